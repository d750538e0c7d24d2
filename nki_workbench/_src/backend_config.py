"""The backend_config itself: its keys, how it is built from a trace, encoded and decoded.

A backend_config is ``base64(json.dumps(cfg))`` with exactly the keys of :data:`CONFIG_KEYS`
(``opts`` is a :class:`CompileOpts` as JSON). :func:`decode_backend_config` reads it back (JSON
only, nothing is executed). :mod:`nki_workbench._src.encode`, the framework-binding contract,
re-exports every name here.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from .errors import NkiError
from .ir import Inst, Kernel, Loop, print_kernel
from .trace.kernel import Traced

KERNEL_VERSION = 1
"""Version of the backend_config layout; bumped whenever a key's meaning changes."""

CONFIG_KEYS = ("kernel_version", "func_name", "grid", "has_collectives", "matmul_mac_count",
               "platform_target", "platform_target_is_fallback", "opts", "serialize_dims",
               "serialize_ir_string", "tiled", "constant_values", "kernel_return",
               "result_is_sequence")
"""The exact keys of a backend_config, in the order they are written."""

# key -> accepted JSON type(s); bool is checked before int because bool is an int in Python
_KEY_TYPES = {"kernel_version": int, "func_name": str, "grid": list, "has_collectives": bool,
              "matmul_mac_count": int, "platform_target": str,
              "platform_target_is_fallback": bool, "opts": dict, "serialize_dims": dict,
              "serialize_ir_string": str, "tiled": bool, "constant_values": list,
              "kernel_return": bool, "result_is_sequence": bool}


@dataclass(frozen=True)
class CompileOpts:
    """Compile options carried by a kernel (part of the cache key and of ``opts`` in the config).

    Attributes:
        platform_target: the requested target (``None`` = resolve at dump time).
        additional_compile_opt: extra ``neuronx-cc`` flags.
        extra: other options as sorted ``(name, value)`` pairs.
    """

    platform_target: str | None = None
    additional_compile_opt: str | None = None
    extra: tuple = ()

    @classmethod
    def from_kwargs(cls, kwargs: dict) -> CompileOpts:
        """Split ``nki.jit`` keyword options into the known fields and ``extra``."""
        kw = dict(kwargs)
        known = {f.name: kw.pop(f.name) for f in dataclasses.fields(cls)
                 if f.name != "extra" and f.name in kw}
        for name, v in kw.items():
            try:
                hash(v)
            except TypeError:
                raise NkiError("err_nki_param_not_hashable",
                               f"kernel option {name}={v!r} is not hashable") from None
        return cls(**known, extra=tuple(sorted(kw.items())))

    def as_json(self) -> dict:
        """The options as a JSON object (``extra`` entries flattened in)."""
        out = {"platform_target": self.platform_target,
               "additional_compile_opt": self.additional_compile_opt}
        out.update({k: _json_value(v) for k, v in self.extra})
        return out


# ----------------------------------------------------------------------------- the config
def _walk_counted(body, mult):
    for s in body:
        if isinstance(s, Loop):
            yield from _walk_counted(s.body, mult * s.trip_count)
        elif isinstance(s, Inst):
            yield s, mult


MATMUL_OPS = ("matmul", "nc_matmul")


def matmul_mac_count(kernel: Kernel) -> int:
    """Multiply-accumulates of every TensorE matmul, over all loop iterations and programs.

    One instruction producing an ``[M, N]`` result from a moving operand ``[K, N]`` costs
    ``M * N * K`` MACs (masks are ignored: the PE array runs the whole tile). Each instruction
    counts once per iteration of its enclosing loops, and the total is multiplied by the number
    of SPMD programs in the launch grid: it is the work the whole custom call performs.
    """
    decls = kernel.decls()
    total = 0
    for inst, mult in _walk_counted(kernel.body, 1):
        if inst.op not in MATMUL_OPS:
            continue
        out = inst.outs[0].grid(decls[inst.outs[0].tensor])
        moving = inst.ins[1]
        k = moving.grid(decls[moving.tensor])[0]
        total += int(np.prod(out, dtype=np.int64)) * int(k) * mult
    programs = int(np.prod(kernel.grid, dtype=np.int64)) if kernel.grid else 1
    return total * programs


def _json_value(v):
    """A constant as JSON: scalars as they are, sequences as lists, anything else as repr."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if np.isfinite(v) else repr(v)
    if isinstance(v, np.generic):
        return _json_value(v.item())
    if isinstance(v, (tuple, list)):
        return [_json_value(x) for x in v]
    return repr(v)


def _dims(decls) -> list:
    return [{"name": d.name, "shape": list(d.shape), "dtype": d.dtype} for d in decls]


def serialize_dims(k: Kernel) -> dict:
    """The config's ``serialize_dims``: name, shape and dtype of every input and output."""
    decls = k.decls()
    outs = [dataclasses.replace(decls[n], shape=s)  # the shapes the caller gets
            for n, s in zip(k.outputs, k.result_shapes(), strict=True)]
    return {"inputs": _dims(k.params), "outputs": _dims(outs)}


