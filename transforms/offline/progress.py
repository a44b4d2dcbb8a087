"""The job's progress in this process: the phase and a few counts, for the launcher's console.

The job's steps report here as they work (`enter(phase)`, `add(name, n)`); the launcher's
progress line (`runners.progress_report`) reads `snapshot()` from another thread. With the
default in-process runner the steps run in the launcher's own threads, so this is the live
view of the whole job; steps that run elsewhere (Dataflow, multi_processing workers) update
their own process's copy, and their progress is the Beam counters of the same names.
"""
from __future__ import annotations

import dataclasses
import threading
import time

__all__ = ["PHASES", "Progress", "enter", "add", "snapshot", "reset"]

# In the order a run goes through them. "discovering" lists the data roots; the count of
# discovered files is final once "inspecting" begins (planning groups every file by path).
PHASES = ("starting", "discovering", "inspecting", "dedup", "writing", "TFT", "publishing")

_lock = threading.Lock()
_counts: dict = {}
_phase = ["starting", time.monotonic(), time.monotonic()]  # name, phase start, run start


@dataclasses.dataclass(frozen=True)
class Progress:
    """What `snapshot()` returns: the current `phase`, when it and the run began (monotonic
    seconds) and the counts so far (`discovered`, `inspected`, `accepted`, `rejected`, ...)."""
    phase: str
    phase_started: float
    started: float
    counts: dict


def enter(phase: str) -> None:
    """Marks `phase` (one of PHASES) as the one now running; cheap when it already is."""
    if _phase[0] == phase:
        return
    if phase not in PHASES:
        raise ValueError(f"Unknown phase {phase!r}. Expected one of {PHASES}.")
    with _lock:
        _phase[0], _phase[1] = phase, time.monotonic()


def add(name: str, n: int = 1) -> None:
    """Adds `n` to the count `name`."""
    with _lock:
        _counts[name] = _counts.get(name, 0) + n


def snapshot() -> Progress:
    with _lock:
        return Progress(_phase[0], _phase[1], _phase[2], dict(_counts))


def reset() -> None:
    """Starts a new run: phase "starting", no counts."""
    with _lock:
        _counts.clear()
        now = time.monotonic()
        _phase[:] = ["starting", now, now]
