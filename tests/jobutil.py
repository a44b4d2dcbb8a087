"""Helpers shared by the offline-job tests: run the job (fast by default), read back what it
wrote. Light to import (TensorFlow and pyarrow load when a reader helper runs): `conftest.py`
imports it, and so does pytest-xdist's controller process, which runs no test."""
from __future__ import annotations

import glob
import json
import os
import shutil

from runners.jobs import preprocess


def job_argv(data_root, output_dir, labels=(), classes=None, boxes=(), sets=(), extra=(),
             isolation: str = "inline", tft: bool = False,
             thumbnails: bool = False) -> list[str]:
    """The `pixelmill preprocess` flags for `run_job`."""
    argv = ["--data_root", str(data_root), "--output_dir", str(output_dir)]
    for path in labels:
        argv += ["--labels", str(path)]
    for path in boxes:
        argv += ["--boxes", str(path)]
    if classes:
        argv += ["--classes", str(classes)]
    for item in [f"decode.isolation={isolation}",
                 f"transform.enabled={'true' if tft else 'false'}",
                 *([] if thumbnails else ["report.thumbnails_per_reason=0"]), *sets]:
        argv += ["--set", item]
    return argv + list(extra)


def nightly_argv(root, labels, out, *extra) -> list[str]:
    """The flags of a small, fast night (or full run) whose images all go to train: inline
    decoding, no TFT, no thumbnails, no near-duplicate search (lifecycle and guard tests)."""
    argv = ["--data_root", str(root), "--labels", str(labels), "--output_dir", str(out)]
    for item in ("decode.isolation=inline", "transform.enabled=false",
                 "report.thumbnails_per_reason=0", "dedup.near_duplicates=false",
                 "split.train=1.0", "split.validation=0.0", "split.test=0.0"):
        argv += ["--set", item]
    return argv + list(extra)


def run_job(data_root, output_dir, labels=(), classes=None, boxes=(), sets=(), extra=(),
            isolation: str = "inline", tft: bool = False, thumbnails: bool = False):
    """Runs the offline job in this process and returns its committed Snapshot.

    Decoding is inline, the TFT analysis off and the report without thumbnails unless a test
    is about them (`isolation="subprocess"`, `tft=True`, `thumbnails=True`): on a 6-image job
    they are ~15 s of ~20 s (the decoder child imports TensorFlow; TFT traces and saves a
    graph), and the thumbnails' isolated child imports TensorFlow too (~7 s of a 10 s demo job
    with inline decoding). `sets` come after these, so a `--set` there wins."""
    return preprocess.run(job_argv(data_root, output_dir, labels, classes, boxes, sets, extra,
                                   isolation, tft, thumbnails))


def copy_output(source, destination) -> str:
    """A copy of a job's output folder (LATEST, classes.txt, snapshots/), file times kept, for
    a test that runs the job again on top of a shared run."""
    shutil.copytree(source, destination)
    return str(destination)


def index_rows(snapshot) -> dict:
    import pyarrow.parquet as pq
    table = pq.read_table(os.path.join(snapshot.path, "index.parquet"))
    return {row["path"]: row for row in table.to_pylist()}


def rejects(snapshot) -> list[dict]:
    with open(os.path.join(snapshot.path, "rejects.jsonl")) as handle:
        return [json.loads(line) for line in handle]


def shard_files(snapshot) -> list[str]:
    return sorted(glob.glob(os.path.join(snapshot.path, "*", "*.tfrecord-*")))


def read_records(snapshot, compression: str = "") -> list[dict]:
    """Every record of every shard, parsed with plain tf.data and the contract's spec."""
    import tensorflow as tf

    from transforms import codec
    records = []
    dataset = tf.data.TFRecordDataset(shard_files(snapshot), compression_type=compression)
    for serialized in dataset:
        parsed = tf.io.parse_single_example(serialized, codec.feature_spec(quality=True))
        records.append(parsed)
    return records
