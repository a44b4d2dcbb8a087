"""The offline job's modes and failure behaviour: isolation, publishing, config, file systems."""
from __future__ import annotations

import errno
import json
import os
import shutil
import time

import pytest
import tensorflow as tf
from apache_beam.io.localfilesystem import LocalFileSystem

from pipelines import snapshot as snapshot_module
from pipelines import staged_run
from runners import cli
from runners.errors import UsageError
from runners.jobs import verify
from tests.imageutil import write_photo
from tests.jobutil import copy_output, index_rows, read_records, run_job, shard_files
from transforms import snapshot_layout as layout
from transforms.offline import inspect_image


@pytest.fixture()
def folder_dataset(folder_images):
    """Six images in class folders (folder labels), no CSV (conftest `folder_images`)."""
    return folder_images


def test_folder_names_are_labels_without_a_csv(folder_snapshot):
    snap = folder_snapshot.snapshot
    rows = index_rows(snap)
    assert {path: row["label"] for path, row in rows.items()} == {
        **{f"{'cat' if i % 2 else 'dog'}/{i}.jpg": ("cat" if i % 2 else "dog") for i in range(6)},
        "loose.jpg": None}
    assert snap.stats["classes"] == ["cat", "dog"]


def test_image_at_the_root_has_no_folder_label(folder_snapshot):
    assert index_rows(folder_snapshot.snapshot)["loose.jpg"]["reason"] == "unlabeled"


def test_gzip_shards_and_shard_count_from_target_size(train_snapshot):
    """conftest's train_snapshot: gzip, target_shard_mb set to 1/3.5 of the images' bytes."""
    snap = train_snapshot.snapshot
    names = [os.path.basename(p) for p in shard_files(snap)]
    count = len(names)
    assert count >= 3
    assert names == [f"images-train.tfrecord-{i:05d}-of-{count:05d}.gz" for i in range(count)]
    assert len(read_records(snap, compression="GZIP")) == 32


def test_fixed_shard_count_writes_every_shard_even_empty_ones(folder_snapshot):
    """conftest's folder_snapshot is written with output.num_shards=8."""
    snap = folder_snapshot.snapshot
    splits = sorted({row["split"] for row in index_rows(snap).values() if row["accepted"]})
    assert splits  # 6 accepted images
    names = [os.path.relpath(p, snap.path) for p in shard_files(snap)]
    assert names == [f"{split}/images-{split}.tfrecord-{i:05d}-of-00008"
                     for split in splits for i in range(8)]
    assert len(read_records(snap)) == 6


class _FragileInspector(inspect_image.ImageInspector):
    """A decoder that segfaults on cat/1.jpg and hangs on dog/2.jpg (it runs in the isolating
    child process, which unpickles it by importing this module, and calls `decode_read` there:
    an inspection's decode, after its `read`; the inline step calls it through `inspect`)."""

    def decode_read(self, read):
        if read.record.path == "cat/1.jpg":
            os._exit(139)
        if read.record.path == "dog/2.jpg":
            time.sleep(60)
        return super().decode_read(read)


@pytest.mark.slow
def test_crashing_and_hanging_decoder_reject_one_file_each(folder_dataset, tmp_path,
                                                           monkeypatch):
    monkeypatch.setattr(inspect_image, "ImageInspector", _FragileInspector)
    snap = run_job(folder_dataset, tmp_path / "out",
                   isolation="subprocess", sets=["decode.timeout_s=2"])
    rows = index_rows(snap)
    assert rows["cat/1.jpg"]["reason"] == "decoder_crash"
    assert "died" in rows["cat/1.jpg"]["detail"]
    assert rows["dog/2.jpg"]["reason"] == "decoder_crash"
    assert "decode.timeout_s=2" in rows["dog/2.jpg"]["detail"]
    assert sum(row["accepted"] for row in rows.values()) == 4
    assert snap.accounting["ok"]


