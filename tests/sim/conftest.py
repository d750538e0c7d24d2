"""The simulator tests run once per executor: every test module here that does not name its
executors itself is parametrised over the numpy interpreter and the compiled JAX program.

The numerics are written once (``semantics/``), so these are the semantics tests of both
executors: each kernel's outputs, warnings and errors must match the same numpy references with
the same tolerances whichever executor ran it (``SimParams(backend=None)`` follows
``NKI_WORKBENCH_SIM_BACKEND``, which the ``executor`` fixture sets).
"""

import os
import sys

import pytest

from nki_workbench._src.options import SIM_BACKEND_ENV

sys.path.insert(0, os.path.dirname(__file__))

# why: these modules compare the two executors explicitly, or time kernels (the cost model
# always interprets): a second run under the other executor would repeat the same work
NAMES_ITS_EXECUTORS = {"test_jax_exec", "test_jax_exec_fast", "test_jax_isa", "test_jax_vector",
                       "test_semantics_numerics", "test_registry", "test_timing",
                       "test_timing_matmul", "test_jax_host"}
EXECUTORS = ("numpy", "jax")


def pytest_generate_tests(metafunc):
    name = metafunc.module.__name__.rpartition(".")[2]
    if name not in NAMES_ITS_EXECUTORS and "executor" in metafunc.fixturenames:
        metafunc.parametrize("executor", EXECUTORS, indirect=True, scope="module")


@pytest.fixture(autouse=True, scope="module")
def executor(request):
    """The executor every simulation of the test runs on (``None``: as the environment says).

    Module-scoped (hypothesis allows no function-scoped fixture under ``@given``): a module's
    tests run on the interpreter, then all of them again compiled.
    """
    backend = getattr(request, "param", None)
    if backend is None:
        yield os.environ.get(SIM_BACKEND_ENV) or None
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SIM_BACKEND_ENV, backend)
        yield backend
