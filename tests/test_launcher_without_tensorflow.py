"""The job's launcher imports no TensorFlow: it decodes in isolated children and writes the
transform in one (`tft_analysis.write_transform_isolated`), and the files that child writes are
the ones this process writes. The CLI starts the decoders' forkserver before Beam's import."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import write_folder_images
from tests.jobutil import run_job
from transforms.offline import tft_analysis as ta
from transforms.offline.tft_analysis import TotalsFn
from transforms.offline.tft_child import BACKGROUND_NICE, TransformWriter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sums(folder) -> dict:
    """{path relative to `folder`: sha256} of every file below it."""
    sums = {}
    for parent, _folders, files in os.walk(folder):
        for name in files:
            path = os.path.join(parent, name)
            with open(path, "rb") as handle:
                sums[os.path.relpath(path, folder)] = hashlib.sha256(handle.read()).hexdigest()
    return sums


def _transform_sums(snapshot_dir) -> dict:
    return {name: _sums(os.path.join(snapshot_dir, name))
            for name in ("transform_fn", "transformed_metadata")}


def _totals():
    """The totals of three accepted images of two classes (index rows, as the nightly reads
    the archive)."""
    fn = TotalsFn()
    accumulator = fn.create_accumulator()
    for path, label, width, mean in (("a.jpg", "cat", 40, 0.25), ("b.jpg", "dog", 30, 0.5),
                                     ("c.jpg", "cat", 20, 0.75)):
        row = {"path": path, "accepted": True, "label": label, "width": width, "height": 10,
               "mean_r": mean, "mean_g": mean, "mean_b": mean, "sqmean_r": mean * mean,
               "sqmean_g": mean * mean, "sqmean_b": mean * mean}
        accumulator = fn.add_input(accumulator, ta.raw_features(row))
    return fn.extract_output(accumulator)


@pytest.fixture()
def in_a_child(monkeypatch):
    """write_transform_isolated as a launcher without TensorFlow runs it: in a child."""
    monkeypatch.setattr(ta, "_tensorflow_loaded", lambda: False)


@pytest.mark.slow
def test_the_transform_written_in_a_child_is_the_one_written_here(tmp_path, in_a_child):
    totals = _totals()
    with ta.writer_started_ahead(True, 16):  # a child that traced its decoder while waiting
        child = ta.write_transform_isolated(str(tmp_path / "child"), ["cat", "dog"], totals, 16)
    cold = ta.write_transform_isolated(str(tmp_path / "cold"), ["cat", "dog"], totals, 16)
    from transforms.offline.tft_graph import write_analyzed_transform
    here = write_analyzed_transform(str(tmp_path / "here"), ["cat", "dog"], totals, 16)
    assert child == here == cold  # the job summary, computed in the child
    assert _sums(tmp_path / "cold") == _sums(tmp_path / "here")
    assert child["images"] == 3 and [c["count"] for c in child["classes"]] == [2, 1]
    assert _sums(tmp_path / "child") == _sums(tmp_path / "here")
    assert "transform_fn/saved_model.pb" in _sums(tmp_path / "child")


@pytest.mark.slow
def test_a_started_ahead_writer_is_used_once_and_stopped(tmp_path, in_a_child):
    with ta.writer_started_ahead(True):
        (ahead,) = ta._AHEAD
        ta.write_transform_isolated(str(tmp_path / "out"), ["cat", "dog"], _totals(), 16)
        assert ta._AHEAD == []  # taken by the step
    assert ahead._pool is None  # taken, then closed by the step
    with ta.writer_started_ahead(True):  # nothing takes it: stopped at exit
        (unused,) = ta._AHEAD
    assert ta._AHEAD == [] and unused._pool is None
    with ta.writer_started_ahead(False):
        assert ta._AHEAD == []


def test_only_a_background_writer_lowers_its_priority(monkeypatch):
    niced = []
    monkeypatch.setattr(os, "nice", niced.append)
    TransformWriter().setup()
    assert niced == []
    TransformWriter(background=True).setup()
    assert niced == [BACKGROUND_NICE]


def _priority(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


@pytest.mark.slow
def test_the_writer_started_ahead_runs_below_the_jobs_priority_a_waited_one_does_not(
        in_a_child):
    """The child started ahead imports and traces beside the decoders: they come first. A
    child started for a write its caller waits for keeps the caller's priority."""
    expected = min(19, _priority(0) + BACKGROUND_NICE)
    with ta.writer_started_ahead(True):
        (ahead,) = ta._AHEAD
        pool = ahead.take()
        try:
            pid = pool.pids()[0]
            deadline = time.monotonic() + 60
            while _priority(pid) != expected and time.monotonic() < deadline:
                time.sleep(0.02)
            assert _priority(pid) == expected
        finally:
            pool.close()
    pool = ta._writer_pool()
    try:
        pool.put(0, None)  # not a write's arguments: fails in `run`, after `setup`
        done = []
        while not done:
            done = pool.poll(wait=True)
        assert _priority(pool.pids()[0]) == _priority(0)
    finally:
        pool.close()


