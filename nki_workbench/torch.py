"""``nki_workbench.torch``: NKI kernels on PyTorch tensors.

* ``PyTorchXLAKernel`` — what ``nki.jit`` uses for torch tensors (``mode="torchxla"``): CPU
  tensors run in the simulator through the ``nki_workbench::kernel_call`` op (eager and under
  ``torch.compile``), XLA tensors emit the ``AwsNeuronNkiKernel`` custom call.
* ``nki_jit`` — the deprecated ``torch_neuronx.nki_jit`` entry point.
* ``build_hlo_module`` / ``build_xla_type`` / ``nki_dtype_to_xla_type_map`` — the HLO the
  bridge emits; ``translate_to_neuron_dtype`` / ``TORCH_TO_NKI`` — the dtype map (overridden by
  ``NKI_WORKBENCH_TORCH_DTYPE_OVERRIDE``).

Importing this module imports torch and defines the op. Import it before ``torch.compile``
traces a kernel call: dynamo cannot import the bridge module itself in the middle of a trace
(``nki.jit`` loads it lazily on the first eager call otherwise).
"""

from ._src.bridges.hlo import ArrayShape, HloBuilder, HloModule, TupleShape
from ._src.bridges.torch import (
    CUSTOM_CALL_TARGET,
    DTYPE_OVERRIDE_ENV,
    NKI_TO_TORCH,
    TORCH_TO_NKI,
    PyTorchXLAKernel,
    build_hlo_module,
    build_xla_type,
    kernel_call_op,
    nki_dtype_to_xla_type_map,
    nki_jit,
    translate_to_neuron_dtype,
)

kernel_call_op()  # defines torch.ops.nki_workbench.kernel_call

__all__ = ["PyTorchXLAKernel", "nki_jit", "build_hlo_module", "build_xla_type",
           "nki_dtype_to_xla_type_map", "translate_to_neuron_dtype", "TORCH_TO_NKI",
           "NKI_TO_TORCH", "DTYPE_OVERRIDE_ENV", "CUSTOM_CALL_TARGET", "kernel_call_op",
           "HloBuilder", "HloModule", "ArrayShape", "TupleShape"]
