"""Random IR mutations of real backend_configs, for the validator's fuzz tests and bench/fuzz_ir.py.

A few small kernels are traced into backend_configs; :func:`mutate` changes one config's
``serialize_ir_string`` either as text (characters, numbers, names, lines, indentation) or as a
structure (a node of the parsed kernel replaced by a plausible wrong one, then printed), and
:func:`run_case` feeds the result to ``simulate_backend_config`` and classifies what came out:
``"ran"``, ``"rejected"`` (``NkiError`` / ``IRParseError``) or ``"escaped"`` (anything else).
Only public names that exist before and after the validator are used, so the same script
measures both.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import re
import time
import warnings

import numpy as np

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import simulate_backend_config
from nki_workbench._src.encode import UnifiedKernel, decode_backend_config
from nki_workbench._src.errors import NkiError
from nki_workbench._src.ir import OPCODES, IRParseError, parse, print_kernel
from nki_workbench._src.ir import expr as E
from nki_workbench._src.ir.nodes import Access, Alloc, Inst, Loop, Scalar

__all__ = ["base_cases", "mutate", "run_case", "fuzz"]


# ----------------------------------------------------------------------------- base kernels
def k_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.exp(nl.load(a)) + nl.load(b))
    return out


def k_matmul(a_t, b):
    out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((32, 64), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        at = nl.load(a_t[k * 32:(k + 1) * 32, :])
        bt = nl.load(b[k * 32:(k + 1) * 32, :])
        acc += nl.matmul(at, bt, transpose_x=True)
    nl.store(out, acc)
    return out


def k_spmd(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i * 16:(i + 1) * 16, :], nl.load(a[i * 16:(i + 1) * 16, :]) * 2.0)
    return out


def k_masked(a):
    out = nl.ndarray((80, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.sequential_range(3):
        ip, jf = nl.mgrid[0:32, 0:16]
        t = nl.load(a[i * 32 + ip, jf], mask=(i * 32 + ip < 80))
        s = nl.sum(nl.maximum(t, 0.0), axis=1, keepdims=True, mask=(i * 32 + ip < 80))
        nl.store(out[i * 32 + ip, 0], s[ip, 0], mask=(i * 32 + ip < 80))
    return out


def k_isa(a, w):
    out = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nisa.tensor_scalar(data=x, op0=np.multiply, operand0=0.5, op1=np.add, operand1=1.0)
    z = nisa.activation(op=nl.exp, data=y, bias=nl.load(w), scale=2.0)
    r = nisa.tensor_reduce(op=np.add, data=z, axis=(1,), keepdims=True)
    nl.store(out, r)
    return out


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def base_cases(seed: int = 0):
    """``[(name, config dict, input arrays)]`` of the base kernels, traced into configs."""
    rng = np.random.default_rng(seed)
    specs = [
        ("add", k_add, (), (_f32(rng, 32, 16), _f32(rng, 32, 16))),
        ("matmul", k_matmul, (), (_f32(rng, 64, 32), _f32(rng, 64, 64))),
        ("spmd", k_spmd, (2,), (_f32(rng, 32, 16),)),
        ("masked", k_masked, (), (_f32(rng, 96, 16),)),
        ("isa", k_isa, (), (_f32(rng, 32, 16), _f32(rng, 32, 1))),
    ]
    out = []
    for name, fn, grid, arrays in specs:
        d = UnifiedKernel(fn, grid=grid, platform_target="trn1").dump_config(*arrays)
        out.append((name, decode_backend_config(d.backend_config), arrays))
    return out


# ----------------------------------------------------------------------------- text mutations
_CHARS = "abcdefghijklmnopqrstuvwxyz_0123456789 ()[]{},:=+-*@/<>&|~'.#\n"
_NUM = re.compile(r"\d+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_NUMBERS = (0, 1, -1, 2, 3, 7, 16, 31, 33, 128, 129, 1000, 4096, 10 ** 6, 10 ** 12, 2 ** 31,
            2 ** 63, 10 ** 40)
_WORDS = ("float32", "bfloat16", "int32", "float64", "sbuf", "psum", "hbm", "local", "output",
          "affine_range", "sequential_range", "load", "store", "exp", "nonsense", "pid0", "pid1",
          "i", "k", "zz", "mask", "expr", "dyn", "None", "True", "nan", "acc", "dtype")


def _text_mutation(text: str, rng: random.Random) -> str:
    kind = rng.randrange(9)
    lines = text.split("\n")
    if kind == 0:  # replace one character
        i = rng.randrange(len(text))
        return text[:i] + rng.choice(_CHARS) + text[i + 1:]
    if kind == 1:  # delete a span
        i = rng.randrange(len(text))
        return text[:i] + text[i + rng.randint(1, 12):]
    if kind == 2:  # insert a character
        i = rng.randrange(len(text))
        return text[:i] + rng.choice(_CHARS) + text[i:]
    if kind == 3:  # replace a number
        nums = list(_NUM.finditer(text))
        if nums:
            m = rng.choice(nums)
            return text[:m.start()] + str(rng.choice(_NUMBERS)) + text[m.end():]
    if kind == 4:  # replace a name by another name of the text or a stock word
        names = list(_NAME.finditer(text))
        m = rng.choice(names)
        new = rng.choice([n.group() for n in names] + list(_WORDS))
        return text[:m.start()] + new + text[m.end():]
    if kind == 5:  # delete a line
        del lines[rng.randrange(1, len(lines))]
        return "\n".join(lines)
    if kind == 6:  # duplicate a line
        i = rng.randrange(1, len(lines))
        lines.insert(rng.randrange(1, len(lines)), lines[i])
        return "\n".join(lines)
    if kind == 7:  # swap two lines
        i, j = rng.randrange(1, len(lines)), rng.randrange(1, len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    i = rng.randrange(1, len(lines))  # re-indent a line
    lines[i] = " " * rng.choice((0, 1, 2, 4, 6, 8)) + lines[i].lstrip(" ")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- structural mutations
def _stmts(body, path=()):
    for i, s in enumerate(body):
        yield path + (i,), s
        if isinstance(s, Loop):
            yield from _stmts(s.body, path + (i,))


def _replace_at(body, path, new):
    i = path[0]
    if len(path) == 1:
        return body[:i] + ((new,) if new is not None else ()) + body[i + 1:]
    loop = body[i]
    return body[:i] + (dataclasses.replace(loop, body=_replace_at(loop.body, path[1:], new)),) \
        + body[i + 1:]


def _bad_expr(rng: random.Random):
    return rng.choice([E.as_expr(E.Var("zz")), E.add(E.Var("q"), 1), E.const(10 ** 9),
                       E.as_expr(E.Iota(rng.choice((1, 7, 200)), 0, 2)),
                       E.as_expr(E.Iota(4, 2, 3)), E.mul(E.Var("i"), E.Var("k"))])


def _mutate_access(a: Access, names, rng: random.Random) -> Access:
    k = rng.randrange(5)
    if k == 0:
        return dataclasses.replace(a, tensor=rng.choice(["ghost", *names]))
    if k == 1 and a.index:
        return dataclasses.replace(a, index=a.index[:-1])
    if k == 2:
        extra = (E.const(0),) if a.index else (E.const(0), E.const(0), E.const(0))
        return dataclasses.replace(a, index=(a.index or ()) + extra)
    if k == 3 and a.index:
        idx = list(a.index)
        idx[rng.randrange(len(idx))] = _bad_expr(rng)
        return dataclasses.replace(a, index=tuple(idx))
    return dataclasses.replace(a, shape=rng.choice([(0,), (3, 5), (1, 10 ** 7)]))


def _mutate_inst(s: Inst, names, rng: random.Random) -> Inst:
    k = rng.randrange(8)
    if k == 0:
        return dataclasses.replace(s, op=rng.choice(sorted(OPCODES) + ["frobnicate"]))
    if k == 1:
        return dataclasses.replace(s, attrs=s.attrs + ((rng.choice(["bogus", "axis", "op"]),
                                                        rng.choice([1, "x", (5,), None])),))
    if k == 2 and s.attrs:
        attrs = list(s.attrs)
        j = rng.randrange(len(attrs))
        attrs[j] = (attrs[j][0], rng.choice(["float64", 3, (), "nonsense", True, None]))
        return dataclasses.replace(s, attrs=tuple(attrs))
    if k == 3 and s.attrs:
        attrs = list(s.attrs)
        del attrs[rng.randrange(len(attrs))]
        return dataclasses.replace(s, attrs=tuple(attrs))
    if k == 4:
        return dataclasses.replace(s, mask=E.compare("lt", rng.choice(
            [E.Var("zz"), E.Var("pid0"), E.Iota(32, 0, 2)]), rng.choice([3, 10 ** 9])))
    if k == 5 and s.ins:
        ins = list(s.ins)
        j = rng.randrange(len(ins))
        ins[j] = rng.choice([Scalar(1.5, "float77"), Scalar(2), E.add(E.Var("zz"), 1),
                             Access("ghost"), *([_mutate_access(ins[j], names, rng)]
                                                if isinstance(ins[j], Access) else [])])
        return dataclasses.replace(s, ins=tuple(ins))
    if k == 6 and s.ins:
        return dataclasses.replace(s, ins=s.ins[:-1] if rng.random() < 0.5 else s.ins + s.ins)
    if s.outs:
        outs = list(s.outs)
        j = rng.randrange(len(outs))
        outs[j] = _mutate_access(outs[j], names, rng)
        return dataclasses.replace(s, outs=tuple(outs))
    return dataclasses.replace(s, outs=(Access("ghost"),))


def _mutate_decl(d, rng: random.Random):
    k = rng.randrange(5)
    if k == 0:
        return dataclasses.replace(d, dtype=rng.choice(["float64", "int4", "bfloat16", "uint8"]))
    if k == 1:
        j = rng.randrange(len(d.shape)) if d.shape else 0
        shape = list(d.shape) or [1]
        shape[j] = rng.choice([0, -4, 1, shape[j] * 2, shape[j] * 1000, 10 ** 9])
        return dataclasses.replace(d, shape=tuple(shape))
    if k == 2:
        return dataclasses.replace(d, shape=d.shape + (2,) if rng.random() < 0.5 else d.shape[1:])
    if k == 3:
        return dataclasses.replace(d, buffer=rng.choice(["sbuf", "psum", "hbm", "gpu"]),
                                   kind=rng.choice(["local", "output", "input", "weird"]))
    return dataclasses.replace(d, par_dim=rng.choice([1, 5, -1]))


def _mutate_loop(s: Loop, rng: random.Random) -> Loop:
    k = rng.randrange(4)
    if k == 0:
        return dataclasses.replace(s, stop=rng.choice([0, s.stop * 10, 10 ** 6, 10 ** 9, -3]))
    if k == 1:
        return dataclasses.replace(s, step=rng.choice([0, -1, 3]))
    if k == 2:
        return dataclasses.replace(s, var=rng.choice(["pid0", "zz", s.var + "x"]))
    return dataclasses.replace(s, kind=rng.choice(["affine", "sequential", "parallel"]))


def _struct_mutation(text: str, rng: random.Random) -> str:
    k = parse(text)
    names = [d.name for d in k.decls().values()]
    stmts = list(_stmts(k.body))
    pick = rng.randrange(6)
    if pick == 0 and k.params:  # a parameter declaration
        j = rng.randrange(len(k.params))
        params = k.params[:j] + (_mutate_decl(k.params[j], rng),) + k.params[j + 1:]
        return print_kernel(k.replace(params=params))
    if pick == 1:  # kernel-level facts
        return print_kernel(k.replace(**rng.choice([
            {"grid": (0,)}, {"grid": (10 ** 6,)}, {"grid": (2, 2)}, {"outputs": ("ghost",)},
            {"attrs": k.attrs + (("bogus", 1),)}, {"target": "trn9"}])))
    path, s = rng.choice(stmts)
    if pick == 2:  # drop or duplicate a statement
        body = _replace_at(k.body, path, None)
        if rng.random() < 0.5:
            body = _replace_at(k.body, path, s)[:path[0]] + (s,) + k.body[path[0]:] \
                if len(path) == 1 else body
        return print_kernel(k.replace(body=body))
    if isinstance(s, Inst):
        new = _mutate_inst(s, names, rng)
    elif isinstance(s, Loop):
        new = _mutate_loop(s, rng)
    else:
        new = Alloc(_mutate_decl(s.decl, rng))
    return print_kernel(k.replace(body=_replace_at(k.body, path, new)))


def mutate(text: str, rng: random.Random) -> tuple[str, str]:
    """One random mutation of IR ``text``: ``(kind, new text)`` with kind ``text``/``struct``."""
    if rng.random() < 0.5:
        return "text", _text_mutation(text, rng)
    return "struct", _struct_mutation(text, rng)


# ----------------------------------------------------------------------------- running
def _config(cfg: dict, text: str) -> str:
    return base64.b64encode(json.dumps({**cfg, "serialize_ir_string": text}).encode()).decode()


def run_case(cfg: dict, text: str, arrays, budget=None) -> tuple[str, BaseException | None, float]:
    """Simulate ``cfg`` with IR ``text``: ``(outcome, exception, seconds)``.

    ``budget``: passed to ``simulate_backend_config`` when given (``None``: its default).
    """
    s = _config(cfg, text)
    kw = {} if budget is None else {"budget": budget}
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            simulate_backend_config(s, *[a.copy() for a in arrays], **kw)
        outcome, exc = "ran", None
    except (NkiError, IRParseError) as e:
        outcome, exc = "rejected", e
    except Exception as e:  # noqa: BLE001  why: an escape is what the fuzzer counts
        outcome, exc = "escaped", e
    return outcome, exc, time.perf_counter() - t0


def fuzz(n: int, seed: int, cases=None, on_case=None, budget=None) -> dict:
    """Run ``n`` mutations with a fixed seed; returns counts, escapes and the slowest case.

    ``on_case(i, kind, outcome, exc, seconds, text)`` is called after each case; ``budget`` goes
    to :func:`run_case`.
    """
    rng = random.Random(seed)
    cases = cases or base_cases()
    stats = {"ran": 0, "rejected": 0, "escaped": 0, "escapes": {}, "max_s": 0.0,
             "slowest": None, "kinds": {"text": 0, "struct": 0}}
    for i in range(n):
        name, cfg, arrays = cases[rng.randrange(len(cases))]
        kind, text = mutate(cfg["serialize_ir_string"], rng)
        stats["kinds"][kind] += 1
        outcome, exc, secs = run_case(cfg, text, arrays, budget)
        stats[outcome] += 1
        if outcome == "escaped":
            key = f"{type(exc).__name__}: {str(exc)[:80]}"
            stats["escapes"].setdefault(key, []).append((i, name, kind))
        if secs > stats["max_s"]:
            stats["max_s"], stats["slowest"] = secs, (i, name, kind, outcome)
        if on_case is not None:
            on_case(i, kind, outcome, exc, secs, text)
    return stats
