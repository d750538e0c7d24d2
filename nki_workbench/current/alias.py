"""``import nki`` resolving to :mod:`nki_workbench.current` when the real package is absent.

:func:`install` registers ``nki``, ``nki.language``, ``nki.isa``, ``nki.isa.constants`` and
``nki.typing``, ``nki.collectives`` in ``sys.modules``; with a real ``nki`` installed it
refuses (shadowing AWS's compiler would be wrong). ``nki_workbench.compat.install()`` calls
it, so ``%load_ext nki_workbench`` and the CLI get it too.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

__all__ = ["install", "uninstall", "installed"]

_MODULES = {"nki": "nki_workbench.current", "nki.language": "nki_workbench.current.language",
            "nki.isa": "nki_workbench.current.isa",
            "nki.isa.constants": "nki_workbench.current.isa.constants",
            "nki.collectives": "nki_workbench.current.collectives",
            "nki.typing": "nki_workbench.nki.typing"}
_FLAG = "__nki_workbench_alias__"


def installed() -> bool:
    """Whether ``import nki`` currently resolves to the workbench."""
    return bool(getattr(sys.modules.get("nki"), _FLAG, False))


def _real_nki() -> bool:
    mod = sys.modules.get("nki")
    if mod is not None:
        return not getattr(mod, _FLAG, False)
    try:
        return importlib.util.find_spec("nki") is not None
    except (ImportError, ValueError):
        return False


def install() -> None:
    """Alias ``nki*`` to ``nki_workbench.current*`` (idempotent).

    Raises:
        RuntimeError: when the real ``nki`` package is installed.
    """
    if installed():
        return
    if _real_nki():
        raise RuntimeError("the real nki package is installed; nki_workbench will not shadow "
                           "it. Import nki_workbench.current directly to run kernels of today's "
                           "API on the workbench alongside it.")
    for alias, target in _MODULES.items():
        mod = importlib.import_module(target)
        sys.modules[alias] = mod
    setattr(sys.modules["nki"], _FLAG, True)


def uninstall() -> None:
    """Remove the alias (only the modules :func:`install` added)."""
    if not installed():
        return
    root = sys.modules["nki"]
    for alias in _MODULES:
        sys.modules.pop(alias, None)
    delattr(root, _FLAG)
