"""Example kernels bundled with the workbench (what ``nki-workbench report`` shows by default).

Each module defines one ``@nki.jit`` kernel named ``KERNEL`` plus:

* ``SHAPES``: placeholder shapes for the CLI (``"a=256x512:float32,..."``),
* ``inputs(rng)``: seeded numpy inputs, and ``reference(*inputs)``: the numpy result,
* ``PARAMS`` (optional): compile-time constants the explorer sweeps.
"""

import importlib

EXAMPLES = ("tensor_add", "matmul", "softmax", "rmsnorm")
"""Names of the bundled examples, in the order the report shows them."""


def load(name: str):
    """The example module ``name`` (one of :data:`EXAMPLES`)."""
    if name not in EXAMPLES:
        raise ValueError(f"no bundled example {name!r}; examples: {', '.join(EXAMPLES)}")
    return importlib.import_module(f"{__name__}.{name}")
