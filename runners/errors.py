"""Errors the command line reports as one clear line (exit 2) instead of a traceback."""
from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(ValueError):
    """A missing or invalid flag, input or config value, found before any work starts."""
