"""Bad input never escapes: mutated IR through ``simulate_backend_config`` and corrupted
backend_configs through the decoder and ``nki-workbench decode``.

* 10 000 mutated IRs (fixed seeds, 20 chunks of 500; text-level and structural mutations of
  the real configs of ``tests/unit/ir_mutations.py``) under the default work budget: only
  ``NkiError``/``IRParseError`` escape. Each chunk runs under a ``pytest-timeout`` bound, so
  a case that hangs fails its chunk instead of freezing the suite; the budget bounds each case's
  work by count (steps, elements, bytes), not by time.
* A hypothesis twin stacks 1-3 mutations on one config.
* 400 corrupted configs (bytes flipped, truncated, re-encoded JSON with wrong types, deep
  nesting, control characters): ``decode_backend_config`` raises only ``ValueError``/
  ``TypeError``; the CLI answers each with exit status 0 or 2, one error line, and no control
  character reaching the terminal.
"""

import base64
import json
import os
import random
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit"))

import ir_mutations as M  # noqa: E402

from nki_workbench import cli  # noqa: E402
from nki_workbench._src.encode import decode_backend_config  # noqa: E402
from nki_workbench._src.ir import IRParseError  # noqa: E402
from nki_workbench.nki import NkiError  # noqa: E402

CASES = M.base_cases()
BY_NAME = {name: (cfg, arrays) for name, cfg, arrays in CASES}
CHUNKS, PER_CHUNK = 20, 500


@pytest.mark.timeout(120)
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_mutated_ir_raises_only_nki_or_parse_errors(chunk):
    stats = M.fuzz(PER_CHUNK, seed=chunk, cases=CASES)
    assert stats["escaped"] == 0, stats["escapes"]
    assert stats["ran"] + stats["rejected"] == PER_CHUNK
    # the mutations are varied: both kinds, and both outcomes
    assert stats["rejected"] > PER_CHUNK // 3 and stats["ran"] > PER_CHUNK // 10
    assert min(stats["kinds"].values()) > PER_CHUNK // 3


@pytest.mark.timeout(120)
@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2 ** 32 - 1), case=st.sampled_from(sorted(BY_NAME)),
       rounds=st.integers(1, 3))
def test_stacked_mutations_raise_only_nki_or_parse_errors(seed, case, rounds):
    cfg, arrays = BY_NAME[case]
    rng = random.Random(seed)
    text = cfg["serialize_ir_string"]
    for _ in range(rounds):  # a few mutations on top of each other
        try:
            text = M.mutate(text, rng)[1]
        except (NkiError, IRParseError):
            break  # the structural mutator re-parses; an earlier mutation broke the text
    outcome, exc, _ = M.run_case(cfg, text, arrays)
    assert outcome in ("ran", "rejected"), f"{type(exc).__name__}: {exc}\n{text}"


# ----------------------------------------------------------------------------- the decoder
def _b64(obj) -> str:
    return base64.b64encode(json.dumps(obj).encode()).decode()


def _corrupt(cfg: dict, rng: random.Random) -> str:
    """One corrupted backend_config string (some stay valid: the decoder must accept those)."""
    good = _b64(cfg)
    kind = rng.randrange(8)
    if kind == 0:  # flip characters of the base64
        s = list(good)
        for _ in range(rng.randint(1, 8)):
            s[rng.randrange(len(s))] = rng.choice("A/+=_-.!~ \x1b\n")
        return "".join(s)
    if kind == 1:  # truncate
        return good[:rng.randrange(1, len(good))]
    if kind == 2:  # a key of the wrong type
        key = rng.choice(sorted(cfg))
        return _b64({**cfg, key: rng.choice([None, 7, 1.5, [], {}, "x", True])})
    if kind == 3:  # a key missing or one too many
        bad = dict(cfg)
        if rng.random() < 0.5:
            bad.pop(rng.choice(sorted(bad)))
        else:
            bad["extra"] = 1
        return _b64(bad)
    if kind == 4:  # deep nesting
        depth = rng.choice([50, 5_000, 100_000])
        return base64.b64encode(("[" * depth + "]" * depth).encode()).decode()
    if kind == 5:  # not JSON / not UTF-8
        return base64.b64encode(bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
                                ).decode()
    if kind == 6:  # control characters (ANSI escapes) inside the IR
        text = cfg["serialize_ir_string"]
        at = rng.randrange(len(text))
        return _b64({**cfg, "serialize_ir_string": text[:at] + "\x1b[2J\x07\x9b" + text[at:]})
    return good


DECODER_CASES = 400
_TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _decode_cases():
    rng = random.Random(22)
    return [_corrupt(CASES[rng.randrange(len(CASES))][1], rng) for _ in range(DECODER_CASES)]


@pytest.mark.timeout(120)
def test_corrupted_configs_raise_only_value_or_type_errors():
    decoded = refused = 0
    for s in _decode_cases():
        try:
            cfg = decode_backend_config(s)
        except (ValueError, TypeError) as exc:
            refused += 1
            assert str(exc), s
        else:
            decoded += 1
            assert isinstance(cfg["serialize_ir_string"], str)
    assert refused > DECODER_CASES // 2 and decoded > 20


@pytest.mark.timeout(120)
def test_the_cli_answers_corrupted_configs_in_one_line(capsys):
    codes = {0: 0, 2: 0}
    for s in _decode_cases()[:200]:
        try:
            rc = cli.main(["decode", s])
        except SystemExit as exc:
            rc = exc.code
        out, err = capsys.readouterr()
        assert rc in (0, 2), (rc, s, err)
        codes[rc] += 1
        assert not _TERMINAL_CONTROL.search(out.replace("\n", "").replace("\t", "")), out
        if rc == 2:
            assert err.startswith("nki-workbench: error: ") and err.count("\n") == 1, err
            assert not _TERMINAL_CONTROL.search(err.rstrip("\n")), err
    assert codes[0] > 10 and codes[2] > 100
