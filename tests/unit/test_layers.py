"""The import contract of the package: layers, no cycles, no private names across modules.

An ast read of every module under ``nki_workbench/`` (nothing is imported), counting imports
inside functions too. Each module belongs to one layer of :data:`LAYERS` (longest name prefix);
a module may import its own layer and the layers below it, never one above. The graph of module
imports has no cycle, and no module imports an underscore name from another module (private
submodules may be imported by the modules of their own package).
"""

import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "nki_workbench"

# Lowest first. Names are relative to ``nki_workbench`` ("" is the package itself); a module
# belongs to the layer of the longest entry that names it or one of its packages (entries in
# EXACT name only themselves).
LAYERS = (
    ("base", ("_src", "_src.errors", "_src.dtypes", "_src.dtype_table", "_src.dtype_casts",
              "_src.tree", "_src.platform", "_src.options",
              "_src.caching", "_src.pyast")),
    ("hw", ("_src.hw", "_src.hw.targets", "_src.hw.cost_targets")),
    ("ir", ("_src.ir",)),
    ("trace", ("_src.trace",)),
    ("front ends", ("_src.lang", "_src.isa", "_src.current", "_src.alloc.spec",
                    "_src.alloc.kernel_opts",
                    "_src.collectives.kinds", "_src.collectives.trace",
                    "_src.collectives.lnc")),
    ("passes", ("_src.alloc",)),
    ("semantics", ("_src.semantics", "_src.machine")),
    ("executors + cost", ("_src.sim", "_src.hw.cost", "_src.hw.cost_table",
                          "_src.collectives.semantics", "_src.collectives.sim",
                          "_src.collectives.world", "_src.collectives.timing",
                          "_src.collectives.lnc_sim")),
    ("encode", ("_src.encode", "_src.backend_config")),
    ("runtime", ("_src.execution", "_src.runtime", "_src.neuron_device")),
    ("dispatch", ("_src.dispatch", "_src.current_jit", "_src.collectives",
                  "_src.collectives.ranks")),
    ("bridges", ("_src.bridges",)),
    ("inspection", ("_src.inspection",)),
    ("notebook", ("notebook",)),
    ("public faces", ("", "cli", "compat", "compat_torch", "ir", "jax", "torch", "nki",
                      "current", "examples")),
)

# entries that name only the package module itself, not what lies below it
EXACT = {"", "_src"}

def _modules() -> dict:
    """Dotted module name (relative to nki_workbench) -> (path, is_package)."""
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if pkg else parts)] = (p, pkg)
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The package module ``name`` lives in (longest existing prefix), or None if external."""
    if name != "nki_workbench" and not name.startswith("nki_workbench."):
        return None
    rel = name[len("nki_workbench."):] if name != "nki_workbench" else ""
    while rel not in MODULES:
        if not rel:
            return None
        rel = rel.rpartition(".")[0]
    return rel


def _imports() -> list:
    """``(importer, imported module, imported name or None, line)`` for every package import."""
    out = []
    for mod, (path, pkg) in MODULES.items():
        here = ("nki_workbench." + mod).rstrip(".")
        base = here if pkg else here.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    target = _resolve(a.name)
                    if target is not None:
                        out.append((mod, target, None, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = base.split(".")[:len(base.split(".")) - node.level + 1]
                    src = ".".join(up + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                for a in node.names:
                    sub = _resolve(f"{src}.{a.name}")
                    if sub is not None and sub == _relname(f"{src}.{a.name}"):
                        out.append((mod, sub, None, node.lineno))  # a submodule
                    else:
                        target = _resolve(src)
                        if target is not None:
                            out.append((mod, target, a.name, node.lineno))
    return out


def _relname(name: str) -> str:
    return name[len("nki_workbench."):] if name.startswith("nki_workbench.") else ""


IMPORTS = _imports()


def _layer(mod: str) -> int:
    best, level = -1, None
    for i, (_, names) in enumerate(LAYERS):
        for n in names:
            hit = mod == n or (n not in EXACT and mod.startswith(n + "."))
            if hit and len(n) > best:
                best, level = len(n), i
    return level


def _edges() -> dict:
    graph = {m: set() for m in MODULES}
    for src, dst, _, _ in IMPORTS:
        if dst != src:
            graph[src].add(dst)
    return graph


def _cycles(graph) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_reader_sees_the_package():
    assert len(MODULES) > 100 and "_src.trace.tensor" in MODULES
    assert ("_src.lang.operators", "_src.trace.tensor", "NkiTensor") in \
        {(s, d, n) for s, d, n, _ in IMPORTS}
    # function-level imports count too: the notebook views import lazily from the package face
    assert any(s == "" and d == "notebook.mime" for s, d, _, _ in IMPORTS)


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if _layer(m) is None)
    assert not missing, f"modules without a layer in LAYERS: {missing}"


def test_no_module_imports_a_layer_above_its_own():
    bad = sorted({f"{src} ({LAYERS[_layer(src)][0]}) imports {dst} ({LAYERS[_layer(dst)][0]}) "
                  f"at line {line}"
                  for src, dst, _, line in IMPORTS if _layer(dst) > _layer(src)})
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_cycles():
    bad = [sorted(c) for c in _cycles(_edges())]
    assert not bad, "import cycles among nki_workbench modules:\n" + "\n".join(
        ", ".join(c) for c in bad)


def test_no_private_names_across_modules():
    bad = []
    for src, dst, name, line in IMPORTS:
        if name is None or not name.startswith("_") or name.startswith("__") or src == dst:
            continue
        sub = f"{dst}.{name}".lstrip(".")
        if sub in MODULES and src.startswith(dst + "." if dst else ""):
            continue  # why: a package's private submodule is the package's own business
        bad.append(f"{src}:{line} imports {name} from {dst}")
    assert not bad, "private names imported across modules:\n" + "\n".join(sorted(bad))


@pytest.mark.parametrize("src,dst", [("_src.trace.tensor", "_src.lang"),
                                     ("_src.trace.kernel", "_src.alloc"),
                                     ("_src.encode", "_src.runtime"),
                                     ("_src.inspection", "notebook.mime"),
                                     ("_src.alloc", "_src.inspection"),
                                     ("_src.sim.interp", "_src.sim.jax_exec"),
                                     ("_src.sim.isa_exec", "_src.sim.interp"),
                                     ("_src.semantics.numerics", "_src.semantics.numerics_jax"),
                                     ("_src.isa", "_src.sim")])
def test_the_edges_that_made_the_old_cycles_are_gone(src, dst):
    assert dst not in _edges()[src]
