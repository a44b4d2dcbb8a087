"""Runs, locks, retries and exits (issue 9): a run with nothing to accept still publishes its
rejects; failed and killed runs leave nothing behind; run ids are safe; exits are honest."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from pipelines.training_input import make_dataset
from tests.imageutil import write_photo
from tests.jobutil import copy_output, rejects, run_job
from tests.tiers import slow_fixture

FAST = ["decode.isolation=inline", "transform.enabled=false", "report.thumbnails_per_reason=0"]


def _sets(items) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def junk_folder(root):
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "a.jpg").write_bytes(b"junk")
    (root / "b.png").write_bytes(b"more junk")
    return root


# Case 4: a run that accepts no image.

@pytest.mark.slow
def test_a_run_that_accepts_nothing_publishes_its_rejects_report_and_transform(tmp_path):
    out = tmp_path / "out"
    snapshot = run_job(junk_folder(tmp_path / "images"), out,
                       sets=["decode.isolation=inline", "transform.enabled=true"])
    assert snapshot.accounting["images"] == {"discovered": 2, "accepted": 0, "rejected": 2,
                                             "skipped": 0, "ok": True}
    assert sorted(r["reason"] for r in rejects(snapshot)) == ["unknown_format"] * 2
    for name in ("index.parquet", "stats.json", "stats.pb", "report.html", "manifest.json",
                 "transform_fn/saved_model.pb"):
        assert os.path.exists(os.path.join(snapshot.path, name)), name
    transform = json.load(open(os.path.join(snapshot.path, "stats.json")))["transform"]
    assert (transform["images"], transform["classes"], transform["labels_outside_table"]) == (
        0, [], {})
    from transforms.offline.tft_graph import tft_summary
    assert transform == tft_summary(snapshot.path)  # the job's summary is the transform's
    assert (out / "LATEST").read_text().strip() == snapshot.run_id
    assert (out / "classes.txt").read_text() == ""
    with pytest.raises(FileNotFoundError, match="No shards for split 'train'"):
        make_dataset(str(out), split="train", batch_size=2)


# Case 18: exit codes.

def _cli(args, cwd):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "runners.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("where", ["file", "below_file"])
@pytest.mark.slow
def test_an_output_dir_that_is_a_file_is_a_usage_error_in_one_line(tmp_path, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    out = blocker if where == "file" else blocker / "out"
    result = _cli(["preprocess", "--data_root", str(junk_folder(tmp_path / "images")),
                   "--output_dir", str(out)], cwd=os.path.dirname(os.path.dirname(__file__)))
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("pixelmill")]
    assert line.startswith(f"pixelmill preprocess: error: --output_dir {out} ")
    assert "expected a folder" in line


@pytest.mark.slow
def test_a_usage_error_is_found_before_tensorflow_is_imported(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    code = ("import sys\n"
            "from runners.jobs import preprocess\n"
            "from runners.errors import UsageError\n"
            "try:\n"
            f"    preprocess.run(['--data_root', {str(tmp_path)!r}, '--output_dir', "
            f"{str(blocker)!r}])\n"
            "except UsageError as exc:\n"
            "    print('usage error;', 'tensorflow' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(__file__)), check=True)
    assert done.stdout.strip() == "usage error; False"


def test_a_failed_run_exits_1_with_the_error_and_without_interpreter_teardown(
        monkeypatch, capsys, private_forkserver):  # the exit reaps the forkserver
    from runners import cli

    def failing_main(argv):
        raise RuntimeError("the pipeline broke")

    exits = []

    def fake_exit(code):
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(cli, "main", failing_main)
    monkeypatch.setattr(cli.exit_safety, "exit_now", fake_exit)
    with pytest.raises(SystemExit):
        cli.console_main(["preprocess"])
    assert exits == [1]  # exit_now even when main raised: no teardown, no SIGSEGV (139)
    assert "RuntimeError: the pipeline broke" in capsys.readouterr().err


def test_a_run_that_raises_is_exit_1_with_the_error(tmp_path, monkeypatch, capsys):
    from runners import cli
    from runners.jobs import preprocess
    def broken(job, options):
        raise RuntimeError("a worker died")

    monkeypatch.setattr(preprocess, "execute", broken)
    code = cli.main(["preprocess", "--data_root", str(junk_folder(tmp_path / "images")),
                     "--output_dir", str(tmp_path / "out"), *_sets(FAST)])
    assert code == 1
    err = capsys.readouterr().err.rstrip().splitlines()
    last = err[0]  # the cause first, and only it
    assert len(err) == 1 and last.startswith("pixelmill preprocess: failed: RuntimeError: a worker died "
                           f"(traceback in {tmp_path / 'out' / '.logs'}/"), last


# Case 11: the run lock.

def _write_lock(out, owner: dict, age_s: float = 0.0):
    from runners.locking.run_lock import LOCK_NAME
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_NAME
    path.write_bytes(json.dumps(owner).encode() if isinstance(owner, dict) else owner)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def _dead_pid() -> int:
    import subprocess
    dead = subprocess.Popen(["true"])
    dead.wait()
    return dead.pid


def test_two_runs_that_judged_a_lock_stale_cannot_both_take_it_over(tmp_path):
    from runners.locking.run_lock import LockHeld, RunLock
    out = tmp_path / "out"
    _write_lock(out, {"run_id": "dead", "pid": 1, "host": "elsewhere"}, age_s=7200)
    first, second = RunLock(str(out), "A", stale_after_s=3600), RunLock(str(out), "B",
                                                                       stale_after_s=3600)
    judged = second._store.read()  # B reads the stale lock ...
    reads = iter([judged])
    real_read = second._store.read
    second._store.read = lambda: next(reads, None) or real_read()
    with first:  # ... A takes it over in between ...
        with pytest.raises(LockHeld, match="run A"):
            second.__enter__()  # ... and B's compare-and-delete finds A's fresh lock
        assert json.loads((out / ".lock").read_text())["run_id"] == "A"


def test_a_pid_not_visible_from_here_proves_nothing(tmp_path):
    from runners.locking.run_lock import LockHeld, RunLock, machine_identity
    out = tmp_path / "out"
    other_container = {**machine_identity(), "pid_ns": -1, "pid": _dead_pid(),
                       "run_id": "other"}
    _write_lock(out, other_container)
    with pytest.raises(LockHeld, match="run other"):
        RunLock(str(out), "mine").__enter__()
    _write_lock(out, {**other_container, "pid_ns": machine_identity()["pid_ns"]})
    with RunLock(str(out), "mine"):  # same host, boot and pid namespace: provably dead
        assert json.loads((out / ".lock").read_text())["run_id"] == "mine"


def test_a_live_run_keeps_its_lock_by_its_heartbeat(tmp_path):
    from runners.locking.run_lock import LockHeld, RunLock
    out = tmp_path / "out"
    with RunLock(str(out), "long", stale_after_s=0.6, heartbeat_s=0.1) as lock:
        time.sleep(1.5)  # longer than the stale time
        with pytest.raises(LockHeld, match="run long"):
            RunLock(str(out), "late", stale_after_s=0.6).__enter__()
        lock.check()
    assert not (out / ".lock").exists()


@pytest.mark.parametrize("content", [b"", b"{not json", b"[1, 2]"])
def test_an_unreadable_lock_is_taken_over_after_the_stale_time(tmp_path, content):
    from runners.locking.run_lock import LockHeld, RunLock
    out = tmp_path / "out"
    _write_lock(out, content, age_s=10)
    with pytest.raises(LockHeld, match="unreadable lock"):
        RunLock(str(out), "mine", stale_after_s=60).__enter__()
    _write_lock(out, content, age_s=120)
    with RunLock(str(out), "mine", stale_after_s=60):
        assert json.loads((out / ".lock").read_text())["run_id"] == "mine"


def test_a_run_whose_lock_was_taken_over_does_not_publish(tmp_path):
    from runners.locking.run_lock import LockLost, RunLock
    out = tmp_path / "out"
    with RunLock(str(out), "mine") as lock:
        _write_lock(out, {"run_id": "usurper"})
        with pytest.raises(LockLost):
            lock.check()
    assert json.loads((out / ".lock").read_text())["run_id"] == "usurper"  # not ours to delete


def test_a_lock_that_blocks_night_after_night_becomes_an_error(tmp_path, capsys):
    from runners.jobs import nightly
    from runners.locking.run_lock import machine_identity
    out = tmp_path / "out"
    root = junk_folder(tmp_path / "images")
    _write_lock(out, {**machine_identity(), "pid": os.getpid(), "run_id": "stuck"})
    argv = ["--data_root", str(root), "--output_dir", str(out), "--lock_blocked_max", "3"]
    assert [nightly.main(argv) for _ in range(3)] == [75, 75, 1]
    assert "turned away 3 runs in a row" in capsys.readouterr().err


def good_folder(root, count: int = 3):
    for i in range(count):
        write_photo(root / ("cat" if i % 2 == 0 else "dog") / f"{i}.jpg", 300 + i, 64, 80,
                    class_index=i % 2, quality=90)
    return root


def _preprocess_argv(root, out, *extra):
    return ["preprocess", "--data_root", str(root), "--output_dir", str(out),
            *_sets(FAST), *extra]


# Case 12: leftovers of killed and failed runs.

@pytest.mark.slow
def test_preprocess_removes_what_killed_runs_left(tmp_path):
    out = tmp_path / "out"
    (out / ".staging" / "killed" / "train").mkdir(parents=True)
    (out / ".staging" / "killed" / "train" / "part").write_bytes(b"x")
    (out / "snapshots" / "uncommitted" / "train").mkdir(parents=True)
    (out / "snapshots" / "uncommitted" / "train" / "part").write_bytes(b"x")
    snapshot = run_job(good_folder(tmp_path / "images"), out, sets=FAST)
    assert sorted(os.listdir(out / "snapshots")) == [snapshot.run_id]
    assert not os.listdir(out / ".staging")


def test_a_failed_run_removes_its_own_staging_and_uncommitted_snapshot(tmp_path, monkeypatch):
    from runners import cli
    from runners.jobs import preprocess
    out = tmp_path / "out"

    def half_done(job, options):
        os.makedirs(os.path.join(job.staging_dir, "train"))
        open(os.path.join(job.staging_dir, "train", "part"), "wb").close()
        (out / "snapshots" / "R1").mkdir(parents=True)
        raise RuntimeError("killed half way")

    monkeypatch.setattr(preprocess, "execute", half_done)
    assert cli.main(_preprocess_argv(good_folder(tmp_path / "images"), out,
                                     "--run_id", "R1")) == 1
    assert not os.path.exists(out / ".staging" / "R1")
    assert not os.path.exists(out / "snapshots" / "R1")
    assert not os.path.exists(out / ".lock")


# Case 16: run ids.

@pytest.mark.parametrize("run_id", ["../..", "a/b", ".hidden", "-x", "x" * 129, "a b"])
def test_an_unsafe_run_id_is_a_usage_error(tmp_path, capsys, run_id):
    from runners import cli
    out = tmp_path / "out"
    root = junk_folder(tmp_path / "images")
    code = cli.main(_preprocess_argv(root, out, f"--run_id={run_id}"))
    assert code == 2
    assert "--run_id must be 1-128 letters" in capsys.readouterr().err
    assert not out.exists() or not os.listdir(out)


def test_a_committed_run_id_is_never_overwritten(folder_snapshot, tmp_path, capsys):
    """A second run named like a committed snapshot (conftest folder_snapshot, copied)."""
    from runners import cli
    out = copy_output(folder_snapshot.out, tmp_path / "out")
    run_id = folder_snapshot.snapshot.run_id
    manifest = (tmp_path / "out" / "snapshots" / run_id / "manifest.json").read_bytes()
    root = good_folder(tmp_path / "images", count=4)
    assert cli.main(_preprocess_argv(root, out, "--run_id", run_id)) == 2
    assert f"snapshot {run_id} is already committed" in capsys.readouterr().err
    assert (tmp_path / "out" / "snapshots" / run_id / "manifest.json").read_bytes() == manifest


# Case 15: nightly on unchanged inputs.

@pytest.mark.slow
def test_nightly_publishes_nothing_when_only_known_rejects_come_back(tmp_path):
    from runners.jobs import nightly
    root = good_folder(tmp_path / "images")
    outside = tmp_path / "outside.jpg"
    outside.write_bytes((root / "cat" / "0.jpg").read_bytes())
    (root / "cat" / "escape.jpg").symlink_to(outside)  # unsafe_path, found every night
    (root / "cat" / "junk.jpg").write_bytes(b"junk")  # unknown_format: read once, then skipped
    os.mkfifo(root / "cat" / "pipe.jpg")  # unreadable, never opened: found every night
    argv = ["--data_root", str(root), "--output_dir", str(tmp_path / "out"),
            *_sets(FAST)]
    first = nightly.run(argv)
    assert sorted(r["reason"] for r in rejects(first.snapshot)) == [
        "unknown_format", "unreadable", "unsafe_path"]
    second = nightly.run(argv)
    assert second.snapshot is None, second.message
    assert "nothing published" in second.message
    (root / "dog" / "new.jpg").symlink_to(outside)  # a new reject is news
    third = nightly.run(argv)
    assert sorted(r["path"] for r in rejects(third.snapshot)) == [
        "cat/escape.jpg", "cat/pipe.jpg", "dog/new.jpg"]


# Cases 13 and 14: retried bundles, and a transform that does not depend on where it was made.

_RUN_SPECIFIC = ("manifest.json", "report.html", "stats.json", "stats.pb", "dataset_info.json")


def _snapshot_files(snapshot_dir) -> dict:
    """Every published file but those that name the run, its time or the code versions."""
    names = {}
    for folder, _, files in os.walk(snapshot_dir):
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), snapshot_dir)
            if rel not in _RUN_SPECIFIC:
                names[rel] = open(os.path.join(folder, name), "rb").read()
    return names


@slow_fixture(scope="module")
def two_tft_runs(script_job, tmp_path_factory):
    """The same inputs twice, each with the defaults (isolated decoding, TFT, thumbnails),
    their own output folders and run ids: conftest's `script_job` (a user's script, the first
    job of a fresh process), then in this test process, which has traced many other graphs
    before (TF numbers traced functions by per-process counters; the written transform must not
    depend on them), with every bundle replayed (the transform's graph is traced again). Both
    tests compare these two: bytes that agree across processes and across retries at once
    leave neither free to move them (a run without replay in this process, a third TFT job,
    would only tell which of the two moved them when a test fails)."""
    from runners.jobs import preprocess
    assert script_job.returncode == 0, script_job.stderr[-3000:]
    out = tmp_path_factory.mktemp("tft_runs") / "out"
    preprocess.run(["--data_root", script_job.root, "--output_dir", str(out), "--run_id", "R2",
                    "--direct_runner_bundle_repeat", "1"])
    return [script_job.snapshot_dir, out / "snapshots" / "R2"]


def test_identical_inputs_give_a_byte_identical_snapshot_transform_included(two_tft_runs):
    first, second = (_snapshot_files(path) for path in two_tft_runs)
    assert {"transform_fn/saved_model.pb", "transform_fn/fingerprint.pb",
            "rejects.jsonl"} <= set(first)
    assert first["rejects.jsonl"].count(b"\n") == 1  # junk/a.jpg
    assert any(name.startswith("train/") for name in first)
    assert sorted(first) == sorted(second)
    assert [name for name in first if first[name] != second[name]] == []


def test_retried_bundles_give_the_same_snapshot_and_transform(two_tft_runs):
    import numpy as np
    import tensorflow as tf
    import tensorflow_transform as tft

    from transforms import codec
    from transforms.offline.tft_graph import tft_summary
    plain, replayed = two_tft_runs
    first, again = _snapshot_files(plain), _snapshot_files(replayed)
    assert sorted(first) == sorted(again)
    # a replayed bundle traces the graph again (TF's function counters move): the written
    # transform numbers its functions by their order, so even saved_model.pb is the same
    assert [name for name in first if first[name] != again[name]] == []
    assert tft_summary(str(plain)) == tft_summary(str(replayed))
    probe = {codec.IMAGE_ENCODED: tf.constant([open(p, "rb").read() for p in sorted(
        (plain.parent.parent.parent / "images" / "cat").glob("*.jpg"))]),
             codec.CLASS_TEXT: tf.constant(["cat", "dog"])}
    outputs = [tft.TFTransformOutput(str(path)).transform_raw_features(probe)
               for path in (plain, replayed)]
    for key in outputs[0]:
        np.testing.assert_array_equal(outputs[0][key].numpy(), outputs[1][key].numpy())
