"""CPU stand-ins for the Neuron PyTorch packages, so the PyTorch NKI examples run unmodified.

``compat.install()`` (and so ``%load_ext nki_workbench`` and the CLI) calls :func:`install`,
which registers these modules in ``sys.modules`` when the real packages are absent, and refuses
(``RuntimeError``) when a real ``torch_xla`` or ``torch_neuronx`` is installed. Exactly these
names exist; nothing else of either package is provided:

=========================================  ===================================================
``torch_xla.core.xla_model.xla_device()``  ``torch.device("cpu")``: tensors "moved to the
                                           device" are CPU tensors, so a kernel called with
                                           them goes through the PyTorch bridge
                                           (``PyTorchXLAKernel``, picked by ``mode="auto"``)
                                           and returns CPU tensors of the kernel's dtypes and
                                           shapes. Takes (and ignores) ``n``/``devkind``.
``torch_xla.device()``                     the same as ``xla_device()`` (torch_xla 2.x)
``xla_model.mark_step()``                  no-op (nothing is deferred: kernels run eagerly);
                                           ``torch_xla.sync()`` too
``xla_model.wait_device_ops()``            no-op (every call has finished when it returns)
``torch_neuronx.nki_jit``                  the deprecated shim (``nki.jit(mode="torchxla")``
                                           with NKI's ``DeprecationWarning``)
``torch_neuronx.utils.get_platform_target``  the platform-target lookup NKI's PyTorch kernel
                                           asks: ``NEURON_PLATFORM_TARGET_OVERRIDE`` or the
                                           detected instance, ``None`` when neither (then the
                                           usual trn1 fallback applies, with its warning)
``neuronxcc.nki.docs.examples.<e>.<m>``    the example module ``<m>.py`` of the SDK's NKI
                                           examples, imported from the user's own copy: the
                                           running script's folder (or ``<e>/<m>.py`` under a
                                           ``sys.path`` entry). The workbench ships no copy.
=========================================  ===================================================
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

__all__ = ["install", "uninstall", "STANDINS"]

STANDINS = ("torch_xla", "torch_xla.core", "torch_xla.core.xla_model", "torch_neuronx",
            "torch_neuronx.utils")
"""The stand-in modules :func:`install` registers."""

_DOCS = "neuronxcc.nki.docs"
_MARK = "__nki_workbench_standin__"


def xla_device(n=None, devkind=None):
    """The stand-in XLA device: the CPU (``n`` and ``devkind`` are accepted and ignored)."""
    import torch  # lazily: installing the stand-ins must not import torch
    return torch.device("cpu")


def mark_step(wait=False):
    """No-op: the simulator runs each kernel call eagerly, nothing waits for a step."""
    return None


def wait_device_ops(devices=None):
    """No-op: every kernel call has finished when it returns."""
    return None


def get_platform_target():
    """``NEURON_PLATFORM_TARGET_OVERRIDE`` or the detected target; ``None`` when unknown."""
    from ._src.encode import resolve_platform_target
    target, fallback = resolve_platform_target(warn=False)
    return None if fallback else target


def _neuronx_getattr(name):
    # why: importing the torch bridge imports torch; only when nki_jit is asked for
    if name == "nki_jit":
        from ._src.bridges.torch import nki_jit
        return nki_jit
    raise AttributeError(f"module 'torch_neuronx' (nki_workbench stand-in) has no attribute "
                         f"{name!r}; only nki_jit is provided")


def _module(name: str, doc: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name, doc)
    setattr(mod, _MARK, True)
    mod.__dict__.update(attrs)
    return mod


def _real(name: str) -> bool:
    mod = sys.modules.get(name)
    if mod is not None:
        return not getattr(mod, _MARK, False)
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


class _DocsExamples(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``neuronxcc.nki.docs.examples.<e>.<m>`` from the example folder the user runs from."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _DOCS and not fullname.startswith(_DOCS + "."):
            return None
        parts = fullname.split(".")[3:]  # after neuronxcc.nki.docs
        if len(parts) <= 2:  # docs, docs.examples, docs.examples.<e>: packages
            spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            spec.submodule_search_locations = []
            return spec
        if parts[0] != "examples" or len(parts) != 3:
            return None
        found = _example_file(parts[1], parts[2])
        return importlib.util.spec_from_file_location(fullname, found) if found else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        setattr(module, _MARK, True)


def _example_file(example: str, name: str) -> str | None:
    script = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
    candidates = [os.path.join(script, f"{name}.py")] if script else []
    for entry in sys.path:
        base = os.path.abspath(entry or os.getcwd())
        candidates += [os.path.join(base, example, f"{name}.py"), os.path.join(base, f"{name}.py")]
    return next((c for c in candidates if os.path.isfile(c)), None)


_FINDER = _DocsExamples()


def install() -> None:
    """Register the stand-ins (idempotent).

    Raises:
        RuntimeError: a real ``torch_xla`` or ``torch_neuronx`` is installed.
    """
    real = [n for n in ("torch_xla", "torch_neuronx") if _real(n)]
    if real:
        raise RuntimeError(f"the real {' and '.join(real)} package is installed; nki_workbench "
                           "will not shadow it with its CPU stand-in. Import nki_workbench.nki "
                           "directly to use the workbench simulator alongside it.")
    if getattr(sys.modules.get("torch_xla"), _MARK, False):
        return
    xm = _module("torch_xla.core.xla_model", "nki_workbench CPU stand-in for "
                 "torch_xla.core.xla_model.", xla_device=xla_device, mark_step=mark_step,
                 wait_device_ops=wait_device_ops)
    core = _module("torch_xla.core", "nki_workbench CPU stand-in.", xla_model=xm)
    # why: torch_xla 2.x spells the device and step as torch_xla.device() / torch_xla.sync()
    root = _module("torch_xla", "nki_workbench CPU stand-in for torch_xla (see "
                   "nki_workbench.compat_torch).", core=core, device=xla_device, sync=mark_step)
    utils = _module("torch_neuronx.utils", "nki_workbench CPU stand-in: the platform-target "
                    "lookup.", get_platform_target=get_platform_target)
    neuronx = _module("torch_neuronx", "nki_workbench CPU stand-in for torch_neuronx: "
                      "nki_jit and utils.get_platform_target only.", utils=utils,
                      __getattr__=_neuronx_getattr)
    for m in (root, core, neuronx):
        m.__path__ = []
    sys.modules.update({"torch_xla": root, "torch_xla.core": core,
                        "torch_xla.core.xla_model": xm, "torch_neuronx": neuronx,
                        "torch_neuronx.utils": utils})
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)


def uninstall() -> None:
    """Remove the stand-ins (only what :func:`install` added)."""
    for name in STANDINS:
        if getattr(sys.modules.get(name), _MARK, False):
            del sys.modules[name]
    for name in [n for n in sys.modules if n == _DOCS or n.startswith(_DOCS + ".")]:
        del sys.modules[name]
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
