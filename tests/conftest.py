"""Suite-wide pytest settings.

A process that ran a TensorFlow Transform analysis can crash in CPython's interpreter teardown
(protobuf's upb extension frees a repeated field after its module is gone; see
`runners.cli.console_main`). The tests have all run and reported by then, so the run ends with
a hard exit carrying pytest's own exit status. pytest-xdist workers are left alone: the
controller collects their results before they exit.
"""
from __future__ import annotations

import logging
import os
import sys

_EXIT_STATUS = {}


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS["status"] = int(exitstatus)


def pytest_unconfigure(config):
    if hasattr(config, "workerinput") or "status" not in _EXIT_STATUS:
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_EXIT_STATUS["status"])
