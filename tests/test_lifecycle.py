"""The dataset follows its sources: relabel, replace, delete (with and without the CSV row), a
class losing its last image, through a real nightly and a real `make_dataset`."""
from __future__ import annotations

import os

import numpy as np
import pytest

from configs.schema import load_config
from pipelines import reader_records, training_input
from pipelines.reader_spec import ReaderSpec
from runners.jobs import nightly
from tests.imageutil import encode, photo
from tests.jobutil import index_rows, nightly_argv
from tests.tiers import slow_fixture
from transforms import snapshot_layout as layout
from transforms.live_view import live_view, read_retirements


def _jpeg(seed: int, class_index: int) -> bytes:
    return encode(photo(seed, 96, 128, class_index), "JPEG", 92)


class World:
    """An image folder with a label CSV and the output folder a nightly job keeps."""

    def __init__(self, base):
        self.root, self.labels, self.out = base / "images", base / "labels.csv", base / "out"
        self.rows: dict[str, str] = {}
        self.root.mkdir(parents=True)

    def put(self, rel: str, data: bytes | None = None, label: str | None = None):
        if data is not None:
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_bytes(data)
        if label is not None:
            self.rows[rel] = label
        self._write_csv()

    def remove(self, rel: str, row: bool):
        (self.root / rel).unlink()
        if row:
            del self.rows[rel]
        self._write_csv()

    def _write_csv(self):
        self.labels.write_text("path,label\n" + "".join(
            f"{path},{label}\n" for path, label in sorted(self.rows.items())))

    def argv(self, *extra) -> list[str]:
        return nightly_argv(self.root, self.labels, self.out, *extra)

    def night(self, *extra):
        return nightly.run(self.argv(*extra))


def live_records(out) -> dict:
    """{image/filename: (class text, sha256)} of every record `make_dataset`'s record stage
    reads over all live snapshots (split train)."""
    import tensorflow as tf

    from transforms import codec
    spec = ReaderSpec.from_config(load_config(), split="train", batch_size=4, snapshots="all",
                                  augment=False, shuffle=False)
    plan = training_input.plan_reading(str(out), spec)
    records = reader_records.read_records(
        plan.file_groups[0], tf.constant([0, 0], tf.int64), shuffle=False, shuffle_buffer=8,
        cycle_length=2, removed=reader_records.removal_table(plan.view))
    found = {}
    for serialized in records:
        parsed = tf.io.parse_single_example(serialized, codec.feature_spec())
        name = parsed[codec.IMAGE_FILENAME].numpy().decode()
        assert name not in found, f"{name} read twice"
        found[name] = (parsed[codec.CLASS_TEXT].numpy().decode(),
                       parsed[codec.IMAGE_SHA256].numpy().decode())
    return found


@slow_fixture(scope="module")
def two_nights(tmp_path_factory):
    """Night one: cats, dogs and one owl. Night two: a relabel, a replacement, a deletion with
    its CSV row left behind, a deletion with its row, the owl (the class's only image) deleted,
    and one new bird."""
    world = World(tmp_path_factory.mktemp("lifecycle"))
    for i in range(4):
        world.put(f"cat/{i}.jpg", _jpeg(10 + i, 0), "cat")
        world.put(f"dog/{i}.jpg", _jpeg(20 + i, 1), "dog")
    world.put("owl/0.jpg", _jpeg(30, 2), "owl")
    first = world.night()
    before = live_records(world.out)
    world.put("cat/1.jpg", label="dog")                 # relabel: same bytes, new label
    world.put("dog/2.jpg", _jpeg(99, 1))                # replace: new bytes, same path
    world.remove("cat/3.jpg", row=False)                # delete; its CSV row stays
    world.remove("dog/3.jpg", row=True)                 # delete with its CSV row
    world.remove("owl/0.jpg", row=True)                 # the owl class's only image
    world.put("bird/0.jpg", _jpeg(40, 3), "bird")       # growth
    second = world.night()
    return world, first, second, before


def test_night_one_is_a_base_and_reads_everything(two_nights):
    world, first, _, before = two_nights
    assert first.snapshot.manifest["base"] is True
    with open(os.path.join(first.snapshot.path, layout.RETIRED), "rb") as handle:
        assert handle.read() == b""  # a base retires nothing: its ledger is there, empty
    assert sorted(before) == sorted([f"cat/{i}.jpg" for i in range(4)]
                                    + [f"dog/{i}.jpg" for i in range(4)] + ["owl/0.jpg"])


