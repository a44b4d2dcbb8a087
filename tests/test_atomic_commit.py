"""Atomic commits (issue 20): the disk fills, or the process dies, at each write, fsync and
rename of the publish step (the manifest's included); afterwards every committed snapshot
verifies, the failed attempt is committed only if its manifest was, `LATEST` names a committed
snapshot (the previous one while the attempt is not), and the next run publishes what the
failed one did not. Also: the committed rule itself (a manifest that does not parse or list
its files does not commit), and the atomic write helper.

The job is staged once (`staged`); each fault point replays only `publish_snapshot` on a copy
of the staging folder and the previous output. A kill is `os._exit` in a forked child (forked
by one small helper process for all the cases), so a replay costs no fresh interpreter and
leaves what a killed process leaves (temporaries too).
"""
from __future__ import annotations

import dataclasses
import errno
import gc
import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import types

import pytest
from apache_beam.io.filesystems import FileSystems

from pipelines import beam_files
from pipelines.beam_files import BEAM_FILES, write_atomically
from pipelines.verify_snapshot import verify_output
from tests.conftest import FOLDER_IMAGES, write_folder_images
from tests.jobutil import job_argv, run_job
from tests.tiers import slow_fixture
from transforms import live_view
from transforms import snapshot_layout as layout

SETS = ["output.num_shards=2"]


@slow_fixture(scope="module")
def staged(tmp_path_factory):
    """`prev`: an output folder with one committed snapshot of three images (LATEST names
    it); `staging`: the job run on all six images into that output's staging folder and not
    published (a template: copy it); `job`, `inputs` for `publish_snapshot`."""
    from runners.jobs import preprocess
    base = tmp_path_factory.mktemp("atomic")
    root = write_folder_images(base / "images")
    first = base / "first"
    for rel in sorted(FOLDER_IMAGES)[:3]:
        os.makedirs(first / os.path.dirname(rel), exist_ok=True)
        shutil.copy(os.path.join(root, rel), first / rel)
    prev = base / "prev"
    previous = run_job(first, prev, sets=SETS)
    argv = job_argv(root, prev, sets=SETS, extra=["--run_id", "attempt"],
                    isolation="inline")
    options, job_options, run_id, output_dir = preprocess.parse_options(argv)
    job, inputs = preprocess.resolve_job(job_options, layout.staging_dir(output_dir, run_id))
    preprocess.execute(job, options)
    template = base / "staged"
    shutil.move(job.staging_dir, template)
    os.rmdir(layout.staging_root(str(prev)))
    return types.SimpleNamespace(root=root, prev=str(prev), previous=previous.run_id,
                                 staging=str(template), job=job, inputs=inputs)


class _Fault(Exception):
    pass


