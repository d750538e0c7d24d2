"""The exception hierarchy: NkiError subclasses that are also the built-in types users catch."""

import inspect
import pickle

import numpy as np
import pytest

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import NkiError, NkiIndexError, NkiSyntaxError, NkiTypeError, nki
from nki_workbench._src.errors import SYNTAX_CODES
from nki_workbench._src.ir.validate import InvalidIRError


def test_codes_pick_the_subclass_and_its_builtin_base():
    e = NkiError("err_tensor_access_out_of_bound", "index 9 is out of bounds", "k.py:3", "fix")
    assert type(e) is NkiIndexError and isinstance(e, IndexError) and isinstance(e, NkiError)
    t = NkiError("err_activation_bias_invalid_type", "bias must be a tile")
    assert type(t) is NkiTypeError and isinstance(t, TypeError)
    syn = NkiError("err_num_partition_exceed_arch_limit", "too many partitions", "k.py:4")
    assert type(syn) is NkiSyntaxError and isinstance(syn, SyntaxError)
    assert (syn.msg, syn.filename, syn.lineno) == ("too many partitions", "k.py", 4)
    assert all(type(NkiError(c, "m")) is NkiSyntaxError for c in SYNTAX_CODES)
    plain = NkiError("err_unsupported_memory", "wrong memory")
    assert type(plain) is NkiError and not isinstance(plain, (IndexError, TypeError,
                                                              SyntaxError))
    assert str(e) == "[err_tensor_access_out_of_bound] index 9 is out of bounds (at k.py:3)" \
        "\n  hint: fix"


def test_errors_pickle_with_their_attributes():
    for e in (NkiError("err_tensor_access_out_of_bound", "m", "k.py:1", "h"),
              NkiError("err_size_of_dimension_exceed_arch_limit", "m", "k.py:2", "h"),
              InvalidIRError("bad", line=3)):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)
        assert (back.code, back.loc, back.hint) == (e.code, e.loc, e.hint)


def static_oob(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[0:128, 0:64])
    nl.store(out, value=t)
    u = nl.load(a[nl.arange(128)[:, None] + 64, nl.arange(64)[None, :]])  # out of bounds
    nl.store(out, value=u)
    return out


def test_trace_time_out_of_bounds_is_an_index_error():
    with pytest.raises(IndexError) as info:
        nki.simulate_kernel(nki.jit(static_oob), np.zeros((128, 64), np.float32))
    assert isinstance(info.value, NkiError)
    assert info.value.code == "err_tensor_access_out_of_bound"


def bias_str(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.activation(op=nl.exp, data=nl.load(a), bias="zero"))
    return out


def test_invalid_type_is_a_type_error():
    with pytest.raises(TypeError) as info:
        nki.simulate_kernel(nki.jit(bias_str), np.zeros((128, 64), np.float32))
    assert info.value.code == "err_activation_bias_invalid_type"


def gather(a, idx):
    out = nl.ndarray((idx.shape[0], a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    ids = nl.load(idx)
    t = nl.zeros((idx.shape[0], a.shape[1]), dtype=a.dtype)
    iy = nl.arange(a.shape[1])[None, :]
    nisa.dma_copy(dst=t, src=a[ids, iy], oob_mode=nisa.oob_mode.error)  # the indirect copy
    nl.store(out, t)
    return out


def test_indirect_dma_out_of_bounds_is_numpys_own_index_error():
    a = np.zeros((128, 512), np.float32)
    bad = np.array([[3], [129]], dtype=np.int32)
    with pytest.raises(IndexError) as info:
        nki.simulate_kernel(nki.jit(gather), a, bad)
    e = info.value
    assert type(e) is IndexError  # exactly, as NKI's simulator raises it
    assert str(e) == "index 66048 is out of bounds for axis 0 with size 65536"
    src, start = inspect.getsourcelines(gather)
    line = start + next(k for k, t in enumerate(src) if "the indirect copy" in t)
    assert e.code == "err_tensor_access_out_of_bound" and e.loc == f"unit/{__name__}.py:{line}"
    assert any("oob_mode.skip" in n and "err_tensor_access_out_of_bound" in n
               for n in e.__notes__)
