"""The transform's writing child started ahead sets itself up below the job's priority, and the
job never waits behind that: the write runs on a thread at the job's priority, and a child
still setting up when the write is handed over is raced by one started at the job's priority
once it gets less than half a core (`tft_analysis._first_ready`)."""
from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from transforms.offline import isolation, tft_graph
from transforms.offline import tft_analysis as ta
from transforms.offline.tft_child import BACKGROUND_NICE, TransformWriter


@pytest.mark.parametrize("background", [True, False])
def test_the_write_runs_on_its_own_thread_only_in_a_background_child(monkeypatch, background):
    niced, threads = [], []
    monkeypatch.setattr(os, "nice", niced.append)

    def write(*arguments):
        threads.append(threading.current_thread())
        return {"arguments": arguments}

    monkeypatch.setattr(tft_graph, "write_analyzed_transform", write)
    writer = TransformWriter(background=background)
    writer.setup()
    assert writer.run(("out", ["cat"])) == {"arguments": ("out", ["cat"])}
    assert niced == ([BACKGROUND_NICE] if background else [])
    assert (threads[0] is threading.current_thread()) is not background


def _nice_values(pid: int) -> dict[int, int]:
    """{thread id: nice value} of every thread of process `pid` (Linux /proc)."""
    values = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as handle:
                values[int(tid)] = int(handle.read().rsplit(")", 1)[1].split()[16])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return values


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's nice value: Linux")
def test_in_the_child_started_ahead_the_writing_thread_keeps_the_jobs_priority(monkeypatch):
    monkeypatch.setattr(ta, "_tensorflow_loaded", lambda: False)
    job = os.getpriority(os.PRIO_PROCESS, 0)
    pool = ta._writer_pool(background=True)
    try:
        while not pool.ready:
            pool.poll(wait=False)
            time.sleep(0.02)
        (pid,) = pool.pids()
        values = _nice_values(pid)
        assert values[pid] == min(19, job + BACKGROUND_NICE)  # the main thread: set-up
        assert job in values.values()  # the thread the write runs on
    finally:
        pool.close()


class _Pool:
    """A stand-in writer pool: ready after `ready_after` polls (None: never)."""

    def __init__(self, pid: int, ready_after: int | None):
        self.pid, self.ready_after, self.polls = pid, ready_after, 0
        self.ready = self.closed = False

    def poll(self, wait: bool) -> list:
        self.polls += 1
        self.ready = self.ready_after is not None and self.polls >= self.ready_after
        return []

    def pids(self) -> list:
        return [self.pid]

    def close(self) -> None:
        self.closed = True


@pytest.fixture()
def race(monkeypatch):
    """`_first_ready` with stand-in pools, fast windows and a chosen CPU clock per pid; the
    fresh pool a test wants started is `race.fresh`, the warm-ups it was started with
    `race.warm_ups`."""
    state = type("Race", (), {})()
    state.fresh, state.warm_ups = _Pool(2, ready_after=None), []
    state.cpu = {1: lambda: 0.0}

    def start(warm_up=None, background=False):
        assert background is False  # the job's priority
        state.warm_ups.append(warm_up)
        return state.fresh

    monkeypatch.setattr(ta, "_READY_POLL_S", 0.002)
    monkeypatch.setattr(ta, "_SHARE_WINDOW_S", 0.004)
    monkeypatch.setattr(ta, "_writer_pool", start)
    monkeypatch.setattr(isolation, "process_cpu_seconds", lambda pid: state.cpu[pid]())
    return state


def test_a_child_set_up_already_gets_the_write_and_no_other_starts(race):
    ahead = _Pool(1, ready_after=1)
    assert ta._first_ready(ahead, (16, True)) is ahead
    assert race.warm_ups == [] and not ahead.closed


def test_a_child_setting_up_at_full_speed_is_waited_for(race):
    race.cpu[1] = time.monotonic  # a whole core
    ahead = _Pool(1, ready_after=40)
    assert ta._first_ready(ahead, (16, True)) is ahead
    assert race.warm_ups == [] and ahead.polls == 40


def test_a_starved_child_is_raced_by_one_at_the_jobs_priority_which_wins(race):
    ahead = _Pool(1, ready_after=None)  # a tenth of a core: it would take long
    race.fresh.ready_after = 5
    assert ta._first_ready(ahead, (16, True)) is race.fresh
    assert race.warm_ups == [(16, True)]  # set up as the one started ahead would have been
    assert ahead.closed and not race.fresh.closed


def test_a_starved_child_that_is_set_up_first_still_wins_the_race(race):
    ahead = _Pool(1, ready_after=8)
    assert ta._first_ready(ahead, None) is ahead
    assert race.warm_ups == [None] and race.fresh.closed and not ahead.closed


def test_without_a_cpu_clock_the_child_started_ahead_is_waited_for(race):
    race.cpu[1] = lambda: None  # not Linux, or a child replaced meanwhile
    ahead = _Pool(1, ready_after=30)
    assert ta._first_ready(ahead, None) is ahead
    assert race.warm_ups == []


def test_a_failing_wait_closes_both_children(race):
    ahead = _Pool(1, ready_after=None)

    def failing_poll(wait):
        raise RuntimeError("An isolating child process did not start")

    race.fresh.poll = failing_poll
    with pytest.raises(RuntimeError, match="did not start"):
        ta._first_ready(ahead, None)
    assert ahead.closed and race.fresh.closed


def test_process_cpu_seconds_reads_a_live_process_and_none_for_one_that_is_gone():
    if sys.platform.startswith("linux"):
        assert isolation.process_cpu_seconds(os.getpid()) > 0.0
    assert isolation.process_cpu_seconds(2**22 + 12345) is None  # above Linux's pid limit: no such process
