"""`pixelmill bench scale`: how the job's metadata path grows with the number of images.

    pixelmill bench scale                        # 100k and 1M images, the hot-cluster check
    pixelmill bench scale --sizes 10000,100000   # quicker
    pixelmill bench scale --with_10m             # adds 10M images (long: tens of minutes)

No image bytes: `runners.bench.scale_sim` makes a metadata-only corpus (synthetic paths, sizes,
sha256s and perceptual hashes with exact copies, near-duplicate clusters and hot clusters) and
runs the job's planning, class table, exact and near dedup, split, shard assignment,
accounting and rejects-ledger steps on it, each step alone in a fresh Python process on the
in-process runner (the FnApiRunner, one worker). Per step and size it prints wall time, CPU
time (user + system of that process, during the run only), peak resident memory (`ru_maxrss`
of the process, including the fixed cost of Python, Beam and imports; the in-process runner
keeps each stage's output and each shuffle of the step in memory, so this grows with the
images), elements and bytes shuffled (inputs of every GroupByKey / CoGroupByKey / Reshuffle;
combiner inputs are pre-combined on the worker and not counted) and hash comparisons of the
near-duplicate search, with the growth factor per image between sizes. A step's figures
include generating its input (the `generate` row is that alone); `whole path` sums the steps.

The hot-cluster check runs the near-duplicate step on `--hot_cluster` images as one cluster of
near-identical hashes (0-2 bits from one centre) and as random hashes: the difference is its cost.

From the largest size's per-image CPU and shuffle it prints a plan for `--plan_images` images
on Dataflow, with its assumptions (each is a flag). Each target is printed with PASS or MISS.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile

from runners.bench.bench_processes import REPO_ROOT
from runners.errors import UsageError
from transforms import snapshot_layout as layout

__all__ = ["StepResult", "measure_step", "format_table", "check_targets", "dataflow_plan",
           "run", "main", "JOB_STEPS"]

JOB_STEPS = ("plan", "classes", "dedup_exact", "dedup_near", "split", "shards", "accounting",
             "ledger")
NEAR_GROWTH_TARGET = 2.0        # near-dup comparisons per image, largest vs smallest size
HOT_CLUSTER_TARGET_S = 10.0     # wall time a 100k hot cluster may add
TIME_GROWTH_TARGET = 1.5        # whole path time per image, largest vs smallest size
PEAK_MEMORY_TARGET = 2 * 1024 ** 3
_RESULT_PREFIX = "BENCH_SCALE_RESULT "
_CHILD_CODE = ("import sys; from runners.bench.bench_scale import _child; "
               "sys.exit(_child(sys.argv[1]))")


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One step measured at one size."""
    step: str
    images: int
    wall_s: float
    cpu_s: float
    peak_rss: int
    shuffled: int
    shuffled_bytes: int
    comparisons: int
    label: str = ""

    def per_image(self, value: float) -> float:
        return value / self.images if self.images else 0.0


def _shuffle_stats(proto, result) -> tuple[int, int]:
    """Elements and estimated bytes into every GroupByKey that is not inside a combine."""
    from apache_beam.metrics import monitoring_infos as infos
    from apache_beam.portability import common_urns
    counts, sizes = {}, {}
    for info in result.monitoring_infos():
        pcoll = info.labels.get("PCOLLECTION")
        if info.urn == common_urns.monitoring_info_specs.ELEMENT_COUNT.spec.urn:
            counts[pcoll] = infos.extract_counter_value(info)
        elif info.urn == common_urns.monitoring_info_specs.SAMPLED_BYTE_SIZE.spec.urn:
            count, total, _low, _high = infos.extract_distribution(info)
            sizes[pcoll] = total / count if count else 0.0
    transforms = proto.components.transforms
    combines = (common_urns.composites.COMBINE_PER_KEY.urn,
                common_urns.composites.COMBINE_GLOBALLY.urn)
    inside, stack = set(), [t for t, v in transforms.items() if v.spec.urn in combines]
    while stack:
        for sub in transforms[stack.pop()].subtransforms:
            inside.add(sub)
            stack.append(sub)
    elements = size = 0
    for tid, transform in transforms.items():
        if transform.spec.urn == common_urns.primitives.GROUP_BY_KEY.urn and tid not in inside:
            for pcoll in transform.inputs.values():
                elements += counts.get(pcoll, 0)
                size += counts.get(pcoll, 0) * sizes.get(pcoll, 0.0)
    return elements, int(size)


