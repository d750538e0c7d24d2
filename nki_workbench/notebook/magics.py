"""``%%nki``: write a kernel in a cell, get it traced, simulated, checked and inspected.

Load with ``%load_ext nki_workbench`` (this also aliases ``neuronxcc.nki`` to the workbench when
the real compiler is absent). Then::

    %%nki --args a,b --check "a + b"
    @nki.jit
    def add(a, b):
        ...

runs the cell, takes the kernel (``--kernel NAME``, default the last function the cell
defines), binds its arguments (``--args`` from the notebook namespace, ``--shapes`` as
placeholders), calls :func:`nki_workbench.inspect`, optionally compares the outputs with a numpy
expression, stores the :class:`~nki_workbench.Inspection` (``--out``, default ``_nki``) and shows
the Inspector widget. ``%%nki?`` lists every option. Kernel errors are shown as the NKI error
code, the message, the cell line and a hint — not as a long internal traceback.
"""

from __future__ import annotations

import ast
import linecache
import traceback
import warnings

from IPython.core import magic_arguments as MA
from IPython.core.magic import Magics, cell_magic, magics_class

from .._src import pyast
from .._src.errors import NkiError
from . import arguments as _args

__all__ = ["NkiMagics", "NkiCellError", "MODES", "split_args", "cell_filename"]

MODES = ("simulation", "jax", "torchxla", "benchmark")
TARGETS = ("trn1", "trn2", "trn3")
_FIRST_TAB = {"simulation": None, "jax": "HLO", "torchxla": "HLO", "benchmark": "Timeline"}


class NkiCellError(NkiError):
    """A ``%%nki`` cell failed: shown as code, message, cell line and hint (no traceback)."""

    def __init__(self, code, message, loc=None, hint=None, cell_line=None, source=None):
        self.cell_line = cell_line
        self.source = source
        super().__init__(code, message, loc, hint)

    def _format(self) -> str:
        text = super()._format()
        if self.cell_line is not None:
            text += f"\n  cell line {self.cell_line}: {self.source}"
        return text

    def _render_traceback_(self) -> list:
        # why: IPython prints these lines instead of the traceback (ipyparallel's protocol)
        return [f"NkiError: {self._format()}"]


def _unquote(text: str) -> str:
    # why: IPython splits magic lines non-POSIX style, so "a + b" arrives with its quotes
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _view_list(text: str) -> list:
    from .inspector import VIEWS
    text = _unquote(text)
    views = [v.strip().lower() for v in text.split(",") if v.strip()]
    bad = sorted(set(views) - set(VIEWS))
    if bad:
        raise _ArgumentTypeError(f"unknown views {bad}; choose from {', '.join(VIEWS)}")
    return views


def _grid(text: str) -> tuple:
    try:
        return _args.parse_grid(_unquote(text))
    except _args.ArgError as exc:
        raise _ArgumentTypeError(str(exc)) from None


def _shapes(text: str) -> dict:
    try:
        return _args.parse_shapes(_unquote(text))
    except _args.ArgError as exc:
        raise _ArgumentTypeError(str(exc)) from None


def _ArgumentTypeError(msg):  # noqa: N802 - argparse keeps this message for the UsageError
    import argparse
    return argparse.ArgumentTypeError(msg)


def split_args(text: str) -> list:
    """Split ``"a, b[0, 1], k=f(x, y)"`` at top-level commas."""
    parts, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur).strip())
    return [p for p in parts if p]


def cell_filename(execution_count, lines: list) -> str:
    """The name a ``%%nki`` cell's code is compiled under: ``<cell [3]>`` (its ``In [3]``).

    Locations then read ``<cell [3]>:5`` (the editor's line 5 of the cell ``In [3]``). A name
    already cached with other source (a cell re-run without a new execution count, e.g. from
    ``run_cell_magic``) gets a suffix, so each kernel keeps its own source lines.
    """
    base = f"<cell [{execution_count}]>"
    name, n = base, 1
    while name in linecache.cache and linecache.cache[name][2] != lines:
        n += 1
        name = f"<cell [{execution_count}] #{n}>"
    return name


def _execution_count(shell, cell: str) -> int:
    """The ``In [N]`` of the running cell."""
    # why: IPython stores the raw cell under its count before running it (and, since 9.x, has
    # already advanced shell.execution_count); a cell run without history keeps the counter
    hist = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None) or []
    body = cell.strip()
    if len(hist) > 1 and body and body in hist[-1]:
        return len(hist) - 1
    return shell.execution_count


def _kernel_line(kernel, filename: str) -> int:
    """The first line of ``kernel`` (its decorator) when it lives in this cell (else 1)."""
    func = _args.kernel_function(kernel)
    code = getattr(func, "__code__", None)
    return code.co_firstlineno if code is not None and code.co_filename == filename else 1


