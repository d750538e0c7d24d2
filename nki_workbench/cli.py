"""``nki-workbench``: the workbench from a shell.

Commands:

* ``report [FILE.py] [--kernel NAME] [--shapes ...] [-o report.html]``: one self-contained HTML
  page (summary, config, IR, occupancy and timeline images). Without FILE it reports on the
  bundled examples (tensor add, tiled matmul, softmax, rmsnorm), simulated and checked against
  numpy.
* ``explore FILE.py --kernel NAME --param TILE_N=128,256,512``: the tile-allocation explorer as a
  panel app on http://127.0.0.1:PORT (FILE may also name a bundled example, e.g. ``matmul``);
  with ``--sweep [--workers N]`` it evaluates every setting in N worker processes and prints the
  results table (latency, SBUF/PSUM peak, error code) sorted by latency instead.
* ``decode BACKEND_CONFIG_OR_FILE``: the decoded backend_config and its IR (a file may hold the
  base64 string or HLO text with ``backend_config="..."`` attributes).

``nki-workbench --list-examples`` names the bundled examples. Kernel files written for
``neuronxcc`` (``from neuronxcc import nki``) run as they are: the compat alias is installed
before a file is imported, as ``%load_ext nki_workbench`` does in a notebook.

A kernel file may define ``SHAPES`` (default ``--shapes``), ``PARAMS`` (default explorer sweep)
and ``KERNEL`` (default kernel name), as the bundled examples do.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys

__all__ = ["main", "build_parser", "load_kernel_file", "extract_backend_configs",
           "list_examples"]


class CliError(Exception):
    """A usage problem reported as ``nki-workbench: error: ...`` (exit status 2)."""


# ------------------------------------------------------------------------------- loading
def load_kernel_file(path: str):
    """Import a kernel file (or a bundled example by name) as a module."""
    from . import examples
    if path in examples.EXAMPLES:
        return examples.load(path)
    if not os.path.isfile(path):
        raise CliError(f"no such kernel file: {path} (bundled examples: "
                       f"{', '.join(examples.EXAMPLES)})")
    from . import compat
    try:
        compat.install()  # why: files written for neuronxcc import it; the alias serves them
    except RuntimeError:  # a real neuronxcc is installed: the file gets that one
        pass
    name = "nkiw_user_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _kernel(module, name: str | None):
    from ._src.dispatch import GenericKernel
    name = name or getattr(module, "KERNEL", None)
    if name is None:
        found = [n for n, v in vars(module).items() if isinstance(v, GenericKernel)]
        if len(found) != 1:
            raise CliError(f"{module.__file__}: name the kernel with --kernel (found "
                           f"{len(found)} @nki.jit kernels: {', '.join(found) or 'none'})")
        name = found[0]
    kernel = getattr(module, name, None)
    if kernel is None or not callable(kernel):
        raise CliError(f"{module.__file__} defines no kernel '{name}'")
    return name, kernel


def _arguments(module, kernel, opts) -> tuple:
    from .notebook import arguments as _args
    text = opts.shapes or getattr(module, "SHAPES", None)
    if text is None:
        raise CliError("give the kernel's tensor arguments with --shapes, e.g. "
                       "--shapes a=128x512:bf16,b=128x512:bf16")
    try:
        specs = _args.parse_shapes(text)
        if getattr(opts, "random", False):
            specs = _args.random_inputs(specs, seed=0)
        return _args.bind_arguments(kernel, [], specs)
    except _args.ArgError as exc:
        raise CliError(str(exc)) from None


def _grid(text):
    from .notebook import arguments as _args
    try:
        return _args.parse_grid(text)
    except _args.ArgError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ------------------------------------------------------------------------------- commands
def _example_inspections():
    import numpy as np

    from . import examples
    from ._src.inspection import inspect
    from .notebook.check import run_check
    out = []
    for name in examples.EXAMPLES:
        mod = examples.load(name)
        ins = mod.inputs(np.random.default_rng(0))
        insp = inspect(getattr(mod, mod.KERNEL), *ins)
        run_check(insp, "reference(*inputs)", {"reference": mod.reference, "inputs": ins})
        out.append((f"{name}: {mod.KERNEL}", insp))
    return out


def cmd_report(opts) -> int:
    """``report``: write the HTML page."""
    from ._src.inspection import inspect
    from .notebook.report import report_html
    if opts.file is None:
        items = _example_inspections()
        title = "nki-workbench report: bundled examples"
    else:
        module = load_kernel_file(opts.file)
        name, kernel = _kernel(module, opts.kernel)
        args, kwargs = _arguments(module, kernel, opts)
        insp = inspect(kernel, *args, grid=opts.grid, platform_target=opts.target, **kwargs)
        items = [(name, insp)]
        title = f"nki-workbench report: {name}"
    page = report_html(items, title, interactive=opts.interactive)
    with open(opts.output, "w", encoding="utf-8") as f:
        f.write(page)
    for label, insp in items:
        print(f"{label}: " + insp.summary_lines()[0])
    print(f"wrote {opts.output} ({len(page)} bytes)")
    return 0


def cmd_explore(opts) -> int:
    """``explore``: serve the panel explorer (blocks), or print the sweep table (``--sweep``)."""
    from .notebook import arguments as _args
    from .notebook.explorer import Explorer, serve
    module = load_kernel_file(opts.file)
    name, kernel = _kernel(module, opts.kernel)
    params = {}
    try:
        for p in opts.param or []:
            k, values = _args.parse_params(p)
            params[k] = values
    except _args.ArgError as exc:
        raise CliError(str(exc)) from None
    params = params or getattr(module, "PARAMS", None)
    if not params:
        raise CliError("give the constants to explore with --param NAME=V1,V2,...")
    args, kwargs = _arguments(module, kernel, opts)
    try:
        explorer = Explorer(kernel, args, params, kwargs, opts.grid, opts.target)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if opts.sweep:
        if opts.workers is not None and opts.workers < 0:
            raise CliError(f"--workers must be 0 or more, not {opts.workers}")
        res = explorer.run_sweep(workers=opts.workers, progress=False)
        print(f"sweep of {name}: {res!r}")
        print(res.table_text(by="latency_us"))
        return 0
    print(f"exploring {name} over {params} on http://127.0.0.1:{opts.port}/", flush=True)
    serve(explorer, port=opts.port, show=False)
    return 0


_CONFIG_ATTR = re.compile(r"""backend_config\s*=\s*(?:\\?["'])([A-Za-z0-9+/=_-]{16,})""")


def extract_backend_configs(text: str) -> list:
    """The base64 backend_config strings in ``text`` (itself one, or HLO/MLIR attributes)."""
    text = text.strip()
    found = _CONFIG_ATTR.findall(text)
    if found:
        return found
    return [text] if re.fullmatch(r"[A-Za-z0-9+/=_-]+", text) else []


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    r"""``text`` with control characters (ANSI escapes included) shown as ``\xNN`` escapes.

    Why: a backend_config is untrusted input; its IR must not drive the user's terminal.
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _read_config_source(src: str) -> str:
    """The text behind ``decode``'s argument: a file's contents, or the argument itself."""
    # why: base64 has '/' but never '.', and a real config is long; anything else with a
    # separator or a dot was meant as a path
    b64 = len(src) >= 64 and re.fullmatch(r"[A-Za-z0-9+/=_-]+", src.strip()) is not None
    looks_like_path = not b64 and (os.sep in src or "." in src)
    # why: the argument is untrusted too: no control characters, no screenful of base64
    shown = _printable(src if len(src) <= 120 else src[:100] + f"... ({len(src)} characters)")
    if os.path.isdir(src):
        raise CliError(f"{shown} is a directory, not a backend_config file")
    if os.path.isfile(src):
        try:
            with open(src, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise CliError(f"cannot read {shown}: {exc.strerror}") from None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CliError(f"{shown} is a binary file, not a backend_config (base64 or HLO "
                           "text)") from None
    if looks_like_path:
        raise CliError(f"no such file: {shown}")
    return src


def cmd_decode(opts) -> int:
    """``decode``: print the decoded config(s) and IR."""
    from ._src.encode import decode_backend_config
    from .notebook.mime import config_text
    configs = extract_backend_configs(_read_config_source(opts.config))
    if not configs:
        raise CliError("no backend_config found: pass the base64 string, or a file with it or "
                       "with HLO text containing backend_config=\"...\"")
    for i, c in enumerate(configs):
        try:
            cfg = decode_backend_config(c)
        except (ValueError, TypeError, RecursionError) as exc:
            where = f"backend_config {i + 1} of {len(configs)}: " if len(configs) > 1 else ""
            raise CliError(where + _printable(str(exc)).splitlines()[0]) from None
        if len(configs) > 1:
            print(f"=== backend_config {i + 1} of {len(configs)}")
        if opts.json:
            print(json.dumps(cfg, indent=2, sort_keys=True))  # (JSON escapes control characters)
            continue
        print(_printable(config_text(cfg)))
        print("--- IR (serialize_ir_string) ---")
        print(_printable(cfg["serialize_ir_string"].rstrip("\n")))
    return 0


def list_examples() -> str:
    """One line per bundled example: name, kernel, shapes and the constants it sweeps."""
    from . import examples
    rows = []
    for name in examples.EXAMPLES:
        mod = examples.load(name)
        doc = (mod.__doc__ or "").strip().splitlines()
        params = getattr(mod, "PARAMS", None)
        rows.append(f"{name:<11} kernel {mod.KERNEL}, shapes {mod.SHAPES}"
                    + (f", sweeps {', '.join(params)}" if params else "")
                    + (f"\n{'':<11} {doc[0]}" if doc else ""))
    return "\n".join(rows)


class _ListExamples(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        print(list_examples())
        parser.exit(0)


# -------------------------------------------------------------------------------- parser
def _kernel_options(p, shapes_help: str) -> None:
    p.add_argument("--kernel", "-k", help="kernel name (default: the file's KERNEL, or its only "
                   "@nki.jit kernel)")
    p.add_argument("--shapes", "-s", help=shapes_help)
    p.add_argument("--grid", "-g", type=_grid, default=None, help="launch grid, e.g. 2,2")
    p.add_argument("--target", "-t", choices=("trn1", "trn2", "trn3"), default=None,
                   help="platform target (default trn1 with a warning)")


def build_parser() -> argparse.ArgumentParser:
    """The ``nki-workbench`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="nki-workbench",
        description="Trace, inspect and simulate NKI kernels without Trainium hardware.")
    from . import __version__
    parser.add_argument("--version", action="version", version=f"nki-workbench {__version__}")
    parser.add_argument("--list-examples", action=_ListExamples, nargs=0,
                        help="list the bundled example kernels (FILE may name one) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    rep = sub.add_parser("report", help="write a self-contained HTML report",
                         description="Write one HTML page: summary, config, IR, SBUF/PSUM maps "
                         "and timeline. Without FILE: the bundled examples.")
    rep.add_argument("file", nargs="?", metavar="FILE.py",
                     help="kernel file, or a bundled example name (default: all examples)")
    _kernel_options(rep, 'tensor arguments as placeholders, e.g. "a=128x512:bf16,b=512" '
                         "(dtypes: NKI names or f32, f16, bf16, fp8e4m3, i32...; default: the "
                         "file's SHAPES)")
    rep.add_argument("--random", action="store_true",
                     help="use seeded random data for --shapes and simulate the kernel")
    rep.add_argument("--interactive", action="store_true",
                     help="add the interactive (Bokeh) timeline and SBUF map of each kernel")
    rep.add_argument("-o", "--output", default="nki_workbench_report.html",
                     help="output file (default nki_workbench_report.html)")
    rep.set_defaults(run=cmd_report)

    exp = sub.add_parser("explore", help="serve the tile-allocation explorer (panel)",
                         description="Serve sliders over compile-time constants on "
                         "http://127.0.0.1:PORT; each setting is re-traced, re-allocated and "
                         "re-timed.")
    exp.add_argument("file", metavar="FILE.py", help="kernel file, or a bundled example name")
    _kernel_options(exp, "tensor arguments as placeholders (default: the file's SHAPES)")
    exp.add_argument("--param", "-p", action="append", metavar="NAME=V1,V2,...",
                     help="a constant to sweep (repeatable; default: the file's PARAMS)")
    exp.add_argument("--port", type=int, default=5006, help="TCP port (default 5006)")
    exp.add_argument("--sweep", action="store_true",
                     help="evaluate every setting and print the results table (no server)")
    exp.add_argument("--workers", type=int, default=None, metavar="N",
                     help="with --sweep: worker processes (default: CPU count; 0: serially)")
    exp.set_defaults(run=cmd_explore)

    dec = sub.add_parser("decode", help="decode a backend_config",
                         description="Print a backend_config's decoded keys and its IR.")
    dec.add_argument("config", metavar="BACKEND_CONFIG_OR_FILE",
                     help="the base64 string, or a file holding it (or HLO text with "
                          "backend_config attributes)")
    dec.add_argument("--json", action="store_true", help="print the decoded config as JSON")
    dec.set_defaults(run=cmd_decode)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``nki-workbench`` console script."""
    from ._src.errors import NkiError
    parser = build_parser()
    opts = parser.parse_args(argv)
    try:
        return opts.run(opts)
    except CliError as exc:
        parser.exit(2, f"nki-workbench: error: {exc}\n")
    except NkiError as exc:
        parser.exit(1, f"nki-workbench: {exc}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
