"""DALI reads the shards: an index per uncompressed shard in `tfrecord2idx`'s exact format, and
every record with every key of the contract (DALI batches raw features, so a record without the
box keys next to one with them fails: "Samples must have the same dimensionality").

DALI itself is too large to install for the suite; the index is checked against the shard bytes,
and the records against the one structure DALI's reader would be given.
"""
from __future__ import annotations

import json
import os
import re

import pytest
import tensorflow as tf

from tests.jobutil import shard_files
from transforms import codec
from transforms.offline import dali_index, tfrecord_framing
from transforms.snapshot_layout import dali_index_name


def _expected_index(record_lengths) -> str:
    """tfrecord2idx's rule, by arithmetic: a framed record is its payload plus 16 bytes
    (8-byte length, two 4-byte CRCs), so offset_i = sum(len_j + 16 for j < i), size_i =
    len_i + 16."""
    lines, offset = [], 0
    for length in record_lengths:
        lines.append(f"{offset} {length + 16}\n")
        offset += length + 16
    return "".join(lines)


def _index_path(snapshot, shard: str) -> str:
    return os.path.join(snapshot.path, dali_index_name(os.path.relpath(shard, snapshot.path)))


def test_every_shard_has_an_index_in_tfrecord2idx_format(demo_snapshot):
    manifest = json.load(open(os.path.join(demo_snapshot.path, "manifest.json")))
    listed = {entry["path"] for entry in manifest["files"]}
    shards = shard_files(demo_snapshot)
    assert len(shards) == 3
    for shard in shards:
        data = open(shard, "rb").read()
        index_path = _index_path(demo_snapshot, shard)
        assert os.path.relpath(index_path, demo_snapshot.path) in listed
        text = open(index_path, "rb").read().decode("ascii")
        assert re.fullmatch(r"(\d+ \d+\n)*", text)
        records = list(tf.data.TFRecordDataset(shard).as_numpy_iterator())  # TF's own reader
        assert text == _expected_index(len(r) for r in records)
        assert sum(len(r) + 16 for r in records) == len(data)
        lines = text.splitlines()
        assert len(lines) == len(records) > 0
        for line, record in zip(lines, records):
            offset, size = map(int, line.split())
            # DALI seeks to `offset` and reads `size` bytes: exactly one framed record.
            assert data[offset + 12:offset + size - 4] == record


def test_a_tiny_tf_written_shard_frames_as_the_hand_computed_index(tmp_path):
    """Payloads of 5, 1 and 12 bytes written by TensorFlow's own writer sit at 0, 21 and 38
    (5 + 16 = 21, 21 + 1 + 16 = 38) in a 66-byte file; the index says exactly that, and so
    does the shard writer's framing of the same payloads."""
    payloads = [b"abcde", b"x", b"0123456789ab"]
    path = str(tmp_path / "tiny.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for payload in payloads:
            writer.write(payload)
    data = open(path, "rb").read()
    assert len(data) == 66
    builder = dali_index.IndexBuilder()
    for payload in payloads:
        builder.add(len(tfrecord_framing.frame_record(payload)))
    assert builder.text() == b"0 21\n21 17\n38 28\n"
    assert b"".join(tfrecord_framing.frame_record(p) for p in payloads) == data
    for offset, payload in ((0, b"abcde"), (21, b"x"), (38, b"0123456789ab")):
        assert int.from_bytes(data[offset:offset + 8], "little") == len(payload)
        assert data[offset + 12:offset + 12 + len(payload)] == payload


def test_index_builder_lines():
    builder = dali_index.IndexBuilder()
    for size in (30, 16, 1000):
        builder.add(size)
    assert builder.text() == b"0 30\n30 16\n46 1000\n"
    assert dali_index_name("train/images-train.tfrecord-00000-of-00002") == (
        "train/dali_index/images-train.tfrecord-00000-of-00002.idx")
    with pytest.raises(ValueError, match="size > 0"):
        dali_index.index_line(0, 0)


def test_every_record_carries_every_key(demo_snapshot):
    """One key set (with type) for all records, boxes or not; box lists are empty when the image
    has no boxes; meta columns are on every record (empty string when its row had none)."""
    structures, box_counts = set(), set()
    for serialized in tf.data.TFRecordDataset(shard_files(demo_snapshot)).as_numpy_iterator():
        features = tf.train.Example.FromString(serialized).features.feature
        structures.add(tuple(sorted((key, feature.WhichOneof("kind"))
                                    for key, feature in features.items())))
        lengths = {len(getattr(features[key], features[key].WhichOneof("kind")).value)
                   for key in codec.BOX_KEYS}
        assert len(lengths) == 1  # every box list has one entry per box
        box_counts |= lengths
    assert len(structures) == 1
    keys = {key for key, _ in structures.pop()}
    assert {codec.IMAGE_SOURCE_ID, *codec.BOX_KEYS, "meta/source", "meta/confidence"} <= keys
    assert {codec.QUALITY_PREFIX + name for name in codec.QUALITY_METRICS} <= keys
    assert 0 in box_counts and max(box_counts) > 0  # the demo mixes images with and without boxes


def test_a_record_framed_in_parts_is_what_tensorflows_writer_writes(tmp_path):
    """`framed_parts` of a record's data in parts (a big middle part, as the shard writer
    gives with image bytes) joins to TensorFlow's framing of the whole; one part is framed in
    one piece."""
    parts = [b"head", bytes(range(256)) * 300, b"", b"tail"]
    path = str(tmp_path / "parts.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"".join(parts))
    framed = tfrecord_framing.framed_parts(parts)
    assert framed[1:-1] == parts and framed[2] is parts[1]  # the parts are not copied
    assert b"".join(framed) == open(path, "rb").read()
    assert tfrecord_framing.framed_parts([b"abcde"]) == [tfrecord_framing.frame_record(b"abcde")]
