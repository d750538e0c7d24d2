"""NKI kernels inside torch.compile(fullgraph=True): one opaque node, the op after AOT autograd."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import nki_workbench.nki.language as nl  # noqa: E402
import nki_workbench.nki.typing as nt  # noqa: E402
from nki_workbench import nki  # noqa: E402
from nki_workbench._src.bridges import torch as bridge  # noqa: E402


@pytest.fixture(autouse=True)
def _trn1(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")


@nki.jit
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out


@nki.jit(mode="torchxla")
def axpy(a: nt.mutable_tensor, b, alpha):
    nl.store(a, nl.load(a) + nl.load(b) * alpha)
    return a


@nki.jit(mode="torchxla")
def scale_into(a, out):
    nl.store(out, nl.multiply(nl.load(a), 3.0))


@nki.jit(mode="torchxla")
def exp_and_square(a):
    e = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(e, nl.exp(t))
    nl.store(s, t * t)
    return e, s


def model(x, y, acc, out):
    h = torch.tanh(x) @ y.T                       # [128, 128]
    s = add(h, torch.sin(h))                      # functional kernel
    axpy(acc, s, 0.5)                             # mutates acc in place
    scale_into(s, out)                            # legacy output argument
    e, sq = exp_and_square(s * 0.1)               # tuple of outputs
    return e + sq + acc


def reference(x, y, acc):
    h = np.tanh(x) @ y.T
    s = h + np.sin(h)
    acc = acc + 0.5 * s
    return np.exp(s * 0.1) + (s * 0.1) ** 2 + acc, acc, 3 * s


def test_compiled_model_fullgraph_one_node_per_kernel_and_in_place_outputs():
    graphs = {"dynamo": [], "aot": []}

    def backend(gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        graphs["dynamo"].append(gm)

        def forward(g, _):
            graphs["aot"].append(g)
            return g
        return aot_autograd(fw_compiler=forward)(gm, example_inputs)

    rng = np.random.default_rng(3)
    x, y = (torch.from_numpy(rng.standard_normal((128, 64)).astype(np.float32)) for _ in "xy")
    acc, out = torch.zeros(128, 128), torch.zeros(128, 128)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    got = compiled(x, y, acc, out)
    want, want_acc, want_out = reference(x.numpy(), y.numpy(), np.zeros((128, 128), np.float32))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(acc.numpy(), want_acc, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-4, atol=1e-4)

    (dynamo,) = graphs["dynamo"]
    calls = [n for n in dynamo.graph.nodes if n.op == "call_function"]
    kernel_nodes = [n for n in calls if "flat_apply" in str(n.target)]
    assert len(kernel_nodes) == 4                       # one opaque node per kernel call
    assert not any("nki_workbench" in str(n.target) for n in calls if n not in kernel_nodes)
    (aot,) = graphs["aot"]
    ops = [n.target for n in aot.graph.nodes if n.op == "call_function"]
    assert ops.count(torch.ops.nki_workbench.kernel_call.default) == 4

    # a second call reuses the compiled graph (new values, same shapes) and stays correct
    acc2, out2 = torch.ones(128, 128), torch.zeros(128, 128)
    got2 = compiled(y, x, acc2, out2)
    want2, want_acc2, want_out2 = reference(y.numpy(), x.numpy(), np.ones((128, 128), np.float32))
    np.testing.assert_allclose(got2.numpy(), want2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(acc2.numpy(), want_acc2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out2.numpy(), want_out2, rtol=1e-4, atol=1e-4)

    # kernels first built inside the compiled region also work eagerly afterwards
    eager = add(x, y)
    np.testing.assert_allclose(eager.numpy(), x.numpy() + y.numpy(), atol=1e-6)
    assert all(isinstance(k, bridge.PyTorchXLAKernel) for k in add._kernels.values())
