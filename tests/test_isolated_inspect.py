"""IsolatedInspectFn's use of its child pool: the pool is polled once a batch of elements has
been put, and whenever it is full, not after every element; every element's result leaves
once, in its own window. A stand-in pool records the polls (the pool itself, with real
children, is tests/test_isolation.py's)."""
from __future__ import annotations

import pytest

from configs.schema import load_config
from transforms.offline import inspect_image, isolation
from transforms.offline.image_inspection import ImageInspector
from transforms.offline.image_record import ImageRecord


class _BusyPool:
    """Children that finish nothing until the caller waits, then the oldest batch."""
    batch = 8

    def __init__(self, *_args, **_kwargs):
        self.queue, self.polls, self.puts, self.weights = [], [], 0, []

    @property
    def in_flight(self) -> int:
        return len(self.queue)

    def put(self, key, item, weight=0) -> None:
        self.puts += 1
        self.queue.append((key, item))
        self.weights.append(weight)

    def poll(self, wait: bool) -> list:
        self.polls.append((self.puts, wait))
        if not wait:
            return []
        done, self.queue = self.queue[:self.batch], self.queue[self.batch:]
        return done

    def close(self) -> None:
        pass


@pytest.fixture
def inspect_fn(monkeypatch):
    monkeypatch.setattr(isolation, "ChildPool", _BusyPool)
    monkeypatch.setattr(inspect_image, "HELD_PER_CHILD", 16)  # full at 32 for one process
    fn = inspect_image.IsolatedInspectFn(ImageInspector(load_config()), timeout_s=60.0,
                                         processes=1)
    fn.setup()
    return fn


def test_the_pool_is_polled_once_a_batch_and_when_full(inspect_fn):
    records = [ImageRecord(uri=f"/data/{i}.jpg", path=f"{i}.jpg", file_bytes=100 + i)
               for i in range(40)]
    out = []
    for number, record in enumerate(records):
        out += list(inspect_fn.process(record, timestamp=number, window=f"w{number}"))
    out += list(inspect_fn.finish_bundle())
    # one process holds 2 x 16 items at most: full at 32 in flight
    assert inspect_fn._pool.polls == [(8, False), (16, False), (24, False), (32, True),
                                      (40, True), (40, True), (40, True), (40, True)]
    assert inspect_fn._pool.weights == [100 + i for i in range(40)]  # each file's bytes
    assert sorted((v.value.path, v.timestamp.micros, v.windows) for v in out) == sorted(
        (f"{i}.jpg", i * 1_000_000, [f"w{i}"]) for i in range(40))
