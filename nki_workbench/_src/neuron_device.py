"""The Neuron toolchain seen from the workbench: the ``neuronx-cc`` command and ``libnrt``.

``write_tensorizer_ir`` and ``compile_command`` reproduce what NKI hands the compiler;
:class:`NeuronRuntime` runs a NEFF on a NeuronCore through ``libnrt`` (ctypes). The kernel
classes of :mod:`nki_workbench._src.runtime` (which re-exports these names) use them when a
compiler and a device are present. No Neuron device was available while writing the runtime
path: it is untested here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import shlex
import time

import numpy as np

from . import dtypes as D
from .errors import NkiError
from .trace.kernel import Traced


# ----------------------------------------------------------------------------- compiler
def write_tensorizer_ir(traced: Traced, path: str) -> str:
    """Write the traced kernel as ``penguin.py``, the compiler's input file.

    The file is Python: the kernel name, target and the workbench IR text (``IR``), which
    ``nki_workbench.ir.parse`` reads back. (The real ``neuronx-cc`` expects NKI's own tensorizer
    IR in this file, so a real compiler rejects ours; the command line is what is reproduced.)
    """
    from .ir import print_kernel
    k = traced.kernel
    text = (f"# penguin.py: kernel '{k.name}' traced by nki_workbench for neuronx-cc\n"
            f"KERNEL_NAME = {k.name!r}\nTARGET = {k.target!r}\nGRID = {tuple(k.grid)!r}\n"
            f"IR = {print_kernel(k)!r}\n")
    with open(path, "w") as f:
        f.write(text)
    return path


def compile_command(target: str, additional_compile_opt: str | None = None) -> list:
    """The exact ``neuronx-cc`` argv NKI runs (in the directory holding ``penguin.py``)."""
    argv = ["neuronx-cc", "compile", "--framework", "XLA", "penguin.py",
            "--internal-tensorizer-opt-level=nki", "--pipeline", "compile", "SaveTemps",
            "--target", target]
    return argv + (shlex.split(additional_compile_opt) if additional_compile_opt else [])


def check_empty_dir(path: str) -> str:
    """Returns ``path`` made absolute, creating it; raises unless it is new or an empty directory.

    Raises:
        NkiError: ``path`` exists and is a file or a non-empty directory (neuronx-cc fails then).
    """
    path = os.path.abspath(path)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise NkiError(None, f"artifacts_dir '{path}' must be an empty directory",
                       hint="pass a new or empty directory (neuronx-cc fails otherwise)")
    os.makedirs(path, exist_ok=True)
    return path


# ----------------------------------------------------------------------------- device runtime
class NeuronRuntime:
    """Runs a NEFF on a NeuronCore through ``libnrt`` (ctypes).

    UNTESTED: no Neuron device was available while this was written. Assumes the NEFF's input
    and output tensors are named after the kernel's parameters and outputs.
    """

    _PLACEMENT_DEVICE = 0
    _FRAMEWORK_NO_FW = 1

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self._check(lib.nrt_init(self._FRAMEWORK_NO_FW, b"", b""), "nrt_init")

    @classmethod
    def load(cls):
        """The runtime when a Neuron device and ``libnrt`` are present, else ``None``."""
        if not glob.glob("/dev/neuron[0-9]*"):
            return None
        name = ctypes.util.find_library("nrt")
        return cls(ctypes.CDLL(name)) if name else None

    @staticmethod
    def _check(status: int, call: str):
        if status != 0:
            raise RuntimeError(f"Neuron runtime call {call} failed with status {status}")

    def _tensor_set(self, arrays: dict, outputs: dict):
        lib, p = self.lib, ctypes.c_void_p
        tset = p()
        self._check(lib.nrt_allocate_tensor_set(ctypes.byref(tset)), "nrt_allocate_tensor_set")
        handles = {}
        for name, arr in {**arrays, **outputs}.items():
            t = p()
            self._check(lib.nrt_tensor_allocate(self._PLACEMENT_DEVICE, 0, arr.nbytes,
                                                name.encode(), ctypes.byref(t)), name)
            if name in arrays:
                self._check(lib.nrt_tensor_write(t, arr.ctypes.data, 0, arr.nbytes), name)
            self._check(lib.nrt_add_tensor_to_tensor_set(tset, name.encode(), t), name)
            handles[name] = t
        return tset, handles

    def execute(self, neff_path: str, inputs: dict, outputs: dict, *, repeat: int = 1,
                trace_path: str | None = None) -> tuple[dict, list]:
        """Run the NEFF ``repeat`` times; returns (outputs, per-run seconds)."""
        lib, p = self.lib, ctypes.c_void_p
        with open(neff_path, "rb") as f:
            neff = f.read()
        model = p()
        self._check(lib.nrt_load(neff, len(neff), 0, 1, ctypes.byref(model)), "nrt_load")
        out_arrays = {n: np.empty(s, dtype=D.storage_dtype(dt)) for n, (s, dt) in outputs.items()}
        in_set, _ = self._tensor_set(inputs, {})
        out_set, handles = self._tensor_set({}, out_arrays)
        times = []
        if trace_path:
            self._check(lib.nrt_profile_start(model, trace_path.encode()), "nrt_profile_start")
        for _ in range(repeat):
            t0 = time.perf_counter()
            self._check(lib.nrt_execute(model, in_set, out_set), "nrt_execute")
            times.append(time.perf_counter() - t0)
        if trace_path:
            self._check(lib.nrt_profile_stop(trace_path.encode()), "nrt_profile_stop")
        for name, arr in out_arrays.items():
            self._check(lib.nrt_tensor_read(handles[name], arr.ctypes.data, 0, arr.nbytes), name)
        lib.nrt_unload(model)
        return out_arrays, times
