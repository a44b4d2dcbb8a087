"""Helpers shared by the offline-job tests: run the job, read back what it wrote."""
from __future__ import annotations

import glob
import json
import os

import pyarrow.parquet as pq
import tensorflow as tf

from runners import preprocess
from transforms import codec


def run_job(data_root, output_dir, labels=(), classes=None, boxes=(), sets=(), extra=()):
    argv = ["--data_root", str(data_root), "--output_dir", str(output_dir)]
    for path in labels:
        argv += ["--labels", str(path)]
    for path in boxes:
        argv += ["--boxes", str(path)]
    if classes:
        argv += ["--classes", str(classes)]
    for item in sets:
        argv += ["--set", item]
    return preprocess.run(argv + list(extra))


def index_rows(snapshot) -> dict:
    table = pq.read_table(os.path.join(snapshot.path, "index.parquet"))
    return {row["path"]: row for row in table.to_pylist()}


def rejects(snapshot) -> list[dict]:
    with open(os.path.join(snapshot.path, "rejects.jsonl")) as handle:
        return [json.loads(line) for line in handle]


def shard_files(snapshot) -> list[str]:
    return sorted(glob.glob(os.path.join(snapshot.path, "*", "*.tfrecord-*")))


def read_records(snapshot, compression: str = "") -> list[dict]:
    """Every record of every shard, parsed with plain tf.data and the contract's spec."""
    records = []
    dataset = tf.data.TFRecordDataset(shard_files(snapshot), compression_type=compression)
    for serialized in dataset:
        parsed = tf.io.parse_single_example(serialized, codec.feature_spec(quality=True))
        records.append(parsed)
    return records
