"""A pool of child processes that run one function over many items, each item with a timeout,
so that native code crashing or hanging on one item costs only that item.

`ChildPool(worker, processes, timeout_s)` starts `processes` children from a forkserver; each
calls `worker.setup()` once, then `worker.run(item)` for every item it is sent (or, for a
two-step worker, `first` and `second`: `isolated_child`). Items travel in batches, one message
each way per batch, and each child holds two batches, so no child waits for the parent and the
parent never handles one item at a time. Which item a child is running and since when it keeps
in a few numbers shared with the parent (`isolated_child.Progress`): a crash blames that item
alone and a timeout counts from its start, as if results came back one by one.
`put(key, item, weight)` queues an item (a batch stops at `batch_weight`: many small items or
one large one to a message); `poll(wait)` returns `(key, result)` pairs as they complete, in
any order (`send_queued()` hands queued items over without waiting for results, for a
caller that works on meanwhile); a result is the worker's return value, or a `Failure` when
the item crashed its child twice (each time in a fresh child), timed out (not retried: a hang
would hang again, and cost the timeout again), or raised in the worker.

Children come from a forkserver, never from fork() of the caller: a Beam worker runs gRPC and
TensorFlow threads, and a child fork()ed while one of them holds an abseil mutex aborts
("Mutex::Fer with pending CondVar queueing"), which turned good images into crashes in about
one run in three.
"""
from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import pickle
import selectors
import sys
import time

from transforms.offline.isolated_child import (
    CLOUD_ENVIRONMENT,
    Failure,
    Later,
    Progress,
    child_main,
)

__all__ = ["ChildPool", "Failure", "Later", "main_script_hidden", "start_forkserver",
           "QUEUED_PER_CHILD", "DECODER_PRELOAD", "process_cpu_seconds"]

# What the forkserver of the decoding children imports once for all of them: TensorFlow and the
# inspection, no Beam (`decoder_imports`). Named here, not in the inspection's modules (which
# import TensorFlow or Beam), so the launcher can start the forkserver before its own
# TensorFlow import and the two imports run side by side.
DECODER_PRELOAD = ("transforms.offline.decoder_imports",)
# Items a child holds by default: two batches of 8 (a message each way costs ~0.1 ms of CPU),
# so it never waits for the parent.
QUEUED_PER_CHILD = 16
_START_TIMEOUT_S = 300.0  # a child's setup (imports, first decode) on a very busy machine
_SEND_WAIT_S = 1.0  # `send_queued`: how long one wait for a child to be ready lasts at most
_MIN_BATCH_WEIGHT_CAP = 64 << 20  # what `min_batch` heavy items may weigh together, at most


def _filesystem_options() -> bytes | None:
    """The options Beam's FileSystems use in this process (a Pipeline's, or a worker's runtime
    options), pickled, for the children: they open `s3://` and `gs://` inputs with the same
    settings. Pickled here so that a child unpickles them (and imports Beam) only if it reads
    such an input (`beam_filesystems.apply_options_on_first_use`)."""
    from transforms.beam_filesystems import filesystem_options
    options = filesystem_options()
    return None if options is None else pickle.dumps(options)


def _cloud_environment() -> dict:
    """This process's cloud credential and endpoint variables. A child forked by a forkserver
    inherits the server's environment, from when it started, not the parent's now."""
    return {k: v for k, v in os.environ.items() if k.startswith(CLOUD_ENVIRONMENT)}


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds process `pid` has used so far, its children not counted
    (Linux `/proc`; None elsewhere, or once it is gone): how much of a core a child gets."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def main_script_hidden():
    """Starts children without re-running the user's `__main__` script in them.

    multiprocessing prepares every spawned or forkserver child by running the parent's main
    script again (as `__mp_main__`). A script that calls the job without an
    `if __name__ == "__main__":` guard would then start the job again inside each child. The
    child needs nothing from `__main__`, so the script's path and spec are hidden while a child
    starts.
    """
    main = sys.modules["__main__"]
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__")
             if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def start_forkserver(preload) -> None:
    """Starts this process's forkserver now, importing `preload` in it, without waiting: its
    imports (TensorFlow: seconds) then overlap with the caller's own work, and the first
    `ChildPool` finds it ready. A pool made later must use the same `preload`."""
    from multiprocessing import forkserver
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(preload))
    with main_script_hidden():  # the forkserver would import the main script too
        forkserver.ensure_running()


