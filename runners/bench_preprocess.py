"""`pixelmill bench preprocess`: images/s of the offline job against two baselines, in one run.

    pixelmill bench preprocess                         # 2000 images, 3 repetitions, 2 workers
    pixelmill bench preprocess --images 500 --repetitions 2 --no-memory_check
    pixelmill bench preprocess --set decode.isolation=inline --workers in_memory

It generates a seeded photo-like corpus once (`runners.demo_data.generate_corpus`: JPEGs of
320..1024 px per side, 5% PNGs, four class folders, labels.csv) and caches it in `--workdir`.
Then, on the same files and the same cores, each repetition times:

  (a) job     the whole offline job (`runners.preprocess.run`: discover, read, sha256, header,
              decode, quality, labels, dedup, split, shards, index, stats, report, publish) in a
              fresh Python process, with `--direct_running_mode=multi_processing
              --direct_num_workers=W` (or `in_memory`); the clock runs around `run()` only, so
              interpreter and import time are left out, Beam's worker start-up is not.
  (b) decode  the decode limit: tf.data reads every file and runs `tf.io.decode_image(channels=3,
              expand_animations=False)` with `num_parallel_calls=W` and a private thread pool of
              W threads (faster here than W Python threads calling the eager op, which serialize
              on op dispatch); nothing else is done with the pixels.
  (c) naive   the single-process tutorial loop: read the file, PIL decode `.convert("RGB")`,
              reject when the pixel variance is below `quality.min_std ** 2`, build a
              tf.train.Example with the original bytes, label and size, and write it with
              `tf.io.TFRecordWriter`.

The repetitions are interleaved (a, b, c, a, b, c, ...) so that load from other processes hits
all three alike. The table gives the median and the minimum images/s of each, and the ratios
job/decode and job/naive against the targets (>= 1.0x and >= 3x), computed from the medians
and from the minimums; tf.data's autotuner and a shared machine make single passes jump. It
also gives CPU milliseconds per image (user + system; for the job, of its whole process tree
including start-up), which other processes on the machine disturb far less than wall time.
A job process that prints its result and then crashes while exiting is timed and flagged in
its `job run` line; one that fails before its result stops the benchmark with its log's tail.

Memory: every job repetition runs in its own process tree, whose resident memory (the sum of
VmRSS over the job process and all its descendants: Beam workers, decode-isolation
subprocesses) is sampled every 0.1 s. `--memory_check` (on by default) adds one job run on a
corpus of `--memory_images` (default images / 10) and reports peak(images) / peak(memory_images)
against the target (< 1.3x for 10x the images). The largest single process (`ru_maxrss` from
`wait4`) is shown too; it catches spikes shorter than the sampling interval. The same two runs
give the job's marginal rate, (images - memory_images) / (time - time of the small run): its
images/s with the fixed cost (graph construction, worker start and stop, publish) taken out.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time

from runners.errors import UsageError

__all__ = ["Corpus", "JobRun", "Measurement", "MemoryCheck", "BenchResult", "prepare_corpus",
           "time_job", "time_decode_limit", "time_naive_loop", "tree_rss_bytes",
           "format_report", "run", "main", "JOB_VS_DECODE_TARGET", "JOB_VS_NAIVE_TARGET",
           "MEMORY_GROWTH_TARGET"]

JOB_VS_DECODE_TARGET = 1.0   # the job at least as fast as decoding alone
JOB_VS_NAIVE_TARGET = 3.0    # the job at least 3x the single-process tutorial loop
MEMORY_GROWTH_TARGET = 1.3   # peak RSS at 10x the images below 1.3x

_CORPUS_MARKER = "corpus.json"
_RESULT_PREFIX = "BENCH_JOB_RESULT "
_SAMPLE_INTERVAL_S = 0.1
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD_CODE = ("import sys; from runners.bench_preprocess import _job_child; "
               "sys.exit(_job_child(sys.argv[1:]))")


# ----------------------------------------------------------------------------------- corpus

@dataclasses.dataclass(frozen=True)
class Corpus:
    """A generated benchmark corpus: `root/<class>/img_NNNNN.{jpg,png}` + `root/labels.csv`."""
    root: str
    labels_csv: str
    items: tuple            # ((absolute path, class name), ...) in index order
    seed: int


def _read_items(root: str) -> tuple:
    with open(os.path.join(root, "labels.csv"), newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return tuple((os.path.join(root, *row["path"].split("/")), row["label"]) for row in rows)


def prepare_corpus(workdir: str, n_images: int, seed: int = 0) -> Corpus:
    """The corpus of `n_images` for `seed` under `workdir`, generated only when no complete one
    is cached there (the marker file `corpus.json` is written last, so a generation that was
    interrupted is redone)."""
    from runners.demo_data import generate_corpus
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


def tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of `root_pid` and all its descendants, summed (Linux /proc)."""
    children = _children_by_parent()
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += _rss_of(pid)
        stack.extend(children.get(pid, ()))
    return total


