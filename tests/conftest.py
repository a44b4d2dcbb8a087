"""Suite-wide pytest settings and the fixtures several test modules share.

Fixtures: `demo` (the generated demo dataset, every bad-input kind once) and `demo_snapshot`
(the real job run on it, with the TFT analysis); `folder_images` (six photo-like JPEGs in class
folders, fresh for each test, which may change them) and `folder_snapshot` (the real job run
once on a read-only copy of them plus one image outside any class folder); `train_snapshot`
(32 images, all train, gzip shards); `script_job` (a user script that runs the whole job with
its defaults in a fresh interpreter, once, on the folder corpus plus one junk file). The
session-scoped ones are built once per test process and must not be modified.

Tiers: `slow_fixture` (tests/tiers.py) makes the fixtures above that run the job or an
interpreter, so the tests that use them are marked `slow`; `make test-quick` runs the others.

Scheduling: with `-n 2` (pytest-xdist), tests that use the same module- or session-scoped
fixture of this suite are sent to one worker (`tests/xdist_groups.py`), so a job that several
tests read runs once, not once per worker.

Test processes: TensorFlow's thread pools sized to each worker's share of the cores, oneDNN's
graph rewrites off (`test_onednn_default.py` reads with them on), and young cycles collected
after 20,000 allocations; each function below says why.

Exit: a process that ran a TensorFlow Transform analysis can crash in CPython's interpreter
teardown (protobuf's upb extension frees a repeated field after its module is gone; see
`runners.exit_safety`). The tests have all run and reported by then, so the run ends with
its `exit_now`, carrying pytest's own exit status. A pytest-xdist worker has sent its results
when it unconfigures, but execnet still has to let it go: it freezes what it holds and ends
with `exit_now(0)` at the start of its interpreter's exit (`pytest_unconfigure` says why).
"""
from __future__ import annotations

import atexit
import gc
import os
import pathlib
import subprocess
import sys
import types

import pytest

from tests.imageutil import write_photo
from tests.s3util import local_s3  # noqa: F401  (a fixture: the session's local S3 server)
from tests.tiers import (  # noqa: F401  (hooks)
    pytest_configure,
    pytest_fixture_setup,
    pytest_itemcollected,
    pytest_runtest_call,
    shared_fixture,
    slow_fixture,
)
from tests.xdist_groups import (  # noqa: F401  (hooks)
    pytest_collection_modifyitems,
    pytest_configure_node,
    pytest_xdist_make_scheduler,
    remove_groups_file,
)
from transforms.gc_policy import collector_paused

_EXIT_STATUS = {}


def share_cores_between_workers() -> None:
    """Under pytest-xdist, each worker's TensorFlow uses its share of the cores.

    TensorFlow sizes its op thread pools to every core, so with `-n 2` on 2 cores four pools
    compete for two cores and their idle threads spin: measured on the online tests, 9% more
    CPU for nothing. Set before TensorFlow is imported (this module loads first); the children
    a test starts inherit it; a value already in the environment wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        share = str(max(1, (os.cpu_count() or 1) // workers))
        for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
            os.environ.setdefault(name, share)


share_cores_between_workers()


def skip_onednn_graph_rewrites() -> None:
    """The suite's TensorFlow runs without oneDNN's graph rewrites (`TF_ENABLE_ONEDNN_OPTS=0`).

    On by default on x86 Linux, the rewrite pass looks up every node of a function among the
    registered kernels each time TensorFlow instantiates one, which every new tf.data pipeline
    does for each of its functions: `perf` put half of the C++ time of a reader's first batch
    there (an online settings case: 0.33 -> 0.15 s of iterator start) and the suite's CPU went
    down by ~7%. It picks CPU kernels, not what pixelmill computes;
    `test_onednn_default.py` reads the same batches with it on, as a user's process does, and
    the console test runs the demo with it on. Set before TensorFlow is imported; the children
    a test starts inherit it; a value already in the environment wins."""
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


skip_onednn_graph_rewrites()


def collect_cycles_less_often() -> None:
    """A test process collects young cycles after 20,000 net allocations instead of 700.

    A test process holds TensorFlow, Beam and TFT, and tracing a tf.data pipeline allocates
    objects by the million: `perf` put ~10% of the suite's CPU in the cyclic collector. The
    job's own processes keep their policy (`transforms.gc_policy`); what a test checks of it
    reads `gc.isenabled` and the freeze count, which this leaves alone."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(20000, middle, old)


