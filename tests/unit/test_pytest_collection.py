"""A jitted kernel named ``test_*`` in a test module is not collected by pytest (NKI's doc tests
name kernels that way), while the module's real tests are."""

import os
import subprocess
import sys
import textwrap

from nki_workbench import nki

MODULE = textwrap.dedent('''
    import numpy as np
    from nki_workbench import nki
    import nki_workbench.nki.language as nl

    @nki.jit(mode="simulation")
    def test_copy_kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    def test_the_kernel():
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        np.testing.assert_array_equal(test_copy_kernel(a), a)
''')


def test_jitted_kernel_named_test_is_not_collected(tmp_path):
    assert nki.jit(lambda a: a).__test__ is False
    (tmp_path / "test_mod.py").write_text(MODULE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-W", "ignore::UserWarning", str(tmp_path / "test_mod.py")],
                         capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout and "error" not in run.stdout.lower()
