"""bench/public_suite.py: a folder of public-style test files through the alias, as a table."""

import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "public_suite.py"

PUBLIC = textwrap.dedent('''
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    @nki.jit(mode="simulation")
    def test_copy(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    def test_passes():
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        assert np.array_equal(test_copy(a), a)

    def test_fails():
        assert np.array_equal(test_copy(np.ones((2, 4), np.float32)), np.zeros((2, 4))), "zeros?"

    def test_on_device_profile():
        raise RuntimeError("needs a Neuron device")
''')


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def test_no_folder_is_a_clean_skip():
    r = run()
    assert r.returncode == 0 and "no folder given" in r.stdout


def test_table_counts_passes_failures_and_device_only_cases(tmp_path):
    (tmp_path / "test_public.py").write_text(PUBLIC)
    r = run(str(tmp_path), "--device-only", "on_device")
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("test_public.py"))
    assert row.split()[1:] == ["1", "1", "0", "0", "1"]  # pass fail err skip device
    assert "pass rate 1/2 = 50.0 %" in r.stdout
    assert "FAILED test_public.py::test_fails" in r.stdout and "zeros?" in r.stdout
    assert "test_copy" not in r.stdout  # the jitted kernel named test_* is not a case


def test_not_a_folder_is_an_error(tmp_path):
    r = run(str(tmp_path / "missing"))
    assert r.returncode == 2 and "is not a folder" in r.stderr


SLOW = textwrap.dedent('''
    import time

    def test_quick():
        assert True

    def test_slow():
        time.sleep(600)
''')


def test_a_file_named_after_the_separator_runs_alone(tmp_path):
    (tmp_path / "test_public.py").write_text(PUBLIC)
    (tmp_path / "test_other.py").write_text("def test_other():\n    assert False, 'ran'\n")
    r = run(str(tmp_path), "--", "test_other.py")
    assert r.returncode == 0, r.stderr
    assert "test_public.py" not in r.stdout
    assert "pass rate 0/1 = 0.0 %" in r.stdout and "FAILED test_other.py::test_other" in r.stdout


def test_a_folder_past_its_time_limit_keeps_the_finished_cases(tmp_path):
    (tmp_path / "test_slow.py").write_text(SLOW)
    r = run(str(tmp_path), "--timeout", "45")  # why: startup under load fits
    assert r.returncode == 0, r.stderr
    assert "time limit" in r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("test_slow.py"))
    assert row.split()[1:] == ["1", "0", "1", "0", "0"]  # quick passed, slow stopped
    assert "FAILED test_slow.py::test_slow: stopped at the folder's time limit (45 s)" in r.stdout


def test_known_device_only_cases_are_counted_apart(tmp_path):
    (tmp_path / "test_double_row_matmul.py").write_text(
        "def test_double_row_matmul_numerical():\n    return\n")
    r = run(str(tmp_path))
    row = next(line for line in r.stdout.splitlines() if line.startswith("test_double_row"))
    assert row.split()[1:] == ["0", "0", "0", "0", "1"]
    r = run(str(tmp_path), "--no-known-device-only")
    row = next(line for line in r.stdout.splitlines() if line.startswith("test_double_row"))
    assert row.split()[1:] == ["1", "0", "0", "0", "0"]


DIES = textwrap.dedent('''
    import os
    import signal

    def test_first():
        pass

    def test_crash():
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer does

    def test_after():
        pass
''')


def test_a_killed_pytest_process_names_the_running_case_and_the_ones_not_run(tmp_path):
    (tmp_path / "test_dies.py").write_text(DIES)
    r = run(str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "killed by signal 9" in r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("test_dies.py"))
    assert row.split()[1:] == ["1", "0", "2", "0", "0"]
    assert ("FAILED test_dies.py::test_crash: the pytest process was killed by signal 9 "
            "(out of memory?) while this case ran") in r.stdout
    assert "FAILED test_dies.py::test_after: not run: the pytest process was killed" in r.stdout
