"""The garbage-collector policy for the heavy imports and the run.

Importing TensorFlow, Beam and TFT makes millions of objects that live as long as the process
(modules, functions, classes, protobuf descriptors), and CPython's cyclic collector walks them
all at every full collection: the imports alone trigger eight. Measured in the launcher of a
20-image `pixelmill preprocess`: ~1.0 s of collection with the default policy, 0.13 s with this
one. `long_lived_imports` imports with the collector paused, then freezes what exists
(`gc.freeze`: later collections skip it); reference counting still frees what the imports drop.
`thawed_after` unfreezes at the end, so a process that runs commands one after another (the
tests) keeps nothing frozen and leaks no cycle.

Python can only unfreeze everything (`gc.unfreeze`), so pixelmill freezes only what it will
thaw itself: when a caller (a library user's pre-fork server, say) froze objects before the
job, the job freezes nothing and unfreezes nothing, and the caller's freeze stays as it was.
"""
from __future__ import annotations

import contextlib
import gc

__all__ = ["collector_paused", "long_lived_imports", "thawed_after", "freeze_alive"]

# How many `thawed_after` bodies that own the freezing (and unfreeze at their end) are in
# progress. A count, not a stack: the freeze is the process's, whichever thread ends first.
_owning = 0


def _ours_to_freeze() -> bool:
    """Whether a freeze now is pixelmill's to undo: a `thawed_after` that will unfreeze is in
    progress, or nothing is frozen yet. In that order: `gc.get_freeze_count` walks every
    frozen object (~70 ms after the job's imports)."""
    return _owning > 0 or gc.get_freeze_count() == 0


def freeze_alive() -> None:
    """`gc.freeze()`, unless objects this process did not freeze under `thawed_after` are
    frozen (they would be unfrozen with ours)."""
    if _ours_to_freeze():
        gc.freeze()


@contextlib.contextmanager
def collector_paused():
    """Runs the body without the cyclic collector; its previous state is restored."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def long_lived_imports():
    """Runs the body (imports) without the cyclic collector, then freezes every object alive
    (also when the body fails; not over a caller's freeze: `freeze_alive`); the collector's
    previous state is restored."""
    with collector_paused():
        try:
            yield
        finally:
            freeze_alive()


@contextlib.contextmanager
def thawed_after():
    """Unfreezes everything frozen when the body ends, however it ends, when the freezing in
    it is ours: nothing was frozen at its start, or another `thawed_after` in progress owns
    it. When a caller froze objects before, nothing is frozen inside and nothing unfrozen
    after."""
    global _owning
    owner = _ours_to_freeze()
    _owning += owner
    try:
        yield
    finally:
        _owning -= owner
        if owner:
            gc.unfreeze()
