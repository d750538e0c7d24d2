"""``make lab`` starts a JupyterLab server that answers, run as root or as a normal user."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_serves_on_localhost(tmp_path):
    port, token = _free_port(), "nkiw-make-lab"
    venv = os.path.dirname(os.path.dirname(sys.executable))
    args = (f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.token={token} "
            f"--ServerApp.port_retries=0 --LabApp.news_url=None "
            f"--LabApp.workspaces_dir={tempfile.mkdtemp(dir=tmp_path)}")
    # -o install: use this venv as it is (no pip run); the recipe is the README's `make lab`
    cmd = ["make", "--no-print-directory", "-o", "install", "lab", f"VENV={venv}",
           f"LAB_ARGS={args}"]
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    status = None
    try:
        end = time.monotonic() + 90
        while time.monotonic() < end and proc.poll() is None:
            try:
                url = f"http://127.0.0.1:{port}/api/status?token={token}"
                with urllib.request.urlopen(url, timeout=2) as r:
                    status = json.loads(r.read())
                    break
            except OSError:
                time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out = proc.communicate(timeout=20)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out = proc.communicate()[0].decode(errors="replace")
    assert status is not None, f"make lab did not answer on 127.0.0.1:{port}:\n{out[-3000:]}"
    assert "started" in status and status["kernels"] == 0
    assert ("--allow-root" in out) == (os.getuid() == 0)


@pytest.mark.parametrize(("uid", "flag"), [("0", True), ("1000", False)])
def test_make_lab_adds_allow_root_only_for_root(tmp_path, uid, flag):
    fake = tmp_path / "id"  # why: the other user's case runs here without switching users
    fake.write_text(f"#!/bin/sh\necho {uid}\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    out = subprocess.run(["make", "--no-print-directory", "-n", "-o", "install", "lab",
                          "VENV=/venv"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=30, check=True).stdout
    assert out.split() == ["/venv/bin/jupyter", "lab"] + (["--allow-root"] if flag else []) + [
        "notebooks/"]
