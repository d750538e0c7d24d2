"""The CPU stand-ins for torch_xla / torch_neuronx that compat.install() provides."""

import importlib
import sys
import types
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import nki_workbench.nki.language as nl  # noqa: E402
from nki_workbench import compat, compat_torch, nki  # noqa: E402


@pytest.fixture(autouse=True)
def alias():
    compat.install()
    yield
    compat.install()  # other tests import kernels through the alias


@nki.jit
def add_bf16(a, b):
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), nl.load(b), dtype=nl.bfloat16))
    return out


def test_xla_device_moves_run_through_the_torch_bridge():
    from torch_xla.core import xla_model as xm
    device = xm.xla_device()
    assert device == torch.device("cpu")
    a = torch.rand(128, 64).to(device=device)
    b = torch.rand(128, 64).to(device=device)
    out = add_bf16(a, b)
    assert xm.mark_step() is None and xm.wait_device_ops() is None
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu"
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (128, 64)
    np.testing.assert_allclose(out.float().numpy(), (a + b).numpy(), rtol=1e-2, atol=1e-2)


def test_nki_jit_shim_warns_as_nki_does():
    from torch_neuronx import nki_jit
    with pytest.warns(DeprecationWarning, match="nki_jit is deprecated"):
        k = nki_jit(add_bf16.func)
    assert k.mode == "torchxla"
    import torch_neuronx
    with pytest.raises(AttributeError, match="only nki_jit"):
        torch_neuronx.trace  # noqa: B018 (not provided: nothing else is faked)


def test_platform_target_lookup(monkeypatch):
    from torch_neuronx.utils import get_platform_target
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    assert get_platform_target() == "trn2"
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the lookup itself never warns
        assert get_platform_target() in (None, "trn1", "trn2", "trn3", "trn2n", "inf2")


def test_docs_examples_modules_come_from_the_users_example_folder(tmp_path, monkeypatch):
    (tmp_path / "mykernels.py").write_text("VALUE = 42\n")
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "script.py")])
    mod = importlib.import_module("neuronxcc.nki.docs.examples.demo.mykernels")
    assert mod.VALUE == 42
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("neuronxcc.nki.docs.examples.demo.not_there")


def test_refuses_when_a_real_torch_xla_is_installed(monkeypatch):
    compat.uninstall()
    assert "torch_xla" not in sys.modules
    monkeypatch.setitem(sys.modules, "torch_xla", types.ModuleType("torch_xla"))  # a "real" one
    with pytest.raises(RuntimeError, match="real torch_xla"):
        compat.install()
    assert not compat.installed()
    monkeypatch.undo()


def test_uninstall_removes_only_the_standins():
    compat.uninstall()
    assert not any(n in sys.modules for n in compat_torch.STANDINS)
    compat.install()
    assert sys.modules["torch_xla.core.xla_model"].xla_device is compat_torch.xla_device


def test_torch_xla_2_device_and_sync_spellings():
    import torch_xla
    x = torch.ones(3).to(device=torch_xla.device())
    torch_xla.sync()
    assert torch_xla.device() == compat_torch.xla_device() and x.device.type == "cpu"
