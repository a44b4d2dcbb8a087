"""What `pixelmill bench preprocess` runs in fresh processes: the job and a nightly rerun, each
timed from outside with the CPU and peak resident memory of its whole process tree; and the
corpus they read (generated once and cached, or any folder given with `--corpus`).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time

from runners.bench.bench_loops import own_cpu_seconds
from runners.errors import UsageError
from transforms import snapshot_layout as layout

__all__ = ["Corpus", "prepare_corpus", "folder_corpus", "corpus_profile", "tree_rss_bytes",
           "tree_pss_bytes",
           "JobRun", "time_job", "NightlyRun", "time_nightly", "workers_flags", "REPO_ROOT"]

_CORPUS_MARKER = "corpus.json"
_RESULT_PREFIX = "BENCH_JOB_RESULT "
_SAMPLE_INTERVAL_S = 0.1
# A process's PSS is read from its smaps_rollup, which walks all its mappings: ~24 ms of CPU a
# sample for a job's ~8 processes (TensorFlow's address space in each). Every 0.1 s that took
# ~17% of a core from the job being timed; RSS and CPU (cheap /proc reads) keep 0.1 s.
_PSS_INTERVAL_S = 0.5
# The checkout (this file is runners/bench/bench_processes.py): the benches' subprocesses run
# there with it first on their path, so `make test`'s command finds tests/ and a timed job
# imports the checkout's packages, nothing of `runners/` as a top-level module.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_JOB_CODE = ("import sys; from runners.bench.bench_processes import _job_child; "
             "sys.exit(_job_child(sys.argv[1:]))")
_NIGHTLY_CODE = "import sys; from runners.cli import console_main; console_main(sys.argv[1:])"
_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")


# ----------------------------------------------------------------------------------- corpus

@dataclasses.dataclass(frozen=True)
class Corpus:
    """Images to time: `root/<class>/<file>` and `labels_csv` (None: folder labels)."""
    root: str
    labels_csv: str | None
    items: tuple            # ((absolute path, class name), ...) in index order
    seed: int | None        # None for a user's folder
    classes_file: str | None = None  # the job's --classes, when given


def _read_items(root: str) -> tuple:
    with open(os.path.join(root, "labels.csv"), newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return tuple((os.path.join(root, *row["path"].split("/")), row["label"]) for row in rows)


def prepare_corpus(workdir: str, n_images: int, seed: int = 0) -> Corpus:
    """The generated photo-like corpus of `n_images` for `seed` under `workdir`, generated only
    when no complete one is cached there (the marker file is written last, so an interrupted
    generation is redone)."""
    from runners.demo.data import generate_corpus
    if isinstance(n_images, bool) or not isinstance(n_images, int) or n_images < 1:
        raise UsageError(f"--images must be an integer >= 1. Received: {n_images!r}")
    root = os.path.abspath(os.path.join(workdir, f"corpus_{n_images}_seed{seed}"))
    marker = os.path.join(root, _CORPUS_MARKER)
    expected = {"n_images": n_images, "seed": seed}
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as handle:
            if json.load(handle) == expected:
                items = _read_items(root)
                if len(items) == n_images and all(os.path.exists(p) for p, _ in items):
                    return Corpus(root, os.path.join(root, "labels.csv"), items, seed)
    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    print(f"Generating {n_images} images (seed {seed}) in {root} ...", flush=True)
    generate_corpus(root, n_images, seed=seed)
    print(f"  done in {time.perf_counter() - started:.1f} s", flush=True)
    with open(marker, "w", encoding="utf-8") as handle:
        json.dump(expected, handle)
    return Corpus(root, os.path.join(root, "labels.csv"), _read_items(root), seed)


def folder_corpus(root: str) -> Corpus:
    """Any folder of images (`--corpus DIR`): its class subfolders are the labels."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise UsageError(f"--corpus {root}: no such folder.")
    items = []
    for folder, _dirs, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.lower().endswith(_IMAGE_EXTENSIONS):
                label = os.path.relpath(folder, root).split(os.sep)[0]
                items.append((os.path.join(folder, name), label))
    if not items:
        raise UsageError(f"--corpus {root}: no image files ({', '.join(_IMAGE_EXTENSIONS)}).")
    return Corpus(root, None, tuple(items), None)


