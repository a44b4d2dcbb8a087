"""WriteShards as a Beam step: three records, their index rows (summarized a shard at a time), the
shard files and their bytes."""
from __future__ import annotations

import glob
import gzip
import hashlib
import os
import pickle

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.testing.util import equal_to

from configs.schema import OutputConfig
from tests.beamutil import assert_that, fn_api_pipeline
from transforms import codec
from transforms.offline.gather import unpacked
from transforms.offline.image_record import ImageRecord
from transforms.offline.index_table import record_row
from transforms.offline.write_shards import (
    AssignShards,
    ShardFile,
    ShardPlan,
    WriteShards,
    shard_counts,
    shard_plan,
)
from transforms.reporting.index_summary import summary_of, summary_output
from transforms.snapshot_layout import dali_index_name

CLASSES = ["cat", "dog"]


def _record(folder, name: str, data: bytes, split: str, label: str, boxes=()) -> ImageRecord:
    uri = os.path.join(str(folder), name)
    with open(uri, "wb") as handle:
        handle.write(data)
    return ImageRecord(uri=uri, path=name, file_bytes=len(data),
                       sha256=hashlib.sha256(data).hexdigest(), format="png", width=4, height=3,
                       metrics=(("brightness_p01", 12.5),), label=label,
                       label_id=CLASSES.index(label), split=split, meta=(("source", "cam1"),),
                       boxes=boxes)


def _side_inputs(pipeline):
    """WriteShards' singleton side input: the class table."""
    return (pipeline | "ClassTable" >> beam.Create([CLASSES]),)


def _shard(split: str, index: int, count: int) -> str:
    return f"{split}/images-{split}.tfrecord-{index:05d}-of-{count:05d}"


def _files_on_disk(staging, expected_records: dict):
    """A matcher for the `files` output: one list, sorted by path, of a ShardFile per shard in
    `expected_records` (rel -> record count), its size and sha256 those of the file written."""
    def check(lists):
        [files] = lists  # one list, sorted by path
        assert files == sorted(files, key=lambda shard: shard.path)
        expected = []
        for rel, count in expected_records.items():
            with open(os.path.join(str(staging), rel), "rb") as handle:
                data = handle.read()
            expected.append(ShardFile(path=rel, bytes=len(data),
                                      sha256=hashlib.sha256(data).hexdigest(), records=count))
        equal_to(expected)(files)
    return check


def test_records_go_to_the_shard_of_their_hash_and_every_shard_is_written(tmp_path):
    images, staging = tmp_path / "images", tmp_path / "staging"
    images.mkdir()
    records = [_record(images, "a.png", b"first image", "train", "cat"),
               _record(images, "b.png", b"second image", "train", "dog",
                       boxes=((0.1, 0.2, 0.5, 0.6, "cat"),)),
               _record(images, "c.png", b"third image", "validation", "dog")]
    # hex digits 16..32 of each sha256, mod 2 (tests/test_splits.py pins the rule): "first
    # image" ...6c96 and "third image" ...3114 are even, "second image" ...a9ab is odd
    shard_of = {"a.png": _shard("train", 0, 2), "b.png": _shard("train", 1, 2),
                "c.png": _shard("validation", 0, 2)}
    every_shard = [_shard(split, i, 2) for split in ("train", "validation") for i in range(2)]
    per_shard = {rel: sum(shard == rel for shard in shard_of.values()) for rel in every_shard}
    assert sorted(per_shard.values()) == [0, 1, 1, 1]  # one shard gets no record
    with fn_api_pipeline() as pipeline:
        written = (pipeline | "Records" >> beam.Create(records)
                   | WriteShards(str(staging), OutputConfig(num_shards=2),
                                 *_side_inputs(pipeline), lanes=3))  # in lanes (the job's)
        # an IndexPart a written shard: its rows and their summary
        assert_that(written.index | beam.Map(_part_contents),
                    equal_to([_part_of([record_row(r, shard_of[r.path])]) for r in records]),
                    label="Index")
        assert_that(written.files, _files_on_disk(staging, per_shard), label="Files")
    assert sorted(os.path.relpath(path, staging) for path in
                  glob.glob(os.path.join(staging, "*", "*.tfrecord-*"))) == every_shard
    for rel in every_shard:
        parsed = [tf.io.parse_single_example(s, codec.feature_spec(meta_columns=("source",)))
                  for s in tf.data.TFRecordDataset(os.path.join(staging, rel))]
        expected = sorted((r for r in records if shard_of[r.path] == rel), key=lambda r: r.sha256)
        assert [p[codec.IMAGE_FILENAME].numpy().decode() for p in parsed] == [
            r.path for r in expected]
        for example, record in zip(parsed, expected):
            assert example[codec.IMAGE_ENCODED].numpy() == open(record.uri, "rb").read()
            assert int(example[codec.CLASS_LABEL]) == record.label_id
            assert example[codec.META_PREFIX + "source"].numpy() == b"cam1"
            box_labels = tf.sparse.to_dense(example[codec.BOX_CLASS_LABEL]).numpy().tolist()
            assert box_labels == [CLASSES.index(box[4]) for box in record.boxes]


