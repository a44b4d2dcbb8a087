"""transforms/offline/isolation.py: a pool of child processes in which a crash, a hang or an
exception costs one item, with real crashes (os._exit) and hangs (sleep), no mocks."""
from __future__ import annotations

import os
import time

import pytest

from transforms.offline import isolation


class _Worker:
    """Squares numbers; item "crash", "crash_once", "hang" and "raise" misbehave, ("slow", n)
    takes 0.6 s to give n, bytes come back as they are. Attempts are counted in files under
    `folder` (the children share no memory)."""

    def __init__(self, folder: str):
        self._folder = folder

    def setup(self):
        self._pid = os.getpid()

    def _attempt(self, item) -> int:
        path = os.path.join(self._folder, f"{len(item)}-bytes" if isinstance(item, bytes)
                            else str(item))
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("x")
        return os.path.getsize(path)

    def run(self, item):
        attempt = self._attempt(item)
        if item == "crash" or (item == "crash_once" and attempt == 1):
            os._exit(139)
        if item == "hang":
            time.sleep(60)
        if item == "raise":
            raise ValueError("bad item")
        if item == "crash_once":
            return "recovered"
        if isinstance(item, tuple):
            time.sleep(0.6)
            return item[1]
        if isinstance(item, bytes):
            return item
        return item * item


class _Pid:
    """Gives its child's pid, after 0.6 s for a ("slow", n) item."""

    def setup(self):
        pass

    def run(self, item):
        if item[0] == "slow":
            time.sleep(0.6)
        return os.getpid()


