"""Bounded cost per file in the inspection: a progressive JPEG with too many scans is rejected
from its markers before decoding (issue 9, case 7); scans are counted without being fooled by
a thumbnail JPEG inside an APP segment."""
from __future__ import annotations

import io
import os
import pathlib
import time

import numpy as np
import pytest
from PIL import Image

from configs.schema import load_config
from transforms.offline import image_header
from transforms.offline.image_header import jpeg_scans
from transforms.offline.image_inspection import ImageInspector
from transforms.offline.image_record import ImageRecord
from transforms.offline.inspect_image import InspectImageFn


def _jpeg(progressive: bool, size=(96, 64), exif: bytes = b"") -> bytes:
    pixels = np.random.default_rng(0).integers(0, 256, (size[1], size[0], 3)).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=85, progressive=progressive,
                                 **({"exif": exif} if exif else {}))
    return buffer.getvalue()


def _scan_bomb(copies: int) -> bytes:
    """A progressive JPEG whose last scan (its SOS segment and entropy-coded data) is repeated
    `copies` more times before EOI, as in the 50,000-scan file that decoded for two minutes."""
    data = _jpeg(progressive=True)
    last_scan = data.rindex(b"\xff\xda")
    scan = data[last_scan:-2]  # up to EOI
    return data[:-2] + scan * copies + data[-2:]


def _inspect(tmp_path, data: bytes, name: str = "x.jpg") -> ImageRecord:
    path = tmp_path / name
    path.write_bytes(data)
    inspector = ImageInspector(load_config(None, ()))
    inspector.setup()
    return inspector.inspect(ImageRecord(uri=str(path), path=name,
                                         file_bytes=os.path.getsize(path)))


def test_scans_of_baseline_and_progressive_jpegs():
    assert jpeg_scans(_jpeg(progressive=False)) == 1
    assert 5 <= jpeg_scans(_jpeg(progressive=True)) <= 12


@pytest.mark.parametrize("offset", [None, -1, 0, 1, 2])
def test_scans_are_counted_exactly_however_many_there_are(offset):
    # `offset` from image_header._FEW_SCANS, past which the count takes its other way
    scans = jpeg_scans(_jpeg(progressive=True))
    copies = 0 if offset is None else image_header._FEW_SCANS + offset - scans
    assert jpeg_scans(_scan_bomb(copies)) == scans + copies


def test_a_thumbnail_inside_an_app_segment_does_not_count():
    thumbnail = _jpeg(progressive=True, size=(16, 16))
    exif = b"Exif\x00\x00" + thumbnail  # not a valid TIFF: only the bytes matter here
    assert jpeg_scans(_jpeg(progressive=False, exif=exif)) == 1


def test_a_scan_bomb_is_too_large_without_decoding(tmp_path):
    bomb = _scan_bomb(copies=2000)
    assert jpeg_scans(bomb) > 2000
    started = time.monotonic()
    record = _inspect(tmp_path, bomb)
    assert time.monotonic() - started < 5.0
    assert record.reject.reason == "too_large"
    assert record.reject.detail.endswith("JPEG scans > limits.max_jpeg_scans=100; never decoded")


def test_a_normal_progressive_jpeg_is_decoded_and_measured(tmp_path):
    record = _inspect(tmp_path, _jpeg(progressive=True))
    assert record.reject is None or record.reject.reason not in ("too_large", "decoder_crash")
    assert record.metrics


@pytest.mark.slow  # its isolated child imports TensorFlow (a forkserver: tests/tiers.py)
def test_thumbnails_are_made_in_an_isolated_process_and_hostile_files_get_none(tmp_path):
    from transforms.reporting.thumbnails import thumbnails_png
    good, bomb, text = tmp_path / "good.jpg", tmp_path / "bomb.jpg", tmp_path / "text.jpg"
    good.write_bytes(_jpeg(progressive=False))
    bomb.write_bytes(_scan_bomb(copies=2000))
    text.write_bytes(b"not an image")
    pngs = thumbnails_png([str(good), str(bomb), str(text)], load_config(None, ()).limits,
                          timeout_s=20.0)
    assert pngs[str(good)].startswith(b"\x89PNG")
    assert pngs[str(bomb)] is None and pngs[str(text)] is None


def test_the_demo_report_shows_thumbnails_of_rejects(demo_snapshot):
    page = (pathlib.Path(demo_snapshot.path) / "report.html").read_text(encoding="utf-8")
    assert page.count('<img src="data:image/png;base64,') >= 3  # blurry, too_dark, duplicate...


@pytest.mark.slow
def test_a_report_with_no_thumbnails_draws_none_and_still_names_the_rejects(tmp_path):
    from tests.imageutil import photo_bytes
    from tests.jobutil import rejects, run_job
    root = tmp_path / "images"
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "ok.jpg").write_bytes(photo_bytes(1, 96, 128))
    (root / "cat" / "tiny.jpg").write_bytes(photo_bytes(2, 8, 8))
    snapshot = run_job(root, tmp_path / "out")   # report.thumbnails_per_reason=0
    assert [r["reason"] for r in rejects(snapshot)] == ["too_small"]
    page = (pathlib.Path(snapshot.path) / "report.html").read_text(encoding="utf-8")
    assert "<img" not in page and "Rejected images" not in page
    assert "cat/tiny.jpg" in page


def test_report_thumbnails_per_reason_is_checked_at_load():
    import pytest

    from configs.schema import ConfigError
    with pytest.raises(ConfigError, match=r"report\.thumbnails_per_reason.*-1"):
        load_config(None, ["report.thumbnails_per_reason=-1"])
    assert load_config(None, ()).report.thumbnails_per_reason == 4


class _RaisingInspector(ImageInspector):
    """An inspection whose decode raises (a decoder bug, not a bad file)."""

    def decode_read(self, read):
        raise ValueError("bad Huffman table")


def test_an_error_in_an_inline_inspection_rejects_its_file_as_a_decoder_crash(tmp_path):
    good, bad = tmp_path / "good.jpg", tmp_path / "bad.jpg"
    good.write_bytes(_jpeg(progressive=False))
    bad.write_bytes(_jpeg(progressive=False))
    config = load_config(None, ())
    step = InspectImageFn(ImageInspector(config))
    step.setup()
    [accepted] = step.process(ImageRecord(uri=str(good), path="good.jpg",
                                          file_bytes=os.path.getsize(good)))
    step = InspectImageFn(_RaisingInspector(config))
    step.setup()
    [crashed] = step.process(ImageRecord(uri=str(bad), path="bad.jpg",
                                         file_bytes=os.path.getsize(bad)))
    assert accepted.reject is None and accepted.metrics
    assert (crashed.path, crashed.reject.reason, crashed.reject.detail) == (
        "bad.jpg", "decoder_crash", "ValueError: ValueError('bad Huffman table')")
