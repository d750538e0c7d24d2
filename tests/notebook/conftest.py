"""Shared fixtures of the notebook-layer tests: one IPython shell with the extension loaded."""

import warnings

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell


@pytest.fixture(scope="session")
def ip():
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nki_workbench")
    rng = np.random.default_rng(7)
    shell.user_ns["x"] = rng.standard_normal((256, 512)).astype(np.float32)
    shell.user_ns["y"] = rng.standard_normal((256, 512)).astype(np.float32)
    yield shell
    shell.run_line_magic("unload_ext", "nki_workbench")


@pytest.fixture(autouse=True)
def _quiet_fallback_warning():
    # why: every kernel here runs on the trn1 fallback target; its warning is expected
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unable to read MLA target")
        yield


def pytest_collection_modifyitems(items):
    # why: module-scoped fixtures run outside the autouse filter above
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.filterwarnings(
                "ignore:Unable to read MLA target:UserWarning"))
