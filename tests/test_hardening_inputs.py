"""Hostile inputs (issue 9): one bad label, file name, CSV cell or file never stops the job or
corrupts the class table; it becomes one reject line with a reason, and the rest goes on."""
from __future__ import annotations

import io
import os
import pathlib
import struct

import numpy as np
import pytest
from PIL import Image

from configs.schema import Config, LabelsConfig
from runners.demo.data import photo_like
from tests.imageutil import photo_bytes
from tests.jobutil import copy_output, index_rows, read_records, rejects, run_job
from transforms import codec
from transforms.decode import decode_image
from transforms.offline import classes, image_header, paths
from transforms.offline.boxes import parse_box_csv
from transforms.offline.csv_records import text_lines
from transforms.offline.image_record import ImageRecord
from transforms.offline.join_labels import resolve_labels
from transforms.offline.labels import LabelRow, parse_label_csv

FAST = ["decode.isolation=inline", "transform.enabled=false"]

# Every character str.splitlines() breaks on besides \n and \r, and NUL.
LINE_BREAKERS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x00"]


def jpeg(seed: int, class_index: int = 0, height: int = 64, width: int = 80) -> bytes:
    return photo_bytes(seed, height, width, class_index, quality=90)


def write(root, rel: str, data: bytes):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# Case 1: labels with line-breaking characters.

@pytest.mark.parametrize("char", LINE_BREAKERS)
def test_a_label_with_a_line_breaking_character_is_a_bad_label_row(char):
    text = f"path,label\na.jpg,ze{char}bra\nb.jpg,cat\n"
    rows = list(parse_label_csv("labels.csv", text.split("\n"), LabelsConfig()))
    bad, good = rows
    assert (bad.reason, bad.path, bad.kind) == ("bad_label", "a.jpg", "label_row")
    assert f"U+{ord(char):04X}" in bad.detail and "labels.csv line 2" in bad.detail
    assert good == LabelRow(path="b.jpg", label="cat", split=None, meta=(),
                            source="labels.csv:3")


def test_a_box_label_with_a_line_separator_is_a_bad_label_row():
    text = "path,xmin,ymin,xmax,ymax,label\na.jpg,1,1,5,5,ze\u2028bra\n"
    (bad,) = parse_box_csv("boxes.csv", text.split("\n"))
    assert (bad.reason, bad.kind) == ("bad_label", "box_row")
    assert "U+2028" in bad.detail


def test_a_class_folder_with_a_line_breaking_character_is_a_bad_label():
    record = ImageRecord(uri="/r/ze\x1cbra/a.jpg", path="ze\x1cbra/a.jpg", file_bytes=1,
                         sha256="ab", width=10, height=10)
    resolved = resolve_labels(record, Config(), folder_labels=True)
    assert resolved.reject.reason == "bad_label"
    assert "U+001C" in resolved.reject.detail


@pytest.mark.parametrize("char", LINE_BREAKERS)
def test_the_class_table_refuses_to_write_a_name_it_could_not_read_back(tmp_path, char):
    path = str(tmp_path / "classes.txt")
    with pytest.raises(ValueError, match=f"id 1 contains U\\+{ord(char):04X}"):
        classes.write_class_table(path, ["cat", f"ze{char}bra"])
    assert not (tmp_path / "classes.txt").exists()


def test_the_class_table_is_read_by_newline_only():
    # A table written before names were checked keeps every id where it was.
    assert classes.parse_class_table("cat\nze\u2028bra\nne\x85w\r\ndog\n", "t") == [
        "cat", "ze\u2028bra", "ne\x85w", "dog"]


def test_bad_labels_never_reach_the_class_table_and_ids_never_move(folder_snapshot, tmp_path):
    root = tmp_path / "images"
    for i, name in enumerate(["a", "b", "c", "d"]):
        write(root, f"{name}.jpg", jpeg(40 + i, i % 3))
    # An earlier run's output (conftest folder_snapshot, copied): its class table is cat, dog.
    out = pathlib.Path(copy_output(folder_snapshot.out, tmp_path / "out"))
    assert (out / "classes.txt").read_text() == "cat\ndog\n"
    second_csv = tmp_path / "second.csv"
    second_csv.write_text("path,label\na.jpg,cat\nb.jpg,dog\nc.jpg,ne\u2028w\nd.jpg,zebra\n",
                          encoding="utf-8")
    second = run_job(root, out, labels=[second_csv], sets=FAST)
    table = (out / "classes.txt").read_bytes().decode("utf-8")
    assert table == "cat\ndog\nzebra\n"
    rows = index_rows(second)
    assert (rows["a.jpg"]["label_id"], rows["b.jpg"]["label_id"],
            rows["d.jpg"]["label_id"]) == (0, 1, 2)
    (bad,) = [r for r in rejects(second) if r["reason"] == "bad_label"]
    assert bad["path"] == "c.jpg" and "U+2028" in bad["detail"]
    assert rows["c.jpg"]["reason"] == "unlabeled"
    third = run_job(root, out, labels=[second_csv], sets=FAST)  # and the next run still works
    assert index_rows(third)["d.jpg"]["label_id"] == 2


