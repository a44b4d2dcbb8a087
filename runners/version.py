"""pixelmill's version, for `pixelmill --version`: the installed distribution's, else (a source
checkout run without installing) the one `setup.py` declares."""
from __future__ import annotations

import ast
import os

__all__ = ["version"]

_SETUP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")


def _from_setup() -> str | None:
    try:
        with open(_SETUP, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "version" and isinstance(
                node.value, ast.Constant) and isinstance(node.value.value, str):
            return node.value.value
    return None


def version() -> str:
    """The version string, or "unknown" when neither source says."""
    from importlib import metadata
    try:
        return metadata.version("pixelmill")
    except metadata.PackageNotFoundError:
        return _from_setup() or "unknown"