def test_records_in_a_gzip_shard_are_ordered_by_sha256(tmp_path):
    images, staging = tmp_path / "images", tmp_path / "staging"
    images.mkdir()
    records = [_record(images, f"{i}.png", bytes([i]) * (10 + i), "train", "cat")
               for i in range(4)]
    rel = _shard("train", 0, 1) + ".gz"
    with fn_api_pipeline() as pipeline:
        written = (pipeline | "Records" >> beam.Create(records)
                   | WriteShards(str(staging), OutputConfig(num_shards=1, compression="gzip"),
                                 *_side_inputs(pipeline)))
        assert_that(written.files, _files_on_disk(staging, {rel: 4}))
    filenames = [tf.io.parse_single_example(s, codec.feature_spec())[codec.IMAGE_FILENAME]
                 .numpy().decode()
                 for s in tf.data.TFRecordDataset(os.path.join(staging, rel), "GZIP")]
    assert filenames == [r.path for r in sorted(records, key=lambda r: r.sha256)]


@pytest.mark.parametrize("compression", ["", "gzip"])
def test_a_shard_of_large_images_is_what_tensorflows_writer_writes(tmp_path, compression):
    """Image bytes from `codec.LARGE_VALUE` on are written as parts of their own
    (`codec.serialized_parts`): the shard is still TensorFlow's framing of protobuf's own
    serialization of each record (gzip: once decompressed), and its DALI index fits it."""
    from transforms.offline import shard_writing

    images, staging = tmp_path / "images", tmp_path / "staging"
    images.mkdir()
    sizes = (codec.LARGE_VALUE - 1, codec.LARGE_VALUE, 5 * codec.LARGE_VALUE + 3, 9)
    records = sorted((_record(images, f"{i}.png", bytes([i + 1]) * size, "train", "cat",
                              boxes=((0.1, 0.2, 0.5, 0.6, "dog"),))
                      for i, size in enumerate(sizes)), key=lambda r: r.sha256)
    output = OutputConfig(num_shards=1, compression=compression or "none")
    rel = _shard("train", 0, 1) + (".gz" if compression else "")
    shard_writing.write_shard(str(staging), output, rel, records, {"dog": 1}, ["source"])
    reference = str(tmp_path / "reference.tfrecord")
    with tf.io.TFRecordWriter(reference) as writer:
        for record in records:
            example = tf.train.Example()
            for key, kind, values in shard_writing._features(
                    record, open(record.uri, "rb").read(), {"dog": 1}, ["source"], 0):
                getattr(example.features.feature[key], kind).value.extend(values)
            writer.write(example.SerializeToString(deterministic=True))
    written = open(os.path.join(staging, rel), "rb").read()
    expected = open(reference, "rb").read()
    if compression:
        assert gzip.decompress(written) == expected
    else:
        assert written == expected
        with open(os.path.join(staging, dali_index_name(rel)), encoding="ascii") as handle:
            sizes_indexed = [int(line.split()[1]) for line in handle]
        assert sum(sizes_indexed) == len(expected) and len(sizes_indexed) == len(records)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_local_shard_is_on_disk_before_its_writer_returns(tmp_path, monkeypatch, compression):
    """The writer fsyncs the shard it wrote, whole, before closing it: the publish's fsync of
    the snapshot then has nothing left to write back in the launcher."""
    from transforms.offline import shard_writing

    images, staging = tmp_path / "images", tmp_path / "staging"
    images.mkdir()
    records = [_record(images, "a.png", b"\x01" * 100, "train", "cat")]
    synced = []

    def fsync(descriptor):
        path = os.readlink(f"/proc/self/fd/{descriptor}")
        synced.append((path, os.path.getsize(path)))

    monkeypatch.setattr(shard_writing.os, "fsync", fsync)
    rel = _shard("train", 0, 1)
    shard, _summaries = shard_writing.write_shard(
        str(staging), OutputConfig(num_shards=1, compression=compression), rel, records,
        {}, ["source"])
    assert synced == [(str(staging / rel), shard.bytes)]