def _jpeg_quality(tables) -> float | None:
    """The IJG quality whose scaled standard luminance table best matches `tables[0]`."""
    standard = (16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55)
    if not tables or 0 not in tables:
        return None
    scale = 100.0 * sum(q / s for q, s in zip(tables[0], standard)) / len(standard)
    return 5000.0 / scale if scale > 100.0 else (200.0 - scale) / 2.0


def corpus_profile(corpus: Corpus) -> dict:
    """Formats, progressive JPEGs and the estimated JPEG quality range (from the headers)."""
    from PIL import Image
    counts = {"png": 0, "jpeg": 0, "progressive": 0, "other": 0}
    qualities = []
    for path, _ in corpus.items:
        try:
            with open(path, "rb") as handle, Image.open(io.BytesIO(handle.read())) as image:
                kind = {"PNG": "png", "JPEG": "jpeg"}.get(image.format, "other")
                counts[kind] += 1
                if kind == "jpeg":
                    counts["progressive"] += bool(image.info.get("progressive"))
                    quality = _jpeg_quality(getattr(image, "quantization", None))
                    if quality is not None:
                        qualities.append(quality)
        except (OSError, ValueError):
            counts["other"] += 1
    total = len(corpus.items)
    return {"images": total, "png_share": counts["png"] / total,
            "progressive_share": counts["progressive"] / max(1, counts["jpeg"]),
            "quality_range": (min(qualities), max(qualities)) if qualities else None,
            "other": counts["other"]}


# ------------------------------------------------------------------- process-tree memory

def _children_by_parent() -> dict:
    children: dict = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:  # the process ended between listdir and open
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        children.setdefault(int(fields[1]), []).append(int(name))
    return children


def _rss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):  # ended, or a zombie with an empty statm
        return 0


def _pss_of(pid: int) -> int:
    """Proportional set size: private pages plus each shared page divided by its sharers."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return _rss_of(pid)


def _tree(root_pid: int) -> list[int]:
    children = _children_by_parent()
    pids, stack = [], [root_pid]
    while stack:
        pid = stack.pop()
        pids.append(pid)
        stack.extend(children.get(pid, ()))
    return pids


def tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of `root_pid` and all its descendants, summed (Linux /proc). Pages that
    processes share (a forkserver's children share its TensorFlow) count once per process."""
    return sum(_rss_of(pid) for pid in _tree(root_pid))


def tree_pss_bytes(root_pid: int) -> int:
    """The memory the tree of `root_pid` really holds: its processes' proportional set sizes
    summed, so a page shared by several of them counts once."""
    return sum(_pss_of(pid) for pid in _tree(root_pid))


def _cpu_of(pid: int) -> float:
    """User + system seconds of `pid` itself (not of its children); 0.0 once it is gone."""
    from transforms.offline.isolation import process_cpu_seconds
    return process_cpu_seconds(pid) or 0.0


class _PeakSampler(threading.Thread):
    """Samples the tree's RSS sum and each process's CPU every `interval_s` (`wait4` misses
    processes nobody waits for: a forkserver's children), and its PSS sum every
    `pss_interval_s` (`_PSS_INTERVAL_S`), until stopped; keeps the sums' maxima."""

    def __init__(self, pid: int, interval_s: float = _SAMPLE_INTERVAL_S,
                 pss_interval_s: float = _PSS_INTERVAL_S):
        super().__init__(daemon=True)
        self._pid = pid
        self._interval_s = interval_s
        self._pss_interval_s = pss_interval_s
        self._finished = threading.Event()
        self.peak = self.peak_rss = 0
        self.cpu_by_pid: dict = {}

    def run(self):
        next_pss = 0.0
        while not self._finished.is_set():
            pids = _tree(self._pid)
            if time.monotonic() >= next_pss:
                self.peak = max(self.peak, sum(_pss_of(pid) for pid in pids))
                next_pss = time.monotonic() + self._pss_interval_s
            self.peak_rss = max(self.peak_rss, sum(_rss_of(pid) for pid in pids))
            for pid in pids:
                self.cpu_by_pid[pid] = max(self.cpu_by_pid.get(pid, 0.0), _cpu_of(pid))
            self._finished.wait(self._interval_s)

    def stop(self) -> tuple[int, int]:
        self._finished.set()
        self.join()
        return self.peak, self.peak_rss


