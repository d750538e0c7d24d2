"""The scheduler's output is pinned: event lists of a few kernels equal the recorded ones.

``tests/sim/data/timeline_golden.json`` holds, per kernel and target, every event of the
timeline (track, core, start, end, what it waited for, the event it waited on, DMA issue time).
A change to the scheduler that is meant to be a pure speed-up must reproduce them exactly; a
change to the cost model re-records them::

    python tests/sim/test_timeline_golden.py --record
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

from nki_workbench._src.hw import get_target
from nki_workbench._src.runtime import get_traced
from nki_workbench._src.sim.timing import timeline

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(__file__).with_name("data") / "timeline_golden.json"
BF16 = ml_dtypes.bfloat16


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod


def _cases():
    """``{case id: (function, args, target)}``: small kernels covering every scheduler path."""
    ck = _load("golden_calibration_kernels", ROOT / "bench" / "calibration_kernels.py")
    mm = _load("golden_timing_matmul", ROOT / "tests" / "sim" / "test_timing_matmul.py")
    z = np.zeros
    out = {}
    for t in ("trn1", "trn2"):
        out[f"mm_tiled_{t}"] = (mm.mm_tiled, (z((512, 256), BF16), z((512, 1024), BF16)), t)
        out[f"mm_optimized_{t}"] = (mm.mm_optimized,
                                    (z((1024, 512), BF16), z((1024, 1024), BF16)), t)
    out["avgpool_trn1"] = (ck.adaptive_avg_pool2d, (z((1, 256, 14, 14), np.float16), 7, 7),
                           "trn1")
    out["resize_trn1"] = (ck.resize_nearest, (z((1, 30, 20, 64), np.float32), (1, 59, 38, 64)),
                          "trn1")
    out["rmsnorm_qkv_trn1"] = (ck.rmsnorm_matmul, (z((1, 128, 512), np.float16),
                                                   z((512, 512), np.float16)), "trn1")
    out["sd_attention_trn1"] = (ck.sd_attention, (z((1, 64, 512), np.float16),
                                                  z((1, 512, 64), np.float16),
                                                  z((1, 512, 64), np.float16)), "trn1")
    out["mamba_v2_trn1"] = (ck.mamba, (z((1, 256, 512), np.float32), z((1, 256, 512), np.float32),
                                       z((256, 16), np.float32), z((1, 16, 512), np.float32),
                                       z((1, 16, 512), np.float32), 2), "trn1")
    out["fp8_matmul_trn2"] = (ck.fp8_double_row_matmul,
                              (z((256, 1024), BF16), z((512, 1024), ml_dtypes.float8_e4m3),
                               z((128, 512), BF16), 2, 2, 4), "trn2")
    return out


def _events(fn, args, target) -> list:
    kernel = get_traced(fn, args, {}, target=get_target(target)).kernel
    tl = timeline(kernel, target=target)
    return [[e.track, e.core, e.start_ns, e.end_ns, e.wait, e.after, e.issue_ns]
            for e in tl.events]


def _record() -> None:
    data = {cid: _events(*case) for cid, case in _cases().items()}
    DATA.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"recorded {sum(map(len, data.values()))} events of {len(data)} kernels in {DATA}")


CASES = _cases()


@pytest.mark.parametrize("cid", sorted(CASES))
def test_schedule_equals_the_recorded_one(cid):
    recorded = json.loads(DATA.read_text(encoding="utf-8"))[cid]
    fresh = _events(*CASES[cid])
    assert len(fresh) == len(recorded)
    for i, (a, b) in enumerate(zip(fresh, recorded, strict=True)):
        assert a == b, (cid, i, a, b)


if __name__ == "__main__":
    if "--record" in sys.argv:
        _record()
