"""nki_workbench: write, inspect and simulate AWS Neuron NKI kernels on any machine.

Public face (re-exports only):

* ``nki_workbench.nki`` — the NKI-compatible API (``jit``, ``simulate_kernel``, ``language``...)
* ``nki_workbench.compat.install()`` — make ``neuronxcc.nki`` imports resolve to it
* ``nki_workbench.ir`` — the IR: node types, ``print_kernel`` and ``parse``
* ``nki_workbench.inspect(kernel, *args)`` — an :class:`Inspection` (outputs, backend_config, IR)
* ``decode_backend_config`` / ``simulate_backend_config`` — read and run a custom call's config
* ``SimParams(backend="numpy" | "jax" | "auto", ...)`` — how to simulate (the one spelling of
  the backend)
* ``tune_malloc()`` — opt into glibc heap tuning for faster simulation (process-wide, so only
  when asked)
* ``compilation_cache(path=None)`` — opt into an on-disk cache of the compiled simulator's
  executables (``NKI_WORKBENCH_COMPILATION_CACHE=DIR`` does the same)
"""

from . import compat, ir, nki
from ._src.encode import decode_backend_config
from ._src.errors import (
                          BlockDimensionWarning,
                          CompiledFallbackWarning,
                          LoopCarriedDependencyWarning,
                          NkiError,
                          NkiWarning,
                          SpmdRaceWarning,
                          UninitializedReadWarning,
)
from ._src.execution import simulate_backend_config
from ._src.inspection import Inspection, inspect
from ._src.options import SimParams
from ._src.platform import compilation_cache, tune_malloc

__version__ = "0.1.0"

__all__ = ["nki", "compat", "ir", "NkiError", "NkiWarning", "UninitializedReadWarning",
           "LoopCarriedDependencyWarning", "SimParams", "inspect", "Inspection",
           "decode_backend_config", "simulate_backend_config", "tune_malloc", "__version__",
           "CompiledFallbackWarning", "SpmdRaceWarning", "BlockDimensionWarning",
           "compilation_cache"]

from ._src.collectives import simulate_ranks  # noqa: E402  (multi-rank collectives)

__all__.append("simulate_ranks")

# nki.isa simulation warnings / errors (their rules: _src/semantics/isa_*.py)
from ._src.errors import (  # noqa: E402
    ActivationRangeWarning,
    IndirectIndexError,
    IsaHintWarning,
    NkiIndexError,
    NkiSyntaxError,
    NkiTypeError,
)

__all__ += ["ActivationRangeWarning", "IsaHintWarning", "IndirectIndexError", "NkiIndexError",
            "NkiTypeError", "NkiSyntaxError"]


# --- notebook layer (lazy: ipywidgets/matplotlib load on first use) --------------------------
def _inspection_mimebundle(self, include=None, exclude=None):
    # why: the html and JSON views (and their imports) live in the notebook layer
    from .notebook.mime import mimebundle
    return mimebundle(self, include, exclude)


def _inspection_widget(self, **kwargs):
    """The Inspector widget: an ipywidgets ``Tab`` over this Inspection.

    Tabs: Summary | Config | IR | SBUF | PSUM | Timeline | HLO; keyword arguments go to
    :class:`nki_workbench.notebook.inspector.Inspector`.
    """
    from .notebook.inspector import Inspector
    return Inspector(self, **kwargs)


# why: Inspection sits below the notebook layer; its rich views are installed from above
Inspection._repr_mimebundle_ = _inspection_mimebundle
Inspection.widget = _inspection_widget

__all__ += ["load_ipython_extension", "unload_ipython_extension", "compare", "explore",
            "sweep"]


def load_ipython_extension(ipython):
    """``%load_ext nki_workbench``: the ``%%nki`` magic and the ``neuronxcc.nki`` alias."""
    from .notebook.magics import load
    try:
        compat.install()
    except RuntimeError:  # why: a real neuronxcc is installed; the magic still works without it
        pass
    load(ipython)


def unload_ipython_extension(ipython):
    """``%unload_ext nki_workbench``: remove the ``%%nki`` magic."""
    from .notebook.magics import unload
    unload(ipython)


def __getattr__(name):
    # why: compare/explore pull in matplotlib and ipywidgets; import them on first use
    if name in ("compare", "explore", "sweep"):
        from . import notebook
        return getattr(notebook, name)
    raise AttributeError(f"module 'nki_workbench' has no attribute '{name}'")