class _Ops:
    """Counts the publish step's file operations (a write, an fsync, a rename or replace) and
    runs `fail()` at the `at`-th (from 0); `at=None` only counts."""

    def __init__(self, monkeypatch, at, fail):
        self.count, self.at, self._fail, self.what = 0, at, fail, None
        real_open, real_replace, real_fsync = open, os.replace, os.fsync
        real_rename = FileSystems.rename
        ops = self

        class Handle:
            def __init__(self, handle):
                self._handle = handle

            def write(self, data):
                ops.step(f"write {self._handle.name}")
                return self._handle.write(data)

            def __getattr__(self, name):
                return getattr(self._handle, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return self._handle.__exit__(*exc)

        def counted_open(path, mode="r", *args, **kwargs):
            handle = real_open(path, mode, *args, **kwargs)
            return Handle(handle) if "w" in mode else handle

        def replace(source, destination):
            ops.step(f"replace {destination}")
            return real_replace(source, destination)

        def fsync(fd):
            ops.step("fsync")
            return real_fsync(fd)

        def rename(sources, destinations):
            ops.step(f"rename {len(sources)} files")
            return real_rename(sources, destinations)

        monkeypatch.setattr(beam_files, "open", counted_open, raising=False)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(FileSystems, "rename", staticmethod(rename))

    def step(self, what: str) -> None:
        if self.count == self.at:
            self.what = what
            self._fail(what)
        self.count += 1


def _disk_full(what):
    raise OSError(errno.ENOSPC, f"No space left on device ({what})")


def _attempt(staged, tmp_path, name="attempt") -> types.SimpleNamespace:
    """A fresh copy of the previous output with the staged run in its staging folder."""
    out = tmp_path / "out"
    if not out.exists():
        shutil.copytree(staged.prev, out)
    staging = layout.staging_dir(str(out), name)
    shutil.copytree(staged.staging, staging)
    return types.SimpleNamespace(out=str(out), job=dataclasses.replace(
        staged.job, staging_dir=staging))


def _publish(staged, attempt, run_id="attempt"):
    from pipelines.snapshot import publish_snapshot
    return publish_snapshot(attempt.job, attempt.out, run_id, staged.inputs)


def _count_ops(staged, tmp_path, monkeypatch) -> int:
    with monkeypatch.context() as patch:
        ops = _Ops(patch, None, None)
        _publish(staged, _attempt(staged, tmp_path / "count"))
    return ops.count


def _check_after_failure(staged, out: str) -> bool:
    """Every committed snapshot verifies; LATEST names a committed snapshot, the previous one
    unless the attempt is committed; classes.txt holds every committed id. Whether the
    attempt is committed."""
    findings = verify_output(out)
    assert findings.ok, dict(findings.broken)
    committed = [s.run_id for s in layout.committed_snapshots(out, BEAM_FILES)]
    assert committed in ([staged.previous], [staged.previous, "attempt"])
    latest = open(os.path.join(out, "LATEST")).read()
    assert latest in (f"{staged.previous}\n", "attempt\n")
    if committed == [staged.previous]:
        assert latest == f"{staged.previous}\n"
        assert layout.latest_snapshot(out, BEAM_FILES).run_id == staged.previous
    # The first run saw only cats. The table is written before the manifest: a committed
    # attempt's ids are always in it; a failed attempt may have reserved `dog` already.
    table = open(os.path.join(out, "classes.txt")).read()
    assert table == "cat\ndog\n" if "attempt" in committed else table in ("cat\n", "cat\ndog\n")
    return "attempt" in committed


def _next_run_publishes(staged, tmp_path, out: str) -> None:
    """What a next run does: cleans up under the lock, then publishes the same staged data."""
    from runners.locking.locked_run import clean_unfinished
    clean_unfinished(out)
    committed = [s.run_id for s in layout.committed_snapshots(out, BEAM_FILES)]
    assert not [name for name in os.listdir(out) if ".tmp-" in name]
    if "attempt" in committed:
        return
    assert os.listdir(os.path.join(out, "snapshots")) == [staged.previous]
    retry = _attempt(staged, tmp_path, "retry")
    snapshot = _publish(staged, retry, "retry")
    assert snapshot.accounting["images"]["accepted"] == len(FOLDER_IMAGES)
    assert [s.run_id for s in layout.committed_snapshots(out, BEAM_FILES)] == [
        staged.previous, "retry"]
    assert layout.read_latest(out, BEAM_FILES) == "retry"
    assert verify_output(out).ok


def test_a_full_disk_at_each_step_of_the_publish(staged, tmp_path, monkeypatch):
    total = _count_ops(staged, tmp_path, monkeypatch)
    assert total > 20
    seen, outcomes = [], set()
    for at in range(total):
        case = tmp_path / f"k{at}"
        attempt = _attempt(staged, case)
        with monkeypatch.context() as patch:
            ops = _Ops(patch, at, _disk_full)
            with pytest.raises(OSError) as raised:
                _publish(staged, attempt)
        seen.append(ops.what)
        assert raised.value.errno == errno.ENOSPC or isinstance(
            raised.value.__context__, OSError), (at, ops.what)
        outcomes.add(_check_after_failure(staged, attempt.out))
        _next_run_publishes(staged, case, attempt.out)
    assert outcomes == {False, True}  # failures before the manifest's rename, and after it
    assert any("manifest.json" in what for what in seen)
    assert any(what.endswith("/LATEST") for what in seen if what.startswith("replace"))


def _killed_child(staged, attempt, at: int) -> int:
    """Publishes in a forked child that `os._exit`s at the `at`-th operation; its status. The
    child collects no garbage: a TensorFlow resource finalized there would wait forever on
    the parent's runtime threads, which a fork does not copy (a full run hung so once). A
    child still alive after 120 s is killed, so the test fails instead of hanging. The wait
    blocks rather than polls: a poll every 20 ms cost ~10 ms of each of the ~80 cases."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        gc.disable()
        code = 3
        try:
            with pytest.MonkeyPatch.context() as patch:
                _Ops(patch, at, lambda what: os._exit(17))
                _publish(staged, attempt)
            code = 0
        finally:
            os._exit(code)
    hung = threading.Event()
    watchdog = threading.Timer(120, lambda: (hung.set(), os.kill(pid, signal.SIGKILL)))
    watchdog.start()
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        watchdog.cancel()
    if hung.is_set():
        raise AssertionError(f"the publishing child hung at operation {at}")
    return os.waitstatus_to_exitcode(status)


_KILL_HELPER = ("import sys; from tests.test_atomic_commit import _kill_each; "
                "sys.exit(_kill_each())")


def _killed_children(staged, attempts, tmp_path) -> list[int]:
    """`_killed_child` for each attempt at its own operation (the i-th at operation i), forked
    by one small helper process rather than by this one: a fork copies the forking process's
    page tables, ~45 ms a GB, and a test process late in the suite holds ~2 GB (TensorFlow
    and what earlier tests left), so ~80 forks cost it ~7 s; the helper (no TensorFlow, ~0.2
    GB) forks in ~7 ms. The helper first publishes one attempt whole, as `_count_ops` did
    here, so that its children find the publish's modules imported. The statuses, in order."""
    warm = _attempt(staged, tmp_path / "warm")
    payload = pickle.dumps((staged.inputs, (warm.out, warm.job),
                            [(attempt.out, attempt.job) for attempt in attempts]))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", _KILL_HELPER], input=payload, cwd=root,
                          capture_output=True, timeout=900)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return json.loads(done.stdout.decode().splitlines()[-1])