def test_failed_run_publishes_nothing_and_keeps_the_previous_snapshot(folder_snapshot,
                                                                      folder_dataset, tmp_path,
                                                                      monkeypatch):
    """The disk fills at the commit point itself: the rename that would put the new run's
    manifest in place fails (a real OSError from the real write path, everything before it
    done), so the new run is not committed, and its moved files and staging are removed."""
    out = copy_output(folder_snapshot.out, tmp_path / "out")  # one committed run
    first = layout.latest_snapshot(out)
    assert first.run_id == folder_snapshot.snapshot.run_id
    write_photo(folder_dataset / "cat" / "new.jpg", 77, class_index=1)
    real_replace, failed = os.replace, []

    def replace(source, destination, *args, **kwargs):
        if os.path.basename(destination) == layout.MANIFEST and str(out) in str(destination):
            failed.append(str(destination))
            raise OSError(errno.ENOSPC, "No space left on device", str(destination))
        return real_replace(source, destination, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError) as raised:
        run_job(folder_dataset, out)
    assert raised.value.errno == errno.ENOSPC
    (attempt,) = failed
    assert os.path.basename(os.path.dirname(attempt)) != first.run_id
    assert os.listdir(os.path.join(out, layout.SNAPSHOTS)) == [first.run_id]  # attempt removed
    assert not [name for _, _, names in os.walk(out) for name in names if ".tmp-" in name]
    assert layout.read_latest(str(out)) == first.run_id
    assert [s.run_id for s in layout.committed_snapshots(str(out))] == [first.run_id]
    assert len(read_records(first)) == 6


@pytest.mark.slow
def test_accounting_mismatch_fails_the_job(folder_dataset, tmp_path, monkeypatch):
    real = snapshot_module.check_accounting

    def lossy(counts):
        key = staged_run.count_key(staged_run.IMAGES, "accepted")
        values = dict(counts.values, **{key: counts.values[key] - 1})  # one record dropped
        return real(staged_run.Counts(values))

    monkeypatch.setattr(snapshot_module, "check_accounting", lossy)
    with pytest.raises(snapshot_module.AccountingError, match="not all accounted"):
        run_job(folder_dataset, tmp_path / "out")
    assert layout.read_latest(str(tmp_path / "out")) is None


def test_invalid_config_is_reported_before_any_work(folder_dataset, tmp_path, capsys):
    code = cli.main(["preprocess", "--data_root", str(folder_dataset), "--output_dir",
                     str(tmp_path / "out"), "--set", "output.compression=zip"])
    assert code == 2
    err = capsys.readouterr().err
    assert "Expected one of ('none', 'gzip')" in err and "output.compression='zip'" in err
    assert not (tmp_path / "out").exists()


def test_label_csv_without_the_label_column_is_reported_before_any_work(folder_dataset,
                                                                          tmp_path, capsys):
    labels = tmp_path / "labels.csv"
    labels.write_text("path,class\ncat/1.jpg,cat\n")
    code = cli.main(["preprocess", "--data_root", str(folder_dataset), "--labels", str(labels),
                     "--output_dir", str(tmp_path / "out")])
    assert code == 2
    assert "label" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


