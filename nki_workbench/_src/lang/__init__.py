"""The implementation of ``nki.language``: each function traces into IR instructions."""

from ..dtypes import (bfloat16, bfp16, bool_, finfo, float8_e4m3, float8_e5m2, float16,
                      float32, fp32, int8, int16, int32, static_cast, tfloat32, uint8, uint16,
                      uint32)
from ..trace.index import arange, ds, mgrid, par_dim
from ..trace.iterators import affine_range, sequential_range, static_range
from ..trace.tensor import NkiTensor
from .common import hbm, private_hbm, psum, sbuf, shared_hbm
from .constants import gemm_grid, gemm_stationary_grid, tile_size
from .creation import (empty_like, full, ndarray, ones, rand, random_seed, shared_constant,
                       shared_identity_matrix, zeros, zeros_like)
from .highlevel import (all_reduce, device_print, dropout, expand_dims, gather_flattened,
                        rms_norm, softmax)
from .math import (abs, add, arctan, bitwise_and, bitwise_or, bitwise_xor, ceil, cos, divide,
                   equal, erf, erf_dx, exp, floor, fmod, gelu, gelu_apprx_sigmoid,
                   gelu_apprx_tanh, gelu_dx, greater, greater_equal, invert, left_shift, less,
                   less_equal, log, logical_and, logical_not, logical_or, logical_xor, maximum,
                   minimum, mish, mod, multiply, negative, not_equal, power, reciprocal, relu,
                   right_shift, rsqrt, sigmoid, sign, silu, silu_dx, sin, softplus, sqrt, square,
                   subtract, tan, tanh, trunc, where)
from .matmul import matmul, transpose
from .memory import atomic_rmw, broadcast_to, copy, load, load_transpose2d, store
from .reduce import all, loop_reduce, max, mean, min, prod, sum, var
from .spmd import nc, num_programs, program_id, program_ndim, spmd_dim

__all__ = [n for n in dir() if not n.startswith("_")]