# Case 2: a file name that is not valid UTF-8.

def test_a_name_that_is_not_utf8_is_unsafe_and_shown_escaped():
    with pytest.raises(paths.UnsafePath, match=r"not valid UTF-8.*/r/cat/\\xff\\xfe\.jpg"):
        paths.relative_to_root("/r", "/r/cat/\udcff\udcfe.jpg")
    assert paths.printable("/r/cat/\udcff\udcfe.jpg") == "/r/cat/\\xff\\xfe.jpg"
    assert paths.printable("/r/ch\u00e2t/a.jpg") == "/r/ch\u00e2t/a.jpg"


@pytest.mark.slow
def test_one_file_name_that_is_not_utf8_is_rejected_alone(tmp_path):
    root = tmp_path / "images"
    for i in range(3):
        write(root, f"cat/{i}.jpg", jpeg(50 + i))
    bad = os.path.join(os.fsencode(root), b"cat", b"\xff\xfe.jpg")
    with open(bad, "wb") as handle:
        handle.write(jpeg(60))
    snapshot = run_job(root, tmp_path / "out", sets=FAST)
    assert snapshot.accounting["images"] == {"discovered": 4, "accepted": 3, "rejected": 1,
                                             "skipped": 0, "ok": True}
    (line,) = rejects(snapshot)
    assert line["reason"] == "unsafe_path"
    assert line["path"].endswith("cat/\\xff\\xfe.jpg")
    assert "not valid UTF-8" in line["detail"] and "\\xff\\xfe.jpg" in line["detail"]


# Case 3: CSV cells that are not UTF-8, labels that span lines, over-long cells.

def csv_bytes_with_hostile_rows(filler_rows: int = 400) -> bytes:
    """A label CSV whose bad rows come after the first 8 KB (the launcher only reads the
    header): a cell that is not UTF-8, a quoted label spanning two lines, a 10 MB quoted cell
    of short lines; valid rows after each."""
    lines = [b"path,label,note"]
    lines += [b"filler/%d.jpg,cat,x" % i for i in range(filler_rows)]
    lines += [b"a.jpg,cat,caf\xe9 au lait",        # Latin-1, not UTF-8
              b'b.jpg,"multi\nline",x',
              b'c.jpg,dog,"' + b"spam spam spam\n" * 700_000 + b'"',
              b"d.jpg,dog,fine"]
    return b"\n".join(lines) + b"\n"


def test_hostile_csv_rows_are_one_bad_row_each_and_the_rest_is_read():
    data = csv_bytes_with_hostile_rows()
    assert len(data) > 10_000_000 and data.index(b"\xe9") > 8192
    items = list(parse_label_csv("labels.csv", text_lines(io.BytesIO(data)), LabelsConfig()))
    bad = [item for item in items if not isinstance(item, LabelRow)]
    good = [item.path for item in items if isinstance(item, LabelRow)]
    assert len(good) == 401 and good[-1] == "d.jpg"
    utf8, multi, long_cell = bad
    line = 402
    assert (utf8.reason, utf8.path) == ("bad_csv_row", f"labels.csv:{line}")
    assert "column 'note' is not valid UTF-8" in utf8.detail and "caf\\xe9" in utf8.detail
    assert (multi.reason, multi.path) == ("bad_label", "b.jpg")
    assert f"labels.csv line {line + 1}" in multi.detail and "U+000A" in multi.detail
    assert (long_cell.reason, long_cell.path) == ("bad_csv_row", f"labels.csv:{line + 3}")
    assert "column 'note' is longer than 65536 bytes" in long_cell.detail
    assert len(long_cell.detail) < 600


