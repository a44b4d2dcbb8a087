"""EXIF orientation: every decode path returns what a viewer (`PIL.ImageOps.exif_transpose`)
shows, for all 8 orientations; the Python and graph readers of the tag agree; the switch
`decode.exif_orientation: false` keeps the stored orientation; the job records the displayed
size and the orientation; the training reader and the serving transform return it upright."""
from __future__ import annotations

import io
import json
import os
import struct
import types

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps

from configs.schema import ConfigError, load_config
from pipelines.reader_samples import parse_sample
from pipelines.training_input import make_dataset
from tests.imageutil import photo, write_bytes
from tests.jobutil import index_rows, run_job
from tests.tiers import slow_fixture
from transforms import codec
from transforms.decode import decode_for_model, decode_image, decode_scaled
from transforms.offline import exif
from transforms.offline.image_header import read_header
from transforms.offline.index_table import upgrade_row
from transforms.orientation import apply_orientation, read_orientation
from transforms.reporting.thumbnails import thumbnail_png

ORIENTATIONS = range(1, 9)
HEIGHT, WIDTH = 96, 128  # stored size; not square, so a wrong turn cannot match


def _with_orientation(pixels: np.ndarray, orientation: int, fmt: str = "JPEG") -> bytes:
    """`pixels` encoded by PIL with EXIF Orientation=`orientation`."""
    tags = Image.Exif()
    tags[exif.ORIENTATION_TAG] = orientation
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt, exif=tags.tobytes(),
                                 **({"quality": 95} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def _upright(data: bytes) -> np.ndarray:
    """What a viewer shows: PIL's decode, `exif_transpose`d."""
    return np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))


def _resized(pixels: np.ndarray, size) -> np.ndarray:
    """`pixels` [h, w, 3] resized (area) to `size` (height, width), float in [0, 255]."""
    return tf.image.resize(pixels.astype(np.float32), size, method="area").numpy()


def _best_turn(image: np.ndarray, stored: np.ndarray) -> int:
    """The orientation k whose transform of `stored` is closest to `image` (same size)."""
    diffs = {}
    for k in ORIENTATIONS:
        turned = apply_orientation(tf.constant(stored), k).numpy()
        if turned.shape[:2] == image.shape[:2]:
            diffs[k] = np.abs(turned.astype(np.float32) - image.astype(np.float32)).mean()
        else:
            turned = _resized(turned, image.shape[:2])
            diffs[k] = np.abs(turned - image.astype(np.float32)).mean()
    return min(diffs, key=diffs.get)


@pytest.fixture(scope="module")
def pixels() -> np.ndarray:
    return photo(7, HEIGHT, WIDTH)


@pytest.fixture(scope="module")
def graphs():
    """The graph forms the tests call, each traced with only the bytes as input: the tag
    reader and the three decode paths. Shared by the module, so each is traced once per test
    process instead of once per test and orientation (the bytes are their only input)."""
    spec = [tf.TensorSpec([], tf.string)]
    return types.SimpleNamespace(
        read_orientation=tf.function(read_orientation, input_signature=spec),
        decode_image=tf.function(decode_image, input_signature=spec),
        decode_scaled=tf.function(lambda b: decode_scaled(b, (24, 24)),  # DCT scale 4
                                  input_signature=spec),
        decode_for_model=tf.function(lambda b: decode_for_model(b, (40, 40)),
                                     input_signature=spec))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_both_readers_of_the_tag_agree_with_pil(pixels, graphs, orientation, fmt):
    data = _with_orientation(pixels, orientation, fmt)
    assert Image.open(io.BytesIO(data)).getexif().get(exif.ORIENTATION_TAG) == orientation
    assert exif.read_orientation(data) == orientation
    assert int(graphs.read_orientation(tf.constant(data))) == orientation
    header = read_header(data)
    assert header.orientation == orientation
    expected = (HEIGHT, WIDTH) if orientation >= 5 else (WIDTH, HEIGHT)
    assert header.displayed_size == expected and (header.width, header.height) == (WIDTH, HEIGHT)


def _tiff(order: str, entries) -> bytes:
    """A TIFF block with one IFD0 of (tag, type, count, value bytes) entries."""
    prefix = b"II" if order == "<" else b"MM"
    body = struct.pack(order + "HI", 42, 8) + struct.pack(order + "H", len(entries))
    for tag, kind, count, value in entries:
        body += struct.pack(order + "HHI", tag, kind, count) + value.ljust(4, b"\0")
    return prefix + body + b"\0\0\0\0"