def _cpu_seconds() -> float:
    import resource
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child(spec_json: str) -> int:
    """Runs one step in this (fresh) process and prints its figures as one JSON line."""
    import logging
    import resource
    import time

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from runners.beam_runner import runner_for
    from runners.bench.scale_sim import STEPS, ScaleCorpus
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    spec = json.loads(spec_json)
    options = PipelineOptions([])
    pipeline = beam.Pipeline(runner=runner_for(options), options=options)
    STEPS[spec["step"]](pipeline, ScaleCorpus(**spec["corpus"]), spec["workdir"])
    cpu, start = _cpu_seconds(), time.perf_counter()
    result = pipeline.run()
    result.wait_until_finish()
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    shuffled, shuffled_bytes = _shuffle_stats(pipeline.to_runner_api(), result)
    counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]}
    print(_RESULT_PREFIX + json.dumps({
        "wall_s": wall, "cpu_s": cpu, "shuffled": shuffled, "shuffled_bytes": shuffled_bytes,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "comparisons": counters.get("near_dup_comparisons", 0)}), flush=True)
    return 0


def measure_step(step: str, corpus: dict, workdir: str, label: str = "",
                 timeout_s: float = 3 * 3600) -> StepResult:
    """Runs `step` on the corpus (ScaleCorpus fields) in a fresh process; its figures."""
    os.makedirs(workdir, exist_ok=True)
    spec = json.dumps({"step": step, "corpus": corpus, "workdir": workdir})
    done = subprocess.run([sys.executable, "-c", _CHILD_CODE, spec], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout_s)
    for line in done.stdout.splitlines():
        if line.startswith(_RESULT_PREFIX):
            figures = json.loads(line[len(_RESULT_PREFIX):])
            return StepResult(step=step, images=corpus["images"], label=label, **figures)
    tail = (done.stdout + done.stderr)[-3000:]
    raise RuntimeError(f"bench scale: step {step!r} at {corpus['images']} images failed "
                       f"(exit {done.returncode}):\n{tail}")


def whole_path(results: list[StepResult], images: int) -> StepResult:
    """The job's steps at one size, summed (peak memory: the largest step's)."""
    steps = [r for r in results if r.images == images and r.step in JOB_STEPS and not r.label]
    return StepResult(
        step="whole path", images=images, wall_s=sum(r.wall_s for r in steps),
        cpu_s=sum(r.cpu_s for r in steps), peak_rss=max(r.peak_rss for r in steps),
        shuffled=sum(r.shuffled for r in steps),
        shuffled_bytes=sum(r.shuffled_bytes for r in steps),
        comparisons=sum(r.comparisons for r in steps))


def _growth(results: list[StepResult], step: str, value) -> str:
    rows = sorted((r for r in results if r.step == step and not r.label), key=lambda r: r.images)
    ratios = [f"{value(b) / value(a):.2f}x" if value(a) else "-" for a, b in zip(rows, rows[1:])]
    return " ".join(ratios) or "-"


def format_table(results: list[StepResult]) -> str:
    """Per step and size, then growth factors per image between consecutive sizes."""
    sizes = sorted({r.images for r in results if not r.label})
    rows = [r for r in results if not r.label] + [whole_path(results, n) for n in sizes]
    head = (f"{'step':<12} {'images':>11} {'wall s':>8} {'CPU s':>8} {'CPU us/img':>10} "
            f"{'peak MB':>8} {'shuffled/img':>12} {'shuf B/img':>10} {'compar/img':>10}")
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: (r.step == "whole path", r.step != "generate",
                                         _order(r.step), r.images)):
        lines.append(
            f"{r.step:<12} {r.images:>11,} {r.wall_s:>8.1f} {r.cpu_s:>8.1f} "
            f"{r.per_image(r.cpu_s) * 1e6:>10.1f} {r.peak_rss / 2 ** 20:>8.0f} "
            f"{r.per_image(r.shuffled):>12.2f} {r.per_image(r.shuffled_bytes):>10.0f} "
            f"{r.per_image(r.comparisons):>10.2f}")
    lines += ["", "growth per image between sizes " + " -> ".join(f"{n:,}" for n in sizes)
              + " (1.00x = linear)", f"{'step':<12} {'wall':>16} {'CPU':>16} {'compar':>16}"]
    everything = results + [whole_path(results, n) for n in sizes]
    for step in ["generate", *JOB_STEPS, "whole path"]:
        lines.append(f"{step:<12} "
                     f"{_growth(everything, step, lambda r: r.per_image(r.wall_s)):>16} "
                     f"{_growth(everything, step, lambda r: r.per_image(r.cpu_s)):>16} "
                     f"{_growth(everything, step, lambda r: r.per_image(r.comparisons)):>16}")
    return "\n".join(lines)