class _TwoSteps:
    """A two-step worker: `first` logs "first n" and leaves the square to `second` (which logs
    "second n"), with a weight of 1 against `group_weight` 3; "done" needs no second step;
    "crash_second" and "raise_second" misbehave in their second step; ("slow", s, n) sleeps s
    seconds in each step, ("slow", s, n, f) f seconds in its first. The log and the attempts
    are files under `folder`."""

    group_weight = 3

    def __init__(self, folder: str):
        self._folder = folder

    def setup(self):
        pass

    def _log(self, line: str) -> None:
        with open(os.path.join(self._folder, "log"), "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    def run(self, item):
        raise AssertionError("a two-step worker's items run in two steps")

    def first(self, item):
        if item == "done":
            return "done"
        if isinstance(item, tuple):
            time.sleep(item[3] if len(item) > 3 else item[1])
        self._log(f"first {item}")
        return isolation.Later(item, 1)

    def second(self, item):
        self._log(f"second {item}")
        if item == "crash_second":
            os._exit(139)
        if item == "raise_second":
            raise ValueError("bad second step")
        if isinstance(item, tuple):
            time.sleep(item[1])
            return item[2]
        return item * item


def _run_one_and_read_maps(pool, item) -> tuple[list, str]:
    """(the pool's results for `item`, its child's /proc maps: which libraries it loaded);
    the pool is closed after."""
    try:
        pool.put(0, item)
        done = []
        while pool.in_flight:
            done += pool.poll(wait=True)
        with open(f"/proc/{pool.pids()[0]}/maps", encoding="utf-8") as handle:
            return done, handle.read()
    finally:
        pool.close()


def _run_all(pool, items) -> dict:
    for key, item in enumerate(items):
        pool.put(key, item)
    results = {}
    while pool.in_flight:
        for key, result in pool.poll(wait=True):
            results[items[key]] = result
    return results


@pytest.fixture
def pool(tmp_path):
    pools = []

    def make(processes=2, timeout_s=5.0):
        pools.append(isolation.ChildPool(_Worker(str(tmp_path)), processes, timeout_s))
        return pools[-1]

    yield make
    for made in pools:
        made.close()


def test_every_item_gets_its_result_across_processes(pool):
    assert _run_all(pool(processes=3), list(range(20))) == {i: i * i for i in range(20)}


def test_a_crash_is_retried_once_in_a_fresh_process(pool, tmp_path):
    results = _run_all(pool(), [1, "crash_once", 2, 3])
    assert results == {1: 1, "crash_once": "recovered", 2: 4, 3: 9}


def test_an_item_that_crashes_twice_fails_alone(pool, tmp_path):
    results = _run_all(pool(), [1, "crash", 2, 3, 4])
    failure = results.pop("crash")
    assert failure.kind == "crash" and "twice" in failure.detail
    assert failure.detail.startswith("the decoding process died (exit code ")
    assert results == {1: 1, 2: 4, 3: 9, 4: 16}
    assert (tmp_path / "crash").read_text() == "xx"


def test_a_crash_names_the_pools_role(tmp_path):
    pool = isolation.ChildPool(_Worker(str(tmp_path)), 1, 5.0, role="transform's writing")
    try:
        failure = _run_all(pool, ["crash"])["crash"]
    finally:
        pool.close()
    assert failure.detail.startswith("the transform's writing process died (exit code ")


def test_a_crash_blames_only_the_item_running_not_those_done_before_it_in_its_batch(
        pool, tmp_path):
    """Results travel in batches; the ones lost with the child are recomputed, not failed."""
    results = _run_all(pool(processes=1), [1, 2, "crash", 3])
    assert results.pop("crash").kind == "crash"
    assert results == {1: 1, 2: 4, 3: 9}
    assert (tmp_path / "crash").read_text() == "xx"


def test_a_timeout_counts_from_the_items_start_not_its_batchs(pool):
    items = [("slow", n) for n in range(4)]  # 2.4 s in one batch, 0.6 s each
    assert _run_all(pool(processes=1, timeout_s=1.5), items) == {
        item: item[1] for item in items}


def test_batches_and_results_larger_than_a_pipe_do_not_block_either_side(pool):
    items = [bytes([n]) * 300_000 for n in range(40)]
    started = time.monotonic()
    assert _run_all(pool(processes=2, timeout_s=20.0), items) == {item: item for item in items}
    assert time.monotonic() - started < 20


def test_a_hang_times_out_once_and_is_not_retried(pool, tmp_path):
    started = time.monotonic()
    results = _run_all(pool(timeout_s=1.0), [1, "hang", 2])
    failure = results.pop("hang")
    assert failure.kind == "timeout" and "decode.timeout_s=1" in failure.detail
    assert results == {1: 1, 2: 4}
    assert (tmp_path / "hang").read_text() == "x"
    assert time.monotonic() - started < 30


def test_a_hang_in_a_pool_without_a_setting_name_names_its_limit_in_seconds(tmp_path):
    pool = isolation.ChildPool(_Worker(str(tmp_path)), 1, 1.0, role="shard writing",
                               timeout_name=None)
    try:
        failure = _run_all(pool, ["hang"])["hang"]
    finally:
        pool.close()
    assert (failure.kind, failure.detail) == ("timeout", "no result within 1 s")


def test_one_item_per_child_spreads_two_slow_items_over_two_children(tmp_path):
    """Two 0.6 s items: in one batch (the default) one child runs both, one after the other;
    with `per_child=1` each child gets one and they run side by side."""
    def pids(per_child: int) -> tuple[set, float]:
        pool = isolation.ChildPool(_Pid(), 2, 10.0, per_child=per_child)
        try:
            _run_all(pool, [("warm", 0), ("warm", 1)])  # both children up and ready
            start = time.monotonic()
            results = _run_all(pool, [("slow", 0), ("slow", 1)])
            return set(results.values()), time.monotonic() - start
        finally:
            pool.close()

    one_each, side_by_side = pids(per_child=1)
    batched, _one_after_the_other = pids(per_child=isolation.QUEUED_PER_CHILD)
    assert len(one_each) == 2 and side_by_side < 1.1
    assert len(batched) == 1


def _size(path) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def test_send_queued_hands_items_over_without_waiting_for_their_results(pool, tmp_path):
    """The child runs what `send_queued` handed it while nobody polls (its attempt file
    appears), and the result comes back from the next `poll`."""
    made = pool(processes=1)
    made.put("k", 7)
    made.send_queued()
    assert made.in_flight == 1
    deadline = time.monotonic() + 30
    # The child creates the file before it writes its mark: wait for the mark, not the name.
    while _size(tmp_path / "7") == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (tmp_path / "7").read_text() == "x"  # ran once, unpolled
    assert made.poll(wait=True) == [("k", 49)]
    assert made.in_flight == 0


def test_results_that_arrive_while_send_queued_waits_for_room_come_from_the_next_poll(
        tmp_path):
    """One child holding one item at a time: handing over the second waits for the first's
    result, which the next `poll` returns (with the second's once it is done)."""
    made = isolation.ChildPool(_Worker(str(tmp_path)), 1, 10.0, per_child=1)
    try:
        made.put("first", 3)
        made.put("second", 4)
        made.send_queued()
        assert made.in_flight == 1  # the second is held by the child; the first is done
        results = made.poll(wait=True)
        while made.in_flight:
            results += made.poll(wait=True)
        assert results[0] == ("first", 9) and sorted(results) == [("first", 9), ("second", 16)]
    finally:
        made.close()


def test_per_child_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="per_child must be >= 1. Received: per_child=0"):
        isolation.ChildPool(_Worker(str(tmp_path)), 1, 1.0, per_child=0)


