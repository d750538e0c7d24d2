"""Tests for the NKI dtype system (nki_workbench._src.dtypes) and the target table (hw.targets)."""

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nki_workbench._src import dtypes as dt
from nki_workbench._src.hw import DEFAULT_TARGET, TARGETS, Target, get_target

ALL = [dt.from_name(n) for n in dt.DTYPE_NAMES]
FLOATS = ["float16", "float32", "bfloat16", "tfloat32", "float8_e4m3", "float8_e5m2"]
ML_FLOATS = ["bfloat16", "float8_e4m3", "float8_e5m2"]

f32_bits = st.integers(min_value=0, max_value=2**32 - 1)
f32_bit_arrays = st.lists(f32_bits, min_size=1, max_size=64).map(
    lambda xs: np.array(xs, dtype=np.uint32).view(np.float32)
)
f32_values = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)


def bits_of(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def same_bits(a, b):
    return a.dtype == b.dtype and np.array_equal(bits_of(a), bits_of(b))


# ------------------------------------------------------------------ dtype objects and names
def test_dtype_objects_match_nki():
    assert dt.bool_ is np.bool_ and dt.int8 is np.int8 and dt.uint32 is np.uint32
    assert dt.float16 is np.float16 and dt.float32 is np.float32
    assert dt.bfloat16 == np.dtype(ml_dtypes.bfloat16) == np.dtype("bfloat16")
    assert dt.float8_e4m3 == np.dtype(ml_dtypes.float8_e4m3)
    assert dt.float8_e5m2 == np.dtype(ml_dtypes.float8_e5m2)
    assert dt.tfloat32 == np.dtype("|V4")
    assert len(dt.DTYPE_NAMES) == 13


@pytest.mark.parametrize("name", dt.DTYPE_NAMES)
def test_name_round_trip(name):
    d = dt.from_name(name)
    assert dt.name_of(d) == name
    assert dt.from_name(dt.name_of(d)) == d
    assert dt.canonical(name) == d


@pytest.mark.parametrize(
    "alias, name",
    [
        ("bf16", "bfloat16"),
        ("fp8_e4m3", "float8_e4m3"),
        ("fp8_e5m2", "float8_e5m2"),
        ("tf32", "tfloat32"),
        ("fp32", "float32"),
        ("FP16", "float16"),
        ("bool_", "bool"),
        ("<f4", "float32"),
        ("i2", "int16"),
        ("u1", "uint8"),
        ("?", "bool"),
        (bool, "bool"),
        (int, "int32"),
        (float, "float32"),
        (np.uint16, "uint16"),
        (ml_dtypes.bfloat16, "bfloat16"),
        (np.dtype(">i4"), "int32"),
        (dt.bool_, "bool"),
        (dt.tfloat32, "tfloat32"),
    ],
)
def test_canonical_accepts(alias, name):
    assert dt.name_of(alias) == name
    assert dt.is_supported(alias)


@pytest.mark.parametrize(
    "bad, shown",
    [
        (np.float64, "float64"),
        (np.int64, "int64"),
        ("float64", "float64"),
        ("int64", "int64"),
        (np.dtype("uint64"), "uint64"),
        (np.complex64, "complex64"),
        (object, "object"),
        ("float8_e4m3fn", "float8_e4m3fn"),
        ("no_such_type", "no_such_type"),
        (None, "None"),
    ],
)
def test_canonical_rejects_with_helpful_message(bad, shown):
    with pytest.raises(TypeError) as err:
        dt.canonical(bad)
    assert shown in str(err.value)
    assert "bfloat16" in str(err.value) and "float8_e5m2" in str(err.value)
    assert not dt.is_supported(bad)


def test_from_name_is_strict():
    with pytest.raises(ValueError, match="bf16"):
        dt.from_name("bf16")


def test_itemsize_storage_predicates():
    sizes = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "uint8": 1, "uint16": 2, "uint32": 4}
    sizes |= {"float16": 2, "float32": 4, "bfloat16": 2, "tfloat32": 4}
    sizes |= {"float8_e4m3": 1, "float8_e5m2": 1}
    assert {n: dt.itemsize(n) for n in dt.DTYPE_NAMES} == sizes
    assert dt.sizeinbytes(dt.tfloat32) == 4
    assert dt.storage_dtype(dt.tfloat32) == np.float32
    for d in ALL:
        if d != dt.tfloat32:
            assert dt.storage_dtype(d) == d
    assert [n for n in dt.DTYPE_NAMES if dt.is_float(n)] == FLOATS
    assert [n for n in dt.DTYPE_NAMES if dt.is_int(n)] == [
        "int8", "int16", "int32", "uint8", "uint16", "uint32",
    ]  # fmt: skip
    assert [n for n in dt.DTYPE_NAMES if dt.is_bool(n)] == ["bool"]
    assert not dt.is_signed("uint16") and not dt.is_signed("bool")
    assert dt.is_signed("int8") and dt.is_signed("float8_e5m2")