def test_each_change_is_one_retirement_line_with_its_reason_and_snapshot(two_nights):
    world, first, second, _ = two_nights
    lines = read_retirements(os.path.join(second.snapshot.path, layout.RETIRED))
    assert [(line["path"], line["reason"], line["snapshot"]) for line in lines] == [
        ("cat/1.jpg", "relabeled", first.run_id), ("cat/3.jpg", "deleted", first.run_id),
        ("dog/2.jpg", "replaced", first.run_id), ("dog/3.jpg", "deleted", first.run_id),
        ("owl/0.jpg", "deleted", first.run_id)]
    relabel = lines[0]
    assert relabel["label"] == "cat" and relabel["split"] == "train"
    assert relabel["detail"] == "same content; labels now dog, were cat"


def test_the_relabeled_image_is_published_with_its_new_label(two_nights):
    world, _, second, _ = two_nights
    rows = index_rows(second.snapshot)
    assert rows["cat/1.jpg"]["accepted"] and rows["cat/1.jpg"]["label"] == "dog"
    assert rows["dog/2.jpg"]["accepted"] and rows["bird/0.jpg"]["accepted"]
    assert sorted(rows) == ["bird/0.jpg", "cat/1.jpg", "dog/2.jpg"]


def test_accounting_covers_the_live_set(two_nights):
    _, _, second, _ = two_nights
    live = second.snapshot.accounting["live"]
    assert live == {"before": 9, "kept": 4, "retired": 5, "added": 3, "after": 7,
                    "retired_by_reason": {"deleted": 3, "relabeled": 1, "replaced": 1},
                    "ok": True}
    # the CSV row left behind for the deleted cat is a missing_file reject
    assert second.snapshot.stats["rejects_by_kind"]["label_row"] == {"missing_file": 1}


def test_make_dataset_reads_exactly_the_live_set(two_nights):
    world, first, second, before = two_nights
    after = live_records(world.out)
    assert sorted(after) == ["bird/0.jpg", "cat/0.jpg", "cat/1.jpg", "cat/2.jpg",
                             "dog/0.jpg", "dog/1.jpg", "dog/2.jpg"]
    assert after["cat/1.jpg"] == ("dog", before["cat/1.jpg"][1])  # same bytes, new label
    assert after["dog/2.jpg"][1] != before["dog/2.jpg"][1]       # the new bytes
    assert training_input.count_examples(str(world.out), "train", "all") == 7


def test_make_dataset_batches_count_the_live_labels(two_nights):
    world, *_ = two_nights
    dataset = training_input.make_dataset(str(world.out), "train", batch_size=3,
                                          snapshots="all", augment=False, shuffle=False,
                                          drop_remainder=False)
    labels = np.concatenate([batch[1].numpy() for batch in dataset])
    names = (world.out / "classes.txt").read_text().split()
    assert names == ["cat", "dog", "owl", "bird"]  # append-only: the owl keeps its id
    assert dict(zip(names, labels.sum(axis=0).astype(int).tolist())) == {
        "cat": 2, "dog": 4, "owl": 0, "bird": 1}
    assert dataset.cardinality().numpy() == 3


def test_the_summary_and_report_show_the_night_s_changes(two_nights):
    from runners.jobs.summary import format_summary
    _, _, second, _ = two_nights
    assert ("live set: 9 before + 3 added - 5 retired = 7  (retired: 3 deleted, 1 relabeled, "
            "1 replaced)") in format_summary(second.snapshot)
    report = open(os.path.join(second.snapshot.path, "report.html")).read()
    assert "live before 9 + added 3 - retired 5 = live now 7" in report


def test_a_quiet_night_after_the_changes_publishes_nothing(two_nights, tmp_path):
    world, _, second, _ = two_nights
    result = world.night()
    assert result.snapshot is None and "nothing new" in result.message
    view = live_view(str(world.out))
    assert [s.run_id for s in view.snapshots] == [two_nights[1].run_id, second.run_id]