def test_min_batch_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="min_batch must be >= 1. Received: min_batch=0"):
        isolation.ChildPool(_Worker(str(tmp_path)), 1, 1.0, min_batch=0)


def test_an_exception_in_the_worker_is_that_items_failure(pool):
    results = _run_all(pool(processes=1), ["raise", 5])
    assert results["raise"] == isolation.Failure("error", "ValueError: bad item")
    assert results[5] == 25


def test_processes_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="processes=0"):
        isolation.ChildPool(_Worker(str(tmp_path)), 0, 1.0)


@pytest.mark.parametrize("isolation_mode,thumbnails,runner_flags,expected", [
    ("subprocess", 4, [], True),                      # the decoders, in this process
    ("subprocess", 0, [], True),
    ("inline", 4, [], True),                          # the report's thumbnails at publish
    ("inline", 0, [], False),                         # nothing isolated in this process
    ("subprocess", 0, ["--direct_running_mode=multi_processing"], False),  # workers decode
    ("subprocess", 0, ["--runner=PrismRunner"], False),
    ("subprocess", 4, ["--runner=PrismRunner"], True),  # thumbnails: always the launcher
])
def test_the_launcher_starts_the_forkserver_early_when_it_will_need_it(
        isolation_mode, thumbnails, runner_flags, expected):
    import types

    from apache_beam.options.pipeline_options import PipelineOptions

    from configs.schema import load_config
    from runners.beam_runner import needs_forkserver
    config = load_config(None, (f"decode.isolation={isolation_mode}",
                                f"report.thumbnails_per_reason={thumbnails}"))
    job = types.SimpleNamespace(config=config)
    assert needs_forkserver(job, PipelineOptions(runner_flags)) is expected


class _Environment:
    """Returns a child's view of one environment variable."""

    def setup(self):
        pass

    def run(self, name):
        return os.environ.get(name, "-")