# ------------------------------------------------------------------ promotion
DOCUMENTED = [
    ("int32", "float16", "float16"),
    ("uint16", "tfloat32", "tfloat32"),
    ("float32", "tfloat32", "float32"),
    ("float32", "bfloat16", "float32"),
    ("float16", "bfloat16", "float32"),
    ("float8_e4m3", "float16", "float16"),
    ("float8_e4m3", "bfloat16", "bfloat16"),
    ("float8_e4m3", "float8_e5m2", "bfloat16"),
    ("int16", "int32", "int32"),
    ("uint8", "uint16", "uint16"),
    ("uint16", "int32", "int32"),
    ("int8", "uint8", "int16"),
    ("int8", "uint16", "int32"),
    ("int32", "uint32", "float32"),
]
ASSUMED = [
    ("tfloat32", "float16", "tfloat32"),
    ("tfloat32", "bfloat16", "tfloat32"),
    ("float8_e5m2", "float16", "float16"),
    ("float8_e5m2", "bfloat16", "bfloat16"),
    ("float8_e5m2", "tfloat32", "tfloat32"),
    ("int16", "uint16", "int32"),
    ("int8", "uint32", "float32"),
    ("int16", "uint32", "float32"),
]


@pytest.mark.parametrize("a, b, expected", DOCUMENTED + ASSUMED)
def test_promote_pairs(a, b, expected):
    assert dt.promote(a, b) == dt.from_name(expected)
    assert dt.promote(b, a) == dt.from_name(expected)


@pytest.mark.parametrize("a", dt.DTYPE_NAMES)
def test_promote_same_and_bool(a):
    assert dt.promote(a, a) == dt.from_name(a)
    assert dt.promote(a, "bool") == dt.from_name(a)
    assert dt.promote(dt.bool_, a) == dt.from_name(a)


@given(st.sampled_from(ALL), st.sampled_from(ALL))
def test_promote_symmetric_and_closed(a, b):
    r = dt.promote(a, b)
    assert r == dt.promote(b, a)
    assert dt.is_supported(r)
    assert dt.promote(r, a) == r and dt.promote(r, b) == r  # the result absorbs both operands


@given(st.sampled_from(ALL), st.sampled_from(ALL))
def test_float_int_gives_the_float(a, b):
    if dt.is_float(a) and dt.is_int(b):
        assert dt.promote(a, b) == a


def test_accepts_any_dtype_like():
    assert dt.promote(np.int32, "fp16") == np.float16
    assert dt.promote(np.dtype("int8"), np.uint8) == np.int16


@pytest.mark.parametrize(
    "operands, expected",
    [
        ((dt.int8, 2), "int32"),
        ((dt.float16, 1.2), "float32"),
        ((dt.float16, 2), "float16"),
        ((dt.uint8, True), "uint8"),
        ((dt.bool_, True), "uint8"),
        ((dt.int16, False), "int16"),
        ((dt.float16, np.float16(2)), "float16"),
        ((dt.bfloat16, np.float32(2)), "float32"),
        ((dt.int8, np.int8(3)), "int8"),
        ((dt.bfloat16, np.float64(0.5)), "float32"),  # 64-bit numpy scalars count as weak
        ((dt.int16, np.int64(3)), "int32"),
        ((2,), "int32"),
        ((2.0,), "float32"),
        ((True,), "uint8"),
        ((np.zeros(3, dt.bfloat16), 1.0), "float32"),
        ((np.zeros(3, dt.bfloat16), np.zeros(3, dt.float8_e4m3)), "bfloat16"),
        (("int32", dt.float16, 3), "float16"),
        ((dt.float16, "bfloat16", dt.tfloat32), "float32"),  # left fold
    ],
)
def test_result_type(operands, expected):
    assert dt.result_type(*operands) == dt.from_name(expected)


