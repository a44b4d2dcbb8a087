"""The whole job, a nightly and the training reader on `s3://`, against a local S3 server
(`tests.s3util`): the same shards and TFT transform, byte for byte, as the same job on local
paths."""
from __future__ import annotations

import os

import numpy as np
import pytest

from configs.schema import load_config
from pipelines.training_input import make_dataset
from runners.errors import UsageError
from runners.jobs import nightly, verify
from tests.imageutil import photo_bytes, write_bytes
from tests.jobutil import run_job
from transforms import snapshot_layout as layout
from transforms.offline import tft_analysis


def _data(base, count: int = 8) -> tuple[str, str, str]:
    rows = []
    for i in range(count):
        name = ("cat", "dog")[i % 2]
        write_bytes(base / "images" / name / f"{i}.jpg", photo_bytes(10 + i, class_index=i % 2))
        rows.append(f"{name}/{i}.jpg,{name}\n")
    write_bytes(base / "images" / "broken.jpg", b"\xff\xd8\xff\xe0 not a jpeg")
    (base / "labels.csv").write_text("path,label\n" + "".join(rows))
    (base / "classes.txt").write_text("cat\ndog\n")
    return str(base / "images"), str(base / "labels.csv"), str(base / "classes.txt")


def _batches(output_dir, **kwargs) -> list:
    config = load_config(overrides=["online.image_size=32"])
    dataset = make_dataset(output_dir, "train", batch_size=4, config=config, augment=False,
                           shuffle=False, drop_remainder=False, jit_compile=False, **kwargs)
    return [(images.numpy(), labels.numpy()) for images, labels in dataset]


def _verify(capsys, *argv) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = verify.main(list(argv))
    return code, capsys.readouterr().out.splitlines()


