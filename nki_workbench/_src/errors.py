"""Errors and warnings that speak NKI: an ``err_*`` code, the kernel's file:line and a hint.

Every trace-time check raises :class:`NkiError`; simulator-time problems (indirect out-of-bounds,
uninitialised reads, loop-carried races) raise or warn with the same shape of message so that a
user always sees *what* went wrong, *where* in their kernel, and *what to change*.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings

__all__ = ["NkiError", "NkiIndexError", "NkiTypeError", "NkiSyntaxError", "SYNTAX_CODES",
           "numpy_index_error", "NkiWarning",
           "UninitializedReadWarning", "LoopCarriedDependencyWarning",
           "SpmdRaceWarning", "BlockDimensionWarning",
           "CompiledFallbackWarning",
           "ActivationRangeWarning", "IsaHintWarning", "IndirectIndexError",
           "user_location", "user_frame", "warn", "short_path", "warn_at_user",
           "warn_once_at_user", "SHOWN_ONCE"]

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# why: the bundled example kernels live in the package but are user code to the tracer
_EXAMPLES_DIR = os.path.join(_PKG_DIR, "examples") + os.sep


@functools.lru_cache(maxsize=4096)
def is_internal(fname: str) -> bool:
    """Whether a code file belongs to the workbench itself (not to a kernel's author)."""
    path = os.path.abspath(fname)
    return path.startswith(_PKG_DIR) and not path.startswith(_EXAMPLES_DIR)


class NkiError(Exception):
    """A kernel is not valid NKI (or fails in simulation).

    ``NkiError(code, ...)`` is an instance of the subclass its code belongs to, so that the
    built-in exception NKI users catch matches too (the stable hierarchy, ``docs/errors.md``):
    out-of-bounds codes (``*out_of_bound*``) give :class:`NkiIndexError` (an ``IndexError``),
    invalid-type codes (``*_invalid_type``) :class:`NkiTypeError` (a ``TypeError``), the
    tile-size rules NKI reports as ``SyntaxError`` (:data:`SYNTAX_CODES`)
    :class:`NkiSyntaxError`.

    Attributes:
        code: the NKI error code, e.g. ``"err_num_partition_exceed_arch_limit"`` (may be ``None``
            where NKI has no code).
        loc: ``"file.py:LINE"`` of the offending kernel line, when known.
        hint: what to change.
    """

    def __new__(cls, code=None, *args, **kwargs):
        if cls is NkiError:
            cls = _class_of(code)
        return super().__new__(cls)

    def __init__(self, code: str | None, message: str, loc: str | None = None,
                 hint: str | None = None):
        self.code = code
        self.msg = message
        self.loc = loc
        self.hint = hint
        super().__init__(self._format())

    def __reduce__(self):
        # why: the default reduce calls the class with the formatted text only, which matches
        # no subclass's __init__; rebuild from the attributes instead
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def _format(self) -> str:
        parts = []
        if self.code:
            parts.append(f"[{self.code}]")
        parts.append(self.msg)
        text = " ".join(parts)
        if self.loc:
            text += f" (at {self.loc})"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class NkiIndexError(NkiError, IndexError):
    """An access out of bounds (``err_tensor_access_out_of_bound``...): also an ``IndexError``."""


class NkiTypeError(NkiError, TypeError):
    """An operand of the wrong type or dtype (``err_*_invalid_type``): also a ``TypeError``."""


SYNTAX_CODES = frozenset({
    "err_num_partition_exceed_arch_limit",
    "err_size_of_dimension_exceed_arch_limit",
})
"""Codes NKI raises as ``SyntaxError``: the tile-size rules of its front end.

The 2.20 documentation shows ``SyntaxError: Size of partition dimension 256 exceeds
architecture limitation of 128`` (``err_num_partition_exceed_arch_limit``) and lists the other
tile-size rule (a free dim over an API's limit: PSUM free size, matmul operand sizes,
``nl.transpose``) among the same compile-time errors.
"""


class NkiSyntaxError(NkiError, SyntaxError):
    """A tile-size rule of :data:`SYNTAX_CODES`: also a ``SyntaxError``, as NKI raises it.

    ``msg`` is the message alone (as on every :class:`NkiError`); ``filename``/``lineno`` are
    the kernel line of ``loc``, so a traceback points at it; ``str()`` and the traceback's note
    give the code and the hint.
    """

    def __init__(self, code: str | None, message: str, loc: str | None = None,
                 hint: str | None = None):
        super().__init__(code, message, loc, hint)
        self.msg = message  # why: SyntaxError.__init__ replaced it with the formatted text
        where, _, line = (loc or "").rpartition(":")
        if where and line.isdigit():
            self.filename, self.lineno = where, int(line)
        # why: a traceback prints a SyntaxError as its msg only; the note keeps code and hint
        self.add_note(f"[{code}]" + (f" at {loc}" if loc else "") +
                      (f"; hint: {hint}" if hint else ""))

    def __str__(self) -> str:
        return self.args[0] if self.args else ""

    def __reduce__(self):
        return (_rebuild_syntax, (type(self), self.code, self.msg, self.loc, self.hint))


def _rebuild_syntax(cls, code, msg, loc, hint):
    return cls(code, msg, loc, hint)


#: Former name of the indirect-DMA index error (indirect OOB now raises numpy's IndexError).
IndirectIndexError = NkiIndexError


def _rebuild(cls, args, state):
    exc = Exception.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


def _class_of(code) -> type:
    if isinstance(code, str):
        if code in SYNTAX_CODES:
            return NkiSyntaxError
        if "out_of_bound" in code:
            return NkiIndexError
        if code.endswith("_invalid_type"):
            return NkiTypeError
    return NkiError


def numpy_index_error(code: str, message: str, loc: str | None = None,
                      hint: str | None = None) -> IndexError:
    """The exact ``IndexError`` NKI's simulator raises for an indirect out-of-bounds access.

    NKI's own tests check ``type(e) is IndexError`` and numpy's text as ``str(e)``; the code,
    kernel line and hint ride along as attributes (``code``, ``loc``, ``hint``) and as a note
    that tracebacks print.

    Args:
        code: the NKI error code.
        message: numpy's message (``"index 66048 is out of bounds for axis 0 with size 65536"``).
        loc: the kernel line.
        hint: what to change.

    Returns:
        IndexError: to raise.
    """
    exc = IndexError(message)
    exc.code, exc.msg, exc.loc, exc.hint = code, message, loc, hint
    exc.add_note(f"[{code}]" + (f" at {loc}" if loc else "") + (f"; hint: {hint}" if hint
                                                                  else ""))
    return exc


class NkiWarning(UserWarning):
    """Base class of the workbench's warnings about a kernel."""


class UninitializedReadWarning(NkiWarning):
    """A tile element was read before anything wrote it (its value is NaN-poisoned)."""


class LoopCarriedDependencyWarning(NkiWarning):
    """Two ``affine_range`` iterations depend on each other's order.

    One read a value another wrote, or both wrote an element (with different values) whose
    final value is seen after the loop.
    """


class SpmdRaceWarning(NkiWarning):
    """Two SPMD programs wrote the same element of a shared HBM tensor (the order decides)."""


class BlockDimensionWarning(NkiWarning, FutureWarning):
    """An on-chip tensor has block dimensions before its partition dim (deprecated by NKI).

    A ``FutureWarning`` (shown by default, unlike ``DeprecationWarning``): it is meant for the
    kernel's author.
    """


class ShadowingWarning(NkiWarning):
    """A local tensor name was re-bound inside a loop instead of updated with ``t[...] =``."""


# --- compiled simulation (helper A) -----------------------------------------------------------
class CompiledFallbackWarning(NkiWarning):
    """The compiled (JAX) backend ran a kernel in the interpreter instead (the reason is named).

    Results are the interpreter's, so nothing is lost but speed; emitted once per kernel and
    reason. The opcodes that never compile are ``semantics.registry.INTERPRETER_ONLY``.
    """


# --- nki.isa simulation (helper B) -----------------------------------------------------------
class ActivationRangeWarning(NkiWarning):
    """``nisa.activation`` got inputs outside the function's documented valid range."""


class IsaHintWarning(NkiWarning):
    """A hint (``is_transpose``, ``is_*_onezero``) does not hold, or a result is undefined.

    Undefined: the hardware gives no defined result for this input (e.g. a value that
    ``nc_find_index8`` cannot find).
    """


def user_location(skip_pkg: bool = True) -> str | None:
    """Return ``"file:line"`` of the innermost frame outside this package (the kernel line)."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = frame.f_code.co_filename
        inside = skip_pkg and is_internal(fname)
        if not inside and "<frozen" not in fname:
            return f"{short_path(fname)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def user_frame():
    """The innermost stack frame outside this package (the kernel code being traced)."""
    frame = sys._getframe(1)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


_LIB_DIRS = (os.path.dirname(os.__file__) + os.sep, os.sep + "site-packages" + os.sep,
             os.sep + "dist-packages" + os.sep)


def _is_library(fname: str) -> bool:
    # why: IPython, ipykernel, panel, param, tornado and the stdlib are nobody's kernel code
    return fname.startswith("<frozen") or any(d in fname for d in _LIB_DIRS)


def warn_at_user(message: str, category: type[Warning] = UserWarning) -> None:
    """Emit a warning attributed to the user's kernel or cell line, wherever it is raised.

    The warning's filename and line are those of the innermost frame that is neither the
    workbench nor a library (IPython, panel, param, the stdlib), so a warning raised under a
    panel callback or an IPython magic points at the cell or file that called the kernel.
    Without such a frame it falls back to the first frame outside the workbench.
    """
    frame, first = sys._getframe(1), None
    while frame is not None:
        fname = frame.f_code.co_filename
        if not is_internal(fname):
            first = first or frame
            if not _is_library(fname):
                break
        frame = frame.f_back
    frame = frame or first
    if frame is None:
        warnings.warn(message, category, stacklevel=2)
        return
    glb = frame.f_globals
    registry = glb.setdefault("__warningregistry__", {}) if isinstance(glb, dict) else None
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=glb.get("__name__", "__main__"), registry=registry)


SHOWN_ONCE: set = set()
"""Messages :func:`warn_once_at_user` has shown in this process (tests clear it)."""


def warn_once_at_user(message: str, category: type[Warning] = UserWarning) -> None:
    """:func:`warn_at_user`, but each message at most once per process.

    For process-wide facts (the trn1 target fallback) that every kernel's Summary repeats:
    printing them on every call buries the warnings that are about the user's code.
    """
    if message in SHOWN_ONCE:
        return
    SHOWN_ONCE.add(message)
    warn_at_user(message, category)


SOURCE_NAMERS: list = []
"""Callables ``fname -> display name or None`` consulted first by :func:`short_path` (the
notebook layer adds one that names a Jupyter cell's file ``<cell [N]>``)."""


def short_path(fname: str) -> str:
    """A source path as IR locations show it: the file and its parent directory."""
    for namer in SOURCE_NAMERS:
        name = namer(fname)
        if name:
            return name
    # why: absolute temp paths make IR text machine-specific; keep the base name and parent.
    parts = fname.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 1 else fname


def warn(category: type[Warning], message: str, loc: str | None = None, hint: str | None = None):
    """Emit a workbench warning with the kernel location and a hint."""
    text = message + (f" (at {loc})" if loc else "") + (f"\n  hint: {hint}" if hint else "")
    warnings.warn(text, category, stacklevel=3)