def test_result_type_errors():
    with pytest.raises(TypeError):
        dt.result_type()
    with pytest.raises(TypeError):
        dt.result_type(dt.float32, 1j)
    with pytest.raises(TypeError, match="float64"):
        dt.result_type(np.zeros(2))  # a float64 array is not an NKI tile


# ------------------------------------------------------------------ casts: bit-exactness
@pytest.mark.parametrize("name", ML_FLOATS)
@settings(max_examples=200)
@given(x=f32_bit_arrays)
def test_from_f32_bit_exact_random_bits(name, x):
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(dt.from_name(name))
    assert same_bits(dt.from_f32(x, name), want)
    assert same_bits(dt.cast(x, name), want)


@pytest.mark.parametrize("name", ML_FLOATS)
@given(v=f32_values)
def test_cast_scalar_bit_exact(name, v):
    x = np.float32(v)
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.asarray(x).astype(dt.from_name(name))
    assert same_bits(dt.cast(x, name), want)


@pytest.mark.parametrize("name", ML_FLOATS + ["float16"])
def test_from_f32_bit_exact_bulk_and_strided(name):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**32, size=(512, 512), dtype=np.uint32).view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-40, 240.0, 248.0,
                         57344.0, 65504.0, 65520.0, 3.4e38], np.float32)  # fmt: skip
    x[0, : specials.size] = specials
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(dt.from_name(name))
    assert same_bits(dt.from_f32(x, name), want)
    assert same_bits(dt.from_f32(x[:, ::3], name), want[:, ::3])
    assert same_bits(dt.from_f32(x.T, name), want.T)


@pytest.mark.parametrize("name", ML_FLOATS + ["float16"])
def test_to_f32_exact_for_every_bit_pattern(name):
    d = dt.from_name(name)
    codes = np.arange(2 ** (8 * d.itemsize), dtype=np.uint32).astype(f"u{d.itemsize}").view(d)
    got = dt.to_f32(codes)
    assert same_bits(got, codes.astype(np.float32))
    assert same_bits(dt.to_f32(codes[::7]), codes[::7].astype(np.float32))
    finite = codes[np.isfinite(got)]
    assert same_bits(dt.from_f32(dt.to_f32(finite), d), finite)  # exact round trip


def test_to_f32_other_inputs():
    x = np.arange(6, dtype=np.float32)
    assert dt.to_f32(x) is x
    assert dt.to_f32(np.array([1, 2], np.int32)).dtype == np.float32
    assert dt.to_f32(np.array([True])).tolist() == [1.0]
    assert dt.to_f32(np.float64(0.1)) == np.float32(0.1)
    with pytest.raises(TypeError):
        dt.to_f32(np.array([1j]))


def test_cast_between_small_floats_is_single_rounding():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(10_000).astype(np.float32) * 100
    for src in ["float16", "bfloat16", "float8_e5m2"]:
        a = x.astype(dt.from_name(src))
        for dst in ML_FLOATS + ["float16"]:
            want = a.astype(np.float32).astype(dt.from_name(dst))
            assert same_bits(dt.cast(a, dst), want), (src, dst)


def test_cast_from_float64_matches_astype():
    x = np.array([1 + 2**-8 + 2**-30, 0.1, -3.3, 1e300, 1 + 2**-11 + 2**-40], np.float64)
    for name in ML_FLOATS + ["float16"]:
        with np.errstate(over="ignore"):
            want = x.astype(dt.from_name(name))
        assert same_bits(dt.cast(x, name), want)
    assert dt.cast(x, "float16")[4] == np.float16(1 + 2**-10)  # numpy rounds float64 once