def _kill_each() -> int:
    """The helper of `_killed_children`: the cases pickled on stdin, the statuses as one JSON
    line on stdout."""
    inputs, (warm_out, warm_job), cases = pickle.loads(sys.stdin.buffer.read())
    staged = types.SimpleNamespace(inputs=inputs)
    _publish(staged, types.SimpleNamespace(out=warm_out, job=warm_job))
    codes = [_killed_child(staged, types.SimpleNamespace(out=out, job=job), at)
             for at, (out, job) in enumerate(cases)]
    print(json.dumps(codes), flush=True)
    return 0


def test_a_kill_at_each_step_of_the_publish(staged, tmp_path, monkeypatch):
    total = _count_ops(staged, tmp_path, monkeypatch)
    attempts = [_attempt(staged, tmp_path / f"k{at}") for at in range(total)]
    assert _killed_children(staged, attempts, tmp_path) == [17] * total
    outcomes = set()
    for at, attempt in enumerate(attempts):
        outcomes.add(_check_after_failure(staged, attempt.out))
        _next_run_publishes(staged, tmp_path / f"k{at}", attempt.out)
    assert outcomes == {False, True}


@pytest.mark.slow
def test_a_real_run_with_a_full_disk_at_the_manifest_then_the_next_run(staged, tmp_path,
                                                                        monkeypatch):
    """The issue's case through `preprocess.run`: the disk is full when the manifest is
    written; nothing is committed, the run's files are removed, and the next run publishes."""
    out = tmp_path / "out"
    shutil.copytree(staged.prev, out)
    real_open = open

    def full_at_manifest(path, mode="r", *args, **kwargs):
        if "manifest.json" in os.path.basename(path) and "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real_open(path, mode, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(beam_files, "open", full_at_manifest, raising=False)
        with pytest.raises(OSError, match="No space left"):
            run_job(staged.root, out, sets=SETS)
    assert [s.run_id for s in layout.committed_snapshots(str(out))] == [staged.previous]
    assert os.listdir(out / "snapshots") == [staged.previous]
    assert (out / "LATEST").read_text() == f"{staged.previous}\n"
    snapshot = run_job(staged.root, out, sets=SETS)
    assert snapshot.accounting["images"]["accepted"] == len(FOLDER_IMAGES)
    assert layout.read_latest(str(out)) == snapshot.run_id
    assert verify_output(str(out)).ok


# The committed rule and the helper, without the job.

def _snapshot(out, run_id, manifest_text, files=("train/a",)):
    folder = os.path.join(out, "snapshots", run_id)
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(folder, rel)), exist_ok=True)
        open(os.path.join(folder, rel), "w").close()
    with open(os.path.join(folder, "manifest.json"), "w") as handle:
        handle.write(manifest_text)
    return folder


@pytest.mark.parametrize("storage", [layout.GFILE, BEAM_FILES], ids=["gfile", "beam"])
def test_a_manifest_that_does_not_parse_or_list_its_files_does_not_commit(tmp_path, storage,
                                                                          caplog):
    out = str(tmp_path)
    listed = json.dumps({"files": [{"path": "train/a"}]})
    _snapshot(out, "r1", listed)
    broken = {"r2": ("", "manifest.json empty"),
              "r3": ("{\"files\": [", "manifest.json not JSON"),
              "r4": ("[1]", "manifest.json not a JSON object (a list)"),
              "r5": ("{}", "manifest.json lists no files"),
              "r6": (json.dumps({"files": [{"path": "train/b"}]}),
                     "manifest.json lists files that do not exist: train/b")}
    for run_id, (text, _) in broken.items():
        _snapshot(out, run_id, text)
    os.makedirs(os.path.join(out, "snapshots", "r7", "train"))  # still writing: not reported
    with open(os.path.join(out, "LATEST"), "w") as handle:
        handle.write("r2\n")
    with caplog.at_level(logging.WARNING):
        assert [s.run_id for s in layout.committed_snapshots(out, storage)] == ["r1"]
    warned = [record.getMessage() for record in caplog.records]
    assert len(warned) == len(broken)
    for run_id, (_, problem) in broken.items():
        (line,) = [w for w in warned if f"snapshots/{run_id} " in w]
        assert f"is not committed: {problem}" in line
    assert layout.read_latest(out, storage) is None
    assert layout.latest_snapshot(out, storage).run_id == "r1"
    assert [s.run_id for s in live_view.select_snapshots(out, "all", storage)] == ["r1"]


def test_write_atomically_leaves_the_old_file_or_the_new_one(tmp_path, monkeypatch):
    path = str(tmp_path / "LATEST")
    write_atomically(path, b"one\n")

    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", no_space)
        with pytest.raises(OSError, match="No space left"):
            write_atomically(path, b"two\n")
    assert open(path, "rb").read() == b"one\n"
    assert os.listdir(tmp_path) == ["LATEST"]
    write_atomically(path, b"two\n")
    assert open(path, "rb").read() == b"two\n"