def test_children_see_the_parents_cloud_variables_of_now_not_the_forkservers(monkeypatch):
    """Credentials set after the forkserver started (a scheduler's, a test fixture's) still
    reach the decoders that read s3:// and gs:// inputs; a variable unset since is unset."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "set-before")
    isolation.ChildPool(_Environment(), 1, 5.0).close()  # the forkserver runs from here on
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "set-after")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    pool = isolation.ChildPool(_Environment(), 1, 5.0)
    try:
        assert _run_all(pool, ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]) == {
            "AWS_ACCESS_KEY_ID": "set-after", "AWS_SECRET_ACCESS_KEY": "-"}
    finally:
        pool.close()


@pytest.mark.slow  # the children import TensorFlow
def test_the_decoding_children_import_no_beam(tmp_path):
    """The decoders' forkserver imports TensorFlow and the inspection, not Beam, and neither
    does unpickling a planned record with its label and box rows (Beam in each child cost
    ~1.7 s of CPU per child and job): a child that inspected one has no Beam module mapped."""
    from configs.schema import LabelsConfig, load_config
    from tests.imageutil import write_photo
    from transforms.offline.boxes import parse_box_csv
    from transforms.offline.image_inspection import ImageInspector, IsolatedInspector
    from transforms.offline.image_record import ImageRecord
    from transforms.offline.labels import parse_label_csv

    path = tmp_path / "cat.jpg"
    write_photo(str(path), 3, class_index=0)
    [label_row] = parse_label_csv("labels.csv", ["path,label", "cat.jpg,cat"], LabelsConfig())
    [box_row] = parse_box_csv("boxes.csv", ["path,xmin,ymin,xmax,ymax,label",
                                            "cat.jpg,1,2,30,40,cat"])
    record = ImageRecord(uri=str(path), path="cat.jpg", file_bytes=path.stat().st_size,
                         label_rows=(label_row,), box_rows=(box_row,))
    pool = isolation.ChildPool(IsolatedInspector(ImageInspector(load_config(None, ()))), 1,
                               120.0, preload=isolation.DECODER_PRELOAD)
    [(_, inspected)], mapped = _run_one_and_read_maps(pool, record)
    assert inspected.reject is None and inspected.width == 128 and len(inspected.sha256) == 64
    assert "/tensorflow/" in mapped and "/apache_beam/" not in mapped


@pytest.mark.slow  # the forkserver imports TensorFlow
def test_a_shard_writing_child_imports_no_beam_for_a_local_shard(tmp_path):
    """A child of the decoders' forkserver writes a local shard (file, DALI index, the
    statistics accumulator of its records, pickled, its index rows and their summary) of
    pickled records with no Beam module mapped: Beam's import would cost each writing child
    more CPU than writing a small shard."""
    import hashlib
    import pickle

    from configs.schema import OutputConfig
    from transforms.offline.gather import packed
    from transforms.offline.image_record import ImageRecord
    from transforms.offline.index_rows import record_row
    from transforms.offline.shard_writing import ShardWriter

    data = b"\x89PNG not really"
    (tmp_path / "a.png").write_bytes(data)
    record = ImageRecord(uri=str(tmp_path / "a.png"), path="a.png", file_bytes=len(data),
                         sha256=hashlib.sha256(data).hexdigest(), format="png", width=2,
                         height=2, label="cat", label_id=0, split="train")
    rel = "train/images-train.tfrecord-00000-of-00001"
    pool = isolation.ChildPool(ShardWriter(), 1, 120.0, preload=isolation.DECODER_PRELOAD,
                               role="shard writing", per_child=1, timeout_name=None)
    [(_, (shard, statistics, part))], mapped = _run_one_and_read_maps(
        pool, (str(tmp_path / "staging"), OutputConfig(), rel, [packed(record)], {}, []))
    assert shard.records == 1 and shard.bytes == (tmp_path / "staging" / rel).stat().st_size
    assert (tmp_path / "staging" / "train" / "dali_index").is_dir()
    accumulator = pickle.loads(statistics)
    assert accumulator.examples == 1 and not accumulator.pending  # folded in the child
    assert accumulator.features["image/filename"].frequent().counts() == {b"a.png": 1}
    assert part.batch.to_pylist() == [record_row(record, rel)]
    summary = pickle.loads(part.summary)  # summarized in the child
    assert (summary.discovered, summary.accepted, dict(summary.by_split)) == (1, 1, {"train": 1})
    assert "/apache_beam/" not in mapped


def _finish(pool) -> dict:
    results = {}
    while pool.in_flight:
        results.update(pool.poll(wait=True))
    return results


def test_a_batch_weight_sends_heavy_items_to_every_child_and_light_ones_together(tmp_path):
    """With `batch_weight`, two slow items each heavier than it run side by side in two
    children (one to a message, a message to each child in turn), while 20 light items
    travel as one batch to one child."""
    pool = isolation.ChildPool(_Pid(), 2, 10.0, per_child=64, batch_weight=100)
    try:
        deadline = time.monotonic() + 60
        while not all(child.ready for child in pool._children) and time.monotonic() < deadline:
            pool.poll(wait=False)  # both children up and ready
            time.sleep(0.01)
        for key in range(2):
            pool.put(key, ("slow", key), 150)
        start = time.monotonic()
        heavy = set(_finish(pool).values())
        side_by_side = time.monotonic() - start
        for key in range(20):
            pool.put(key, ("light", key), 1)
        light = set(_finish(pool).values())
    finally:
        pool.close()
    assert len(heavy) == 2 and side_by_side < 1.1
    assert len(light) == 1


def test_a_batch_stops_before_the_item_that_passes_the_weight(tmp_path):
    """Items of 40, 40, 40, 10 with `batch_weight=100`: a batch takes two (a third would weigh
    120); an item heavier than the weight goes alone. Weights leave with their items."""
    pool = isolation.ChildPool(_Worker(str(tmp_path)), 1, 10.0, per_child=64, batch_weight=100)
    try:
        for key, weight in enumerate((40, 40, 40, 10)):
            pool.put(key, key + 2, weight)
        assert pool._batch_size() == 2
        assert _finish(pool) == {0: 4, 1: 9, 2: 16, 3: 25}
        pool.put(9, 3, 500)
        pool.put(10, 4, 1)
        assert pool._batch_size() == 1
        assert _finish(pool) == {9: 9, 10: 16}
        assert pool.in_flight == 0 and not pool._queue  # a weight lives in its item's entry
    finally:
        pool.close()


def test_a_min_batch_takes_heavy_items_together_fewer_as_the_queue_runs_short(tmp_path):
    """`min_batch=4` with one child: items heavier than `batch_weight` go a quarter of the
    queue to a message, 4 at most and one at least: 16 queued -> 4, 8 -> 2, 7 -> 1."""
    pool = isolation.ChildPool(_Worker(str(tmp_path)), 1, 10.0, per_child=64, batch_weight=100,
                               min_batch=4)
    try:
        for key in range(20):
            pool.put(key, key + 2, 150)
        assert pool._batch_size() == 4
        assert _finish(pool) == {key: (key + 2) ** 2 for key in range(20)}
        sizes = []
        for queued in (16, 8, 7, 4, 1):
            for key in range(queued):
                pool.put(key, key + 2, 150)
            sizes.append(pool._batch_size())
            assert _finish(pool) == {key: (key + 2) ** 2 for key in range(queued)}
        assert sizes == [4, 2, 1, 1, 1]
    finally:
        pool.close()


def test_heavy_items_of_a_min_batch_stop_at_64_mib_but_one_goes_alone(tmp_path):
    """30 MiB items with `min_batch=4`: two to a message (a third would pass 64 MiB); a 100
    MiB item still goes, alone."""
    mib = 1 << 20
    pool = isolation.ChildPool(_Worker(str(tmp_path)), 1, 10.0, per_child=64,
                               batch_weight=4 * mib, min_batch=4)
    try:
        for key in range(16):
            pool.put(key, key + 2, 30 * mib)
        assert pool._batch_size() == 2
        pool._queue.clear()
        for key in range(16):
            pool.put(key, key + 2, 100 * mib)
        assert pool._batch_size() == 1
        pool._queue.clear()
    finally:
        pool.close()


def _two_step_pool(tmp_path, timeout_s: float = 10.0):
    return isolation.ChildPool(_TwoSteps(str(tmp_path)), 1, timeout_s)


def _results_and_log(pool, tmp_path, items) -> tuple[dict, list]:
    """`_run_all(pool, items)`, the pool closed after, and the worker's log lines."""
    try:
        results = _run_all(pool, items)
    finally:
        pool.close()
    return results, (tmp_path / "log").read_text().split("\n")[:-1]


