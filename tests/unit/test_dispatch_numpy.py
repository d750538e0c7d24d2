"""The numpy family: BaremetalKernel's neuronx-cc command (with a fake compiler on PATH),
BenchmarkKernel's latency percentiles, ProfileKernel's files."""

import json
import os
import stat
import subprocess
import sys
import types

import numpy as np
import pytest

import nki_workbench.nki.language as nl
import nki_workbench.nki.typing as nt
from nki_workbench import nki
from nki_workbench._src import encode, runtime
from nki_workbench._src.ir import parse
from nki_workbench._src.runtime import NoNeuronDeviceWarning
from nki_workbench.nki import NkiError

RNG = np.random.default_rng(2)

FAKE_CC = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_CC_LOG"
pwd > "$FAKE_CC_LOG.cwd"
echo "compiler chatter that must not reach stdout"
if [ -n "$FAKE_CC_FAIL" ]; then exit 3; fi
echo NEFF-BYTES > file.neff
"""


@pytest.fixture(autouse=True)
def _machine(monkeypatch, tmp_path):
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("NKI_WORKBENCH_STRICT", raising=False)
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    monkeypatch.setattr(encode, "_DETECTORS", [])
    encode._detected.cache_clear()
    monkeypatch.setattr(runtime, "_warned_no_device", False)
    yield
    encode._detected.cache_clear()


@pytest.fixture
def fake_cc(monkeypatch, tmp_path):
    """A fake ``neuronx-cc`` first on PATH; returns the path of its argv log."""
    bindir = tmp_path / "fake_bin"
    bindir.mkdir()
    exe = bindir / "neuronx-cc"
    exe.write_text(FAKE_CC)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "argv.log"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CC_LOG", str(log))
    return log


def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out


def matmul(a_t, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(4):
        acc += nl.matmul(nl.load(a_t[k * 128:(k + 1) * 128, :]),
                         nl.load(b[k * 128:(k + 1) * 128, :]), transpose_x=True)
    nl.store(out, acc)
    return out


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------- baremetal
def test_baremetal_runs_the_exact_neuronx_cc_command(fake_cc, tmp_path, capfd):
    a, b = _f32(128, 64), _f32(128, 64)
    art = tmp_path / "artifacts"
    neff = tmp_path / "kept.neff"
    k = nki.jit(add, mode="baremetal", platform_target="trn2",
                additional_compile_opt="--verbose=35 --lnc 1", save_neff_name=str(neff),
                artifacts_dir=str(art))
    with pytest.warns(NoNeuronDeviceWarning, match="no Neuron device"):
        out = k(a, b)
    np.testing.assert_allclose(out, a + b, atol=1e-6)
    assert fake_cc.read_text().splitlines() == [
        "compile", "--framework", "XLA", "penguin.py", "--internal-tensorizer-opt-level=nki",
        "--pipeline", "compile", "SaveTemps", "--target", "trn2", "--verbose=35", "--lnc", "1"]
    assert os.path.realpath(fake_cc.with_suffix(".log.cwd").read_text().strip()) == \
        os.path.realpath(art)
    assert "chatter" not in capfd.readouterr().out   # compiler stdout goes to DEVNULL
    assert neff.read_text() == "NEFF-BYTES\n"
    ns: dict = {}
    exec((art / "penguin.py").read_text(), ns)  # noqa: S102 - our own generated file
    assert ns["KERNEL_NAME"] == "add" and ns["TARGET"] == "trn2"
    assert parse(ns["IR"]) == k.concrete(runtime.BaremetalKernel).trace((a, b), {})[0].kernel
    assert runtime.compile_command("trn1") == [
        "neuronx-cc", "compile", "--framework", "XLA", "penguin.py",
        "--internal-tensorizer-opt-level=nki", "--pipeline", "compile", "SaveTemps",
        "--target", "trn1"]


def test_baremetal_default_target_is_the_fallback(fake_cc):
    a = _f32(8, 8)
    with pytest.warns(UserWarning) as rec:
        nki.baremetal(add)(a, a)
    messages = [str(w.message) for w in rec]
    assert "Unable to read MLA target. Assuming cross compile to trn1." in messages
    assert fake_cc.read_text().splitlines()[-1] == "trn1"


def test_compiler_failure_is_called_process_error(fake_cc, monkeypatch):
    monkeypatch.setenv("FAKE_CC_FAIL", "1")
    with pytest.raises(subprocess.CalledProcessError) as e:
        nki.baremetal(add, platform_target="trn1")(_f32(4, 4), _f32(4, 4))
    assert e.value.returncode == 3 and e.value.cmd[0] == "neuronx-cc"


def test_artifacts_dir_must_be_empty(fake_cc, tmp_path):
    art = tmp_path / "busy"
    art.mkdir()
    (art / "old.txt").write_text("x")
    with pytest.raises(NkiError, match="must be an empty directory"):
        nki.baremetal(add, platform_target="trn1", artifacts_dir=str(art))(
            _f32(4, 4), _f32(4, 4))


def test_strict_with_a_compiler_but_no_device(fake_cc, monkeypatch):
    monkeypatch.setenv("NKI_WORKBENCH_STRICT", "1")
    with pytest.raises(RuntimeError, match="no Neuron device"):
        nki.baremetal(add, platform_target="trn1")(_f32(4, 4), _f32(4, 4))
    assert fake_cc.exists()   # it compiled first, as NKI does


def test_save_trace_name_without_a_device_is_reported():
    with pytest.warns(NoNeuronDeviceWarning) as rec:
        nki.baremetal(add, save_trace_name="t.ntff")(_f32(4, 4), _f32(4, 4))
    assert len(rec) == 2 and "no NTFF trace" in str(rec[1].message)


# ----------------------------------------------------------------------------- benchmark
@pytest.fixture
def fake_cost_model(monkeypatch):
    """A stand-in of the cost model's interface (estimate_latency_us(kernel, target))."""
    calls = []
    mod = types.ModuleType("nki_workbench._src.sim.timing")

    def estimate_latency_us(kernel, target):
        calls.append((kernel.name, target))
        return 12.5
    mod.estimate_latency_us = estimate_latency_us
    monkeypatch.setitem(sys.modules, "nki_workbench._src.sim.timing", mod)
    return calls


PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)


def test_benchmark_percentiles_come_from_the_cost_model(fake_cost_model):
    lhs, rhs = nt.tensor[[512, 128], nl.float32], nt.tensor[[512, 512], nl.float32]
    bench = nki.benchmark(warmup=5, iters=10)(matmul)
    assert bench(lhs, rhs) is None
    lat = bench.benchmark_result.nc_latency
    assert [lat.get_latency_percentile(p) for p in PERCENTILES] == [12.5] * 8
    assert lat.is_estimate and "estimate" in lat.source
    assert bench.benchmark_result.warmup == 5 and bench.benchmark_result.iters == 10
    assert fake_cost_model == [("matmul", "trn1")]
    with pytest.raises(ValueError, match="percentile 5"):
        lat.get_latency_percentile(5)


def test_benchmark_defaults_and_jit_mode(fake_cost_model):
    k = nki.jit(add, mode="benchmark", platform_target="trn2")
    k(_f32(128, 32), nt.tensor[[128, 32], nl.float32])
    res = k.benchmark_result
    assert (res.warmup, res.iters) == (10, 100)
    assert res.nc_latency.get_latency_percentile(50) == 12.5
    assert fake_cost_model == [("add", "trn2")]
    with pytest.raises(ValueError, match="iters"):
        nki.benchmark(iters=0)(add)


def test_benchmark_with_the_real_cost_model():
    pytest.importorskip("nki_workbench._src.sim.timing")
    bench = nki.benchmark(matmul, platform_target="trn1")
    bench(nt.tensor[[512, 128], nl.float32], nt.tensor[[512, 512], nl.float32])
    values = [bench.benchmark_result.nc_latency.get_latency_percentile(p) for p in PERCENTILES]
    assert values[0] > 0 and len(set(values)) == 1
    assert bench.benchmark_result.nc_latency.is_estimate


def test_benchmark_refuses_collectives(fake_cost_model):
    def reduce_all(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.all_reduce(nl.load(a), np.add, program_axes=0))
        return out
    with pytest.raises(NkiError, match="NKI not yet supports collective compute"):
        nki.benchmark(nki.jit(reduce_all)[2])(nt.tensor[[128, 8], nl.float32])
    assert fake_cost_model == []


def test_benchmark_without_a_cost_model_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "nki_workbench._src.sim.timing", None)
    with pytest.raises(NkiError) as e:
        nki.benchmark(add)(_f32(4, 4), _f32(4, 4))
    assert e.value.code == "wb_no_cost_model"


# ----------------------------------------------------------------------------- profile
def test_profile_needs_an_absolute_working_directory():
    with pytest.raises(ValueError, match="absolute path"):
        nki.profile(add)
    with pytest.raises(ValueError, match="absolute path"):
        nki.profile(working_directory="rel/dir")(add)
    with pytest.raises(ValueError, match="profile_nth"):
        nki.profile(working_directory="/tmp", profile_nth=0)(add)
    with pytest.raises(ValueError, match="num_execs"):
        nki.profile(working_directory="/tmp", num_execs=0)(add)


def test_profile_writes_its_summary_and_honours_overwrite(tmp_path, fake_cost_model):
    wd = tmp_path / "prof"
    prof = nki.profile(working_directory=str(wd), profile_nth=3, num_execs=5,
                       platform_target="trn1")(matmul)
    with pytest.warns(Warning):  # the stand-in cost model has no timeline for a trace file
        assert prof(nt.tensor[[512, 128], nl.float32], nt.tensor[[512, 512], nl.float32]) \
            is None
    summary = json.loads((wd / "profile_summary.json").read_text())
    assert summary["kernel"] == "matmul" and summary["platform_target"] == "trn1"
    assert summary["latency_us"] == 12.5 and summary["is_estimate"] is True
    assert summary["profile_nth"] == 3 and summary["num_execs"] == 5
    assert summary["matmul_mac_count"] == 4 * 128 * 128 * 512
    assert summary["static_instructions_by_engine"] == {"dma": 3, "tensor": 1, "vector": 1}
    with pytest.raises(FileExistsError, match="overwrite=True"):
        prof(nt.tensor[[512, 128], nl.float32], nt.tensor[[512, 512], nl.float32])
    again = nki.profile(working_directory=str(wd), overwrite=True, platform_target="trn1")(
        matmul)
    with pytest.warns(Warning):
        again(nt.tensor[[512, 128], nl.float32], nt.tensor[[512, 512], nl.float32])


def test_profile_with_the_real_time_model_writes_a_perfetto_trace(tmp_path):
    wd = tmp_path / "prof"
    nki.profile(add, working_directory=str(wd), platform_target="trn1")(
        _f32(128, 64), _f32(128, 64))
    summary = json.loads((wd / "profile_summary.json").read_text())
    assert summary["files"]["perfetto"] == "profile.perfetto.json"
    trace = json.loads((wd / "profile.perfetto.json").read_text())
    assert trace["traceEvents"] and summary["latency_us"] > 0