collect_cycles_less_often()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """Collection imports TensorFlow, Beam and every test module: with the cyclic collector
    paused, as the job imports them (`transforms.gc_policy`), ~1 s less per test process. Not
    frozen: tests check that a job leaves nothing frozen."""
    with collector_paused():
        yield


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS["status"] = int(exitstatus)


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config):
    """The end of a test process: `exit_now` with pytest's status, no teardown (module
    docstring). A worker instead freezes every object it holds, so that the full collections
    pytest runs after this hook (its unraisable-exception check, at unconfigure and at
    cleanup) have nothing to walk, and registers `exit_now(0)` to run first at its
    interpreter's exit, once execnet has ended the session with the controller. A worker that
    had run half the suite spent 3-8 s in those collections and its teardown while the
    controller waited for it to end (docs/benchmarks.md, thirty-seventh round). What is lost:
    an exception in a `__del__` that only that last collection would have run goes
    unreported, as it already did in a process that ends with `exit_now`."""
    remove_groups_file()
    from runners.exit_safety import exit_now
    if hasattr(config, "workerinput"):
        gc.freeze()
        atexit.register(exit_now, 0)
        return
    if "status" in _EXIT_STATUS:
        exit_now(_EXIT_STATUS["status"])


def run_job(*args, **kwargs):
    """`tests.jobutil.run_job`, imported when a fixture runs a job: this module stays light for
    pytest-xdist's controller, which loads it but runs no test (importing Beam and TensorFlow
    there cost ~7.5 s of CPU while the workers were starting)."""
    from tests.jobutil import run_job as run
    return run(*args, **kwargs)


@pytest.fixture()
def private_forkserver(monkeypatch):
    """multiprocessing's forkserver, for one test, a fresh one of its own that preloads
    nothing: a test that reaps the forkserver (`stop_signals.end_children`, as a command's exit
    does) reaps that one, not the test process's, whose TensorFlow import (~3.5 s of CPU) the
    next test that decodes in children would otherwise pay again."""
    from multiprocessing import forkserver
    server = forkserver.ForkServer()
    server.set_forkserver_preload([])
    monkeypatch.setattr(forkserver, "_forkserver", server)
    for name in ("ensure_running", "get_inherited_fds", "connect_to_new_process",
                 "set_forkserver_preload"):
        monkeypatch.setattr(forkserver, name, getattr(server, name))
    yield server
    server._stop()


# ---------------------------------------------------------------- image corpora

FOLDER_IMAGES = {f"{'cat' if i % 2 else 'dog'}/{i}.jpg": 10 + i for i in range(6)}
"""The folder corpus: root-relative path -> seed (cat/1, cat/3, cat/5, dog/0, dog/2, dog/4)."""


def write_folder_images(root) -> str:
    """Six 96x128 photo-like JPEGs (quality 92) in `cat/` and `dog/` folders under `root`."""
    for rel, seed in FOLDER_IMAGES.items():
        write_photo(os.path.join(root, rel), seed, class_index=seed % 2)
    return str(root)


@pytest.fixture()
def folder_images(tmp_path):
    """A fresh folder corpus for one test (it may add or change files): its root path."""
    return pathlib.Path(write_folder_images(tmp_path / "images"))