@dataclasses.dataclass(frozen=True)
class _Finished:
    stdout: str
    exit_code: int
    wall_seconds: float
    cpu_seconds: float      # user + system of the whole tree (sampled per process; wait4's
                            # figure when larger)
    peak_tree_rss: int      # PSS sum (shared pages once)
    max_process_rss: int
    peak_rss_sum: int       # RSS sum (shared pages once per process)
    launcher_cpu_seconds: float = 0.0  # the job's own process (sampled; wait4's when larger)


def _run_measured(code: str, argv: list, log_path: str) -> _Finished:
    """Runs `python -c code argv` from the repository root and measures its process tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT, env.get("PYTHONPATH")]))
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    started = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen([sys.executable, "-c", code, *argv], cwd=REPO_ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=log, text=True)
        sampler = _PeakSampler(process.pid)
        sampler.start()
        stdout = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        peak, peak_rss = sampler.stop()
    sampled = sum(cpu for pid, cpu in sampler.cpu_by_pid.items() if pid != process.pid)
    cpu = usage.ru_utime + usage.ru_stime  # the job process and the children it waited for
    own = sampler.cpu_by_pid.get(process.pid, 0.0)
    return _Finished(stdout, process.returncode, time.perf_counter() - started,
                     max(cpu, own + sampled), peak, usage.ru_maxrss * 1024, peak_rss, own)


def _log_tail(log_path: str) -> str:
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        return handle.read()[-3000:]


# ------------------------------------------------------------------------------ the job

@dataclasses.dataclass(frozen=True)
class JobRun:
    """One timed run of the offline job in a fresh process tree."""
    images: int             # discovered
    accepted: int
    rejects: dict           # reason -> count
    seconds: float          # around `runners.jobs.preprocess.run()` inside the child
    wall_seconds: float     # the child process, interpreter start and imports included
    peak_tree_rss: int      # bytes, sampled: the tree's PSS sum (a shared page counts once)
    max_process_rss: int    # bytes, largest single process (wait4 ru_maxrss)
    exit_code: int = 0      # of the child; non-zero with a result = it crashed after finishing
    cpu_seconds: float = 0.0  # user + system of the whole tree (wait4), imports included
    shards: tuple = ()      # ((path, sha256), ...) of the shard files
    decode_processes: int = 0  # isolating processes per worker the job used
    peak_rss_sum: int = 0   # bytes, sampled: the tree's RSS sum (shared pages per process)
    launcher_cpu_seconds: float = 0.0  # the job's own process, imports included
    verdicts: dict = dataclasses.field(default_factory=dict)  # rejected path -> reason
    # The job's own process inside `run()`: no imports, no exit (None: not reported)
    launcher_run_cpu_seconds: float | None = None

    @property
    def rate(self) -> float:
        return self.images / self.seconds


def workers_flags(workers: str) -> list[str]:
    """Beam flags for `--workers`: "default" (none: the default local run), "in_memory", or a
    number of multi_processing workers."""
    if workers == "default":
        return []
    if workers == "in_memory":
        return ["--direct_running_mode=in_memory"]
    return ["--direct_running_mode=multi_processing", f"--direct_num_workers={int(workers)}"]


def _job_child(argv) -> int:
    """Runs in the child process: the job as a library user runs it, timed; one result line
    on stdout; then a normal interpreter exit (what target 7 checks)."""
    from runners.beam_runner import decode_processes
    from runners.jobs import preprocess
    started, cpu_started = time.perf_counter(), own_cpu_seconds()
    snapshot = preprocess.run(argv)
    seconds, run_cpu_seconds = time.perf_counter() - started, own_cpu_seconds() - cpu_started
    rejects: dict = {}
    verdicts: dict = {}
    with open(os.path.join(snapshot.path, layout.REJECTS), encoding="utf-8") as handle:
        for line in handle:
            entry = json.loads(line)
            if entry["kind"] == "image":
                rejects[entry["reason"]] = rejects.get(entry["reason"], 0) + 1
                verdicts[entry["path"]] = entry["reason"]
    images = snapshot.accounting["images"]
    shards = sorted((f["path"], f["sha256"]) for f in snapshot.manifest["files"]
                    if ".tfrecord" in f["path"])
    options = preprocess.parse_options(argv)[0]
    processes = decode_processes(options, snapshot.manifest["config"]["decode"]["processes"])
    print(_RESULT_PREFIX + json.dumps({
        "seconds": seconds, "run_cpu_seconds": run_cpu_seconds,
        "discovered": images["discovered"], "accepted": images["accepted"],
        "rejects": dict(sorted(rejects.items())), "shards": shards,
        "decode_processes": processes, "verdicts": verdicts}), flush=True)
    return 0


def _job_argv(corpus: Corpus, output_dir: str, workers: str, config, overrides) -> list:
    argv = ["--data_root", corpus.root, "--output_dir", output_dir, *workers_flags(workers)]
    if corpus.labels_csv:
        argv += ["--labels", corpus.labels_csv]
    if corpus.classes_file:
        argv += ["--classes", corpus.classes_file]
    if config:
        argv += ["--config", config]
    for item in overrides:
        argv += ["--set", item]
    return argv


def time_job(corpus: Corpus, output_dir: str, workers: str = "default",
             config: str | None = None, overrides=(), log_path: str | None = None,
             keep_output: bool = False) -> JobRun:
    """Runs the job on `corpus` in a fresh process (output under `output_dir`, removed after
    unless `keep_output`) and returns its timing and memory. Raises RuntimeError (with the
    log's tail) when it fails before its result."""
    shutil.rmtree(output_dir, ignore_errors=True)
    log_path = log_path or output_dir.rstrip("/") + ".log"
    done = _run_measured(_JOB_CODE, _job_argv(corpus, output_dir, workers, config, overrides),
                         log_path)
    if not keep_output:
        shutil.rmtree(output_dir, ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith(_RESULT_PREFIX)]
    if not lines:  # a crash after the result line is reported, not fatal: the job was timed
        raise RuntimeError(f"The job failed (exit code {done.exit_code}); log {log_path}:\n"
                           f"{_log_tail(log_path)}")
    result = json.loads(lines[-1][len(_RESULT_PREFIX):])
    return JobRun(images=result["discovered"], accepted=result["accepted"],
                  rejects=result["rejects"], seconds=result["seconds"],
                  wall_seconds=done.wall_seconds, peak_tree_rss=done.peak_tree_rss,
                  max_process_rss=done.max_process_rss, exit_code=done.exit_code,
                  cpu_seconds=done.cpu_seconds,
                  shards=tuple(tuple(s) for s in result["shards"]),
                  decode_processes=result["decode_processes"], peak_rss_sum=done.peak_rss_sum,
                  launcher_cpu_seconds=done.launcher_cpu_seconds,
                  verdicts=result.get("verdicts", {}),
                  launcher_run_cpu_seconds=result.get("run_cpu_seconds"))


@dataclasses.dataclass(frozen=True)
class NightlyRun:
    """`pixelmill nightly` on an output folder whose snapshot already holds every input."""
    wall_seconds: float     # the whole command: interpreter start, imports, run, exit
    cpu_seconds: float
    exit_code: int
    nothing_new: bool       # it said so (and published nothing)


def time_nightly(corpus: Corpus, workdir: str, workers: str = "default",
                 config: str | None = None, overrides=()) -> NightlyRun:
    """A full run on `corpus`, then the timed `pixelmill nightly` on the same inputs."""
    output_dir = os.path.join(workdir, "nightly_out")
    time_job(corpus, output_dir, workers, config, overrides,
             os.path.join(workdir, "nightly_first_run.log"), keep_output=True)
    log_path = os.path.join(workdir, "nightly.log")
    done = _run_measured(_NIGHTLY_CODE, ["nightly", *_job_argv(
        corpus, output_dir, workers, config, overrides)], log_path)
    shutil.rmtree(output_dir, ignore_errors=True)
    if done.exit_code not in (0, 3):
        raise RuntimeError(f"pixelmill nightly failed (exit code {done.exit_code}); log "
                           f"{log_path}:\n{_log_tail(log_path)}")
    return NightlyRun(done.wall_seconds, done.cpu_seconds, done.exit_code,
                      "nothing new" in done.stdout)
