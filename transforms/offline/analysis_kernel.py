"""The quality analysis's compiled passes (`_analysis_kernel.c`: the analysis copy's resize, its
luma, levels and channel sums, the hash's area sums, the luma's float metrics and its
percentiles' order statistics, and all of the analysis after the resize in one call), or None
where setup.py could not build them (no C compiler, or no Python headers). Callers read
`compiled` when they run, and run their numpy form when it is None: the same integers and the
same float64 bits, ~1.4 ms more CPU per photo (docs/architecture.md)."""
from __future__ import annotations

__all__ = ["compiled"]

try:
    from transforms.offline import _analysis_kernel as compiled
except ImportError:
    compiled = None
