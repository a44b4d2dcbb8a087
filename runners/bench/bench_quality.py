"""`pixelmill bench quality`: are the quality rules and dedup right? A labelled evaluation.

    pixelmill bench quality                             # 24 photo-like corpus images
    pixelmill bench quality --images ~/photos --photos 18
    pixelmill bench quality --images ~/photos --compare cleanvision
    pixelmill bench quality --set quality.blur_fine_min=0.1 --workdir /tmp/eval

From a folder of good photos (`--images`; by default the benchmark's photo-like corpus,
`runners.demo.data.generate_corpus`) it builds a labelled set (`runners.bench.quality_eval`): every
photo, fitted to `--size` px (default 512, so that a blur sigma means the same for every photo;
0 keeps the stored size), and `len(VARIANTS)` variants of it, each with the outcome it should
get: mild blur, brightness x0.5, noise, resize down and up, rotation by 90 and grayscale
(no quality rule may fire), blur sigma 3 and 6 (`blurry`), brightness x0.08 (`too_dark`),
85% toward white (`too_bright`), a flat fill (`low_information`), a byte copy (`duplicate`),
a JPEG q30 recompression and a 92% centre crop (`near_duplicate`).

It then runs the offline job itself (`runners.jobs.preprocess.run`, in this process, with
`decode.isolation=inline`, `transform.enabled=false` and `dedup.crop_tolerant=true`; `--set`
overrides them) and prints per rule true/false positives and negatives, precision and
recall, a table per variant, every wrong reason, and PASS/MISS per target (`TARGETS`).
`--compare cleanvision` (when that package is importable) scores cleanvision's `Imagelab` on
the same files the same way. Exit code 0 whether targets pass or not (it measures); 2 for bad
flags.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from runners.bench import quality_eval
from runners.errors import UsageError
from transforms import snapshot_layout as layout

__all__ = ["run", "main", "job_outcomes", "cleanvision_outcomes", "JOB_SETTINGS"]

# What the evaluation sets on the job before the user's --set: the fast path (the decode
# isolation and the TFT analysis do not change a verdict) and the crop-tolerant near-duplicate
# option, whose target the crops are (it only adds near-duplicate pairs: the quality targets
# read the same without it).
JOB_SETTINGS = ("decode.isolation=inline", "transform.enabled=false", "dedup.crop_tolerant=true")
_DEFAULT_PHOTOS = 24
_CORPUS_SEED = 12


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pixelmill bench quality", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", default=None,
                        help="Folder of good photos (searched recursively). Default: the "
                             "benchmark's photo-like corpus, generated.")
    parser.add_argument("--photos", type=int, default=None,
                        help=f"Use the first N photos in path order (default: all of "
                             f"--images, {_DEFAULT_PHOTOS} of the corpus).")
    parser.add_argument("--size", type=int, default=quality_eval.DEFAULT_SIZE,
                        help="Fit each photo to this long side first (only shrinks); 0 keeps "
                             "the stored size.")
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        metavar="SECTION.KEY=VALUE", help="Override one job config value.")
    parser.add_argument("--config", default=None, help="YAML config for the job.")
    parser.add_argument("--compare", choices=("cleanvision",), default=None,
                        help="Also score cleanvision on the same files (needs the package).")
    parser.add_argument("--workdir", default=None,
                        help="Where the labelled set and the job's output go, kept (default: "
                             "a temporary folder, removed afterwards).")
    parser.add_argument("--keep", action="store_true",
                        help="Keep the temporary folder (its path is printed).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the noise variants.")
    return parser


def job_outcomes(set_dir: str, output_dir: str, sets=(), config: str | None = None) -> dict:
    """Runs the offline job on the labelled set; {path: (outcome, detail)}, outcome "accepted"
    or the reject reason."""
    from runners.jobs import preprocess
    argv = ["--data_root", set_dir, "--output_dir", output_dir]
    if config:
        argv += ["--config", config]
    for item in (*JOB_SETTINGS, *sets):
        argv += ["--set", item]
    snapshot = preprocess.run(argv)
    outcomes = {}
    with open(os.path.join(snapshot.path, layout.REJECTS), encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row.get("kind", "image") == "image":
                outcomes[row["path"]] = (row["reason"], row["detail"])
    return outcomes


def cleanvision_outcomes(set_dir: str) -> dict:
    """cleanvision's verdicts on the labelled set, mapped to pixelmill's reasons: {path:
    (outcomes, detail)} with a set of outcomes (cleanvision flags issues independently). Of
    each exact or near duplicate set, the lowest path is not flagged (it is the one kept)."""
    try:
        from cleanvision import Imagelab
    except ImportError as exc:
        raise UsageError("--compare cleanvision needs the cleanvision package "
                         f"(pip install cleanvision). Import failed: {exc}") from exc
    lab = Imagelab(data_path=set_dir)
    lab.find_issues()
    issues = lab.issues
    flags = {}
    for path, row in issues.iterrows():
        rel = os.path.relpath(str(path), set_dir).replace(os.sep, "/")
        flags[rel] = {reason for issue, reason in quality_eval.CLEANVISION_ISSUES.items()
                      if issue not in ("exact_duplicates", "near_duplicates")
                      and bool(row.get(f"is_{issue}_issue", False))}
    details = {rel: "" for rel in flags}
    for issue in ("exact_duplicates", "near_duplicates"):
        for members in lab.info.get(issue, {}).get("sets", []):
            ordered = sorted(os.path.relpath(str(p), set_dir).replace(os.sep, "/")
                             for p in members)
            for rel in ordered[1:]:
                flags[rel].add(quality_eval.CLEANVISION_ISSUES[issue])
                details[rel] = f"{issue} of {ordered[0]!r}"
    return {rel: (frozenset(found) or frozenset({"accepted"}), details[rel])
            for rel, found in flags.items()}


def _check_args(args) -> None:
    if args.images is not None and not os.path.isdir(args.images):
        raise UsageError(f"--images must be a folder of photos. Received: {args.images!r}")
    if args.photos is not None and args.photos < 1:
        raise UsageError(f"--photos must be >= 1. Received: {args.photos}")
    if args.size != 0 and args.size < 64:
        raise UsageError(f"--size must be 0 (keep) or >= 64 px. Received: {args.size}")


def _photos(args, workdir: str) -> tuple[list, str]:
    """The source photos and a description of where they came from."""
    if args.images is None:
        count = args.photos or _DEFAULT_PHOTOS
        corpus = os.path.join(workdir, "corpus")
        from runners.demo.data import generate_corpus
        paths = generate_corpus(corpus, count, seed=_CORPUS_SEED)
        return sorted(paths), f"{count} photo-like corpus images (seed {_CORPUS_SEED})"
    paths = quality_eval.find_photos(args.images)
    if args.photos:
        paths = paths[:args.photos]
    if not paths:
        raise UsageError(f"--images {args.images!r} holds no readable image.")
    return paths, f"{len(paths)} photos from {args.images}"


def run(argv=None) -> quality_eval.Evaluation:
    """Builds the set, runs the job (and cleanvision), prints the report; returns the job's
    evaluation."""
    args = _parser().parse_args(argv)
    _check_args(args)
    workdir = args.workdir or tempfile.mkdtemp(prefix="pixelmill_bench_quality_")
    try:
        photos, source = _photos(args, workdir)
        set_dir = os.path.join(workdir, "set")
        shutil.rmtree(set_dir, ignore_errors=True)
        items = quality_eval.build_set(photos, set_dir, args.size, args.seed)
        fitted = f"fitted to {args.size} px" if args.size else "stored size"
        print(f"pixelmill bench quality: {source}, {fitted}; each with "
              f"{len(quality_eval.VARIANTS)} variants: {len(items)} images")
        print(f"set: {set_dir}\njob settings: {', '.join((*JOB_SETTINGS, *args.sets))}"
              f"{' --config ' + args.config if args.config else ''}\n")
        output_dir = os.path.join(workdir, "output")
        shutil.rmtree(output_dir, ignore_errors=True)
        outcomes = job_outcomes(set_dir, output_dir, args.sets, args.config)
        evaluation = quality_eval.evaluate(items, {
            path: (frozenset({outcome}), detail) for path, (outcome, detail) in outcomes.items()})
        print(quality_eval.format_report("pixelmill", evaluation))
        if args.compare == "cleanvision":
            other = quality_eval.evaluate(items, cleanvision_outcomes(set_dir))
            print(quality_eval.format_report("cleanvision", other))
        return evaluation
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv=None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    from runners.cli import console_main
    console_main(["bench", "quality", *sys.argv[1:]])