def test_a_two_step_worker_runs_a_groups_first_steps_before_their_second_steps(tmp_path):
    """One batch of six: the first steps until three states are held (group_weight 3; "done"
    holds none), then their second steps, then the next group's. Results keep their items."""
    results, log = _results_and_log(_two_step_pool(tmp_path), tmp_path, [1, 2, "done", 3, 4, 5])
    assert results == {1: 1, 2: 4, "done": "done", 3: 9, 4: 16, 5: 25}
    assert log == [
        "first 1", "first 2", "first 3", "second 1", "second 2", "second 3",
        "first 4", "first 5", "second 4", "second 5"]


def test_a_crash_in_a_second_step_blames_that_item_alone(tmp_path):
    """The child dies in an item's second step, after the group's first steps: that item is
    tried once more in a fresh child and then fails; the others of its group are recomputed."""
    pool = _two_step_pool(tmp_path)
    try:
        results = _run_all(pool, [1, "crash_second", 2, 3])
    finally:
        pool.close()
    failure = results.pop("crash_second")
    assert failure.kind == "crash" and "twice" in failure.detail
    assert results == {1: 1, 2: 4, 3: 9}
    assert (tmp_path / "log").read_text().count("second crash_second") == 2


def test_an_exception_in_a_second_step_is_that_items_failure(tmp_path):
    pool = _two_step_pool(tmp_path)
    try:
        results = _run_all(pool, ["raise_second", 5])
    finally:
        pool.close()
    assert results == {"raise_second": isolation.Failure("error", "ValueError: bad second step"),
                       5: 25}


def test_a_two_step_items_timeout_counts_both_its_steps_and_not_its_groups(tmp_path):
    """Four items of 0.15 s a step in one batch (1.2 s in all; groups of three) finish under a
    1.0 s timeout; one item of 0.6 s a step (1.2 s) times out in its second step."""
    pool = _two_step_pool(tmp_path, timeout_s=1.0)
    try:
        quick = [("slow", 0.15, n) for n in range(4)] + ["done"]
        assert _run_all(pool, quick) == {**{item: item[2] for item in quick[:4]}, "done": "done"}
        slow = ("slow", 0.6, 7)
        failure = _run_all(pool, [slow])[slow]
    finally:
        pool.close()
    assert failure.kind == "timeout"
    assert "second ('slow', 0.6, 7)" in (tmp_path / "log").read_text()