# ------------------------------------------------------------------ tf32
def tf32_reference(x):
    """Nearest tf32 value by comparing the two neighbours (ties to even mantissa)."""
    x = np.float32(x)
    if not np.isfinite(x):
        return x
    bits = int(np.array(x).view(np.uint32))
    down_bits = bits & 0xFFFFE000
    down = np.array(down_bits, np.uint32).view(np.float32)[()]
    up = np.array(down_bits + 0x2000, np.uint32).view(np.float32)[()]
    up_value = float(up) if np.isfinite(up) else np.copysign(2.0**128, float(x))  # past max
    d_down, d_up = abs(float(x) - float(down)), abs(up_value - float(x))
    if d_down < d_up or (d_down == d_up and not (down_bits >> 13) & 1):
        return down
    return up


@pytest.mark.parametrize(
    "value, expected",
    [
        (1 + 2**-11, 1.0),  # halfway, even neighbour below
        (1 + 3 * 2**-11, 1 + 2**-9),  # halfway, odd neighbour below: rounds up
        (1 + 2**-11 + 2**-20, 1 + 2**-10),  # above halfway
        (1 + 2**-10, 1 + 2**-10),  # representable
        (-(1 + 3 * 2**-11), -(1 + 2**-9)),
        (np.inf, np.inf),
        (3.4028235e38, np.inf),  # float32 max rounds past tf32 max
    ],
)
def test_tf32_rounding_examples(value, expected):
    got = dt.cast(np.float32(value), dt.tfloat32)
    assert got.dtype == np.float32
    assert got == np.float32(expected)


@given(v=f32_values)
def test_tf32_matches_reference(v):
    got = dt.from_f32(np.float32(v), "tfloat32")
    want = tf32_reference(v)
    if np.isnan(v):
        assert np.isnan(got) and np.signbit(got) == np.signbit(np.float32(v))
        assert int(got.view(np.uint32)) & 0x7FFFFFFF == 0x7FC00000
    else:
        assert same_bits(got, np.asarray(want))
    assert int(np.asarray(got).view(np.uint32)) & 0x1FFF == 0


def test_tf32_strided_and_finfo():
    x = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    full = dt.cast(x, "tf32")
    assert same_bits(dt.cast(x[::2, ::3], "tf32"), full[::2, ::3])
    info = dt.finfo(dt.tfloat32)
    assert info.nmant == 10 and info.nexp == 8 and info.eps == 2.0**-10
    assert info.max == np.float32((2 - 2**-10) * 2.0**127) and info.min == -info.max
    assert info.tiny == np.float32(2.0**-126) and info.smallest_subnormal == np.float32(2.0**-136)


# ------------------------------------------------------------------ float -> int, int -> int
@pytest.mark.parametrize(
    "name, values, expected",
    [
        ("int32", [1.7, -1.7, 0.5, -0.5, 2.0**31, -(2.0**32), 1e10], [1, -1, 0, 0, 2**31 - 1,
                                                                      -(2**31), 2**31 - 1]),
        ("int32", [np.nan, -np.nan, np.inf, -np.inf], [0, 0, 2**31 - 1, -(2**31)]),
        ("uint8", [-3.0, 255.9, 256.0, np.nan, 1e30], [0, 255, 255, 0, 255]),
        ("int8", [-128.9, 127.9, -1e9], [-128, 127, -128]),
        ("uint32", [4294967295.0, 5e9, -1.0], [4294967295, 4294967295, 0]),
        ("int16", [32767.5, -32768.5], [32767, -32768]),
    ],
)  # fmt: skip
def test_float_to_int_truncates_and_saturates(name, values, expected):
    for src in [np.float32, np.float64]:
        got = dt.cast(np.array(values, src), name)
        assert got.dtype == dt.from_name(name)
        assert got.tolist() == expected


def test_float_to_int_from_small_floats():
    assert dt.cast(np.array([3.75, -2.5, np.nan], dt.bfloat16), "int8").tolist() == [3, -2, 0]
    assert dt.cast(np.array([240, -240], dt.float8_e4m3), "uint8").tolist() == [240, 0]
    assert dt.cast(np.array([65504, -np.inf], np.float16), "int16").tolist() == [32767, -32768]