def test_shard_count_comes_from_the_split_bytes_and_the_target_size():
    output = OutputConfig(target_shard_mb=1.0)
    assert shard_counts({"train": 3 * 1024 * 1024 + 1, "test": 10}, output) == {
        "train": 4, "test": 1}
    assert shard_counts({"train": 3 * 1024 * 1024 + 1}, OutputConfig(num_shards=8)) == {
        "train": 8}


@pytest.mark.parametrize("in_lists", [False, True])
def test_assign_shards_keys_each_record_by_the_shard_of_its_hash(in_lists):
    output = OutputConfig(target_shard_mb=1.0)
    records = [ImageRecord(uri=f"/r/{i}.jpg", path=f"{i}.jpg", file_bytes=400 * 1024,
                           sha256=hashlib.sha256(bytes([i])).hexdigest(),
                           split="train" if i < 7 else "test") for i in range(9)]
    counts = {"train": 3, "test": 1}  # 7 x 400 KiB = 2.7 MiB -> 3 shards; 800 KiB -> 1
    # int(sha256(bytes([i]))[16:32], 16) % 3 for the train records, computed once by hand
    train_shards = [2, 2, 2, 1, 0, 0, 2]
    expected = [(("train", train_shards[i]), f"{i}.jpg") for i in range(7)]
    expected += [(("test", 0), "7.jpg"), (("test", 0), "8.jpg")]
    with fn_api_pipeline() as pipeline:
        keyed, plan = (pipeline | beam.Create(records)
                       | AssignShards(output, in_lists=in_lists))
        assert_that(keyed | beam.MapTuple(lambda key, entry: (key, unpacked(entry[2]).path)),
                    equal_to(expected), label="Keys")
        assert_that(keyed | beam.MapTuple(lambda _, entry: entry[:2] == (
                        unpacked(entry[2]).sha256, ())),
                    equal_to([True] * 9), label="ShaAndBoxClasses")
        assert_that(plan, equal_to([ShardPlan(counts, [])]), label="Plan")


def _changed_since_validated(tmp_path):
    """A record of `a.png` whose bytes changed after its sha256 was taken."""
    images = tmp_path / "images"
    images.mkdir()
    record = _record(images, "a.png", b"validated bytes", "train", "cat")
    with open(record.uri, "wb") as handle:
        handle.write(b"changed bytes")
    return record


def test_a_file_that_changed_since_it_was_validated_fails_the_job(tmp_path):
    record = _changed_since_validated(tmp_path)
    with pytest.raises(Exception, match="changed while the job ran"):
        with fn_api_pipeline() as pipeline:
            _ = (pipeline | "Records" >> beam.Create([record])
                 | WriteShards(str(tmp_path / "staging"), OutputConfig(num_shards=1),
                               *_side_inputs(pipeline)))


def _part_contents(part) -> tuple:
    """An IndexPart's rows and summary (`summary_output`), to compare."""
    return part.batch.to_pylist(), summary_output(pickle.loads(part.summary))