class _PeakSampler(threading.Thread):
    """Samples `tree_rss_bytes(pid)` until stopped and keeps the maximum."""

    def __init__(self, pid: int, interval_s: float = _SAMPLE_INTERVAL_S):
        super().__init__(daemon=True)
        self._pid = pid
        self._interval_s = interval_s
        self._finished = threading.Event()
        self.peak = 0

    def run(self):
        while not self._finished.is_set():
            self.peak = max(self.peak, tree_rss_bytes(self._pid))
            self._finished.wait(self._interval_s)

    def stop(self) -> int:
        self._finished.set()
        self.join()
        return self.peak


# ------------------------------------------------------------------------------------ (a)

@dataclasses.dataclass(frozen=True)
class JobRun:
    """One timed run of the offline job in a fresh process tree."""
    images: int             # discovered
    accepted: int
    rejects: dict           # reason -> count
    seconds: float          # around `runners.preprocess.run()` inside the child
    wall_seconds: float     # the child process, interpreter start and imports included
    peak_tree_rss: int      # bytes, sampled
    max_process_rss: int    # bytes, largest single process (wait4 ru_maxrss)
    exit_code: int = 0      # of the child; non-zero with a result = it crashed after finishing
    cpu_seconds: float = 0.0  # user + system of the whole tree (wait4), imports included

    @property
    def rate(self) -> float:
        return self.images / self.seconds


def _workers_flags(workers: str) -> list[str]:
    if workers == "in_memory":
        return ["--direct_running_mode=in_memory"]
    return ["--direct_running_mode=multi_processing", f"--direct_num_workers={int(workers)}"]


def _job_child(argv) -> int:
    """Runs in the child process: the job, timed; one result line on stdout."""
    from runners import preprocess
    started = time.perf_counter()
    snapshot = preprocess.run(argv)
    seconds = time.perf_counter() - started
    rejects: dict = {}
    with open(os.path.join(snapshot.path, "rejects.jsonl"), encoding="utf-8") as handle:
        for line in handle:
            entry = json.loads(line)
            if entry["kind"] == "image":
                rejects[entry["reason"]] = rejects.get(entry["reason"], 0) + 1
    images = snapshot.accounting["images"]
    print(_RESULT_PREFIX + json.dumps({
        "seconds": seconds, "discovered": images["discovered"], "accepted": images["accepted"],
        "rejects": dict(sorted(rejects.items()))}), flush=True)
    return 0