@slow_fixture(scope="session")
def folder_snapshot(tmp_path_factory):
    """The job (inline decoding, no TFT, `output.num_shards=8`: every split that has records
    gets 8 shards, most of them empty) run once on the folder corpus plus `loose.jpg` at the
    root (no folder, so no label). Read-only: `.root`, `.out`, `.snapshot`. A test that runs
    the job again into it copies `.out` first (`jobutil.copy_output`)."""
    base = tmp_path_factory.mktemp("folder_snapshot")
    root = write_folder_images(base / "images")
    write_photo(os.path.join(root, "loose.jpg"), 40)
    out = base / "out"
    return types.SimpleNamespace(root=root, out=out, snapshot=run_job(
        root, out, sets=["output.num_shards=8"]))


TRAIN_IMAGES = 32


@slow_fixture(scope="session")
def train_snapshot(tmp_path_factory):
    """The job run once on 32 photo-like JPEGs (64x80, quality 90; cat/ for even numbers, dog/
    for odd), all in the train split, written as gzip shards sized by `output.target_shard_mb`
    to about 3.5 shards' worth of bytes. Read-only: `.root`, `.out`, `.snapshot`."""
    base = tmp_path_factory.mktemp("train_snapshot")
    root = base / "images"
    for index in range(TRAIN_IMAGES):
        write_photo(root / ("cat", "dog")[index % 2] / f"{index}.jpg", index, 64, 80,
                    class_index=index % 2, quality=90)
    total = sum(path.stat().st_size for path in root.rglob("*.jpg"))
    out = base / "out"
    snapshot = run_job(root, out, sets=[
        "output.compression=gzip", f"output.target_shard_mb={total / 3.5 / 2**20}",
        "split.train=1.0", "split.validation=0.0", "split.test=0.0"])
    return types.SimpleNamespace(root=str(root), out=str(out), snapshot=snapshot)


@shared_fixture(scope="session")
def demo(tmp_path_factory):
    """The demo dataset (runners.demo.data, seed 3, 5 good images per class)."""
    from runners.demo.data import generate_demo
    return generate_demo(str(tmp_path_factory.mktemp("demo")), seed=3, images_per_class=5)


@slow_fixture(scope="session")
def demo_snapshot(demo, tmp_path_factory):
    """The job run once on the demo with its labels, class table and boxes, with the TFT
    analysis and the report's thumbnails (inline decoding; `test_preprocess_job` compares it
    with an isolated run)."""
    return run_job(demo.root, tmp_path_factory.mktemp("demo_out"), labels=[demo.labels_csv],
                   classes=demo.classes_txt, boxes=[demo.boxes_csv], tft=True, thumbnails=True)


@slow_fixture(scope="session")
def script_job(tmp_path_factory):
    """A user script, run once in a fresh interpreter, that calls the whole job as a library
    with its defaults (decoding in isolating child processes, the TFT analysis on, thumbnails
    in the report) on the folder corpus plus `junk/a.jpg` (not an image: one reject), prints
    the accounting of its images as one JSON line and then simply ends: no
    `if __name__ == "__main__":` guard and no hard exit. `test_exit_safety` checks its exit
    code, `test_preprocess_modes` that the unguarded script was not re-run inside the decoding
    processes, `test_hardening_runs` compares its snapshot with runs in the test process.
    Read-only: `.returncode`, `.stdout`, `.stderr` of the finished process, `.root` (the
    images) and `.snapshot_dir` (None when the script published nothing)."""
    base = tmp_path_factory.mktemp("script_job")
    root = write_folder_images(base / "images")
    (base / "images" / "junk").mkdir()
    (base / "images" / "junk" / "a.jpg").write_bytes(b"junk")
    script = base / "nightly_job.py"
    out = base / "out"
    script.write_text(
        "import json, sys\n"
        "from runners.jobs import preprocess\n"
        f"snap = preprocess.run(['--data_root', {root!r}, '--output_dir', {str(out)!r}])\n"
        "print(json.dumps(snap.accounting['images']))\n"
        "sys.stdout.flush()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600, cwd=str(base))
    latest = out / "LATEST"
    return types.SimpleNamespace(
        returncode=done.returncode, stdout=done.stdout, stderr=done.stderr, root=root,
        snapshot_dir=out / "snapshots" / latest.read_text().strip() if latest.exists() else None)