def replay_warnings(caught: list, filename: str, lineno: int) -> None:
    """Show warnings recorded while a cell's kernel ran, attributed to the cell.

    A warning raised from the cell's own lines keeps its line; one raised elsewhere (the
    workbench, IPython, numpy) is shown at the kernel's ``def`` line. (The target-fallback
    warning is raised once per process at its source: ``errors.warn_once_at_user``.)
    """
    for w in caught:
        line = w.lineno if w.filename == filename else lineno
        warnings.warn_explicit(w.message, w.category, filename, line,
                               module=filename, registry={})


def _last_function(code: str) -> str | None:
    names = [n.name for n in pyast.parse(code).body
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return names[-1] if names else None


def _cell_error(exc: BaseException, filename: str, lines: list, offset: int = 0
                ) -> NkiCellError:
    """Turn any failure into a short NkiCellError naming the cell line.

    ``lines`` is the executed code; ``offset`` turns its line numbers into the notebook cell's
    (0 when the code was compiled with the editor's line numbers, as ``%%nki`` cells are).
    """
    line = None
    if isinstance(exc, NkiError) and exc.loc and exc.loc.startswith(filename):
        line = int(exc.loc.rsplit(":", 1)[1])
    if line is None:
        for fr in traceback.extract_tb(exc.__traceback__):
            if fr.filename == filename:
                line = fr.lineno
    if line is None and isinstance(exc, SyntaxError) and exc.filename == filename:
        line = exc.lineno
    source = lines[line - 1].strip() if line and 0 < line <= len(lines) else None
    shown = line + offset if line else None
    if isinstance(exc, NkiError):
        return NkiCellError(exc.code, exc.msg, None if line else exc.loc, exc.hint, shown,
                            source)
    return NkiCellError(None, f"{type(exc).__name__}: {exc}", None, None, shown, source)


@magics_class
class NkiMagics(Magics):
    """The ``%%nki`` cell magic."""

    @MA.magic_arguments()
    @MA.argument("--kernel", "-k", default=None,
                 help="name of the kernel (default: the last function the cell defines)")
    @MA.argument("--args", "-a", type=_unquote, default=None,
                 help="kernel arguments from the notebook namespace, comma-separated "
                      "expressions; NAME=EXPR binds a parameter by name (e.g. a,b,TILE=256)")
    @MA.argument("--shapes", "-s", type=_shapes, default=None,
                 help='placeholder tensors, e.g. "a=128x512:bf16,b=512x512" (no data: traced, '
                      "allocated and timed, not simulated)")
    @MA.argument("--grid", "-g", type=_grid, default=None, help="SPMD launch grid, e.g. 2,2")
    @MA.argument("--target", "-t", choices=TARGETS, default=None,
                 help="platform target (default: the kernel's, else the environment, else "
                      "trn1 with a warning)")
    @MA.argument("--mode", "-m", choices=MODES, default="simulation",
                 help="simulation: trace and simulate; jax/torchxla: also open the custom-call "
                      "(HLO) tab for that framework; benchmark: trace and time only, open the "
                      "timeline")
    @MA.argument("--show", type=_view_list, default=None,
                 help="Inspector tabs to show (besides Summary): config,ir,sbuf,psum,"
                      "timeline,hlo (default all)")
    @MA.argument("--check", "-c", type=_unquote, default=None,
                 help='numpy expression of the expected output, e.g. "np.exp(a)" (kernel '
                      "parameters are visible by name); shows the max error")
    @MA.argument("--atol", type=float, default=1e-3, help="absolute tolerance of --check")
    @MA.argument("--rtol", type=float, default=1e-3, help="relative tolerance of --check")
    @MA.argument("--strict", action="store_true",
                 help="a failed --check raises (NkiError wb_check_failed) instead of showing "
                      "the error banner")
    @MA.argument("--out", "-o", default="_nki",
                 help="variable that receives the Inspection (default _nki)")
    @MA.argument("--static", action="store_true",
                 help="show the Inspection's static view (text/HTML) instead of the widget")
    @MA.argument("--quiet", "-q", action="store_true", help="store the Inspection, show nothing")
    @cell_magic
    def nki(self, line: str, cell: str):
        """Trace, simulate and inspect the NKI kernel defined in this cell.

        The cell is run in the notebook namespace; its kernel is inspected with
        ``nki_workbench.inspect`` and shown as the Inspector widget (Summary | Config | IR |
        SBUF | PSUM | Timeline | HLO). The Inspection is stored in ``--out`` (default ``_nki``).
        Errors in the kernel show the NKI error code, the message and the cell line.
        """
        opts = MA.parse_argstring(self.nki, line)
        return self._run(opts, cell)

    # ---------------------------------------------------------------------------- steps
    def _run(self, opts, cell: str):
        from IPython.core.error import UsageError

        from .._src import current_jit as _current_jit
        from .._src.inspection import inspect
        from .progress import SimulationProgress
        ns = self.shell.user_ns
        code = self.shell.transform_cell(cell)
        # why: line 1 of the cell is the %%nki line, and IPython drops leading blank lines;
        # padding the code with them makes every location (IR, views, errors) the editor's line
        dropped = max(0, len(cell.splitlines()) - len(code.splitlines()))
        code = "\n" * (1 + dropped) + code
        lines = code.splitlines()
        kept = code.splitlines(True)
        filename = cell_filename(_execution_count(self.shell, cell), kept)
        linecache.cache[filename] = (len(code), None, kept, filename)
        try:
            exec(compile(code, filename, "exec"), ns)  # noqa: S102 - the user's own cell
        except Exception as exc:
            raise _cell_error(exc, filename, lines) from exc
        name = opts.kernel or _last_function(code)
        if name is None:
            raise UsageError("the cell defines no function: define the kernel in the cell or "
                             "name it with --kernel NAME")
        if name not in ns:
            raise UsageError(f"no kernel named '{name}' in the notebook namespace")
        kernel = _current_jit.kernel_of_its_api(ns[name])  # legacy or today's `import nki`
        positional, named = self._arguments(opts, name)
        try:
            args, kwargs = _args.bind_arguments(kernel, positional, named)
        except _args.ArgError as exc:
            raise UsageError(str(exc)) from None
        simulate = opts.mode != "benchmark"
        pending: list = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    insp = inspect(kernel, *args, grid=opts.grid, platform_target=opts.target,
                                   simulate=simulate, progress=SimulationProgress, **kwargs)
                    if opts.check is not None:
                        from .check import run_check
                        run_check(insp, opts.check,
                                  {**ns, **self._by_parameter(kernel, args, kwargs)},
                                  opts.atol, opts.rtol, strict=opts.strict)
                finally:
                    pending = list(caught)
            replay_warnings(pending, filename, _kernel_line(kernel, filename))
        except Exception as exc:
            replay_warnings(pending, filename, _kernel_line(kernel, filename))
            raise _cell_error(exc, filename, lines) from exc
        ns[opts.out] = insp
        if opts.quiet:
            return None
        if opts.static:
            return insp
        return insp.widget(show=opts.show, selected=self._first_tab(opts),
                           framework=opts.mode if opts.mode in ("jax", "torchxla") else "jax")

    def _arguments(self, opts, kernel_name: str) -> tuple:
        from IPython.core.error import UsageError
        positional, named = [], {}
        for item in split_args(opts.args or ""):
            key, eq, expr = item.partition("=")
            is_kw = eq and key.strip().isidentifier() and not expr.startswith("=")
            source = expr if is_kw else item
            try:
                value = eval(source, self.shell.user_ns)  # noqa: S307 - notebook expressions
            except Exception as exc:
                raise UsageError(f"--args: cannot evaluate {source.strip()!r} for kernel "
                                 f"'{kernel_name}': {type(exc).__name__}: {exc}") from None
            if is_kw:
                named[key.strip()] = value
            elif named:
                raise UsageError(f"--args: positional {item!r} after a NAME=EXPR argument")
            else:
                positional.append(value)
        for key, spec in (opts.shapes or {}).items():
            if key in named:
                raise UsageError(f"'{key}' is given by both --args and --shapes")
            named[key] = spec
        return positional, named

    @staticmethod
    def _by_parameter(kernel, args, kwargs) -> dict:
        import inspect as pyinspect
        sig = pyinspect.signature(_args.kernel_function(kernel))
        return dict(sig.bind_partial(*args, **kwargs).arguments)

    @staticmethod
    def _first_tab(opts) -> str | None:
        tab = _FIRST_TAB[opts.mode]
        if tab is None or (opts.show is not None and tab.lower() not in opts.show):
            return None
        return tab


class _CellNamer:
    """Names the file of an ordinary notebook cell ``<cell [N]>`` in IR locations."""

    def __init__(self, shell):
        self.shell = shell

    def __call__(self, fname: str) -> str | None:
        # why: IPython maps each cell's file (ipykernel_PID/HASH.py) to its execution count
        number = getattr(getattr(self.shell, "compile", None), "_filename_map", {}).get(fname)
        if number is None:
            return None
        from .sources import CELL_FILES
        name = f"<cell [{number}]>"
        CELL_FILES[name] = fname
        return name


def load(ipython) -> None:
    """Register the magics (``%load_ext nki_workbench`` also installs the alias, above this).

    Kernels defined in ordinary cells get ``<cell [N]>`` locations too.
    """
    from .._src.errors import SOURCE_NAMERS
    ipython.register_magics(NkiMagics)
    if not any(isinstance(n, _CellNamer) for n in SOURCE_NAMERS):
        SOURCE_NAMERS.append(_CellNamer(ipython))


def unload(ipython) -> None:
    """Remove the ``%%nki`` magic (``%unload_ext nki_workbench``)."""
    from .._src.errors import SOURCE_NAMERS
    ipython.magics_manager.magics["cell"].pop("nki", None)
    SOURCE_NAMERS[:] = [n for n in SOURCE_NAMERS if not isinstance(n, _CellNamer)]