def _order(step: str) -> int:
    return JOB_STEPS.index(step) if step in JOB_STEPS else -1


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def check_targets(results: list[StepResult]) -> list[str]:
    """One line per target: the measured value, the target, PASS or MISS."""
    sizes = sorted({r.images for r in results if not r.label})
    small, large = sizes[0], sizes[-1]
    lines = []
    near = {r.images: r for r in results if r.step == "dedup_near" and not r.label}
    if small != large and small in near and large in near:
        ratio = near[large].per_image(near[large].comparisons) / max(
            near[small].per_image(near[small].comparisons), 1e-12)
        lines.append(f"{_verdict(ratio <= NEAR_GROWTH_TARGET)}  near-dup comparisons per image "
                     f"at {large:,} / at {small:,}: {ratio:.2f}x (target <= "
                     f"{NEAR_GROWTH_TARGET}x)")
    hot = {r.label: r for r in results if r.label}
    if {"hot", "random"} <= set(hot):
        added, added_cpu = (hot["hot"].wall_s - hot["random"].wall_s,
                            hot["hot"].cpu_s - hot["random"].cpu_s)
        lines.append(f"{_verdict(added <= HOT_CLUSTER_TARGET_S)}  a hot cluster of "
                     f"{hot['hot'].images:,} near-identical hashes adds {added:.1f} s wall "
                     f"({added_cpu:.1f} s CPU) to the near-dup step (target <= "
                     f"{HOT_CLUSTER_TARGET_S:.0f} s)")
    if small != large:
        a, b = whole_path(results, small), whole_path(results, large)
        for what, value in (("wall", lambda r: r.per_image(r.wall_s)),
                            ("CPU", lambda r: r.per_image(r.cpu_s))):
            ratio = value(b) / value(a)
            lines.append(f"{_verdict(ratio <= TIME_GROWTH_TARGET)}  whole path {what} time per "
                         f"image at {large:,} / at {small:,}: {ratio:.2f}x (target <= "
                         f"{TIME_GROWTH_TARGET}x)")
    peak = whole_path(results, large).peak_rss
    lines.append(f"{_verdict(peak <= PEAK_MEMORY_TARGET)}  peak memory at {large:,}: "
                 f"{peak / 2 ** 30:.2f} GB (largest step process; target <= "
                 f"{PEAK_MEMORY_TARGET / 2 ** 30:.0f} GB)")
    return lines


class _CountingStorage:
    """Local files for `reporting.history.read_history`, noting every file read and its size."""

    def __init__(self):
        self.read = []

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def read_text(self, path: str) -> str:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        self.read.append((os.path.basename(path), len(text.encode("utf-8"))))
        return text


def check_nightly(workdir: str, rows: int, snapshots: int, seed: int = 0) -> str:
    """What a nothing-new night reads of an archive of `rows` images in `snapshots` snapshots
    (besides tonight's listing and the index rows the job joins against), as a target line."""
    import time

    from runners.bench.scale_sim import ScaleCorpus, write_archive
    from transforms.reporting.history import read_history
    folders = write_archive(os.path.join(workdir, "archive"), ScaleCorpus(rows, seed=seed),
                            snapshots)
    storage, start = _CountingStorage(), time.perf_counter()
    _views, reported, _old = read_history(folders, storage)
    seconds = time.perf_counter() - start
    names = {name for name, _size in storage.read}
    sizes = [size for _name, size in storage.read]
    old_bytes = sum(os.path.getsize(os.path.join(f, name)) for f in folders
                    for name in (layout.REJECTS, layout.STATS))
    ok = names == {"summary.json"} and len(sizes) == snapshots and max(sizes) <= 2 ** 20
    return (f"{_verdict(ok)}  nightly no-op on an archive of {rows:,} rows in {snapshots} "
            f"snapshots reads {len(sizes)} files, all {'/'.join(sorted(names))} "
            f"({sum(sizes) / 1e6:.2f} MB, largest {max(sizes) / 1e3:.0f} KB, {len(reported):,} "
            f"reject fingerprints, {seconds:.2f} s); the ledgers and stats.json it used to read: "
            f"{old_bytes / 1e6:.1f} MB (target: one small summary per snapshot, no ledger, no "
            f"stats history)")