def time_job(corpus: Corpus, output_dir: str, workers: str = "2", config: str | None = None,
             overrides=(), log_path: str | None = None) -> JobRun:
    """Runs the job on `corpus` in a fresh process (output under `output_dir`, removed after)
    and returns its timing and memory. Raises RuntimeError (with the log's tail) on failure."""
    argv = ["--data_root", corpus.root, "--labels", corpus.labels_csv,
            "--output_dir", output_dir, *_workers_flags(workers)]
    if config:
        argv += ["--config", config]
    for item in overrides:
        argv += ["--set", item]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_REPO_ROOT, env.get("PYTHONPATH")]))
    shutil.rmtree(output_dir, ignore_errors=True)
    log_path = log_path or output_dir.rstrip("/") + ".log"
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    started = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen([sys.executable, "-c", _CHILD_CODE, *argv], cwd=_REPO_ROOT,
                                   env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        sampler = _PeakSampler(process.pid)
        sampler.start()
        stdout = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        peak = sampler.stop()
    wall = time.perf_counter() - started
    shutil.rmtree(output_dir, ignore_errors=True)
    lines = [line for line in stdout.splitlines() if line.startswith(_RESULT_PREFIX)]
    if not lines:  # a crash after the result line is reported, not fatal: the job was timed
        with open(log_path, encoding="utf-8", errors="replace") as handle:
            tail = handle.read()[-3000:]
        raise RuntimeError(f"The job failed (exit code {process.returncode}); log {log_path}:"
                           f"\n{tail}")
    result = json.loads(lines[-1][len(_RESULT_PREFIX):])
    return JobRun(images=result["discovered"], accepted=result["accepted"],
                  rejects=result["rejects"], seconds=result["seconds"], wall_seconds=wall,
                  peak_tree_rss=peak, max_process_rss=usage.ru_maxrss * 1024,
                  exit_code=process.returncode,
                  cpu_seconds=usage.ru_utime + usage.ru_stime)


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------------------------------ (b)

def time_decode_limit(paths, threads: int) -> float:
    """Seconds for tf.data to read and `tf.io.decode_image` every file, `threads` at a time."""
    import tensorflow as tf
    if threads < 1:
        raise ValueError(f"threads must be >= 1. Received: threads={threads}")

    def decode(path):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return tf.size(image)  # only a scalar leaves the pipeline

    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    dataset = (tf.data.Dataset.from_tensor_slices(list(paths))
               .map(decode, num_parallel_calls=threads, deterministic=False)
               .with_options(options))
    started = time.perf_counter()
    count = 0
    for _ in dataset:
        count += 1
    seconds = time.perf_counter() - started
    if count != len(paths):
        raise RuntimeError(f"decoded {count} of {len(paths)} files")
    return seconds


# ------------------------------------------------------------------------------------ (c)

def time_naive_loop(items, output_path: str, min_variance: float) -> tuple[float, int]:
    """The tutorial loop in this process: (seconds, records written)."""
    import numpy as np
    import tensorflow as tf
    from PIL import Image

    def int64(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    def bytes_(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    class_ids: dict = {}
    written = 0
    started = time.perf_counter()
    with tf.io.TFRecordWriter(output_path) as writer:
        for path, label in items:
            with open(path, "rb") as handle:
                data = handle.read()
            pixels = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            if pixels.var() < min_variance:
                continue
            example = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": bytes_(data),
                "image/height": int64(pixels.shape[0]),
                "image/width": int64(pixels.shape[1]),
                "image/class/label": int64(class_ids.setdefault(label, len(class_ids))),
                "image/class/text": bytes_(label.encode()),
            }))
            writer.write(example.SerializeToString())
            written += 1
    return time.perf_counter() - started, written


# --------------------------------------------------------------------------------- results

@dataclasses.dataclass(frozen=True)
class Measurement:
    """images/s of one contender over the repetitions, and CPU milliseconds per image (user +
    system of all its threads and processes: much less sensitive than wall time to what else
    runs on the machine)."""
    name: str
    description: str
    rates: tuple
    cpu_ms_per_image: tuple = ()

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def minimum(self) -> float:
        return min(self.rates)

    @property
    def cpu_ms(self) -> float | None:
        return statistics.median(self.cpu_ms_per_image) if self.cpu_ms_per_image else None


@dataclasses.dataclass(frozen=True)
class MemoryCheck:
    small_images: int
    large_images: int
    small_peak: int          # bytes, process-tree RSS
    large_peak: int          # bytes, the highest over the job repetitions
    small_max_process: int
    large_max_process: int
    small_seconds: float     # the small run's time in run()
    large_seconds: float     # the median time in run() of the job repetitions

    @property
    def growth(self) -> float:
        return self.large_peak / self.small_peak

    @property
    def marginal_rate(self) -> float | None:
        """images/s of the extra images, (large - small) / (time large - time small): the job's
        rate with its fixed cost (graph construction, worker start and stop, publish) taken
        out. None when the larger run was not slower (noise)."""
        extra = self.large_seconds - self.small_seconds
        return (self.large_images - self.small_images) / extra if extra > 0 else None

    @property
    def fixed_seconds(self) -> float | None:
        rate = self.marginal_rate
        return None if rate is None else self.small_seconds - self.small_images / rate


@dataclasses.dataclass(frozen=True)
class BenchResult:
    images: int
    workers: str
    decode_threads: int
    overrides: tuple
    job: Measurement
    decode: Measurement
    naive: Measurement
    job_runs: tuple          # JobRun per repetition
    naive_written: int
    memory: MemoryCheck | None


def _verdict(value: float, target: float, below: bool = False) -> str:
    passed = value < target if below else value >= target
    return "PASS" if passed else "MISS"


def _mb(value: int) -> str:
    return f"{value / 2**20:.0f} MB"