def _part_of(rows: list) -> tuple:
    """`_part_contents` of the IndexPart of rows."""
    return rows, summary_output(summary_of(rows))


def _write(records, staging, output: OutputConfig, processes: int) -> dict:
    """WriteShards of `records` into `staging` with `processes` writing children; (index parts'
    contents, features, files) as sorted lists, gathered into a file (a child pipeline's
    outputs)."""
    import json
    out = os.path.join(str(staging), "outputs.json")

    def dump(items):
        with open(out, "w") as handle:
            json.dump(sorted(repr(item) for item in items), handle)

    with fn_api_pipeline() as pipeline:
        written = (pipeline | "Records" >> beam.Create(records)
                   | WriteShards(str(staging), output, *_side_inputs(pipeline), processes))
        _ = ((written.index | beam.Map(_part_contents), written.features,
              written.files | beam.FlatMap(lambda files: files))
             | beam.Flatten()
             | beam.combiners.ToList() | beam.Map(dump))
    with open(out) as handle:
        outputs = json.load(handle)
    os.remove(out)
    return outputs


def _folder_bytes(folder) -> dict:
    return {os.path.relpath(path, folder): open(path, "rb").read()
            for path in glob.glob(os.path.join(str(folder), "**", "*"), recursive=True)
            if os.path.isfile(path)}


@pytest.mark.slow  # the writing children's forkserver imports TensorFlow
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_shards_written_in_children_equal_those_written_here(tmp_path, monkeypatch,
                                                             compression):
    """With `processes`, children write the shards (the images are never read in this
    process: reading here raises) and every file, index row, features summary and ShardFile
    is the one written here."""
    from transforms.offline import shard_writing
    images = tmp_path / "images"
    images.mkdir()
    records = [_record(images, f"{i}.png", bytes([i]) * (20 + i), split, label,
                       boxes=((0.1, 0.2, 0.5, 0.6, "cat"),) if i % 3 == 0 else ())
               for i, (split, label) in enumerate([("train", "cat"), ("train", "dog")] * 5
                                                  + [("validation", "dog")] * 3)]
    output = OutputConfig(num_shards=3, compression=compression)
    here = _write(records, tmp_path / "here", output, processes=0)

    def not_here(path, limit=None):
        raise AssertionError(f"{path} was read by the launcher")
    monkeypatch.setattr(shard_writing, "read_bytes", not_here)
    in_children = _write(records, tmp_path / "children", output, processes=2)
    assert in_children == here
    # per shard with records its index part and its records' features, and per shard its file
    shards = [item for item in here if item.startswith("ShardFile(")]
    filled = [shard for shard in shards if "records=0)" not in shard]
    assert len(shards) == 6 and len(here) == 2 * len(filled) + 6
    assert sum(item.count("'sha256':") for item in here) == len(records)
    assert _folder_bytes(tmp_path / "children") == _folder_bytes(tmp_path / "here")


@pytest.mark.slow  # the writing children's forkserver imports TensorFlow
def test_a_file_that_changed_fails_the_job_from_a_writing_child_with_its_cause(tmp_path):
    record = _changed_since_validated(tmp_path)
    shard = _shard("train", 0, 1)
    with pytest.raises(Exception, match=f"Writing the shard {shard} failed in its process "
                                        r"\(error\): RuntimeError: .*a.png changed while the job "
                                        "ran"):
        with fn_api_pipeline() as pipeline:
            _ = (pipeline | "Records" >> beam.Create([record])
                 | WriteShards(str(tmp_path / "staging"), OutputConfig(num_shards=1),
                               *_side_inputs(pipeline), processes=1))


def test_the_shard_plan_sums_each_bundles_bytes_and_unites_their_meta_columns():
    output = OutputConfig(target_shard_mb=1.0)
    parts = [({"train": 700 * 1024, "test": 10}, ["camera", "source"]),
             ({"train": 700 * 1024}, ["author"]), ({"validation": 1}, [])]
    assert shard_plan(parts, output) == ShardPlan(
        {"train": 2, "test": 1, "validation": 1}, ["author", "camera", "source"])
    assert shard_plan([], output) == ShardPlan({}, [])