def dataflow_plan(results: list[StepResult], args) -> str:
    """A costed plan for `args.plan_images` images on Dataflow from the largest size's figures
    (every assumption printed with it)."""
    largest = max(r.images for r in results if not r.label)
    whole = whole_path(results, largest)
    n = args.plan_images
    meta_cpu_h = whole.per_image(whole.cpu_s) * args.dataflow_cpu_factor * n / 3600
    inspect_cpu_h = args.inspect_cpu_ms / 1000 * n / 3600
    vcpu_h = (meta_cpu_h + inspect_cpu_h) / args.utilization
    worker_h = vcpu_h / args.worker_vcpus
    workers = math.ceil(worker_h / args.window_hours)
    shuffle_gb = whole.per_image(whole.shuffled_bytes) * n / 1e9
    memory_gb_h = worker_h * args.worker_memory_gb
    cost = (vcpu_h * args.vcpu_hour_usd + memory_gb_h * args.gb_hour_usd
            + shuffle_gb * args.shuffle_gb_usd)
    per_step = sorted(((r.per_image(r.cpu_s) * 1e6, r.step) for r in results
                       if r.images == largest and r.step in JOB_STEPS and not r.label),
                      reverse=True)
    return "\n".join([
        f"Plan for {n:,} images on Dataflow (full run; figures from the {largest:,}-image "
        f"run above):",
        f"  metadata path   {whole.per_image(whole.cpu_s) * 1e6:8.1f} us CPU/image measured x "
        f"{args.dataflow_cpu_factor} -> {meta_cpu_h:10,.0f} vCPU-h   (largest steps: "
        + ", ".join(f"{step} {us:.0f} us" for us, step in per_step[:3]) + ")",
        f"  inspection      {args.inspect_cpu_ms * 1000:8.1f} us CPU/image assumed     "
        f"-> {inspect_cpu_h:10,.0f} vCPU-h   (read, sha256, decode, quality: `bench "
        f"preprocess` CPU ms/image; not simulated here)",
        f"  at {args.utilization:.0%} utilization: {vcpu_h:,.0f} vCPU-h = {worker_h:,.0f} "
        f"worker-hours of {args.worker_vcpus} vCPU / {args.worker_memory_gb} GB",
        f"  workers for a {args.window_hours:g} h window: {workers:,} (max_num_workers; "
        f"autoscaling starts lower)",
        f"  shuffle: {whole.per_image(whole.shuffled):.1f} elements, "
        f"{whole.per_image(whole.shuffled_bytes):,.0f} B per image -> {shuffle_gb:,.0f} GB "
        f"through Dataflow Shuffle",
        f"  cost: {vcpu_h:,.0f} vCPU-h x ${args.vcpu_hour_usd} + {memory_gb_h:,.0f} GB-h x "
        f"${args.gb_hour_usd} + {shuffle_gb:,.0f} GB x ${args.shuffle_gb_usd} = ${cost:,.0f} "
        f"per full run",
        "  assumptions: per-element CPU on a Dataflow vCPU as on this machine's in-process "
        "runner (the same SDK code encodes at the same fusion breaks) times the factor; one "
        "SDK process per vCPU; prices are list prices given by flags (check the region's); "
        "image bytes are read by workers from GCS and never shuffled; a nightly run re-reads "
        "the listing and the archive's index rows (plan and dedup joins, O(archive)) but "
        "inspects, shuffles and writes only what is new.",
    ])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pixelmill bench scale", description=(
        "Metadata-only simulation of the job's steps at growing sizes; prints per step time, "
        "CPU, memory, shuffle and comparisons, the targets and a Dataflow plan."))
    parser.add_argument("--sizes", default="100000,1000000",
                        help="comma-separated numbers of images (default 100000,1000000)")
    parser.add_argument("--with_10m", action="store_true", help="also run 10,000,000 images")
    parser.add_argument("--steps", default=",".join(("generate",) + JOB_STEPS),
                        help="comma-separated steps (default: all)")
    parser.add_argument("--hot_cluster", type=int, default=100_000,
                        help="images in the hot-cluster check (0: skip it)")
    parser.add_argument("--nightly_rows", type=int, default=1_000_000,
                        help="archive rows of the nightly no-op check (0: skip it)")
    parser.add_argument("--nightly_snapshots", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a temp one)")
    plan = parser.add_argument_group("Dataflow plan assumptions")
    plan.add_argument("--plan_images", type=int, default=100_000_000)
    plan.add_argument("--inspect_cpu_ms", type=float, default=12.6)
    plan.add_argument("--dataflow_cpu_factor", type=float, default=1.0)
    plan.add_argument("--utilization", type=float, default=0.7)
    plan.add_argument("--worker_vcpus", type=int, default=4)
    plan.add_argument("--worker_memory_gb", type=float, default=16.0)
    plan.add_argument("--window_hours", type=float, default=4.0)
    plan.add_argument("--vcpu_hour_usd", type=float, default=0.056)
    plan.add_argument("--gb_hour_usd", type=float, default=0.003557)
    plan.add_argument("--shuffle_gb_usd", type=float, default=0.011)
    return parser


