"""Test-suite wide checks.

Every kernel traced anywhere in the suite is printed and parsed back: ``parse(print(ir)) == ir``
— the IR printer/parser round trip, property-tested over every kernel the tests trace.
Every kernel simulated anywhere in the suite is also re-simulated once from its backend_config
alone (``simulate_backend_config``), which must give byte-identical outputs.
"""

import pytest

import nki_workbench
from nki_workbench._src.execution import SIM_HOOKS, config_round_trip_hook
from nki_workbench._src.ir import parse, print_kernel
from nki_workbench._src.trace.kernel import TRACE_HOOKS

# why: the suite simulates thousands of tiles; like bench/, it opts into the glibc heap tuning
# that the package never applies by default (a process-wide side effect)
nki_workbench.tune_malloc()

ROUND_TRIPPED: list = []


def _round_trip(traced):
    text = print_kernel(traced.kernel)
    back = parse(text)
    assert back == traced.kernel, f"IR round trip failed for {traced.kernel.name}:\n{text}"
    assert print_kernel(back) == text
    ROUND_TRIPPED.append(traced.kernel.name)


@pytest.fixture(autouse=True, scope="session")
def _ir_round_trip_every_trace():
    TRACE_HOOKS.append(_round_trip)
    yield
    TRACE_HOOKS.remove(_round_trip)


@pytest.fixture(autouse=True, scope="session")
def _backend_config_round_trip_every_simulation():
    SIM_HOOKS.append(config_round_trip_hook)
    yield
    SIM_HOOKS.remove(config_round_trip_hook)


@pytest.fixture(autouse=True, scope="session")
def _auto_compiles_on_the_calling_thread():
    """``backend="auto"`` compiles where the call is (the default on 2 CPUs, as on CI), so
    which call runs compiled does not depend on a thread's timing on larger machines; the
    background compile's own tests turn it on (``tests/unit/test_auto_backend.py``)."""
    from nki_workbench._src import execution
    saved, execution.AUTO_BACKGROUND_COMPILE = execution.AUTO_BACKGROUND_COMPILE, False
    yield
    execution.AUTO_BACKGROUND_COMPILE = saved


@pytest.fixture(autouse=True)
def _once_per_process_warnings_start_fresh():
    """Each test sees the once-per-process warnings (the trn1 fallback) as a fresh process would."""
    from nki_workbench._src import errors
    errors.SHOWN_ONCE.clear()
    yield
