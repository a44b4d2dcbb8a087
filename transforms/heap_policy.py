"""The C heap policy of the decoding children: memory they free is kept for the next image.

An inspection allocates and frees the same few blocks for every image (the decoded image, the
analysis copy's integer sums, its float luma: 0.1-3 MB each). glibc's malloc adapts its
thresholds to the largest block freed so far and then gives the top of its heap back to the
kernel whenever more than twice that is free, which a photo's blocks together exceed: every
photo faulted its pages in again (~70 minor faults, ~0.17 ms of system time and more of user
time per 0.3 MP photo). Fixed at the values glibc's own adaptive thresholds stop at (mallopt(3):
blocks below 32 MiB from the heap, up to 64 MiB of free top kept), the same inspection faults
~3 times per image (docs/benchmarks.md). Only processes that are ours take it: the decoders'
forkserver, whose children inherit it, never a library user's process (the job's launcher may be
one). A C library without `mallopt` (not glibc) is left as it is.
"""
from __future__ import annotations

import ctypes

__all__ = ["retain_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # blocks this large or larger are mmapped (and unmapped when freed)
TRIM_THRESHOLD = 64 << 20  # free memory at the heap's top beyond this goes back to the kernel


def _c_library():
    try:
        return ctypes.CDLL(None)  # the process's own symbols: the C library it runs on
    except (OSError, TypeError):  # TypeError: a platform where None names no library
        return None


def retain_freed_memory(library=None) -> bool:
    """Sets this process's two malloc thresholds (inherited by children it forks after); True
    when the C library took both. `library`: the C library (tests pass a stand-in)."""
    library = _c_library() if library is None else library
    mallopt = getattr(library, "mallopt", None)
    if mallopt is None:
        return False
    mmap_set = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    trim_set = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    return bool(mmap_set) and bool(trim_set)
