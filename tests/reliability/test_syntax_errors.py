"""The tile-size rules NKI raises as ``SyntaxError`` (``errors.SYNTAX_CODES``): each kernel
fails at trace time with an :class:`NkiSyntaxError` that is also a ``SyntaxError``, with its
code, the kernel line (``loc`` and ``lineno``) and a traceback that shows both."""

import inspect
import pickle
import traceback

import numpy as np
import pytest

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import NkiError, NkiSyntaxError, nki
from nki_workbench._src.errors import SYNTAX_CODES


def partition_256(a):
    out = nl.ndarray((256, 64), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a[0:256, 0:64])  # the bad line: 256 partitions
    nl.store(out, t)
    return out


def psum_too_wide(a):
    out = nl.ndarray((128, 1024), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 1024), nl.float32, buffer=nl.psum)  # the bad line: 4 KiB of PSUM
    nl.store(out, acc)
    return out


def stationary_too_wide(a):
    out = nl.ndarray((256, 64), nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a[0:128, 0:256])
    y = nl.load(a[0:128, 0:64])
    r = nisa.nc_matmul(x, y)  # the bad line: stationary free size 256 > 128
    nl.store(out[0:128, :], r)
    return out


CASES = {
    "partition_256": (partition_256, "err_num_partition_exceed_arch_limit",
                      "exceeds architecture limitation of 128"),
    "psum_too_wide": (psum_too_wide, "err_size_of_dimension_exceed_arch_limit", "PSUM"),
    "stationary_too_wide": (stationary_too_wide, "err_size_of_dimension_exceed_arch_limit",
                            "stationary free size 256"),
}
A = np.zeros((256, 256), np.float32)


def _bad_line(fn):
    src, start = inspect.getsourcelines(fn)
    return start + next(k for k, t in enumerate(src) if "the bad line" in t)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tile_size_rules_raise_a_syntax_error_with_code_and_line(name):
    fn, code, text = CASES[name]
    with pytest.raises(SyntaxError) as info:
        nki.simulate_kernel(nki.jit(fn), A)
    e = info.value
    assert type(e) is NkiSyntaxError and isinstance(e, NkiError) and code in SYNTAX_CODES
    assert e.code == code and text in e.msg
    line = _bad_line(fn)
    assert e.loc.endswith(f"test_syntax_errors.py:{line}")
    assert e.lineno == line and e.filename.endswith("test_syntax_errors.py")
    assert str(e).startswith(f"[{code}] ") and f"(at {e.loc})" in str(e)
    shown = "".join(traceback.format_exception(e))
    assert f"line {line}" in shown and f"NkiSyntaxError: {e.msg}" in shown
    assert f"[{code}] at {e.loc}" in shown  # the note: code, line and hint survive printing


def test_it_is_caught_as_nki_error_too_and_pickles():
    with pytest.raises(NkiError) as info:
        nki.simulate_kernel(nki.jit(partition_256), A)
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is NkiSyntaxError
    assert (back.code, back.msg, back.loc, back.hint, back.lineno) == (
        info.value.code, info.value.msg, info.value.loc, info.value.hint, info.value.lineno)
    assert str(back) == str(info.value)


def test_other_codes_are_no_syntax_errors():
    for code in ("err_unsupported_memory", "err_tensor_access_out_of_bound",
                 "err_activation_bias_invalid_type", None):
        assert not isinstance(NkiError(code, "m"), SyntaxError)