def _jpeg_with_app1(pixels, payload: bytes, before: bytes = b"") -> bytes:
    """A JPEG whose first segments are `before` and then an APP1 holding `payload`."""
    plain = io.BytesIO()
    Image.fromarray(pixels).save(plain, "JPEG")
    data = plain.getvalue()
    app1 = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return data[:2] + before + app1 + data[2:]


def _variants(pixels) -> list[tuple[bytes, int]]:
    """Hand-made EXIF blocks: byte orders, value types, odd placements, broken blocks."""
    short_be = struct.pack(">H", 6)
    cases = [
        (_tiff(">", [(0x0110, 2, 4, b"cam\0"), (0x0112, 3, 1, short_be)]), 6),  # big-endian
        (_tiff("<", [(0x0112, 4, 1, struct.pack("<I", 8))]), 8),                # LONG
        (_tiff("<", [(0x0112, 3, 1, struct.pack("<H", 9))]), 1),                # out of range
        (_tiff("<", [(0x0112, 3, 2, struct.pack("<HH", 3, 3))]), 1),            # count 2
        (_tiff("<", [(0x0112, 2, 1, b"3")]), 1),                                # ASCII
        (b"MM\0\x2a\0\0\xff\xff", 1),                                          # IFD past end
        (b"XX\0\x2a\0\0\0\x08", 1),                                            # byte order
    ]
    made = [(_jpeg_with_app1(pixels, b"Exif\0\0" + tiff), k) for tiff, k in cases]
    xmp = b"\xff\xe1\x00\x11http://ns.adobe"                  # another APP1 first
    fill = b"\xff\xff"                                         # fill bytes before a marker
    good = b"Exif\0\0" + _tiff("<", [(0x0112, 3, 1, struct.pack("<H", 3))])
    made += [(_jpeg_with_app1(pixels, good, xmp), 3), (_jpeg_with_app1(pixels, good, fill), 3),
             (_jpeg_with_app1(pixels, b"NotExif" + good[6:]), 1), (b"", 1), (b"\xff\xd8", 1),
             (b"\x89PNG\r\n\x1a\n", 1), (b"GIF89a" + good, 1)]
    return made


def test_hand_made_and_broken_blocks_read_the_same_in_python_and_in_the_graph(pixels, graphs):
    graph = graphs.read_orientation
    for data, expected in _variants(pixels):
        assert exif.read_orientation(data) == expected, data[:40]
        assert int(graph(tf.constant(data))) == expected, data[:40]


