"""IsolatedInspectFn's use of its child pool: the pool is polled once a batch of elements has
been put, and whenever it is full, not after every element; every element's result leaves
once, in its own window, in bursts of `BURST` results and the rest at the bundle's end. A stand-in pool records the polls (the pool itself, with real
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


def test_the_childrens_three_steps_give_what_inspect_gives(tmp_path):
    """What a decoding child runs (`IsolatedInspector.prepare` of each file, `prepared` of those
    it leaves to the next steps, then `first` and `second` while a step says `Later`) and the
    inline step (`ImageInspector.inspect`) give equal records: an accepted photo, one rejected
    by a quality rule after its decode, one the decoder refuses, and a file that cannot be
    read. Each ends at the step that decides it."""
    import numpy as np

    from tests.imageutil import write_bytes, write_image, write_photo
    from transforms.offline.image_inspection import IsolatedInspector

    write_photo(tmp_path / "photo.jpg", 1)
    write_image(tmp_path / "blank.png", np.full((96, 128, 3), 128, np.uint8), fmt="PNG")
    write_bytes(tmp_path / "corrupt.jpg", (tmp_path / "photo.jpg").read_bytes()[:400])
    inspector = ImageInspector(load_config())
    inspector.setup()
    stepped = IsolatedInspector(inspector)  # its setup would set this process's TF threads
    names = ("photo.jpg", "blank.png", "corrupt.jpg", "missing.jpg")
    records = {name: ImageRecord(uri=str(tmp_path / name), path=name, file_bytes=1)
               for name in names}
    results = {name: stepped.prepare(record) for name, record in records.items()}
    reads = [result.state for result in results.values() if isinstance(result, isolation.Later)]
    stepped.prepared(reads)  # the small files' tensors, made together
    assert [read.tensor is not None for read in reads] == [True, True, True]
    reasons = {}
    for name, result in results.items():
        steps = 1
        for step in (stepped.first, stepped.second):
            if not isinstance(result, isolation.Later):
                break
            result, steps = step(result.state), steps + 1
        assert result == inspector.inspect(records[name])
        reasons[name] = (result.reject and result.reject.reason, steps)
    assert reasons == {"photo.jpg": (None, 3), "blank.png": ("low_information", 3),
                       "corrupt.jpg": ("decode_error", 2), "missing.jpg": ("unreadable", 1)}


def test_results_leave_in_bursts_and_the_rest_at_the_bundles_end(monkeypatch, inspect_fn):
    """Bursts of 12, a pool that returns the oldest 8 a wait: the waits after the 32nd and
    the 40th element hold 8 and 16 results, and those 16 leave at the 40th; the other 24 at
    the bundle's end."""
    monkeypatch.setattr(inspect_image, "BURST", 12)
    records = [ImageRecord(uri=f"/data/{i}.jpg", path=f"{i}.jpg", file_bytes=1)
               for i in range(40)]
    left = [len(list(inspect_fn.process(record, timestamp=number, window="w")))
            for number, record in enumerate(records)]
    at_end = [value.value.path for value in inspect_fn.finish_bundle()]
    assert [(number + 1, count) for number, count in enumerate(left) if count] == [(40, 16)]
    assert sorted(at_end) == sorted(f"{i}.jpg" for i in range(16, 40))