def format_report(result: BenchResult) -> str:
    """The table, the ratio lines against the targets, the job's outcomes and the memory line."""
    rows = [result.job, result.decode, result.naive]
    lines = [f"pixelmill bench preprocess: {result.images} images, "
             f"{len(result.job.rates)} repetitions, job workers: {result.workers}, "
             f"decode threads: {result.decode_threads}"
             + (f", overrides: {' '.join(result.overrides)}" if result.overrides else ""),
             "",
             f"{'':<10}{'images/s median':>16}{'images/s min':>14}{'CPU ms/image':>14}   what",
             f"{'':-<10}{'':->16}{'':->14}{'':->14}   {'':-<40}"]
    for row in rows:
        cpu = "-" if row.cpu_ms is None else f"{row.cpu_ms:.1f}"
        lines.append(f"{row.name:<10}{row.median:>16.1f}{row.minimum:>14.1f}{cpu:>14}   "
                     f"{row.description}")
    lines.append("")
    for other, target in ((result.decode, JOB_VS_DECODE_TARGET),
                          (result.naive, JOB_VS_NAIVE_TARGET)):
        by_median = result.job.median / other.median
        by_min = result.job.minimum / other.minimum
        lines.append(f"job / {other.name:<7} {by_median:6.2f}x median  {by_min:6.2f}x min   "
                     f"target >= {target:.1f}x  {_verdict(by_median, target)}")
    if result.job.cpu_ms and result.decode.cpu_ms and result.naive.cpu_ms:
        lines.append(f"CPU per image: job {result.job.cpu_ms / result.decode.cpu_ms:.1f}x the "
                     f"decode limit's, {result.job.cpu_ms / result.naive.cpu_ms:.2f}x the naive "
                     f"loop's (job: whole process tree, start-up included)")
    lines.append("")
    for index, job in enumerate(result.job_runs, 1):
        rejects = ", ".join(f"{k} {v}" for k, v in job.rejects.items()) or "none"
        lines.append(f"job run {index}: {job.images} discovered, {job.accepted} accepted, "
                     f"rejects: {rejects}; {job.seconds:.1f} s in run() "
                     f"({job.wall_seconds:.1f} s with process start), "
                     f"peak tree RSS {_mb(job.peak_tree_rss)}"
                     + (f"; the process then exited with code {job.exit_code}"
                        if job.exit_code else ""))
    lines.append(f"naive loop wrote {result.naive_written} records")
    memory = result.memory
    if memory is None:
        lines.append("memory: not checked (--no-memory_check)")
    else:
        lines.append(
            f"memory: peak tree RSS {_mb(memory.small_peak)} at {memory.small_images} images, "
            f"{_mb(memory.large_peak)} at {memory.large_images} "
            f"({memory.large_images / memory.small_images:.0f}x the images): "
            f"{memory.growth:.2f}x   target < {MEMORY_GROWTH_TARGET:.1f}x  "
            f"{_verdict(memory.growth, MEMORY_GROWTH_TARGET, below=True)}"
            f"   (largest process {_mb(memory.small_max_process)} -> "
            f"{_mb(memory.large_max_process)})")
        rate = memory.marginal_rate
        if rate is None:
            lines.append("job marginal rate: not measurable (the larger run was not slower)")
        else:
            lines.append(
                f"job marginal rate: {rate:.1f} images/s ({memory.small_images} vs "
                f"{memory.large_images} images, fixed cost {memory.fixed_seconds:.1f} s); "
                f"vs decode median {rate / result.decode.median:.2f}x, vs naive median "
                f"{rate / result.naive.median:.2f}x (steady state, not the targets)")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- entry

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pixelmill bench preprocess",
        description="images/s of the offline job vs the decode limit and a naive loop.")
    parser.add_argument("--images", type=int, default=2000, help="corpus size (default 2000)")
    parser.add_argument("--repetitions", type=int, default=3,
                        help="timed passes of each contender (default 3)")
    parser.add_argument("--workdir", default="bench_out",
                        help="corpus cache, job output and logs (default bench_out)")
    parser.add_argument("--workers", default="2",
                        help="job workers: a number (multi_processing) or in_memory (default 2)")
    parser.add_argument("--decode_threads", type=int, default=None,
                        help="threads of the decode limit (default: the job's workers, 1 for "
                             "in_memory)")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    parser.add_argument("--memory_check", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the job on --memory_images and compare peak RSS")
    parser.add_argument("--memory_images", type=int, default=None,
                        help="small corpus of the memory check (default images / 10)")
    parser.add_argument("--config", default=None, help="job config YAML (default base.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.KEY=VALUE", help="job config override (repeatable)")
    return parser


def _check_args(args) -> None:
    if args.repetitions < 1:
        raise UsageError(f"--repetitions must be >= 1. Received: {args.repetitions}")
    if args.workers != "in_memory" and not (args.workers.isdigit() and int(args.workers) >= 1):
        raise UsageError(f"--workers must be a number >= 1 or 'in_memory'. "
                         f"Received: {args.workers!r}")
    if args.decode_threads is not None and args.decode_threads < 1:
        raise UsageError(f"--decode_threads must be >= 1. Received: {args.decode_threads}")
    if args.memory_images is not None and not 1 <= args.memory_images < args.images:
        raise UsageError(f"--memory_images must be in [1, --images). "
                         f"Received: {args.memory_images} with --images {args.images}")


def run(argv=None) -> BenchResult:
    """Parses the options, measures (a), (b), (c) and memory, and returns the figures."""
    from configs.schema import ConfigError, load_config
    args = _parser().parse_args(argv)
    _check_args(args)
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    corpus = prepare_corpus(workdir, args.images, args.seed)
    memory_corpus = None
    if args.memory_check:
        small = args.memory_images or max(1, args.images // 10)
        if small >= args.images:
            raise UsageError(f"--memory_check needs --images >= 2 (a smaller corpus to compare "
                             f"with). Received: --images {args.images}")
        memory_corpus = prepare_corpus(workdir, small, args.seed)
    threads = args.decode_threads or (1 if args.workers == "in_memory" else int(args.workers))
    paths = [path for path, _ in corpus.items]
    min_variance = (config.quality.min_std or 0.0) ** 2
    job_runs, decode_rates, naive_rates, written = [], [], [], 0
    decode_cpu, naive_cpu = [], []
    for repetition in range(1, args.repetitions + 1):
        job = time_job(corpus, os.path.join(workdir, "job_out"), args.workers, args.config,
                       args.overrides, os.path.join(workdir, f"job_{repetition}.log"))
        job_runs.append(job)
        cpu = _own_cpu_seconds()
        decode_rates.append(len(paths) / time_decode_limit(paths, threads))
        decode_cpu.append(1000.0 * (_own_cpu_seconds() - cpu) / len(paths))
        cpu = _own_cpu_seconds()
        seconds, written = time_naive_loop(corpus.items, os.path.join(workdir, "naive.tfrecord"),
                                           min_variance)
        naive_cpu.append(1000.0 * (_own_cpu_seconds() - cpu) / len(paths))
        naive_rates.append(len(paths) / seconds)
        print(f"repetition {repetition}/{args.repetitions}: job {job.rate:.1f}, "
              f"decode {decode_rates[-1]:.1f}, naive {naive_rates[-1]:.1f} images/s", flush=True)
    os.remove(os.path.join(workdir, "naive.tfrecord"))
    memory = None
    if memory_corpus is not None:
        small_run = time_job(memory_corpus, os.path.join(workdir, "job_out_memory"), args.workers,
                             args.config, args.overrides,
                             os.path.join(workdir, "job_memory.log"))
        largest = max(job_runs, key=lambda j: j.peak_tree_rss)
        memory = MemoryCheck(
            small_images=len(memory_corpus.items), large_images=len(paths),
            small_peak=small_run.peak_tree_rss, large_peak=largest.peak_tree_rss,
            small_max_process=small_run.max_process_rss,
            large_max_process=max(j.max_process_rss for j in job_runs),
            small_seconds=small_run.seconds,
            large_seconds=statistics.median(j.seconds for j in job_runs))
    workers_text = ("in_memory" if args.workers == "in_memory"
                    else f"{args.workers} (multi_processing)")
    return BenchResult(
        images=len(paths), workers=workers_text, decode_threads=threads,
        overrides=tuple(args.overrides),
        job=Measurement("job", "(a) pixelmill preprocess, end to end",
                        tuple(j.rate for j in job_runs),
                        tuple(1000.0 * j.cpu_seconds / j.images for j in job_runs)),
        decode=Measurement("decode", f"(b) tf.data read + tf.io.decode_image, {threads} "
                                     f"parallel", tuple(decode_rates), tuple(decode_cpu)),
        naive=Measurement("naive", "(c) 1 process: read, PIL, variance, Example, write",
                          tuple(naive_rates), tuple(naive_cpu)),
        job_runs=tuple(job_runs), naive_written=written, memory=memory)


def main(argv=None) -> int:
    """Command-line entry: measures and prints the report; 0 when it ran (PASS or MISS)."""
    result = run(argv)
    print()
    print(format_report(result))
    return 0


if __name__ == "__main__":
    from runners.cli import main as cli_main
    sys.exit(cli_main(["bench", "preprocess", *sys.argv[1:]]))
