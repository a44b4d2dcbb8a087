"""SIGTERM and SIGINT stop a real `pixelmill preprocess` cleanly (issue 21 item 5): exit 143 /
130, one line of ours, no lock, no staging, no decoder process left in its process group."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from runners.stop_signals import Stopped
from tests.imageutil import write_photo

_REPO = __file__.rsplit("/tests/", 1)[0]


def _group(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


@pytest.mark.slow
@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_run_cleanly(tmp_path, signum, code):
    for i in range(12):
        write_photo(tmp_path / "images" / ("cat" if i % 2 else "dog") / f"{i}.jpg", i, 64, 80,
                    class_index=i % 2)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runners.cli", "preprocess", "--data_root",
         str(tmp_path / "images"), "--output_dir", str(out), "--run_id", "r1",
         "--set", "decode.isolation=subprocess", "--set", "transform.enabled=false"],
        cwd=_REPO, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        deadline = time.monotonic() + 240
        # Inside the run: the lock taken, staging begun, the decoders' forkserver started.
        while not ((out / ".staging" / "r1").exists() and len(_group(proc.pid)) > 1):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err
    ours = [line for line in err.splitlines() if line.startswith("pixelmill")]
    # progress lines may come first when the signal was dropped in a weakref callback (the
    # run then stops before publishing: test_a_stop_that_python_dropped_still_stops_...)
    assert ours[-1:] == [f"pixelmill: stopped by {signal.Signals(signum).name}: the run's "
                         f"unpublished files and its lock were removed"], err
    assert sum("stopped" in line or "error" in line for line in ours) == 1, err
    assert "Traceback" not in err
    assert not (out / ".lock").exists()
    assert not (out / ".staging" / "r1").exists()
    assert not (out / "snapshots").exists() or not any((out / "snapshots").iterdir())
    deadline = time.monotonic() + 5  # multiprocessing's resource tracker ends on its own
    while _group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {pid: _cmdline(pid) for pid in _group(proc.pid)} == {}


def test_a_signal_keeps_its_kind_through_beams_step_annotation():
    stopped = Stopped.by(2)
    annotated = type(stopped)(stopped.args[0] + " [while running 'Decode']")  # as Beam does
    assert isinstance(annotated, BaseException) and not isinstance(annotated, Exception)
    assert (annotated.exit_code, annotated.name) == (130, "SIGINT")
    assert Stopped.by(15).exit_code == 143


def _square(x):
    return x * x


def test_a_pool_started_after_end_children_gets_a_new_forkserver(private_forkserver):
    """`end_children` reaps the forkserver; a later pool in the same process (a library user,
    the next test) must start a new one, not wait on the reaped pid (ECHILD)."""
    import multiprocessing

    from runners import stop_signals
    context = multiprocessing.get_context("forkserver")
    with context.Pool(1) as pool:
        assert pool.map(_square, [2]) == [4]
    first = private_forkserver._forkserver_pid
    stop_signals.end_children()
    assert private_forkserver._forkserver_pid is None
    with context.Pool(1) as pool:
        assert pool.map(_square, [3]) == [9]
    assert private_forkserver._forkserver_pid not in (None, first)


def test_a_stop_that_python_dropped_still_stops_before_publishing():
    """A signal that lands in a `__del__` or weakref callback raises `Stopped` there, and Python
    prints and drops it ("Exception ignored in"): seen once in CI, where the run then published.
    The publisher asks `raise_if_received` first, so the run stops before committing."""
    from runners.jobs.guard import guarded_publish
    from runners.stop_signals import handled, raise_if_received, received

    class Dropper:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs here; its Stopped is dropped

    with handled():
        raise_if_received()  # nothing yet
        Dropper()  # collected at once: the signal arrives inside __del__, and is dropped
        assert received() == signal.SIGINT  # without a traceback: it is raised again below
        with pytest.raises(Stopped) as stopped:
            raise_if_received()
        assert stopped.value.exit_code == 130
        with pytest.raises(Stopped):  # before it reads the job (None here) or writes anything
            guarded_publish(None, "unused", "r1", {}, 0, 0.5, False)
    raise_if_received()  # outside `handled()` (a library call): nothing