def _wait_for(path, seconds: float = 120.0) -> bool:
    deadline = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return os.path.exists(path)


@pytest.mark.slow
def test_a_write_handed_to_the_writer_started_ahead_goes_on_while_the_caller_does(
        tmp_path, in_a_child):
    """`start_transform_write` returns at once with a pending token; the child writes the
    transform while nothing waits for it; `finish_transform_write` gives the same summary and
    files as a write done here."""
    totals = _totals()
    with ta.writer_started_ahead(True, 16):
        token = ta.start_transform_write(str(tmp_path / "child"), ["cat", "dog"], totals, 16)
        assert token[0] == "pending"
        assert _wait_for(tmp_path / "child" / "transform_fn" / "saved_model.pb")
        child = ta.finish_transform_write(token)
        assert ta._PENDING == {}
    from transforms.offline.tft_graph import write_analyzed_transform
    here = write_analyzed_transform(str(tmp_path / "here"), ["cat", "dog"], totals, 16)
    assert child == here
    assert _sums(tmp_path / "child") == _sums(tmp_path / "here")


@pytest.mark.slow
def test_without_a_writer_started_ahead_the_write_is_done_when_started(tmp_path, in_a_child):
    # As on a Beam worker: the token carries the summary, so any process can finish it.
    kind, summary = ta.start_transform_write(str(tmp_path / "out"), ["cat", "dog"], _totals(),
                                             16)
    assert kind == "written" and summary["images"] == 3
    assert os.path.exists(tmp_path / "out" / "transform_fn" / "saved_model.pb")
    assert ta.finish_transform_write((kind, summary)) == summary


def test_a_pending_write_is_finished_only_in_the_process_that_started_it():
    with pytest.raises(RuntimeError, match=r"write 123456789 was started in another process"):
        ta.finish_transform_write(("pending", 123456789))


@pytest.mark.slow
def test_a_write_that_nothing_awaits_is_stopped_with_the_run(tmp_path, in_a_child):
    with ta.writer_started_ahead(True):
        token = ta.start_transform_write(str(tmp_path / "out"), ["cat", "dog"], _totals(), 16)
        _output, pool, _owner = ta._PENDING[token[1]]
        (pid,) = pool.pids()
    assert ta._PENDING == {} and pool.pids() == []  # closed: its child is stopped
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_closing_a_writer_still_starting_does_not_wait_for_it(monkeypatch, in_a_child):
    # A run stopped while the forkserver still imports: the step's exit returns at once, and
    # the pool that starting gives later is closed by the thread that started it.
    import threading

    release, closed = threading.Event(), []

    class FakePool:
        def close(self):
            closed.append(True)

    def slow_start(warm_up=None, background=False):
        release.wait(10)
        return FakePool()

    monkeypatch.setattr(ta, "_writer_pool", slow_start)
    with ta.writer_started_ahead(True):
        (ahead,) = ta._AHEAD
    assert ta._AHEAD == [] and closed == []  # returned before the pool existed
    release.set()
    ahead._thread.join(10)
    assert closed == [True] and ahead._pool is None


@pytest.mark.slow
def test_a_failure_in_the_writing_child_is_raised_with_its_cause(tmp_path, in_a_child):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the transform's folder would go")
    with pytest.raises(RuntimeError, match=r"Writing the transform into .*blocker.* failed in "
                                           r"its process \(error\): "):
        ta.write_transform_isolated(str(blocker / "out"), ["cat", "dog"], _totals(), 16)