def test_mutated_heads_never_fail_and_agree(pixels, graphs):
    """Random byte changes in the first 200 bytes of an EXIF JPEG: both readers agree and
    neither raises."""
    graph = graphs.read_orientation
    base = bytearray(_with_orientation(pixels, 6))
    rng = np.random.default_rng(0)
    for _ in range(60):
        data = bytearray(base)
        for position in rng.integers(2, 200, size=3):
            data[position] = int(rng.integers(0, 256))
        cut = int(rng.integers(20, len(data))) if rng.random() < 0.3 else len(data)
        data = bytes(data[:cut])
        assert int(graph(tf.constant(data))) == exif.read_orientation(data)


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_every_decode_path_matches_exif_transpose(pixels, graphs, orientation):
    """decode_image, decode_scaled and decode_for_model, traced with only the bytes as input."""
    data = _with_orientation(pixels, orientation)
    upright = _upright(data)
    image = graphs.decode_image(tf.constant(data)).numpy()
    assert image.shape == upright.shape
    assert np.abs(image.astype(int) - upright).mean() < 3.0
    scaled = graphs.decode_scaled(tf.constant(data)).numpy()  # DCT scale 4: short side 96 -> 24
    assert scaled.shape[:2] == (upright.shape[0] // 4, upright.shape[1] // 4)
    assert np.abs(scaled - _resized(upright, scaled.shape[:2])).mean() < 8.0
    model = graphs.decode_for_model(tf.constant(data)).numpy()
    assert np.abs(model * 255.0 - _resized(upright, (40, 40))).mean() < 8.0
    stored = tf.io.decode_jpeg(data, channels=3).numpy()
    assert _best_turn(image, stored) == orientation
    assert _best_turn(scaled, stored) == orientation


@pytest.mark.parametrize("orientation", [3, 6])
def test_orientation_one_keeps_the_stored_image(pixels, orientation):
    """`decode.exif_orientation: false` passes orientation=1: the raw sensor orientation."""
    data = _with_orientation(pixels, orientation)
    stored = tf.io.decode_jpeg(data, channels=3).numpy()
    np.testing.assert_array_equal(decode_image(data, orientation=1).numpy(), stored)
    assert decode_scaled(data, (24, 24), orientation=1).shape[:2] == (24, 32)


def test_png_exif_is_applied(pixels):
    data = _with_orientation(pixels, 8, "PNG")
    np.testing.assert_array_equal(decode_image(data).numpy(), _upright(data))


def _record(data: bytes, orientation: int | None, height: int, width: int) -> bytes:
    """A serialized record; `orientation=None` drops the key (a shard from before it)."""
    serialized = codec.encode_example(
        encoded=data, image_format="jpeg", height=height, width=width, filename="a.jpg",
        sha256="ab" * 32, label=0, label_text="cat", orientation=orientation or 1)
    if orientation is None:
        example = tf.train.Example.FromString(serialized)
        del example.features.feature[codec.IMAGE_ORIENTATION]
        serialized = example.SerializeToString(deterministic=True)
    return serialized


@pytest.mark.parametrize("stored_key", [6, None])
@pytest.mark.parametrize("to_canvas", [False, True])
def test_reader_sample_is_upright_from_the_key_or_the_bytes(pixels, stored_key, to_canvas):
    data = _with_orientation(pixels, 6)
    upright = _upright(data)
    assert codec.parse_example(_record(data, None, WIDTH, HEIGHT))[codec.IMAGE_ORIENTATION] == 0
    options = dict(image_size=(48, 48), num_classes=2, with_boxes=False, max_boxes=1,
                   to_canvas=to_canvas)
    serialized = tf.constant(_record(data, stored_key, WIDTH, HEIGHT))
    sample = parse_sample(serialized, **options)
    image = (sample["source"].numpy().astype(np.float32) if to_canvas
             else sample["images"].numpy() * 255.0)
    assert np.abs(image - _resized(upright, image.shape[:2])).mean() < 8.0
    raw = parse_sample(serialized, **options, exif_orientation=False)
    raw_image = raw["source"] if to_canvas else raw["images"]
    stored = tf.io.decode_jpeg(data, channels=3).numpy()
    assert np.abs(raw_image.numpy().astype(np.float32) * (1 if to_canvas else 255.0)
                  - _resized(stored, raw_image.shape[:2])).mean() < 8.0


def test_a_recorded_orientation_is_taken_as_it_is_and_older_snapshots_read_the_bytes(
        pixels, tmp_path):
    """`orientation_recorded` (every record carries the key: the manifests say so) takes the
    key as stored and builds no EXIF reader; a snapshot whose manifest does not say so (written
    before the key) keeps the fallback. Shown on a record without the key (parsed as 0) whose
    bytes say 6: trusted, it stays as stored."""
    from pipelines.reader_metadata import orientation_recorded
    from transforms.snapshot_layout import Snapshot
    data = _with_orientation(pixels, 6)
    serialized = tf.constant(_record(data, None, WIDTH, HEIGHT))
    options = dict(image_size=(48, 48), num_classes=2, with_boxes=False, max_boxes=1)
    trusted = parse_sample(serialized, **options, orientation_recorded=True)["images"].numpy()
    stored = tf.io.decode_jpeg(data, channels=3).numpy()
    assert np.abs(trusted * 255.0 - _resized(stored, trusted.shape[:2])).mean() < 8.0
    fallback = parse_sample(serialized, **options)["images"].numpy()
    assert np.abs(fallback * 255.0 - _resized(_upright(data), fallback.shape[:2])).mean() < 8.0
    snapshots = []
    for run_id, manifest in (("new", {"orientation_recorded": True}), ("old", {})):
        os.makedirs(tmp_path / run_id)
        (tmp_path / run_id / "manifest.json").write_text(json.dumps(
            {"run_id": run_id, "files": [], **manifest}))
        snapshots.append(Snapshot(run_id=run_id, path=str(tmp_path / run_id)))
    assert orientation_recorded(snapshots[:1]) is True
    assert orientation_recorded(snapshots) is False  # read together: one old one decides


def test_thumbnail_is_upright(pixels, tmp_path):
    path = write_bytes(tmp_path / "turned.jpg", _with_orientation(pixels, 6))
    thumb = np.asarray(Image.open(io.BytesIO(thumbnail_png(path, max_side=64))))
    assert thumb.shape[:2] == (64, 48)
    raw = np.asarray(Image.open(io.BytesIO(thumbnail_png(path, 64, exif_orientation=False))))
    assert raw.shape[:2] == (48, 64)


def test_switch_is_validated_and_an_old_index_row_upgrades():
    assert load_config().decode.exif_orientation is True
    assert load_config(overrides=["decode.exif_orientation=false"]).decode.exif_orientation \
        is False
    with pytest.raises(ConfigError, match="decode.exif_orientation"):
        load_config(overrides=["decode.exif_orientation=sideways"])
    assert upgrade_row({"path": "a.jpg", "width": 4, "height": 3})["orientation"] == 1
    assert upgrade_row({"path": "b.jpg", "width": None})["orientation"] is None
    with pytest.raises(ValueError, match="orientation"):
        codec.encode_example(encoded=b"", image_format="jpeg", height=1, width=1, filename="a",
                             sha256="ab" * 32, label=0, label_text="a", orientation=9)


@slow_fixture(scope="module")
def turned_job(tmp_path_factory):
    """One job with TFT over a portrait phone photo (stored landscape, Orientation=6), a
    mirrored one (2) and a plain one."""
    root = tmp_path_factory.mktemp("orient")
    data = root / "data"
    files = {}
    for name, seed, orientation in (("phone.jpg", 1, 6), ("mirror.jpg", 2, 2),
                                    ("plain.jpg", 3, 1)):
        files[name] = _with_orientation(photo(seed, HEIGHT, WIDTH), orientation)
        write_bytes(data / "cat" / name, files[name])
    snapshot = run_job(data, root / "out", tft=True, sets=[
        "online.image_size=32", "split.train=1.0", "split.validation=0.0", "split.test=0.0"])
    return snapshot, str(root / "out"), files


def test_job_records_displayed_size_and_orientation(turned_job):
    snapshot, _, files = turned_job
    rows = {os.path.basename(path): row for path, row in index_rows(snapshot).items()}
    assert all(row["accepted"] for row in rows.values()), rows
    assert (rows["phone.jpg"]["width"], rows["phone.jpg"]["height"]) == (HEIGHT, WIDTH)
    assert (rows["mirror.jpg"]["width"], rows["mirror.jpg"]["height"]) == (WIDTH, HEIGHT)
    assert {name: row["orientation"] for name, row in rows.items()} == {
        "phone.jpg": 6, "mirror.jpg": 2, "plain.jpg": 1}
    assert snapshot.manifest["orientation_recorded"] is True
    shard_dir = os.path.join(snapshot.path, "train")
    records = [codec.parse_example(serialized) for name in sorted(os.listdir(shard_dir))
               if ".tfrecord" in name for serialized in tf.data.TFRecordDataset(
                   os.path.join(shard_dir, name), compression_type="")]
    by_name = {r[codec.IMAGE_FILENAME].numpy().decode(): r for r in records}
    phone = by_name["cat/phone.jpg"]
    assert int(phone[codec.IMAGE_ORIENTATION]) == 6
    assert (int(phone[codec.IMAGE_HEIGHT]), int(phone[codec.IMAGE_WIDTH])) == (WIDTH, HEIGHT)
    assert phone[codec.IMAGE_ENCODED].numpy() == files["phone.jpg"]  # original bytes kept


def test_reader_and_serving_transform_are_upright(turned_job):
    """The reader's records (no augmentation) are the upright images; the serving transform,
    given only the bytes, yields the reader's normalized pixels; with the switch off the
    reader returns the stored orientation."""
    import tensorflow_transform as tft

    from transforms.offline.tft_analysis import IMAGE
    snapshot, out, files = turned_job
    names = sorted(files)
    config = load_config(overrides=["online.image_size=32"])
    common = dict(split="train", batch_size=3, augment=False, shuffle=False,
                  drop_remainder=False, with_boxes=False)
    plain, _ = next(iter(make_dataset(out, config=config, normalize=False, **common)))
    uprights = [_resized(_upright(files[name]), (32, 32)) for name in names]
    order = [int(np.argmin([np.abs(image * 255.0 - u).mean() for u in uprights]))
             for image in plain.numpy()]
    assert sorted(order) == [0, 1, 2]
    for image, index in zip(plain.numpy(), order):
        assert np.abs(image * 255.0 - uprights[index]).mean() < 4.0, names[index]
    normalized, _ = next(iter(make_dataset(out, config=config, **common)))
    served = tft.TFTransformOutput(snapshot.path).transform_raw_features(
        {codec.IMAGE_ENCODED: tf.constant([files[names[i]] for i in order])})[IMAGE]
    np.testing.assert_allclose(served.numpy(), normalized.numpy(), atol=1e-4)
    raw_config = load_config(overrides=["online.image_size=32", "decode.exif_orientation=false"])
    raw, _ = next(iter(make_dataset(out, config=raw_config, normalize=False, **common)))
    for image, index in zip(raw.numpy(), order):
        stored = _resized(tf.io.decode_jpeg(files[names[index]], channels=3).numpy(), (32, 32))
        assert np.abs(image * 255.0 - stored).mean() < 4.0, names[index]