def _parse(argv) -> argparse.Namespace:
    args = _parser().parse_args(argv)
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        raise UsageError(f"--sizes must be comma-separated integers. Received: "
                         f"--sizes={args.sizes!r}") from None
    if not sizes or sizes[0] < 1:
        raise UsageError(f"--sizes must name at least one positive size. Received: "
                         f"--sizes={args.sizes!r}")
    args.sizes = sizes + ([10_000_000] if args.with_10m and 10_000_000 not in sizes else [])
    from runners.bench.scale_sim import STEPS
    args.steps = [s for s in args.steps.split(",") if s]
    unknown = [s for s in args.steps if s not in STEPS]
    if unknown or not args.steps:
        raise UsageError(f"Unknown step(s) {unknown}. Expected some of {tuple(STEPS)}. "
                         f"Received: --steps={','.join(args.steps)!r}")
    for flag in ("hot_cluster", "nightly_rows"):
        if getattr(args, flag) < 0:
            raise UsageError(f"--{flag} must be >= 0. Received: --{flag}={getattr(args, flag)}")
    if args.nightly_snapshots < 1:
        raise UsageError(f"--nightly_snapshots must be >= 1. Received: --nightly_snapshots="
                         f"{args.nightly_snapshots}")
    return args


def run(argv=None) -> list[StepResult]:
    """Measures every step at every size (and the hot cluster); prints the report."""
    args = _parse(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="pixelmill_scale_")
    results = []
    for images in args.sizes:
        for step in args.steps:
            results.append(measure_step(step, {"images": images, "seed": args.seed},
                                        os.path.join(workdir, f"{step}-{images}")))
            print(f"  {step:<12} {images:>11,} images: {results[-1].wall_s:7.1f} s wall, "
                  f"{results[-1].cpu_s:7.1f} s CPU", file=sys.stderr, flush=True)
    if args.hot_cluster:
        for label, corpus in (("hot", {"hot_clusters": 1, "hot_share": 1.0, "near_share": 0.0}),
                              ("random", {"hot_clusters": 0})):
            corpus.update(images=args.hot_cluster, seed=args.seed, exact_share=0.0)
            results.append(measure_step("dedup_near", corpus,
                                        os.path.join(workdir, f"near-{label}"), label=label))
    print(format_table(results))
    print()
    targets = check_targets(results)
    if args.nightly_rows:
        targets.append(check_nightly(workdir, args.nightly_rows, args.nightly_snapshots,
                                     args.seed))
    print("\n".join(targets))
    print()
    print(dataflow_plan(results, args))
    return results


def main(argv=None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
