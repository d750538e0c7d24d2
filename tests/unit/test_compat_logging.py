"""compat.install() leaves the `logging.OFF` level that harnesses written for neuronxcc use."""

import logging

from nki_workbench import compat


def test_logging_off_silences_a_logger(caplog):
    compat.install()
    assert logging.OFF > logging.CRITICAL
    assert logging.getLevelName(logging.OFF) == "OFF"
    log = logging.getLogger("nki_workbench.test_harness")
    log.setLevel(logging.OFF)
    with caplog.at_level(logging.OFF, logger="nki_workbench.test_harness"):
        log.critical("must not appear")
    assert "must not appear" not in caplog.text
    log.setLevel(logging.NOTSET)


def test_uninstall_removes_only_what_install_added():
    compat.install()
    compat.uninstall()
    assert not hasattr(logging, "OFF")
    logging.OFF = 99  # a level someone else defined stays untouched
    try:
        compat.install()
        assert logging.OFF == 99
        compat.uninstall()
        assert logging.OFF == 99
    finally:
        del logging.OFF
        compat.install()  # other tests import kernels through the alias