def test_arguments_are_checked_before_any_child_starts(tmp_path, in_a_child, monkeypatch):
    monkeypatch.setattr(ta, "_writer_pool",
                        lambda *_, **__: pytest.fail("no child for bad arguments"))
    with pytest.raises(ValueError, match="totals must be a tft_totals.Totals"):
        ta.write_transform_isolated(str(tmp_path), ["cat"], {"images": 1}, 16)
    with pytest.raises(ValueError, match="size_quantiles"):
        ta.write_transform_isolated(str(tmp_path), ["cat"], _totals(), 16, size_quantiles=1)


@pytest.mark.slow
def test_a_default_job_imports_no_tensorflow_in_the_launcher(tmp_path):
    root = write_folder_images(tmp_path / "images")
    out = str(tmp_path / "out")
    code = ("import os, sys\n"
            "from runners import cli\n"
            f"code = cli.main(['preprocess', '--data_root', {root!r}, '--output_dir', {out!r}, "
            "'--run_id', 'R1', '--set', 'report.thumbnails_per_reason=0'])\n"
            "print(code, 'tensorflow' in sys.modules, 'tensorflow_transform' in sys.modules)\n"
            "sys.stdout.flush()\n"
            "os._exit(0)\n")  # no interpreter teardown, as the console script
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=600)
    assert done.stdout.strip().splitlines()[-1] == "0 False False", done.stderr[-3000:]
    # The same job here, where TensorFlow is loaded: the transform is written in-process.
    run_job(root, tmp_path / "here", tft=True, extra=["--run_id", "R1"])
    assert "tensorflow" in sys.modules
    child = _transform_sums(os.path.join(out, "snapshots", "R1"))
    assert child == _transform_sums(tmp_path / "here" / "snapshots" / "R1")
    assert child["transform_fn"] and child["transformed_metadata"]


@pytest.mark.parametrize("args,started", [
    (["preprocess", "--data_root", "x"], True),
    (["demo", "--workdir", "x"], True),
    (["preprocess", "--data_root", "x", "--runner", "DataflowRunner"], False),
    (["preprocess", "--data_root", "x", "--direct_running_mode=multi_processing"], False),
    (["nightly", "--data_root", "x"], False),  # may find nothing new, and decode nothing
    (["preprocess", "--help"], False),
    (["demo", "--help"], False),  # help decodes nothing: no TensorFlow import behind it
    (["demo", "-h", "--workdir", "x"], False),
])
def test_the_cli_starts_the_decoders_forkserver_before_beams_import(monkeypatch, args, started):
    from runners import cli
    calls = []
    monkeypatch.setattr(cli, "_start_decoders_forkserver", lambda: calls.append(True))
    monkeypatch.setattr(cli, "_run", lambda command, module, rest, verbose: 0)
    assert cli.main(args) == 0
    assert calls == ([True] if started else [])


def test_the_manifest_reads_tensorflows_version_without_importing_it():
    import tensorflow as tf

    from pipelines import snapshot
    assert snapshot._tensorflow_version() == tf.__version__


@pytest.mark.slow
def test_the_writing_child_imports_no_beam(tmp_path):
    # The child as the forkserver makes it (TensorFlow and the inspection imported), handed
    # the pickled writer and totals: it writes a local transform without importing Beam.
    import pickle

    from transforms.offline.tft_child import TransformWriter
    job = pickle.dumps((TransformWriter((16, True)),
                        (str(tmp_path / "out"), ["cat", "dog"], _totals(), 16, 4, True)))
    code = ("import pickle, sys\n"
            "import transforms.offline.decoder_imports\n"
            "writer, arguments = pickle.loads(sys.stdin.buffer.read())\n"
            "writer.setup()\n"
            "summary = writer.run(arguments)\n"
            "print(summary['images'], 'apache_beam' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], input=job, capture_output=True,
                          cwd=REPO, timeout=600)
    assert done.stdout.decode().split() == ["3", "False"], done.stderr.decode()[-3000:]
    assert "transform_fn/saved_model.pb" in _sums(tmp_path / "out")