def test_max_cell_bytes_is_configurable_and_counts_bytes():
    text = "path,label\na.jpg,\u00e9\u00e9\u00e9\nb.jpg,abcdef\nc.jpg,cat\n"
    items = list(parse_label_csv("l.csv", text.split("\n"), LabelsConfig(max_cell_bytes=5)))
    assert [getattr(item, "reason", None) for item in items] == ["bad_csv_row", "bad_csv_row",
                                                                 None]
    assert "column 'label' is longer than 5 bytes" in items[0].detail


def test_a_line_without_end_is_cut_not_held_whole():
    lines = list(text_lines(io.BytesIO(b"path,label\n" + b"x" * 5000 + b"\na.jpg,cat\n"),
                            max_cell_bytes=100))
    assert [len(line) for line in lines] == [11, 1602, 10]
    items = list(parse_label_csv("l.csv", lines, LabelsConfig(max_cell_bytes=100)))
    assert "longer than" in items[0].detail and items[1].path == "a.jpg"


@pytest.mark.slow
def test_a_job_reads_past_hostile_csv_rows(tmp_path):
    root = tmp_path / "images"
    for i, name in enumerate(["a", "b", "c", "d"]):
        write(root, f"{name}.jpg", jpeg(70 + i, i % 2))
    csv_path = tmp_path / "labels.csv"
    csv_path.write_bytes(csv_bytes_with_hostile_rows(filler_rows=0))
    snapshot = run_job(root, tmp_path / "out", labels=[csv_path], sets=FAST)
    assert (tmp_path / "out" / "classes.txt").read_text() == "dog\n"
    reasons = sorted((r["reason"], r["path"]) for r in rejects(snapshot))
    assert reasons == [("bad_csv_row", f"{csv_path}:2"), ("bad_csv_row", f"{csv_path}:5"),
                       ("bad_label", "b.jpg"), ("unlabeled", "a.jpg"), ("unlabeled", "b.jpg"),
                       ("unlabeled", "c.jpg")]
    assert snapshot.accounting["label_rows"] == {"total": 4, "matched": 1, "rejected": 3,
                                                 "ok": True}


# Cases 5, 6, 8, 9: stored size, work per file, file size, only regular files.

def _lzw_frame(pixels: np.ndarray) -> bytes:
    """The LZW minimum code size and data sub-blocks of a palette image, as Pillow writes
    them."""
    image = Image.fromarray(pixels.astype(np.uint8), "P")
    image.putpalette([v for i in range(256) for v in (i, 255 - i, (i * 7) % 256)])
    buffer = io.BytesIO()
    image.save(buffer, "GIF")
    data = buffer.getvalue()
    start = 13 + ((3 << ((data[10] & 7) + 1)) if data[10] & 0x80 else 0)
    while data[start] == 0x21:  # extensions before the image descriptor
        start += 2
        while data[start]:
            start += data[start] + 1
        start += 1
    packed = data[start + 9]
    pos = start + 10 + ((3 << ((packed & 7) + 1)) if packed & 0x80 else 0)
    end = pos + 1
    while data[end]:
        end += data[end] + 1
    return data[pos:end + 1]


def gif(screen: tuple[int, int], frames: list[tuple[int, int, np.ndarray]]) -> bytes:
    """A GIF with a logical screen and frames (left, top, pixels) anywhere on or off it."""
    palette = bytes(v for i in range(256) for v in (i, 255 - i, (i * 7) % 256))
    out = bytearray(b"GIF89a" + struct.pack("<HHBBB", *screen, 0xF7, 0, 0) + palette)
    for left, top, pixels in frames:
        height, width = pixels.shape
        out += b"\x2c" + struct.pack("<HHHHB", left, top, width, height, 0) + _lzw_frame(pixels)
    return bytes(out + b"\x3b")


def noise(seed: int, height: int, width: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width))


GIF_LAYOUTS = {
    "screen larger than the frame": ((38, 32), [(0, 0, noise(1, 32, 27))]),
    "frame off the screen": ((40, 40), [(0, 0, noise(2, 40, 40)), (30, 30, noise(3, 20, 20))]),
    "later frame larger": ((10, 10), [(0, 0, noise(4, 10, 10)), (0, 0, noise(5, 60, 50))]),
    "small first frame at an offset": ((50, 50), [(10, 10, noise(6, 30, 20))]),
}


