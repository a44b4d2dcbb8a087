"""The launcher's progress on the console while a job runs (`transforms.offline.progress`).

On a terminal (stderr is a tty) one line is rewritten in place ('\\r') every half second:

    pixelmill: inspecting 1,204/5,000 (accepted 1,150, rejected 54) 212 images/s, ETA 0:18

then the phase (dedup, writing, TFT, publishing) with its elapsed time. Anywhere else (cron,
Airflow, CI logs) it is one log line when a phase begins (as the half-second ticks see it, and
the phase the run ends in, however short) and one every 30 s. Log lines from
pixelmill clear the progress line first (`clear_line`), so the two never mix.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time

from transforms.offline import progress

__all__ = ["reporting", "format_line", "clear_line", "TTY_INTERVAL_S", "LOG_INTERVAL_S"]

TTY_INTERVAL_S = 0.5
LOG_INTERVAL_S = 30.0
_LOG = logging.getLogger(__name__)
_write_lock = threading.RLock()  # the progress line and log lines take turns on the stream
_shown = {"stream": None}  # the stream that shows a progress line now, if any


def _eta(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


def format_line(state: progress.Progress, now: float) -> str:
    """One line for `state`: counts, rate and ETA while inspecting (no ETA until the files are
    all discovered), else the phase and how long it has run."""
    counts = state.counts
    discovered = counts.get("discovered", 0)
    if state.phase == "discovering":
        return f"discovering: {counts.get('listed', 0):,} files listed"
    if state.phase == "inspecting":
        inspected = counts.get("inspected", 0)
        to_inspect = max(discovered - counts.get("skipped", 0), inspected)
        elapsed = max(now - state.phase_started, 1e-6)
        rate = inspected / elapsed
        line = (f"inspecting {inspected:,}/{to_inspect:,} (accepted {counts.get('accepted', 0):,}"
                f", rejected {counts.get('rejected', 0):,}) {rate:,.0f} images/s")
        if inspected and rate > 0:
            line += f", ETA {_eta((to_inspect - inspected) / rate)}"
        return line
    elapsed = _eta(now - state.phase_started)
    if state.phase == "writing":
        return f"writing: {counts.get('written', 0):,} records in shards ({elapsed})"
    done = (f" ({discovered:,} discovered, {counts.get('accepted', 0):,} passed inspection)"
            if discovered else "")
    return f"{state.phase}{done} ({elapsed})"


def clear_line() -> None:
    """Erases the progress line, if one is shown, so that a log line starts at column 0."""
    with _write_lock:
        stream = _shown["stream"]
        if stream is not None:
            stream.write("\r\x1b[K")
            stream.flush()
            _shown["stream"] = None


class _Reporter(threading.Thread):
    def __init__(self, stream, tty: bool):
        super().__init__(name="pixelmill-progress", daemon=True)
        self._stream, self._tty = stream, tty
        self._done = threading.Event()
        self._last_phase, self._last_log = None, 0.0

    def run(self) -> None:
        while not self._done.wait(TTY_INTERVAL_S):
            self.tick(time.monotonic())

    def tick(self, now: float) -> None:
        state = progress.snapshot()
        if state.phase == "starting":
            return
        if self._tty:
            with _write_lock:
                self._stream.write(f"\rpixelmill: {format_line(state, now)}\x1b[K")
                self._stream.flush()
                _shown["stream"] = self._stream
        elif state.phase != self._last_phase or now - self._last_log >= LOG_INTERVAL_S:
            _LOG.info("%s", format_line(state, now))
            self._last_phase, self._last_log = state.phase, now

    def stop(self) -> None:
        self._done.set()
        self.join(5)
        if self._tty:
            clear_line()
        else:  # a last phase shorter than a tick (publishing takes ~0.05 s) still gets its line
            self.tick(time.monotonic())


@contextlib.contextmanager
def reporting(stream=None):
    """Shows the job's progress on `stream` (default: stderr) while the block runs."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    progress.reset()
    reporter = _Reporter(stream, bool(isatty and isatty()))
    reporter.start()
    try:
        yield
    finally:
        reporter.stop()