@given(st.lists(st.floats(allow_nan=True, width=32), min_size=1, max_size=20),
       st.sampled_from(["int8", "int16", "int32", "uint8", "uint16", "uint32"]))  # fmt: skip
def test_float_to_int_always_in_range(values, name):
    got = dt.cast(np.array(values, np.float32), name)
    info = np.iinfo(dt.from_name(name))
    wide = np.array(values, np.float64)
    want = np.clip(np.nan_to_num(np.trunc(wide), nan=0.0), info.min, info.max)
    assert got.astype(np.float64).tolist() == want.tolist()


def test_int_to_int_saturates():
    x = np.array([-(2**31), -129, -1, 0, 127, 128, 255, 70000, 2**31 - 1], np.int32)
    assert dt.cast(x, "int8").tolist() == [-128, -128, -1, 0, 127, 127, 127, 127, 127]
    assert dt.cast(x, "uint8").tolist() == [0, 0, 0, 0, 127, 128, 255, 255, 255]
    assert dt.cast(x, "uint32").tolist() == [0, 0, 0, 0, 127, 128, 255, 70000, 2**31 - 1]
    u = np.array([0, 2**31, 2**32 - 1], np.uint32)
    assert dt.cast(u, "int32").tolist() == [0, 2**31 - 1, 2**31 - 1]
    big = np.array([-(2**40), 2**40, 2**63 - 1], np.int64)
    assert dt.cast(big, "int32").tolist() == [-(2**31), 2**31 - 1, 2**31 - 1]
    assert dt.cast(np.array([2**64 - 1], np.uint64), "int16").tolist() == [32767]


def test_int_and_bool_conversions():
    assert same_bits(dt.cast(np.array([2**24 + 1], np.int32), "float32"),
                     np.array([2**24], np.float32))  # fmt: skip
    assert dt.cast(np.array([1, 300], np.int32), "float8_e4m3").tolist() == [1.0, np.inf]
    assert dt.cast(np.array([3, 0, -2], np.int16), "bool").tolist() == [True, False, True]
    assert dt.cast(np.array([True, False]), "bfloat16").astype(np.float32).tolist() == [1.0, 0.0]
    assert dt.cast(np.array([True, False]), "int32").tolist() == [1, 0]
    assert dt.cast(np.array([0.0, -0.0, np.nan, 0.5], np.float32), dt.bool_).tolist() == [
        False, False, True, True,
    ]  # fmt: skip
    assert dt.cast([1, 2], "tfloat32").dtype == np.float32


SOURCES = [np.bool_, np.int8, np.uint16, np.int32, np.int64, np.uint64, np.float16, np.float32,
           np.float64, dt.bfloat16, dt.float8_e4m3, dt.float8_e5m2]  # fmt: skip


@pytest.mark.parametrize("src", SOURCES)
@pytest.mark.parametrize("dst", dt.DTYPE_NAMES)
def test_cast_never_returns_float64(src, dst):
    x = np.array([0, 1, 2], dtype=np.int8).astype(src)
    out = dt.cast(x, dst)
    assert isinstance(out, np.ndarray)
    assert out.dtype == dt.storage_dtype(dst) != np.float64
    assert out.shape == x.shape


def test_cast_returns_a_copy_and_rejects_complex():
    x = np.arange(3, dtype=np.float32)
    y = dt.cast(x, "float32")
    assert y is not x and not np.shares_memory(x, y)
    assert dt.from_f32(x, "float32") is x
    with pytest.raises(TypeError):
        dt.cast(np.array([1j]), "float32")
    with pytest.raises(TypeError):
        dt.cast(np.ones(2), "float64")


def test_static_cast():
    s = dt.static_cast(2.5, "bfloat16")
    assert isinstance(s, ml_dtypes.bfloat16) and float(s) == 2.5
    assert isinstance(dt.static_cast(3, dt.int8), np.int8)
    a = dt.static_cast(np.array([1.0, 2.0, 100.0, 1000.0]), dt.float8_e4m3)
    assert isinstance(a, np.ndarray) and a.dtype == dt.float8_e4m3
    assert a.astype(np.float32).tolist() == [1.0, 2.0, 96.0, np.inf]  # tie to even; max 240
    assert dt.static_cast([1.0, 2.0], "fp32").dtype == np.float32


