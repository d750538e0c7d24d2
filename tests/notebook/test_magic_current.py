"""%%nki accepts kernels of today's ``import nki`` as well as legacy ones, and says which."""

import numpy as np

CURRENT_CELL = '''
import nki.isa as nisa
import nki.language as nl

def add_current(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=y, src=b[i * 128:(i + 1) * 128, :])
        nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=x)
    return out
'''


def test_magic_runs_a_current_api_kernel_and_names_its_api(ip, capsys):
    ip.run_cell_magic("nki", "--args x,y --out rc --quiet", CURRENT_CELL)
    insp = ip.user_ns["rc"]
    np.testing.assert_allclose(insp.outputs, ip.user_ns["x"] + ip.user_ns["y"], rtol=1e-6)
    assert "NKI API: import nki (NKI 0.2+), kernel 'add_current'" in capsys.readouterr().out
    assert insp.platform_target == "trn3"