def test_a_deletion_alone_is_news_for_the_quick_look(two_nights, tmp_path):
    import shutil
    world, *_ = two_nights
    copy = World.__new__(World)
    shutil.copytree(world.root.parent, tmp_path / "w")
    copy.root, copy.labels, copy.out = (tmp_path / "w" / "images", tmp_path / "w" / "labels.csv",
                                        tmp_path / "w" / "out")
    copy.rows = dict(world.rows)
    copy.remove("cat/0.jpg", row=True)
    result = copy.night()
    assert result.snapshot is not None
    lines = read_retirements(os.path.join(result.snapshot.path, layout.RETIRED))
    assert [(line["path"], line["reason"]) for line in lines] == [("cat/0.jpg", "deleted")]
    assert result.snapshot.accounting["live"]["after"] == 6
    assert sorted(live_records(copy.out)) == ["bird/0.jpg", "cat/1.jpg", "cat/2.jpg",
                                              "dog/0.jpg", "dog/1.jpg", "dog/2.jpg"]


def _copy(world: World, base) -> World:
    import shutil
    shutil.copytree(world.root.parent, base)
    copy = World.__new__(World)
    copy.root, copy.labels, copy.out = base / "images", base / "labels.csv", base / "out"
    copy.rows = dict(world.rows)
    return copy


def _indexed_records(shard: str) -> list[bytes]:
    """A shard's records read through its DALI index alone (offset, size per line), as the
    `tfrecord` package and DALI do: 8-byte length, 4-byte CRC, data, 4-byte CRC."""
    import struct
    data = open(shard, "rb").read()
    folder, name = os.path.split(shard)
    records = []
    for line in open(os.path.join(folder, "dali_index", name + ".idx")):
        offset, size = map(int, line.split())
        (length,) = struct.unpack("<Q", data[offset:offset + 8])
        assert size == length + 16
        records.append(data[offset + 12:offset + 12 + length])
    return records


def _names_in(records) -> list[str]:
    import tensorflow as tf

    from transforms import codec
    return sorted(tf.train.Example.FromString(r).features.feature[codec.IMAGE_FILENAME]
                  .bytes_list.value[0].decode() for r in records)


def _all_shard_bytes(out) -> bytes:
    import glob
    return b"".join(open(p, "rb").read()
                    for p in glob.glob(str(out / "snapshots" / "*" / "*" / "*.tfrecord-*")))


@slow_fixture(scope="module")
def forgotten(two_nights, tmp_path_factory):
    """The two nights' output, `cat/0.jpg` forgotten, then a nightly while the file stays."""
    from runners.jobs import forget
    world = _copy(two_nights[0], tmp_path_factory.mktemp("forget") / "w")
    sha = two_nights[3]["cat/0.jpg"][1]
    code = forget.main(["--output_dir", str(world.out), "--path", "cat/0.jpg"])
    after_forget = live_records(world.out)
    night = world.night("--always_run_job")
    return world, code, sha, after_forget, night


def test_forget_removes_the_record_from_reads_and_its_bytes_from_the_shards(two_nights,
                                                                              forgotten):
    world, code, sha, after_forget, _ = forgotten
    assert code == 0
    assert "cat/0.jpg" not in after_forget and len(after_forget) == 6
    cat0 = (world.root / "cat/0.jpg").read_bytes()
    assert cat0 not in _all_shard_bytes(world.out)
    assert cat0 in _all_shard_bytes(two_nights[0].out)  # it was there before
    [line] = read_retirements(str(world.out / layout.FORGOTTEN))
    assert (line["path"], line["sha256"], line["snapshot"], line["reason"]) == (
        "cat/0.jpg", sha, two_nights[1].run_id, "forgotten")


def test_a_forgotten_image_is_not_brought_back_while_its_source_exists(forgotten):
    world, *_, night = forgotten
    rows = index_rows(night.snapshot)
    assert rows["cat/0.jpg"]["reason"] == "forgotten"
    assert "cat/0.jpg" not in live_records(world.out)


def test_allow_forgotten_brings_it_back(forgotten, tmp_path):
    world = _copy(forgotten[0], tmp_path / "w")
    night = world.night("--allow_forgotten")
    assert index_rows(night.snapshot)["cat/0.jpg"]["accepted"]
    assert "cat/0.jpg" in live_records(world.out)


@slow_fixture(scope="module")
def compacted(two_nights, tmp_path_factory):
    from runners.jobs import compact
    world = _copy(two_nights[0], tmp_path_factory.mktemp("compact") / "w")
    before = live_records(world.out)
    code = compact.main(["--output_dir", str(world.out)])
    latest = layout.latest_snapshot(str(world.out))
    return world, code, before, latest


