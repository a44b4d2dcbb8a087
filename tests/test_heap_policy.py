"""transforms/heap_policy.py: the decoders' forkserver keeps freed C heap for the next image."""
from __future__ import annotations

import contextlib
import gc
import os
import platform
import subprocess
import sys

import pytest

from transforms import gc_policy, heap_policy
from transforms.offline import isolation

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Library:
    """A C library stand-in: records each `mallopt(param, value)` and answers `answer`."""

    def __init__(self, answer=1):
        self.calls = []
        self._answer = answer

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return self._answer


def test_both_thresholds_are_set_to_where_glibcs_adaptation_stops():
    library = _Library()
    assert heap_policy.retain_freed_memory(library) is True
    assert library.calls == [(-3, 32 * 2**20), (-1, 64 * 2**20)]  # M_MMAP_, M_TRIM_THRESHOLD


def test_a_threshold_the_library_refuses_is_reported():
    assert heap_policy.retain_freed_memory(_Library(answer=0)) is False


def test_a_library_without_mallopt_is_left_as_it_is():
    assert heap_policy.retain_freed_memory(object()) is False


def test_the_decoders_forkserver_takes_the_policy(monkeypatch):
    """Checked by stand-ins, so that the test process's own heap keeps glibc's defaults and
    nothing of it is left frozen."""
    taken = []
    monkeypatch.setattr(heap_policy, "retain_freed_memory", lambda: taken.append(True))
    monkeypatch.setattr(gc_policy, "long_lived_imports", contextlib.nullcontext)
    monkeypatch.delitem(sys.modules, "transforms.offline.decoder_imports", raising=False)
    frozen = gc.get_freeze_count()
    import transforms.offline.decoder_imports  # noqa: F401
    assert isolation.DECODER_PRELOAD == ("transforms.offline.decoder_imports",)
    assert len(taken) == 1 and gc.get_freeze_count() == frozen


_CYCLES = """
import resource, sys
sys.path.insert(0, {root!r})
if sys.argv[1] == "policy":
    from transforms.heap_policy import retain_freed_memory
    assert retain_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
blocks = [b"x" * 2**20 for _ in range(8)]  # what one image allocates, then frees
del blocks
before = faults()
for _ in range(10):
    blocks = [b"x" * 2**20 for _ in range(8)]
    del blocks
print((faults() - before) // 10)
"""


def _faults_per_cycle(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", _CYCLES.format(root=_ROOT), mode],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.slow  # starts two interpreters (no TensorFlow: ~0.1 s)
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_blocks_freed_together_are_reused_without_faulting_their_pages_again():
    default = _faults_per_cycle("default")
    if default < 1000:  # 8 MB of pages is 2,048 faults when they go back to the kernel
        pytest.skip(f"this glibc keeps the freed blocks by itself ({default} faults a cycle)")
    assert _faults_per_cycle("policy") < 50
