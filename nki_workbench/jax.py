"""NKI kernels in JAX programs (importing this module imports jax).

* ``nki.jit(kernel, mode="jax")`` / :class:`JAXKernel` — call a kernel with jax arrays, inside
  ``jax.jit``, ``lax.scan``/``cond``, ``vmap``; on cpu/cuda/rocm/tpu it runs in the simulator,
  on Neuron it is one ``custom_call @AwsNeuronCustomNativeKernel``.
* :func:`nki_call` — the ``jax_neuronx.nki_call(kernel, *args, grid=, out_shape=)`` form.
* :func:`with_vjp` — attach a backward function so ``jax.grad`` works.
* :func:`lower_for_neuron` / :func:`export_for_neuron` — the neuron StableHLO without a device.
"""

from ._src.bridges.jax import (
    JAX_TO_NKI_DTYPES,
    JAXKernel,
    JaxTraceResult,
    nki_call,
    nki_call_eval,
    nki_call_p,
    with_vjp,
)
from ._src.bridges.jax_lowering import (
    DONT_CACHE_ENV,
    OP_NAME,
    STALE_TRACE_MESSAGE,
    TARGET,
    StaleTraceError,
    export_for_neuron,
    lower_for_neuron,
)

__all__ = ["JAXKernel", "JaxTraceResult", "nki_call", "nki_call_p", "nki_call_eval",
           "with_vjp", "lower_for_neuron", "export_for_neuron", "TARGET", "OP_NAME",
           "DONT_CACHE_ENV", "STALE_TRACE_MESSAGE", "StaleTraceError", "JAX_TO_NKI_DTYPES"]