@pytest.mark.slow
def test_job_nightly_and_reader_on_s3(local_s3, tmp_path, monkeypatch, capsys):
    images, labels, classes = _data(tmp_path / "data")
    sets = ["split.train=1.0", "split.validation=0", "split.test=0"]
    local = run_job(images, tmp_path / "out", labels=[labels], classes=classes, sets=sets,
                    tft=True)
    bucket = local_s3.bucket("pm-job")
    local_s3.upload_tree(tmp_path / "data", f"{bucket}/data")
    out = f"{bucket}/out"
    # The transform is written as a launcher without TensorFlow writes it: in an isolated
    # child, which uploads with the job's S3 options and credentials.
    monkeypatch.setattr(tft_analysis, "_tensorflow_loaded", lambda: False)
    writers, start_writer = [], tft_analysis._writer_pool
    monkeypatch.setattr(tft_analysis, "_writer_pool",
                        lambda *args, **kwargs: writers.append(1) or start_writer(*args, **kwargs))
    remote = run_job(f"{bucket}/data/images", out, labels=[f"{bucket}/data/labels.csv"],
                     classes=f"{bucket}/data/classes.txt", sets=sets, extra=local_s3.flags,
                     isolation="subprocess",  # the decoder children read s3:// too
                     tft=True)  # made locally (TF cannot write s3://), then uploaded

    # The transform below came from a child: the one started ahead, plus one started at the
    # job's priority when that one gets under half a core (a busy machine: `_first_ready`).
    assert writers in ([1], [1, 1])
    # Byte-identical shards and rejects; committed with LATEST; nothing left behind.
    shards = sorted(entry["path"] for entry in remote.manifest["files"]
                    if ".tfrecord-" in entry["path"] and "dali_index" not in entry["path"])
    assert shards
    transform = sorted(os.path.relpath(os.path.join(folder, name), local.path)
                       for part in ("transform_fn", "transformed_metadata")
                       for folder, _, names in os.walk(os.path.join(local.path, part))
                       for name in names)
    assert "transform_fn/saved_model.pb" in transform
    assert sorted(key.split(f"{remote.run_id}/", 1)[1] for key in local_s3.keys(
        "pm-job", f"out/snapshots/{remote.run_id}/transform")) == transform
    for rel in shards + [layout.REJECTS] + transform:
        with open(os.path.join(local.path, rel), "rb") as handle:
            assert local_s3.read(f"{remote.path}/{rel}") == handle.read(), rel
    assert local_s3.read(f"{out}/{layout.LATEST}").decode().strip() == remote.run_id
    keys = local_s3.keys("pm-job", "out/")
    assert f"out/snapshots/{remote.run_id}/{layout.MANIFEST}" in keys
    assert not [key for key in keys if "/.staging/" in key or key == "out/.lock"], keys

    # The reader: the same batches from the S3 snapshot (through its cache) as from local.
    cache = tmp_path / "cache"
    expected = _batches(str(tmp_path / "out"))
    got = _batches(out, cache_dir=str(cache))
    assert len(got) == len(expected) == 2
    for (a_images, a_labels), (b_images, b_labels) in zip(expected, got):
        np.testing.assert_array_equal(a_images, b_images)
        np.testing.assert_array_equal(a_labels, b_labels)
    cached = os.path.join(cache, "pm-job", "out", "snapshots", remote.run_id, shards[0])
    assert os.path.isfile(cached)
    before = os.stat(cached).st_mtime_ns
    _batches(out, cache_dir=str(cache))  # a later run reuses the copy
    assert os.stat(cached).st_mtime_ns == before

    # Nightly on S3: nothing new -> the quick look ends it; a new image -> a snapshot.
    argv = ["--data_root", f"{bucket}/data/images", "--labels", f"{bucket}/data/labels.csv",
            "--output_dir", out, "--set", "decode.isolation=inline", "--set",
            "transform.enabled=false", "--set", "report.thumbnails_per_reason=0",
            *[arg for item in sets for arg in ("--set", item)], *local_s3.flags]
    unchanged = nightly.run(argv)
    assert unchanged.snapshot is None and unchanged.exit_code == 0, unchanged.message
    assert "nothing new since snapshot" in unchanged.message
    local_s3.client.put_object(Bucket="pm-job", Key="data/images/cat/new.jpg",
                               Body=photo_bytes(99, class_index=0))
    local_s3.client.put_object(
        Bucket="pm-job", Key="data/labels.csv",
        Body=local_s3.read(f"{bucket}/data/labels.csv") + b"cat/new.jpg,cat\n")
    grown = nightly.run(argv)
    assert grown.snapshot is not None and grown.exit_code == 0, grown.message
    assert grown.snapshot.run_id == local_s3.read(f"{out}/{layout.LATEST}").decode().strip()
    assert sum(len(images) for images, _ in _batches(out, cache_dir=str(cache),
                                                     snapshots="all")) == 9

    # `pixelmill verify` on s3://: both snapshots verify; a tampered shard is named broken.
    files = len(remote.manifest["files"]) + len(grown.snapshot.manifest["files"])
    assert _verify(capsys, out, *local_s3.flags) == (
        0, [f"pixelmill verify: 2 snapshot(s), {files} files: all verified"])
    with pytest.raises(UsageError, match="no such folder"):
        verify.main([f"{bucket}/nothing"])
    with pytest.raises(UsageError, match="bucket 'pm-nowhere' does not exist"):
        verify.main(["s3://pm-nowhere/out"])

    # A shard on S3 that no longer matches its manifest is refused, never cached.
    local_s3.client.put_object(Bucket="pm-job", Key=f"out/snapshots/{remote.run_id}/"
                               f"{shards[0]}", Body=b"tampered")
    code, lines = _verify(capsys, out, "--snapshot", remote.run_id)
    assert code == 1 and lines[-1] == (f"pixelmill verify: 1 snapshot(s), "
                                       f"{len(remote.manifest['files'])} files: 1 broken")
    assert lines[0].startswith(f"{remote.path}/{shards[0]}: ")
    with pytest.raises(ValueError, match="does not match its manifest entry"):
        _batches(out, cache_dir=str(tmp_path / "cache2"), snapshots="last:3")
    assert not os.path.exists(os.path.join(tmp_path, "cache2", "pm-job", "out", "snapshots",
                                           remote.run_id, shards[0]))