class _Child:
    """One child process, the items it holds (oldest first: the order it runs them), how many
    results it returned and when the parent last sent it work or heard from it."""

    def __init__(self, context, worker, filesystem_options=None):
        self.connection, child_end = context.Pipe()
        self.progress = Progress(context)
        with main_script_hidden():
            self.process = context.Process(target=child_main,
                                           args=(child_end, worker, self.progress,
                                                 filesystem_options, _cloud_environment()),
                                           daemon=True)
            self.process.start()
        child_end.close()
        self.ready = False
        self.held: collections.deque = collections.deque()
        self.messages = 0  # batches sent whose results have not come back
        self.returned = 0
        self.started = self.since = time.monotonic()

    def send(self, batch: list) -> None:
        if not self.held:
            self.since = time.monotonic()
        self.held.extend(batch)
        self.messages += 1
        with contextlib.suppress(OSError):  # a dead child: its end of file tells `poll`
            self.connection.send(batch)

    def current(self) -> tuple[int, float]:
        """(position in `held` of the item running, or else of the next to run; when it
        started, or when the child last finished an item or heard from the parent)."""
        item, changed = self.progress.read()
        return min(item - self.returned, len(self.held) - 1), max(changed, self.since)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)


class ChildPool:
    """See the module docstring. `preload`: modules the forkserver imports once for all
    children (e.g. tensorflow), so each child starts in milliseconds. `role` names the
    children in a crash's detail ("the decoding process died ..."), `timeout_name` the setting
    `timeout_s` comes from in a timeout's detail (None: the limit in seconds). `per_child`:
    items a child holds at most, sent in batches of half as many (one at a time for 1: large
    items, such as a shard to write, spread over every child). `batch_weight`: a batch also
    stops before the item that would take the `weight`s given to `put` above it, but takes at
    least a quarter of each child's share of the queue, `min_batch` at most (and 64 MiB, or
    one item): many small items or a few large ones travel per message, fewer as the queue
    runs short, so a message of heavy items is not one wake-up of the caller each (see
    `poll`'s cost in `image_inspection`). A child holds two batches at most, and the children
    get them in turn, so the last ones of a run leave every child about as much work."""

    def __init__(self, worker, processes: int, timeout_s: float, preload=(),
                 role: str = "decoding", per_child: int = QUEUED_PER_CHILD,
                 timeout_name: str | None = "decode.timeout_s", batch_weight: float = 0,
                 min_batch: int = 1):
        if processes < 1:
            raise ValueError(f"processes must be >= 1. Received: processes={processes}")
        if per_child < 1:
            raise ValueError(f"per_child must be >= 1. Received: per_child={per_child}")
        if min_batch < 1:
            raise ValueError(f"min_batch must be >= 1. Received: min_batch={min_batch}")
        self._per_child = per_child
        self.batch = max(1, per_child // 2)  # items sent to a child in one message, at most
        self._batch_weight = batch_weight
        self._min_batch = min_batch
        self._worker = worker
        self._role = role
        self._timeout_name = timeout_name
        self._filesystem_options = _filesystem_options()
        self._timeout_s = timeout_s
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(list(preload))
        self._queue: collections.deque = collections.deque()
        self._crashes: collections.Counter = collections.Counter()
        self._selector = selectors.DefaultSelector()  # every child's end, registered once
        self._children = [self._start() for _ in range(processes)]
        self._failed_starts = 0
        self._early: list = []  # results `send_queued` received, for the next `poll`

    def _start(self) -> _Child:
        child = _Child(self._context, self._worker, self._filesystem_options)
        self._selector.register(child.connection, selectors.EVENT_READ, child)
        return child

    @property
    def ready(self) -> bool:
        """Whether a child has finished its `setup` (as of the last `poll` or `send_queued`)."""
        return any(child.ready for child in self._children)

    @property
    def in_flight(self) -> int:
        """Items queued or held by a child, not yet returned by `poll`."""
        return len(self._queue) + sum(len(child.held) for child in self._children)

    def put(self, key, item, weight: float = 0) -> None:
        """Queues `item`; `weight` (e.g. its bytes) counts against `batch_weight`."""
        self._queue.append((key, item, weight))  # (key, item, weight) here and in `held`

    def _batch_size(self) -> int:
        """How many queued items the next batch takes (at least one)."""
        count = min(self.batch, len(self._queue))
        if not self._batch_weight:
            return count
        # Heavy items: a quarter of each child's share of the queue, one at least and
        # `min_batch` at most, so the batches shrink with the queue and the last are single.
        share = len(self._queue) // (4 * len(self._children))
        at_least = max(1, min(self._min_batch, share))
        total = 0.0
        for position in range(count):
            total += self._queue[position][2]
            if total > self._batch_weight and position >= (
                    at_least if total <= _MIN_BATCH_WEIGHT_CAP else 1):
                return position
        return count

    def _dispatch(self) -> None:
        """Sends queued items to the children with room, a batch to each in turn: the last
        batches of a run go to every child, not all to the first."""
        while self._queue:
            open_children = [c for c in self._children  # two batches each, at most
                             if c.ready and c.messages < 2 and len(c.held) < self._per_child]
            if not open_children:
                return
            for child in open_children:
                if not self._queue:
                    return
                count = min(self._batch_size(), self._per_child - len(child.held))
                child.send([self._queue.popleft() for _ in range(count)])

    def _replace(self, index: int) -> None:
        """Stops child `index` and starts a fresh one; what it held goes back to the queue."""
        child = self._children[index]
        self._selector.unregister(child.connection)
        child.stop()
        self._queue.extendleft(reversed(child.held))
        self._children[index] = self._start()

    def _take_current(self, index: int):
        """Removes and returns the (key, item, weight) child `index` was running (or was to run
        next); the items it held before it finished, but their results died with the child."""
        child = self._children[index]
        position, _since = child.current()
        entry = child.held[position]
        del child.held[position]
        return entry

    def _child_died(self, index: int) -> list:
        child = self._children[index]
        if not child.ready:  # died before its first item: nobody to blame
            self._failed_starts += 1
            if self._failed_starts > 3 * len(self._children):
                raise RuntimeError("The isolating child processes keep dying before their "
                                   f"first item (exit code {child.process.exitcode}).")
            self._replace(index)
            return []
        if not child.held:  # died idle: nothing was lost
            self._replace(index)
            return []
        entry = self._take_current(index)
        key = entry[0]
        child.process.join(5)
        self._crashes[key] += 1
        self._replace(index)
        detail = f"the {self._role} process died (exit code {child.process.exitcode})"
        if self._crashes[key] < 2:
            self._queue.appendleft(entry)  # once more, in a fresh child
            return []
        return [(key, Failure("crash", f"{detail} (twice, each in a fresh process)"))]

    def _message(self, index: int) -> list:
        child = self._children[index]
        try:
            message = child.connection.recv()
        except (EOFError, OSError):
            return self._child_died(index)
        if isinstance(message, str):  # READY
            child.ready = True
            return []
        child.since = time.monotonic()
        child.returned += len(message)
        child.messages -= 1  # one message of results per batch
        done = []
        for key, result in message:  # in the order sent
            child.held.popleft()
            self._crashes.pop(key, None)
            done.append((key, pickle.loads(result)))
        return done

    def _expire(self, now: float) -> list:
        done = []
        for index, child in enumerate(self._children):
            if not child.ready and now - child.started > _START_TIMEOUT_S:
                raise RuntimeError(f"An isolating child process did not start within "
                                   f"{_START_TIMEOUT_S:g} s.")
            if child.held and now - child.current()[1] > self._timeout_s:
                key = self._take_current(index)[0]
                self._replace(index)
                limit = (f"{self._timeout_s:g} s" if self._timeout_name is None
                         else f"{self._timeout_name}={self._timeout_s:g}")
                done.append((key, Failure("timeout", f"no result within {limit}")))
        return done

    def send_queued(self) -> None:
        """Hands every queued item to a child now, waiting for a child to be ready (or to have
        room) but not for results: the caller works on and `poll`s later, which also returns
        what arrived here. A child that dies or never starts is handled as in `poll`."""
        while True:
            self._dispatch()
            if not self._queue:
                return
            self._early += self._receive(_SEND_WAIT_S)  # a child's READY, or a result

    def poll(self, wait: bool) -> list:
        """Sends queued items to children with room, then returns the `(key, result)` pairs
        that are done; with `wait`, blocks until at least one is (when any is in flight)."""
        done, self._early = self._early, []
        while True:
            self._dispatch()
            timeout = 0.0
            if wait and self.in_flight and not done:
                now = time.monotonic()
                deadlines = [child.current()[1] + self._timeout_s
                             for child in self._children if child.held]
                timeout = max(0.0, min(deadlines, default=now + 1.0) - now)
            done += self._receive(timeout)
            if done or not wait or not self.in_flight:
                return done

    def _receive(self, timeout: float) -> list:
        """The results (and READYs, deaths, timeouts) that arrive within `timeout` seconds."""
        done = []
        for selected, _events in self._selector.select(timeout):
            if selected.data in self._children:  # not replaced while handling this round
                done += self._message(self._children.index(selected.data))
        return done + self._expire(time.monotonic())

    def pids(self) -> list[int]:
        """The children's process ids (they change when a child is replaced)."""
        return [child.process.pid for child in self._children]

    def close(self) -> None:
        """Stops every child (items still held are dropped)."""
        for child in self._children:
            self._selector.unregister(child.connection)
            with contextlib.suppress(OSError, ValueError):
                child.connection.send(None)
            child.stop()
        self._children = []
        self._queue.clear()
        self._selector.close()
