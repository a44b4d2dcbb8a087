"""Log lines a test reads, through a handler of its own (independent of pytest's logging
plugin, so `-p no:logging` and xdist change nothing)."""
from __future__ import annotations

import contextlib
import logging


@contextlib.contextmanager
def captured_warnings(logger_name: str):
    """Yields the list that collects the messages of `logger_name`'s WARNING+ records."""
    lines: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
