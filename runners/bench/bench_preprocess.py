"""`pixelmill bench preprocess`: the offline job against the decode limit and a naive loop, and
every target of the throughput issue with PASS/MISS, in one run on the same cores.

    pixelmill bench preprocess                          # 2000 images, 3 repetitions
    pixelmill bench preprocess --corpus ~/photos        # any folder (class subfolders)
    pixelmill bench preprocess --images 500 --repetitions 2 --no-memory_check

Each repetition times, interleaved so that load from other processes hits all alike: (a) the
whole job in a fresh process as a library user calls it, (b) the decode limit (tf.data and
`tf.io.decode_image` on the job's cores), (c) the single-process tutorial loop. CPU ms per
image is user + system of the whole process tree, far less disturbed than wall time. The
corpora, every measurement and the flags are described in docs/benchmarks.md; the report ends
with every target, its measured value and PASS/MISS (`bench_report`).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import sys

from runners.bench.bench_loops import (
    job_scale_decode_ms,
    machine_state,
    own_cpu_seconds,
    time_decode_limit,
    time_inspect,
    time_naive_loop,
)
from runners.bench.bench_processes import (
    Corpus,
    JobRun,
    corpus_profile,
    folder_corpus,
    prepare_corpus,
    time_job,
    time_nightly,
    tree_rss_bytes,
)
from runners.bench.bench_report import (
    TARGETS,
    BenchResult,
    IdentityCheck,
    Measurement,
    MemoryCheck,
    ScaleCheck,
    format_report,
)
from runners.errors import UsageError

__all__ = ["Corpus", "JobRun", "Measurement", "MemoryCheck", "BenchResult", "TARGETS",
           "prepare_corpus", "time_job", "time_decode_limit", "time_naive_loop",
           "tree_rss_bytes", "format_report", "run", "main"]

_IDENTITY_FLAGS = ("2", ("decode.isolation=inline",))  # the other setup for target 8


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pixelmill bench preprocess",
        description="The offline job vs the decode limit and a naive loop, with every target.")
    parser.add_argument("--images", type=int, default=2000, help="corpus size (default 2000)")
    parser.add_argument("--corpus", default=None,
                        help="time this folder of images (class subfolders) instead")
    parser.add_argument("--repetitions", type=int, default=3,
                        help="timed passes of each contender, (big, small) job pairs of "
                             "each corpus's marginal CPU, and interleaved rounds of the "
                             "start-up check (default 3)")
    parser.add_argument("--workdir", default="bench_out",
                        help="corpus cache, job output and logs (default bench_out)")
    parser.add_argument("--workers", default="default",
                        help="job workers: default (no runner flags), in_memory, or a number "
                             "of multi_processing workers")
    parser.add_argument("--decode_threads", type=int, default=None,
                        help="threads of the decode limit (default: the cores the job uses)")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    parser.add_argument("--memory_check", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the job on --memory_images: memory growth, marginal "
                             "rate, fixed cost, shard identity, nightly")
    parser.add_argument("--memory_images", type=int, default=None,
                        help="small corpus of the memory check (default images / 10)")
    parser.add_argument("--inspect_images", type=int, default=300,
                        help="images for the inspection-step CPU (0: skip; default 300)")
    parser.add_argument("--scale_images", type=int, default=0,
                        help="also one job and one naive pass on this many images (0: skip)")
    parser.add_argument("--thumbnails", type=int, default=10000,
                        help="thumbnail corpus, 64-128 px (0: skip; default 10000)")
    parser.add_argument("--camera", type=int, default=50,
                        help="camera corpus, 4000x3000 JPEGs (0: skip; default 50)")
    parser.add_argument("--camera_launcher", type=int, default=1000,
                        help="target 3's camera launcher figure from this many camera photos "
                             "against a tenth as many, once per repetition (0: from --camera's "
                             "runs; default 1000: 200 vs 20 moved by ~1 ms between pairs, "
                             "1000 vs 100 by ~0.2 ms)")
    parser.add_argument("--classes", type=int, default=21841,
                        help="the photo corpus labelled over this many classes, with --classes, "
                             "once per repetition right after the photo job (0: skip; default "
                             "21841, ImageNet-21k's count)")
    parser.add_argument("--startup_images", type=int, default=20,
                        help="start-up check: the whole command on this many photos against "
                             "the bare imports (0: skip; default 20)")
    parser.add_argument("--floor_rounds", type=int, default=3,
                        help="fresh processes timing the bare imports (and TensorFlow's "
                             "import alone), for the floor of "
                             "the end-to-end targets (0: no floor; default 3)")
    parser.add_argument("--make_test", action="store_true",
                        help="also time `make test`'s pytest command (target 6), first, "
                             "before any corpus is made or timed")
    parser.add_argument("--baseline", default=None,
                        help="decisions.json of an earlier bench run: shards and verdicts must "
                             "be the same (target 7)")
    parser.add_argument("--config", default=None, help="job config YAML (default base.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.KEY=VALUE", help="job config override (repeatable)")
    return parser


def _check_args(args) -> None:
    if args.repetitions < 1:
        raise UsageError(f"--repetitions must be >= 1. Received: {args.repetitions}")
    if args.workers not in ("default", "in_memory") and not (
            args.workers.isdigit() and int(args.workers) >= 1):
        raise UsageError(f"--workers must be 'default', 'in_memory' or a number >= 1. "
                         f"Received: {args.workers!r}")
    if args.decode_threads is not None and args.decode_threads < 1:
        raise UsageError(f"--decode_threads must be >= 1. Received: {args.decode_threads}")
    if args.memory_images is not None and not 1 <= args.memory_images < args.images:
        raise UsageError(f"--memory_images must be in [1, --images). "
                         f"Received: {args.memory_images} with --images {args.images}")
    if args.baseline and not os.path.isfile(args.baseline):
        raise UsageError(f"--baseline {args.baseline}: no such file.")
    for flag in ("inspect_images", "scale_images", "thumbnails", "camera", "classes",
                 "startup_images", "floor_rounds"):
        if getattr(args, flag) < 0:
            raise UsageError(f"--{flag} must be >= 0. Received: {getattr(args, flag)}")
    if args.camera_launcher != 0 and args.camera_launcher < 10:
        raise UsageError(f"--camera_launcher must be 0 or >= 10 (its small run is a tenth). "
                         f"Received: {args.camera_launcher}")


def _corpora(args, workdir: str) -> tuple:
    """(corpus, small corpus or None, what the corpus is)."""
    if args.corpus:
        corpus = folder_corpus(args.corpus)
        small_count = args.memory_images or max(1, len(corpus.items) // 10)
        small = None
        if args.memory_check and small_count < len(corpus.items):
            small = Corpus(corpus.root, None, corpus.items[:small_count], None)
            small = _subset_folder(small, os.path.join(workdir, "corpus_subset"))
        return corpus, small, f"folder {corpus.root}"
    corpus = prepare_corpus(workdir, args.images, args.seed)
    small = None
    if args.memory_check:
        count = args.memory_images or max(1, args.images // 10)
        if count >= args.images:
            raise UsageError(f"--memory_check needs --images >= 2 (a smaller corpus to compare "
                             f"with). Received: --images {args.images}")
        small = prepare_corpus(workdir, count, args.seed)
    return corpus, small, f"generated photo-like corpus (seed {args.seed})"


def _subset_folder(subset: Corpus, folder: str) -> Corpus:
    """A folder of hard links (copies across file systems) to the subset's files, in their
    class subfolders: the job rejects symbolic links that leave its data root."""
    import shutil
    shutil.rmtree(folder, ignore_errors=True)
    items = []
    for path, label in subset.items:
        target = os.path.join(folder, os.path.relpath(path, subset.root))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
        items.append((target, label))
    return Corpus(folder, None, tuple(items), None)


def _cores_used(workers: str) -> int:
    from runners.beam_runner import local_cores
    return 1 if workers == "in_memory" else (local_cores() if workers == "default"
                                             else int(workers))


def _first(pair: tuple):
    return pair[0]


def _middle(items, run=lambda item: item):
    """The item whose JobRun (`run(item)`) took the median time (the upper one of two)."""
    return sorted(items, key=lambda item: run(item).seconds)[len(items) // 2]


def _many_classes(args, workdir: str, corpus: Corpus) -> Corpus | None:
    """The photos labelled over `--classes` classes, with their table (None: not asked)."""
    if not args.classes:
        return None
    from runners.bench import bench_corpora
    labels, table = bench_corpora.write_many_classes(
        [os.path.relpath(path, corpus.root).replace(os.sep, "/") for path, _ in corpus.items],
        os.path.join(workdir, f"classes_{args.classes}"), args.classes)
    return Corpus(corpus.root, labels, corpus.items, corpus.seed, classes_file=table)


def _repetitions(args, corpus: Corpus, workdir: str, threads: int, min_variance: float):
    """Per repetition: the job and, back to back with it (target 2's pair), the job over many
    classes, the first of the two alternating (the 4-class job first in odd repetitions: a
    fixed order would give one side the warmer caches every time); then the decode limit and
    the naive loop."""
    paths = [path for path, _ in corpus.items]
    many_classes = _many_classes(args, workdir, corpus)
    job_runs, class_runs, decode, naive, written = [], [], ([], []), ([], []), 0

    def class_run(repetition: int):
        return time_job(many_classes, os.path.join(workdir, "job_out_classes"), args.workers,
                        args.config, args.overrides,
                        os.path.join(workdir, f"job_classes_{repetition}.log"))

    for repetition in range(1, args.repetitions + 1):
        many_first = many_classes is not None and repetition % 2 == 0
        if many_first:
            class_runs.append(class_run(repetition))
        job = time_job(corpus, os.path.join(workdir, "job_out"), args.workers, args.config,
                       args.overrides, os.path.join(workdir, f"job_{repetition}.log"))
        job_runs.append(job)
        if many_classes is not None and not many_first:
            class_runs.append(class_run(repetition))
        cpu = own_cpu_seconds()
        decode[0].append(len(paths) / time_decode_limit(paths, threads))
        decode[1].append(1000.0 * (own_cpu_seconds() - cpu) / len(paths))
        cpu = own_cpu_seconds()
        seconds, written = time_naive_loop(corpus.items, os.path.join(workdir, "naive.tfrecord"),
                                           min_variance)
        naive[1].append(1000.0 * (own_cpu_seconds() - cpu) / len(paths))
        naive[0].append(len(paths) / seconds)
        print(f"repetition {repetition}/{args.repetitions}: job {job.rate:.1f}, "
              f"decode {decode[0][-1]:.1f}, naive {naive[0][-1]:.1f} images/s", flush=True)
    os.remove(os.path.join(workdir, "naive.tfrecord"))
    return job_runs, class_runs, decode, naive, written


def _small_runs(args, small: Corpus, workdir: str) -> list:
    """The job on the small corpus, once per repetition (the memory check, the marginal's
    pairs). Run first, while this process has not imported TensorFlow: PSS divides a shared
    page among every process that maps it, so a job timed after the bench's own TensorFlow
    import (the decode limit) reads ~170 MB lower (docs/benchmarks.md, twelfth round)."""
    return [time_job(small, os.path.join(workdir, "job_out_memory"), args.workers, args.config,
                     args.overrides, os.path.join(workdir, f"job_memory_{repetition}.log"))
            for repetition in range(1, args.repetitions + 1)]


def _small_corpus_checks(args, small: Corpus, small_runs: list, job_runs, workdir: str):
    """(MemoryCheck, IdentityCheck, NightlyRun) from the runs on the small corpus."""
    small_run = small_runs[0]
    # Peaks like with like: the small runs and the first big run are the ones timed before this
    # process imported TensorFlow (`_small_runs`).
    memory = MemoryCheck(
        small_images=small_run.images, large_images=job_runs[0].images,
        small_peak=max(s.peak_tree_rss for s in small_runs),
        large_peak=job_runs[0].peak_tree_rss,
        small_max_process=max(s.max_process_rss for s in small_runs),
        large_max_process=job_runs[0].max_process_rss,
        small_seconds=small_run.seconds, small_wall=small_run.wall_seconds,
        large_seconds=statistics.median(j.seconds for j in job_runs))
    workers, extra = _IDENTITY_FLAGS
    other = time_job(small, os.path.join(workdir, "job_out_identity"), workers, args.config,
                     [*args.overrides, *extra], os.path.join(workdir, "job_identity.log"))
    identity = IdentityCheck(
        other=f"multi_processing, {workers} workers, {', '.join(extra)}",
        shards=len(small_run.shards), identical=small_run.shards == other.shards)
    nightly = time_nightly(small, workdir, args.workers, args.config, args.overrides)
    return memory, identity, nightly


def _scale_check(args, workdir: str, min_variance: float) -> ScaleCheck | None:
    if not args.scale_images:
        return None
    corpus = prepare_corpus(workdir, args.scale_images, args.seed)
    job = time_job(corpus, os.path.join(workdir, "job_out_scale"), args.workers, args.config,
                   args.overrides, os.path.join(workdir, "job_scale.log"))
    seconds, _ = time_naive_loop(corpus.items, os.path.join(workdir, "naive_scale.tfrecord"),
                                 min_variance)
    os.remove(os.path.join(workdir, "naive_scale.tfrecord"))
    return ScaleCheck(images=job.images, job_rate=job.rate,
                      naive_rate=len(corpus.items) / seconds)


def _other_corpus(workdir: str, name: str, count: int, seed: int) -> Corpus:
    from runners.bench import bench_corpora
    generate = {"thumbnails": bench_corpora.generate_thumbnails,
                "camera": bench_corpora.generate_camera}[name]
    root = os.path.join(workdir, f"{name}_{count}_seed{seed}")
    if bench_corpora.cached_corpus(root, {"corpus": name, "images": count, "seed": seed},
                                   lambda folder: generate(folder, count, seed)):
        print(f"Generated {count} {name} in {root}", flush=True)
    from runners.bench.bench_processes import _read_items
    return Corpus(root, os.path.join(root, "labels.csv"), _read_items(root), seed)


def _corpus_cost(args, name: str, what: str, corpus: Corpus, small: Corpus | None,
                 workdir: str, threads: int, min_variance: float, analysis_size: int):
    from runners.bench.bench_costs import CorpusCost
    pairs = _job_pairs(args, workdir, name, corpus, small)
    run, small_run = _middle(pairs, _first)
    paths = [path for path, _ in corpus.items]
    cpu = own_cpu_seconds()
    decode_rate = len(paths) / time_decode_limit(paths, threads)
    decode_ms = 1000.0 * (own_cpu_seconds() - cpu) / len(paths)
    seconds, _ = time_naive_loop(corpus.items, os.path.join(workdir, "naive.tfrecord"),
                                 min_variance)
    os.remove(os.path.join(workdir, "naive.tfrecord"))
    print(f"{name}: job {run.rate:.1f}, decode {decode_rate:.1f}, naive "
          f"{len(paths) / seconds:.1f} images/s", flush=True)
    return CorpusCost(name, what, run, small_run, decode_rate, decode_ms, len(paths) / seconds,
                      job_scale_decode_ms(paths, analysis_size, threads),
                      tuple(pairs) if small is not None else ())


def _job_pairs(args, workdir: str, tag: str, big: Corpus, small: Corpus | None) -> list:
    """(big JobRun, small JobRun or None) per repetition (one without `small`), the two jobs
    in turn; outputs and logs under `workdir` named after `tag`."""
    def timed(corpus: Corpus, suffix: str):
        return time_job(corpus, os.path.join(workdir, f"job_out_{tag}{suffix}"), args.workers,
                        args.config, args.overrides,
                        os.path.join(workdir, f"job_{tag}{suffix}.log"))
    return [(timed(big, ""), None if small is None else timed(small, "_small"))
            for _ in range(args.repetitions if small is not None else 1)]


def _launcher_pairs(args, workdir: str, name: str, count: int) -> tuple:
    """(big JobRun, small JobRun) per repetition on `count` images of `name` and a tenth."""
    return tuple(_job_pairs(args, workdir, f"{name}_launcher",
                            _other_corpus(workdir, name, count, args.seed),
                            _other_corpus(workdir, name, count // 10, args.seed)))


def _costs(args, workdir: str, photos, class_pairs: tuple, threads: int, min_variance: float,
           analysis_size: int):
    """The issue-22 figures: `photos` (the photo corpus's CorpusCost), `class_pairs` (target
    2's (many-class JobRun, photo JobRun) pairs), the other corpora, start-up, identity
    against --baseline, and target 4's floor imports (the bare imports' CPU, TensorFlow's
    import alone; None without --floor_rounds); writes decisions.json."""
    from runners.bench import bench_costs
    costs = [photos]
    for name in ("thumbnails", "camera"):
        count = getattr(args, name)
        if count:
            small = (_other_corpus(workdir, name, max(1, count // 10), args.seed)
                     if args.memory_check and count > 1 else None)
            what = {"thumbnails": "64-128 px JPEGs", "camera": "4000x3000 JPEGs"}[name]
            cost = _corpus_cost(args, name, what, _other_corpus(workdir, name, count, args.seed),
                                small, workdir, threads, min_variance, analysis_size)
            if name == "camera" and small is not None and args.camera_launcher:
                cost = dataclasses.replace(cost, launcher_pairs=_launcher_pairs(
                    args, workdir, name, args.camera_launcher))
            costs.append(cost)
    if class_pairs and photos.job.images:
        costs.append(bench_costs.CorpusCost(
            "classes", f"the photos over {args.classes} classes (--classes)",
            _middle(class_pairs, _first)[0],
            None, photos.decode_rate, photos.decode_ms, photos.naive_rate, photos.job_decode_ms,
            class_pairs=class_pairs))
    startup = None
    if args.startup_images:
        startup = bench_costs.measure_startup(
            prepare_corpus(workdir, args.startup_images, args.seed), workdir,
            rounds=args.repetitions)
    floor_imports = ((bench_costs.measure_imports_cpu(workdir, args.floor_rounds),
                      bench_costs.measure_decoder_import_s(workdir, args.floor_rounds))
                     if args.floor_rounds else (None, None))
    current = {cost.name: bench_costs.decisions(cost.job) for cost in costs}
    baseline = (bench_costs.compare_decisions(current, bench_costs.load_baseline(args.baseline))
                if args.baseline else None)  # read before this run's file may replace it
    with open(os.path.join(workdir, "decisions.json"), "w", encoding="utf-8") as handle:
        json.dump(current, handle, indent=1, sort_keys=True)
    return costs, startup, baseline, floor_imports


def run(argv=None) -> BenchResult:
    """Parses the options, measures everything and returns the figures."""
    from configs.schema import ConfigError, load_config
    args = _parser().parse_args(argv)
    _check_args(args)
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    state_at_start = machine_state()
    from runners.bench import bench_costs
    tests = bench_costs.time_test_suite(workdir) if args.make_test else None  # first: its doc
    corpus, small, what = _corpora(args, workdir)
    threads = args.decode_threads or _cores_used(args.workers)
    min_variance = (config.quality.min_std or 0.0) ** 2
    small_runs = _small_runs(args, small, workdir) if small is not None else []
    job_runs, class_runs, decode, naive, written = _repetitions(args, corpus, workdir, threads,
                                                                min_variance)
    paths = [path for path, _ in corpus.items]
    inspect = time_inspect(paths, config, args.inspect_images) if args.inspect_images else None
    memory = identity = nightly = None
    if small is not None:
        memory, identity, nightly = _small_corpus_checks(args, small, small_runs, job_runs,
                                                         workdir)
    from runners.bench.bench_costs import CorpusCost, CostResult
    middle = _middle(job_runs)
    photos = CorpusCost("photos", what, middle, small_runs[0] if small_runs else None,
                        statistics.median(decode[0]), statistics.median(decode[1]),
                        statistics.median(naive[0]),
                        job_scale_decode_ms(paths, config.quality.analysis_size, threads),
                        tuple(zip(job_runs, small_runs)))
    costs, startup, baseline, floor_imports = _costs(
        args, workdir, photos, tuple(zip(class_runs, job_runs)), threads, min_variance,
        config.quality.analysis_size)
    workers_text = {"default": "default local run (no runner flags)",
                    "in_memory": "in_memory"}.get(args.workers,
                                                  f"{args.workers} (multi_processing)")
    return BenchResult(
        images=len(paths), workers=workers_text, decode_threads=threads,
        overrides=tuple(args.overrides),
        job=Measurement("job", "(a) pixelmill preprocess, end to end",
                        tuple(j.rate for j in job_runs),
                        tuple(1000.0 * j.cpu_seconds / j.images for j in job_runs)),
        decode=Measurement("decode", f"(b) tf.data read + tf.io.decode_image, {threads} "
                                     f"parallel", tuple(decode[0]), tuple(decode[1])),
        naive=Measurement("naive", "(c) 1 process: read, PIL, variance, Example, write",
                          tuple(naive[0]), tuple(naive[1])),
        job_runs=tuple(job_runs), naive_written=written, memory=memory,
        cores=_cores_used("default"), corpus=what, profile=corpus_profile(corpus),
        inspect=inspect, nightly=nightly, identity=identity,
        scale=_scale_check(args, workdir, min_variance),
        date=datetime.date.today().isoformat(), load=(state_at_start, machine_state()),
        costs=CostResult(tuple(costs), startup, tests, identity, baseline, floor_imports[0],
                         _cores_used(args.workers), floor_imports[1]))


def main(argv=None) -> int:
    """Command-line entry: measures and prints the report; 0 when it ran (PASS or MISS)."""
    result = run(argv)
    print()
    print(format_report(result))
    return 0


if __name__ == "__main__":
    from runners.cli import main as cli_main
    sys.exit(cli_main(["bench", "preprocess", *sys.argv[1:]]))
