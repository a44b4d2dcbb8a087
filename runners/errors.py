"""Errors the command line reports as one clear line instead of a traceback: `UsageError`
(exit 2) and `LockHeld` (exit 75). Light to import: `pixelmill --help` loads this module."""
from __future__ import annotations

__all__ = ["UsageError", "LockHeld"]


class UsageError(ValueError):
    """A missing or invalid flag, input or config value, found before any work starts."""


class LockHeld(RuntimeError):
    """Another run holds the output folder's lock (`runners.locking.run_lock`); the message says
    which. Defined here, light to import, for the command line's exit 75."""
