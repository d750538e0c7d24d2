"""Host-framework bridges: JAX (``jax.py``) and PyTorch (``torch.py``, with ``hlo.py``).

Each bridge module defines a ``FrameworkKernel`` subclass and registers it for its ``nki.jit``
mode through ``dispatch.register_mode``; ``dispatch`` imports a bridge the first time its mode
is chosen, so importing ``nki_workbench`` imports neither framework.
"""