class _FakeGcs(LocalFileSystem):
    """A remote-looking file system (`fakegs://`) stored in a local folder. The job only sees
    `fakegs://` paths, so any `open()`/`os.walk` on a user path would fail."""

    base = ""
    folders_exist = True

    @classmethod
    def scheme(cls):
        return "fakegs"

    def _local(self, path):
        return path.replace("fakegs://", self.base + "/", 1)

    def _remote(self, path):
        return "fakegs://" + path[len(self.base) + 1:]

    def join(self, base_path, *paths):
        return "/".join([base_path.rstrip("/")] + [p.strip("/") for p in paths])

    def split(self, path):
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path):
        os.makedirs(self._local(path), exist_ok=True)

    def has_dirs(self):
        return False

    def _list(self, dir_or_prefix):
        for metadata in super()._list(self._local(dir_or_prefix)):
            yield type(metadata)(self._remote(metadata.path), metadata.size_in_bytes,
                                 metadata.last_updated_in_seconds)

    def create(self, path, *args, **kwargs):
        os.makedirs(os.path.dirname(self._local(path)), exist_ok=True)
        return super().create(self._local(path), *args, **kwargs)

    def open(self, path, *args, **kwargs):
        return super().open(self._local(path), *args, **kwargs)

    def copy(self, sources, destinations):
        return super().copy([self._local(p) for p in sources],
                            [self._local(p) for p in destinations])

    def rename(self, sources, destinations):
        for destination in destinations:
            os.makedirs(os.path.dirname(self._local(destination)), exist_ok=True)
        return super().rename([self._local(p) for p in sources],
                              [self._local(p) for p in destinations])

    def exists(self, path):
        if not self.folders_exist and path.startswith("fakegs://"):  # GCS: prefixes do not
            return os.path.isfile(self._local(path))
        return super().exists(self._local(path))

    def size(self, path):
        return super().size(self._local(path))

    def last_updated(self, path):
        return super().last_updated(self._local(path))

    def checksum(self, path):
        return super().checksum(self._local(path))

    def metadata(self, path):
        metadata = super().metadata(self._local(path))
        return type(metadata)(path, metadata.size_in_bytes, metadata.last_updated_in_seconds)

    def delete(self, paths):
        return super().delete([self._local(p) for p in paths])


@pytest.mark.slow
def test_remote_style_paths_go_through_beam_file_systems(folder_dataset, tmp_path, capsys,
                                                         monkeypatch):
    bucket = tmp_path / "bucket"
    shutil.copytree(folder_dataset, bucket / "images")
    _FakeGcs.base = str(bucket)
    # TFT (off by default in run_job) writes through tf.io.gfile, which knows gs:// but not
    # this test-only scheme.
    snap = run_job("fakegs://images", "fakegs://out")
    assert snap.accounting["images"] == {"discovered": 6, "accepted": 6, "rejected": 0, "skipped": 0,
                                         "ok": True}
    assert snap.path == f"fakegs://out/snapshots/{snap.run_id}"
    assert (bucket / "out" / "LATEST").read_text().strip() == snap.run_id
    local_shards = sorted((bucket / "out" / "snapshots" / snap.run_id).glob("*/*.tfrecord-*"))
    assert sum(1 for _ in tf.data.TFRecordDataset([str(p) for p in local_shards])) == 6
    # `pixelmill verify` finds the snapshot there too, also where OUT, a prefix, does not
    # "exist" (GCS: only objects do).
    monkeypatch.setattr(_FakeGcs, "folders_exist", False)
    assert verify.main(["fakegs://out"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(" files: all verified")
    with pytest.raises(UsageError, match="no such folder"):
        verify.main(["fakegs://elsewhere"])


@pytest.mark.parametrize("command", ["preprocess", "nightly"])
def test_help_lists_pixelmills_options(command, capsys):
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--data_root" in out and "--output_dir" in out and "Beam pipeline option" in out


def test_job_called_from_an_unguarded_script_decodes_in_isolation(script_job):
    """A user script without `if __name__ == "__main__":` must not be re-run inside the
    isolating decoder processes (which would turn every image into a decoder_crash).
    conftest's script_job: such a script, run with the defaults (decode.isolation=subprocess)
    on the six-image folder corpus plus a junk file (rejected by its header, never decoded)."""
    done = script_job
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "discovered": 7, "accepted": 6, "rejected": 1, "skipped": 0, "ok": True}
    ledger = (done.snapshot_dir / "rejects.jsonl").read_text().splitlines()
    assert [(json.loads(line)["path"], json.loads(line)["reason"]) for line in ledger] == [
        ("junk/a.jpg", "unknown_format")]