def test_compact_keeps_what_make_dataset_reads(compacted):
    world, code, before, latest = compacted
    assert code == 0
    assert live_records(world.out) == before
    assert [s.run_id for s in live_view(str(world.out)).snapshots] == [latest.run_id]
    assert training_input.count_examples(str(world.out), "train", "all") == 7
    # the copied records all carry image/orientation, as their sources' manifests say
    assert latest.manifest["orientation_recorded"] is True


def test_after_compact_tfds_and_the_index_reader_see_exactly_the_live_set(compacted):
    import glob

    import tensorflow_datasets as tfds
    world, _, before, latest = compacted
    builder = tfds.builder_from_directory(latest.path)
    assert builder.info.splits["train"].num_examples == 7
    names = sorted(example["image/filename"].numpy().decode()
                   for example in builder.as_dataset(split="train"))
    assert names == sorted(before)
    shards = sorted(glob.glob(os.path.join(latest.path, "train", "*.tfrecord-*")))
    assert _names_in([r for shard in shards for r in _indexed_records(shard)]) == sorted(before)


def test_compact_twice_has_nothing_to_do(compacted, capsys):
    from runners.jobs import compact
    world = compacted[0]
    assert compact.main(["--output_dir", str(world.out)]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_a_night_after_compact_plans_against_the_new_base(compacted, tmp_path):
    world = _copy(compacted[0], tmp_path / "w")
    world.put("dog/0.jpg", label="cat")  # relabel once more
    night = world.night()
    [line] = read_retirements(os.path.join(night.snapshot.path, layout.RETIRED))
    assert (line["path"], line["reason"], line["snapshot"]) == (
        "dog/0.jpg", "relabeled", compacted[3].run_id)
    after = live_records(world.out)
    assert after["dog/0.jpg"][0] == "cat" and len(after) == 7


def test_forget_reads_paths_and_sha256s_from_a_file_and_refuses_bad_ones(tmp_path):
    from runners.errors import UsageError
    from runners.jobs.forget import parse_names
    listing = tmp_path / "takedown.txt"
    listing.write_text("cat/1.jpg\n\n" + "AB" * 32 + "\n")
    assert parse_names(["dog/0.jpg"], [], str(listing)) == (["dog/0.jpg", "cat/1.jpg"],
                                                            ["ab" * 32])
    with pytest.raises(UsageError, match=r"--sha256 must be 64 hex digits. Received: \['abc'\]"):
        parse_names([], ["abc"], None)
    with pytest.raises(UsageError, match="Name what to forget"):
        parse_names([], [], None)


def test_before_compact_tfds_reads_one_snapshot_as_written_less_forgotten_bytes(two_nights,
                                                                                 forgotten):
    """What the README's reader table says: TFDS reads one snapshot's shards; `forget`
    rewrote them (and their TFDS shard lengths) without the forgotten record."""
    import tensorflow_datasets as tfds
    world = forgotten[0]
    first = two_nights[1].run_id
    builder = tfds.builder_from_directory(str(world.out / "snapshots" / first))
    names = sorted(example["image/filename"].numpy().decode()
                   for example in builder.as_dataset(split="train"))
    assert names == sorted(f"{c}/{i}.jpg" for c in ("cat", "dog") for i in range(4)
                           if (c, i) != ("cat", 0)) + ["owl/0.jpg"]
    assert builder.info.splits["train"].num_examples == len(names) == 8
    second = layout.latest_snapshot(str(two_nights[0].out))
    tonight = sorted(example["image/filename"].numpy().decode() for example in
                     tfds.builder_from_directory(second.path).as_dataset(split="train"))
    assert tonight == ["bird/0.jpg", "cat/1.jpg", "dog/2.jpg"]


@pytest.mark.parametrize("command", ["forget", "compact"])
def test_maintenance_commands_say_in_one_line_that_s3_is_not_theirs(command, capsys):
    """(`pixelmill verify` reads s3://: `tests/test_s3_job.py`.)"""
    from runners import cli
    argv = {"forget": ["forget", "--output_dir", "s3://b/out", "--path", "a.jpg"],
            "compact": ["compact", "--output_dir", "s3://b/out"]}[command]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "s3://b/out" in err[0] and "local" in err[0]
