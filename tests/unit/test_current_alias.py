"""``import nki`` resolves to the workbench's current-API package (unless the real one exists)."""

import importlib
import sys

import numpy as np
import pytest

from nki_workbench import compat
from nki_workbench.current import alias, api_of, backend_config
from nki_workbench.nki import typing as nt


def test_compat_install_aliases_import_nki():
    compat.install()
    import nki
    import nki.isa as nisa
    import nki.language as nl
    from nki.isa.constants import dge_mode, oob_mode

    import nki_workbench.current as cur
    assert nki is cur and nisa is cur.isa and nl is cur.language
    assert dge_mode is nisa.dge_mode and oob_mode is nisa.oob_mode
    assert nl.float32 == "float32" and nl.bool_ == "bool" and nl.sbuf is not None
    assert alias.installed()


def test_alias_refuses_when_the_real_nki_is_installed(monkeypatch):
    compat.install()
    alias.uninstall()
    assert "nki" not in sys.modules
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "nki" else real_find_spec(name, *a))
    try:
        with pytest.raises(RuntimeError, match="real nki"):
            alias.install()
    finally:
        monkeypatch.undo()
        alias.install()
    assert alias.installed()


def test_api_of_and_new_stack_backend_config():
    compat.install()
    import neuronxcc.nki.language as lnl
    import nki
    import nki.isa as nisa
    import nki.language as nl

    def cur(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out

    def old(a):
        return lnl.load(a)

    assert api_of(cur) == "nki" and api_of(nki.jit(cur)) == "nki" and api_of(old) == "legacy"
    cfg = backend_config(nki.jit(cur), nt.tensor[[128, 64], np.float32])
    assert cfg == {"kernel_version": 1,
                   "klir_binary": {"binary": "/tmp/cur.klir", "input_names": ["a"],
                                   "output_names": ["out"]},
                   "func_name": "cur", "grid": [], "has_collectives": False}
    assert backend_config(nki.jit(cur)[2], nt.tensor[[128, 64], np.float32])["grid"] == [2]


def test_removed_entry_points_say_so():
    import nki
    for name in ("baremetal", "benchmark", "profile", "simulate_kernel"):
        with pytest.raises(AttributeError, match="not available since NKI 0.2"):
            getattr(nki, name)


def test_nl_bool_is_the_bool_dtype_name():
    import nki_workbench.current.language as cnl
    assert cnl.bool == cnl.bool_ == "bool"
