"""What an isolating child runs (`isolation.ChildPool` starts it): the worker's setup, then for
each batch received one message of results, each item's steps run as that item's in the progress
shared with the parent (`Progress`), so a crash or a hang there blames that item alone.

A worker with `first` and `second` runs in two steps (`Later`): the first steps of a batch's items
while the states they hold weigh under `worker.group_weight`, then their second steps, so the code
and data of each step stay in the CPU's caches from one item to the next (an image's decode, then
its analysis: with an analysis between two decodes, a thumbnail's decode took ~1.9x as long).
A worker that also has `prepare` runs it over every item of a batch before any first step (an
image's read, hash and header: small states, the batch's inputs themselves), for the same reason
(the read between two decodes cost a thumbnail's inspection ~0.03 ms), and then, if it has one,
`prepared` over their states together (one call, as no item's step: work that is cheaper for
many at once and must not fail; a raise leaves the states to the first steps as they are). An
item's timeout counts all its steps. This module imports neither Beam nor TensorFlow.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import queue
import threading
import time

__all__ = ["Failure", "Later", "Progress", "child_main", "CLOUD_ENVIRONMENT", "READY"]

READY = "ready"  # a child's first message: its setup is done
CLOUD_ENVIRONMENT = ("AWS_", "GOOGLE_", "CLOUDSDK_")  # prefixes of the parent's variables it takes


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why an item has no result: `kind` is "crash", "timeout" or "error" (the worker raised);
    `detail` says what happened."""
    kind: str
    detail: str


@dataclasses.dataclass(frozen=True)
class Later:
    """What a two-step worker's `first` returns for an item that needs its `second`: the `state`
    `second` takes, and its `weight` (e.g. bytes held) against the worker's `group_weight`."""
    state: object
    weight: float = 0.0


class Progress:
    """A child's progress, in memory shared with the parent: the item it works on or is to run
    next (counted over every item it was sent), and since when (time.monotonic, one clock for
    every process): when that item's step began, less what its earlier step took, or when the
    last step ended. The child writes the time before the item, the parent reads the item
    before the time, so an item it sees never comes with an older time."""

    def __init__(self, context):
        self._values = context.RawArray("d", 2)  # item, changed

    def enter(self, item: int, spent: float = 0.0) -> None:
        self._values[1] = time.monotonic() - spent
        self._values[0] = item

    def leave(self, next_item: int) -> None:
        self._values[1] = time.monotonic()
        self._values[0] = next_item

    def read(self) -> tuple[int, float]:
        """(item, changed)."""
        return int(self._values[0]), self._values[1]


def child_main(connection, worker, progress, filesystem_options=None,
               environment=None) -> None:
    """The child's loop: setup once, then for each batch received one message of results."""
    if environment is not None:  # the parent's cloud variables, exactly
        for name in [k for k in os.environ if k.startswith(CLOUD_ENVIRONMENT)]:
            del os.environ[name]
        os.environ.update(environment)
    if filesystem_options is not None:  # pickled: applied when a remote path is first read
        from transforms.beam_filesystems import apply_options_on_first_use
        apply_options_on_first_use(filesystem_options)
    worker.setup()
    connection.send(READY)
    # Results leave from a thread of their own, so this one is always back in recv() soon:
    # a parent blocked sending a big batch never waits on a child blocked sending results.
    outbox: queue.SimpleQueue = queue.SimpleQueue()
    sender = threading.Thread(target=_send_all, args=(connection, outbox), daemon=True)
    sender.start()
    run = _stepped if hasattr(worker, "first") else _one_step
    received = 0  # items received before this batch: the number of its first
    while True:
        try:
            batch = connection.recv()
        except (EOFError, OSError):  # the parent is gone
            batch = None
        if batch is None:
            outbox.put(None)
            sender.join()
            return
        items = [item for _key, item, _weight in batch]
        results = run(worker, items, progress, received)
        received += len(batch)
        outbox.put([(key, result) for (key, _item, _weight), result in zip(batch, results)])


def _step(progress, item: int, function, argument, spent: float = 0.0):
    """`function(argument)` as item `item`'s running step (a raise is its `Failure`), and the
    seconds it took."""
    progress.enter(item, spent)
    began = time.monotonic()
    try:
        result = function(argument)
    except Exception as exc:  # noqa: BLE001 - reported as this item's Failure
        result = Failure("error", f"{type(exc).__name__}: {str(exc)[:500]}")
    return result, time.monotonic() - began


def _pickled(result) -> bytes:
    # pickled while its item runs: a result that cannot be sent crashes the child, blaming it
    return pickle.dumps(result, pickle.HIGHEST_PROTOCOL)


def _one_step(worker, items: list, progress, first: int) -> list:
    """The pickled results of `worker.run` over `items` (numbered from `first`)."""
    results = []
    for position, item in enumerate(items):
        result, _spent = _step(progress, first + position, worker.run, item)
        results.append(_pickled(result))
        progress.leave(first + position + 1)
    return results


def _prepared(worker, items: list, progress, first: int, results: list) -> list:
    """`worker.prepare` over every item (numbered from `first`): (position, state, seconds
    spent) of those it leaves to the first step (`Later`); the others' pickled results go into
    `results`."""
    pending = []
    for position, item in enumerate(items):
        result, spent = _step(progress, first + position, worker.prepare, item)
        if isinstance(result, Later):
            pending.append((position, result.state, spent))
        else:
            results[position] = _pickled(result)
        progress.leave(first + (position + 1 if position + 1 < len(items)
                                else pending[0][0] if pending else len(items)))
    if pending and hasattr(worker, "prepared"):
        try:  # an optional saving: its states are as good without it
            worker.prepared([state for _position, state, _spent in pending])
        except Exception:  # noqa: BLE001 - the first steps work from the states as they are
            pass
    return pending


def _stepped(worker, items: list, progress, first: int) -> list:
    """The pickled results of a worker in steps over `items` (numbered from `first`), after its
    `prepare` over all of them when it has one: the first steps of a group of items (until
    their held states weigh `worker.group_weight`), then the second steps of that group, group
    after group. Each step's time counts toward its item's timeout with its earlier steps'."""
    results: list = [None] * len(items)
    pending = (_prepared(worker, items, progress, first, results)
               if hasattr(worker, "prepare")
               else [(position, item, 0.0) for position, item in enumerate(items)])
    index = 0
    while index < len(pending):
        group, weight = [], 0.0  # (position, state, seconds of its steps so far)
        while index < len(pending) and weight < worker.group_weight:
            position, argument, before = pending[index]
            result, spent = _step(progress, first + position, worker.first, argument, before)
            if isinstance(result, Later):
                group.append((position, result.state, before + spent))
                weight += result.weight
            else:
                results[position] = _pickled(result)
            index += 1
            ahead = index < len(pending) and weight < worker.group_weight
            progress.leave(first + (pending[index][0] if ahead
                                    else group[0][0] if group else len(items)))
        for number, (held, state, spent) in enumerate(group):
            result, _spent = _step(progress, first + held, worker.second, state, spent)
            results[held] = _pickled(result)
            after = (group[number + 1][0] if number + 1 < len(group)
                     else pending[index][0] if index < len(pending) else len(items))
            progress.leave(first + after)
    return results


def _send_all(connection, outbox) -> None:
    """Sends each message of `outbox` until None (or until the parent is gone)."""
    while (message := outbox.get()) is not None:
        try:
            connection.send(message)
        except OSError:
            return