# ------------------------------------------------------------------ finfo / constants
def test_finfo_values():
    bf = dt.finfo(dt.bfloat16)
    assert bf.max == np.float32(3.3895314e38) and bf.min == -bf.max
    assert bf.eps == 2.0**-7 and bf.nmant == 7 and bf.nexp == 8 and bf.bits == 16
    assert bf.dtype == dt.bfloat16
    e4 = dt.finfo("float8_e4m3")
    assert float(e4.max) == 240.0 and float(e4.min) == -240.0 and e4.bits == 8
    assert float(dt.finfo("float8_e5m2").max) == 57344.0
    assert dt.finfo(np.float32).max == np.finfo(np.float32).max
    assert dt.finfo("fp16").smallest_subnormal == np.finfo(np.float16).smallest_subnormal
    with pytest.raises(TypeError, match="iinfo"):
        dt.finfo(dt.int32)
    assert dt.iinfo("uint16").max == 65535
    with pytest.raises(TypeError):
        dt.iinfo(dt.float32)


def test_fp32_and_bfp16_constants():
    assert dt.fp32.min.dtype == np.float32
    assert int(np.asarray(dt.fp32.min).view(np.uint32)) == 0xFF7FFFFF
    assert dt.fp32.min == np.float32(-3.4028235e38)
    assert np.asarray(dt.bfp16.min).dtype == dt.bfloat16
    assert int(np.asarray(dt.bfp16.min).view(np.uint16)) == 0xFF80
    assert np.isneginf(np.float32(dt.bfp16.min))  # as documented by NKI, 0xff80 is -inf


# ------------------------------------------------------------------ targets
def test_target_table():
    assert list(TARGETS) == ["trn1", "trn2", "trn3"]
    t1, t2, t3 = TARGETS.values()
    assert (t1.nc_version, t2.nc_version, t3.nc_version) == (2, 3, 4)
    assert [t.total_available_sbuf_size for t in (t1, t2, t3)] == [180224, 212984, 245752]
    assert t1.sbuf_bytes_per_partition == 192 * 1024 and t2.sbuf_bytes_per_partition == 224 * 1024
    assert t1.sbuf_bytes == 24 * 2**20 and t2.sbuf_bytes == 28 * 2**20
    for t in (t1, t2, t3):
        assert t.num_partitions == t.pmax == 128
        assert (t.psum_bytes_per_partition, t.psum_banks, t.psum_bank_bytes) == (16384, 8, 2048)
        assert t.psum_bytes == 2 * 2**20
        assert (t.psum_fmax, t.gemm_stationary_fmax, t.gemm_moving_fmax) == (512, 128, 512)
        assert (t.bn_stats_fmax, t.psum_min_align, t.sbuf_min_align) == (512, 4, 1)
        assert t.allowed_start_partitions(128) == (0,)
        assert t.allowed_start_partitions(64) == (0, 64)
        assert t.allowed_start_partitions(33) == (0, 64)
        assert t.allowed_start_partitions(1) == (0, 32, 64, 96)
        with pytest.raises(ValueError):
            t.allowed_start_partitions(129)
    assert t3.psum_accumulate_dtypes == ("float32", "bfloat16")
    assert not t1.has_hwdge and t2.has_hwdge


def test_get_target():
    assert DEFAULT_TARGET == "trn1"
    assert get_target() is TARGETS["trn1"]
    assert get_target("TRN2") is TARGETS["trn2"]
    assert get_target("inf2") is TARGETS["trn1"] and get_target("gen3") is TARGETS["trn2"]
    assert get_target(TARGETS["trn3"]) is TARGETS["trn3"]
    with pytest.raises(ValueError) as err:
        get_target("trn9")
    msg = str(err.value)
    assert "trn9" in msg and all(n in msg for n in ("trn1", "trn2", "trn3"))


def test_target_is_frozen_and_checked():
    t = TARGETS["trn1"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.pmax = 64  # type: ignore[misc]
    with pytest.raises(ValueError, match="inconsistent"):
        dataclasses.replace(t, sbuf_reserved_bytes=0)
    assert isinstance(t, Target)