def build_backend_config(traced: Traced, *, func_name: str | None = None, grid=None,
                         platform_target: str | None = None,
                         platform_target_is_fallback: bool = False, opts=None) -> dict:
    """The backend_config dict of a traced kernel (keys exactly :data:`CONFIG_KEYS`).

    ``serialize_dims`` lists the name, shape and dtype of every input and output tensor;
    ``tiled`` is true when the launch grid has more than one program; ``kernel_return`` is true
    for kernels that return their outputs (false for the legacy output-argument convention).
    """
    k = traced.kernel
    grid = tuple(k.grid if grid is None else grid)
    opts = opts if opts is not None else CompileOpts()
    opts_json = opts.as_json() if isinstance(opts, CompileOpts) else dict(opts)
    cfg = {
        "kernel_version": KERNEL_VERSION,
        "func_name": func_name or k.name,
        "grid": [int(g) for g in grid],
        "has_collectives": bool(k.attr("has_collectives", False)),
        "matmul_mac_count": matmul_mac_count(k),
        "platform_target": platform_target or k.target,
        "platform_target_is_fallback": bool(platform_target_is_fallback),
        "opts": opts_json,
        "serialize_dims": serialize_dims(k),
        "serialize_ir_string": print_kernel(k),
        "tiled": int(np.prod(grid, dtype=np.int64)) > 1 if grid else False,
        "constant_values": [[p, _json_value(v)] for p, v in traced.constants],
        "kernel_return": traced.returns != "none",
        "result_is_sequence": traced.returns in ("tuple", "list"),
    }
    return cfg


def encode_backend_config(cfg: dict) -> str:
    """``base64(json.dumps(cfg))`` as an ASCII string; ``cfg`` must have exactly the 14 keys."""
    _check_keys(cfg, "encode_backend_config")
    body = json.dumps({key: cfg[key] for key in CONFIG_KEYS})
    return base64.b64encode(body.encode("utf-8")).decode("ascii")


def _check_keys(cfg, where: str) -> None:
    if not isinstance(cfg, dict):
        raise ValueError(f"{where}: backend_config must be a JSON object, got "
                         f"{type(cfg).__name__}")
    missing = [k for k in CONFIG_KEYS if k not in cfg]
    extra = sorted(str(k) for k in cfg if k not in CONFIG_KEYS)
    if missing or extra:
        raise ValueError(f"{where}: backend_config keys differ from the contract"
                         + (f"; missing: {', '.join(missing)}" if missing else "")
                         + (f"; unexpected: {', '.join(extra)}" if extra else ""))


def decode_backend_config(s) -> dict:
    """Read a backend_config back into its dict. Only parses base64 and JSON; runs nothing.

    Args:
        s: the base64 string (``str`` or ``bytes``).

    Returns:
        dict with exactly the keys of :data:`CONFIG_KEYS`.

    Raises:
        ValueError: bad base64, bad UTF-8/JSON, missing or extra keys, a value of the wrong type
            or an unsupported ``kernel_version``.
        TypeError: ``s`` is neither str nor bytes.
    """
    if isinstance(s, str):
        try:
            raw = s.strip().encode("ascii")
        except UnicodeEncodeError:
            raise ValueError("backend_config is not base64: it contains non-ASCII "
                             "characters") from None
    elif isinstance(s, (bytes, bytearray)):
        raw = bytes(s).strip()
    else:
        raise TypeError(f"backend_config must be a base64 str or bytes, got {type(s).__name__}")
    try:
        body = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"backend_config is not valid base64: {exc}") from None
    try:
        cfg = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"backend_config does not hold JSON: {exc}") from None
    _check_keys(cfg, "decode_backend_config")
    for key, typ in _KEY_TYPES.items():
        v = cfg[key]
        ok = isinstance(v, bool) if typ is bool else (isinstance(v, typ)
                                                      and not isinstance(v, bool))
        if not ok:
            raise ValueError(f"backend_config key '{key}' must be {typ.__name__}, got "
                             f"{type(v).__name__}")
    if cfg["kernel_version"] != KERNEL_VERSION:
        raise ValueError(f"backend_config kernel_version {cfg['kernel_version']} is not "
                         f"supported (this build reads version {KERNEL_VERSION})")
    if not all(isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in cfg["grid"]):
        raise ValueError(f"backend_config grid {cfg['grid']!r} must be positive integers")
    return cfg
