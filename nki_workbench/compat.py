"""Make kernels written for ``neuronxcc.nki`` run unmodified on the workbench.

``install()`` registers ``neuronxcc``, ``neuronxcc.nki`` and its sub-modules in
``sys.modules`` as aliases of ``nki_workbench.nki`` — but only when the real ``neuronxcc`` is
not installed: with a real one present it refuses (shadowing the compiler would be wrong).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import types

__all__ = ["install", "uninstall", "installed"]

_SUBMODULES = ("language", "language.constants", "isa", "isa.constants", "compiler", "typing",
               "distributed", "distributed.collectives", "nccl", "nccl.collectives")
_ALIASES = ("neuronxcc", "neuronxcc.nki") + tuple(f"neuronxcc.nki.{m}" for m in _SUBMODULES)

# Harnesses written for neuronxcc call `logger.setLevel(logging.OFF)` after importing it: the real
# package leaves an OFF level on the stdlib module. Any level above CRITICAL silences a logger.
LOGGING_OFF = logging.CRITICAL + 10
_added_logging_off = False


def installed() -> bool:
    """Whether the alias is active."""
    mod = sys.modules.get("neuronxcc")
    return getattr(mod, "__nki_workbench_alias__", False)


def _real_neuronxcc() -> bool:
    mod = sys.modules.get("neuronxcc")
    if mod is not None:
        return not getattr(mod, "__nki_workbench_alias__", False)
    return importlib.util.find_spec("neuronxcc") is not None


def install() -> None:
    """Alias ``neuronxcc.nki*`` to ``nki_workbench.nki*`` (idempotent).

    Raises:
        RuntimeError: when the real ``neuronxcc`` package is installed.
    """
    if installed():
        return
    if _real_neuronxcc():
        raise RuntimeError("the real neuronxcc package is installed; nki_workbench will not "
                           "shadow it. Import nki_workbench.nki directly to use the workbench "
                           "simulator alongside it.")
    importlib.import_module("nki_workbench.compat_torch").install()  # torch_xla/_neuronx
    nki = importlib.import_module("nki_workbench.nki")
    root = types.ModuleType("neuronxcc")
    root.__nki_workbench_alias__ = True
    root.__path__ = []
    root.nki = nki
    sys.modules["neuronxcc"] = root
    sys.modules["neuronxcc.nki"] = nki
    for m in _SUBMODULES:
        sys.modules[f"neuronxcc.nki.{m}"] = importlib.import_module(f"nki_workbench.nki.{m}")
    importlib.import_module("nki_workbench.current.alias").install()  # `import nki` (NKI 0.2+)
    _add_logging_off()


def _add_logging_off() -> None:
    global _added_logging_off
    if not hasattr(logging, "OFF"):
        logging.OFF = LOGGING_OFF
        logging.addLevelName(LOGGING_OFF, "OFF")
        _added_logging_off = True


def uninstall() -> None:
    """Remove the alias (only the modules ``install`` added)."""
    if not installed():
        return
    importlib.import_module("nki_workbench.compat_torch").uninstall()
    for name in _ALIASES:
        sys.modules.pop(name, None)
    importlib.import_module("nki_workbench.current.alias").uninstall()
    global _added_logging_off
    if _added_logging_off:
        del logging.OFF
        _added_logging_off = False