class _ThreeSteps(_TwoSteps):
    """`_TwoSteps` with a `prepare` over every item of a batch first: it logs "prepare n" and
    passes the item on (`Later`); "ready" is done there, "crash_prepare" dies there; ("slow",
    s, n) sleeps s seconds in it too."""

    def prepare(self, item):
        self._log(f"prepare {item}")
        if item == "ready":
            return "ready"
        if item == "crash_prepare":
            os._exit(139)
        if isinstance(item, tuple):
            time.sleep(item[1])
        return isolation.Later(item)


class _ThreeStepsPrepared(_ThreeSteps):
    """`_ThreeSteps` with `prepared`: it logs the states it sees together, and raises when one
    of them is 13 (after the log: the states go on as they were)."""

    def prepared(self, states):
        self._log("prepared " + " ".join(map(str, states)))
        if 13 in states:
            raise ValueError("an optional saving failed")


def _three_step_pool(tmp_path, timeout_s: float = 10.0, worker=_ThreeSteps):
    return isolation.ChildPool(worker(str(tmp_path)), 1, timeout_s)


def test_prepared_sees_a_batchs_prepared_states_together_and_a_raise_changes_nothing(
        tmp_path):
    """One batch: `prepare` of each item, one `prepared` of the states left to the first steps
    ("ready" was done in its prepare), then the first and second steps. A `prepared` that
    raises costs no item its result."""
    pool = _three_step_pool(tmp_path, worker=_ThreeStepsPrepared)
    try:
        results = _run_all(pool, [1, "ready", 2])
        again = _run_all(pool, [13, 3])
    finally:
        pool.close()
    assert results == {1: 1, "ready": "ready", 2: 4} and again == {13: 169, 3: 9}
    log = (tmp_path / "log").read_text().split("\n")[:-1]
    assert log == ["prepare 1", "prepare ready", "prepare 2", "prepared 1 2",
                   "first 1", "first 2", "second 1", "second 2",
                   "prepare 13", "prepare 3", "prepared 13 3",
                   "first 13", "first 3", "second 13", "second 3"]


def test_a_worker_with_prepare_prepares_the_whole_batch_before_the_first_steps(tmp_path):
    """One batch of six: every item's `prepare` ("ready" is done there), then the first steps
    of a group (group_weight 3) and their second steps, group after group."""
    results, log = _results_and_log(_three_step_pool(tmp_path), tmp_path,
                                    [1, 2, "ready", 3, 4, 5])
    assert results == {1: 1, 2: 4, "ready": "ready", 3: 9, 4: 16, 5: 25}
    assert log == [
        "prepare 1", "prepare 2", "prepare ready", "prepare 3", "prepare 4", "prepare 5",
        "first 1", "first 2", "first 3", "second 1", "second 2", "second 3",
        "first 4", "first 5", "second 4", "second 5"]


def test_a_crash_in_a_prepare_blames_that_item_alone(tmp_path):
    pool = _three_step_pool(tmp_path)
    try:
        results = _run_all(pool, [1, "crash_prepare", 2])
    finally:
        pool.close()
    failure = results.pop("crash_prepare")
    assert failure.kind == "crash" and "twice" in failure.detail
    assert results == {1: 1, 2: 4}
    assert (tmp_path / "log").read_text().count("prepare crash_prepare") == 2


def test_a_three_step_items_timeout_counts_all_its_steps_and_not_its_batchs(tmp_path):
    """Four items of 0.15 s a step in one batch (1.8 s in all) finish under a 1.5 s timeout;
    one item with a 0.8 s prepare and a 1.4 s first step times out in that step (its prepare's
    0.8 s count; the step alone is under the timeout), 0.7 s before the step would end and log:
    the kill has that much slack on a busy machine, not the 0.1 s of 0.8 s a step."""
    pool = _three_step_pool(tmp_path, timeout_s=1.5)
    try:
        quick = [("slow", 0.15, n) for n in range(4)]
        assert _run_all(pool, quick) == {item: item[2] for item in quick}
        slow = ("slow", 0.8, 7, 1.4)
        failure = _run_all(pool, [slow])[slow]
    finally:
        pool.close()
    assert failure.kind == "timeout"
    lines = (tmp_path / "log").read_text().split("\n")
    assert lines.count(f"prepare {slow}") == 1
    assert f"first {slow}" not in lines and f"second {slow}" not in lines