@pytest.mark.parametrize("name", sorted(GIF_LAYOUTS))
def test_the_header_size_of_a_gif_is_what_the_decoder_returns(name):
    screen, frames = GIF_LAYOUTS[name]
    data = gif(screen, frames)
    header = image_header.read_header(data)
    assert decode_image(data).shape == (header.height, header.width, 3)
    assert header.total_pixels == sum(p.size for _, _, p in frames)


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "WEBP", "JPEG"])
def test_the_header_size_of_other_formats_is_what_the_decoder_returns(fmt):
    buffer = io.BytesIO()
    Image.fromarray(photo_like(np.random.default_rng(9), 37, 53, 1)).save(buffer, fmt)
    header = image_header.read_header(buffer.getvalue())
    assert decode_image(buffer.getvalue()).shape == (37, 53, 3) == (header.height,
                                                                      header.width, 3)


def test_frames_are_counted_from_the_header_before_decoding():
    stub = b"\x02\x02\x4c\x01\x00"  # LZW minimum code size 2, clear + end: never decoded here
    frame = b"\x2c" + struct.pack("<HHHHB", 0, 0, 2000, 2000, 0) + stub
    data = (b"GIF89a" + struct.pack("<HHBBB", 2000, 2000, 0, 0, 0) + frame * 200 + b"\x3b")
    header = image_header.read_header(data)
    assert (header.frames, header.total_pixels, len(data) < 5000) == (200, 800_000_000, True)
    apng = io.BytesIO()
    stills = [Image.fromarray(photo_like(np.random.default_rng(i), 40, 50, 0)) for i in range(4)]
    stills[0].save(apng, "PNG", save_all=True, append_images=stills[1:])
    header = image_header.read_header(apng.getvalue())
    assert (header.frames, header.total_pixels) == (4, 4 * 40 * 50)


def test_discovery_never_opens_a_fifo(tmp_path):
    fifo = tmp_path / "x.jpg"
    os.mkfifo(fifo)
    assert paths.not_a_regular_file(str(fifo)) == "not a regular file (a FIFO); never opened"
    assert paths.not_a_regular_file(str(tmp_path)) == (
        "not a regular file (a directory); never opened")
    regular = write(tmp_path, "y.jpg", b"x")
    assert paths.not_a_regular_file(str(regular)) is None
    assert paths.not_a_regular_file("gs://bucket/x.jpg") is None


@pytest.mark.slow
def test_sizes_frames_files_and_fifos_in_one_job(tmp_path):
    root = tmp_path / "images"
    rng = np.random.default_rng(11)
    write(root, "cat/screen.gif", gif((60, 50), [(0, 0, rng.integers(0, 256, (40, 48)))]))
    write(root, "cat/many.gif", gif((64, 64), [(0, 0, noise(20 + i, 64, 64))
                                               for i in range(5)]))
    png = io.BytesIO()
    Image.fromarray(photo_like(rng, 64, 64, 0)).save(png, "PNG")
    write(root, "cat/padded.png", png.getvalue() + bytes(60_000))
    write(root, "cat/ok.jpg", jpeg(12))
    os.mkfifo(root / "cat" / "pipe.jpg")
    snapshot = run_job(root, tmp_path / "out", sets=FAST + [
        "limits.max_total_pixels=15000", "limits.max_file_bytes=50000"])
    rows = index_rows(snapshot)
    assert rows["cat/screen.gif"]["accepted"]
    assert (rows["cat/screen.gif"]["width"], rows["cat/screen.gif"]["height"]) == (48, 40)
    by_path = {r["path"]: r for r in rejects(snapshot)}
    assert by_path["cat/many.gif"]["reason"] == "too_large"
    assert "5 frames, 20480 pixels in all > limits.max_total_pixels=15000" in (
        by_path["cat/many.gif"]["detail"])
    assert by_path["cat/padded.png"]["reason"] == "too_large"
    assert by_path["cat/padded.png"]["detail"].startswith(
        f"{len(png.getvalue()) + 60_000} bytes, more than limits.max_file_bytes=50000")
    assert by_path["cat/pipe.jpg"]["reason"] == "unreadable"
    assert "a FIFO" in by_path["cat/pipe.jpg"]["detail"]
    records = {r[codec.IMAGE_FILENAME].numpy().decode(): r for r in read_records(snapshot)}
    stored = records["cat/screen.gif"]
    decoded = decode_image(stored[codec.IMAGE_ENCODED])
    assert decoded.shape[:2] == (int(stored[codec.IMAGE_HEIGHT]), int(stored[codec.IMAGE_WIDTH]))
