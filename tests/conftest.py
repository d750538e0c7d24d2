"""Test-suite wide checks.

Every kernel traced anywhere in the suite is printed and parsed back: ``parse(print(ir)) == ir``
— the IR printer/parser round trip, property-tested over every kernel the tests trace.
"""

import pytest

from nki_workbench._src.ir import parse, print_kernel
from nki_workbench._src.trace.kernel import TRACE_HOOKS

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
