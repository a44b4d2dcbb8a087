"""Synthetic data for the demo and the benchmark: photo-like images, labels, boxes, bad inputs.

`generate_demo` writes a small labelled dataset in which every kind of bad input the offline job
must catch appears once, under a name that says what is wrong with it, and returns the outcome
the job is expected to reach for each file and CSV row (`DemoDataset.expected`). Run the demo
with the generated class table as `--classes` so the table is frozen (the `zebra` row is then
`unknown_class`).

`generate_corpus` writes many larger JPEGs (and a few PNGs) quickly for throughput benchmarks,
cut from canvases built like photographs (smooth areas, edges, some texture), not noise.

All randomness is `np.random.default_rng(seed)`: the same seed (and the same Pillow/libjpeg)
writes byte-identical files.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import os

import numpy as np
from PIL import Image, ImageFilter

from transforms.snapshot_layout import CLASSES

__all__ = ["DEMO_CLASSES", "DemoDataset", "generate_demo", "generate_corpus", "photo_like"]

DEMO_CLASSES = ("cat", "dog", "bird", "fish")

# Two base colours per class (RGB): a background and an object colour family.
_PALETTE = np.array([
    [[196, 120, 60], [90, 60, 40]],     # warm orange / brown
    [[150, 130, 80], [60, 80, 50]],     # sand / olive
    [[110, 160, 210], [220, 190, 60]],  # sky blue / yellow
    [[40, 140, 150], [30, 60, 120]],    # teal / deep blue
    [[170, 80, 120], [230, 200, 200]],  # plum / pale pink
    [[90, 150, 70], [200, 220, 120]],   # grass / lime
], dtype=np.float32)


def _class_colours(class_index: int) -> np.ndarray:
    """Two base colours for any class index (cycles the palette, permuting channels)."""
    colours = _PALETTE[class_index % len(_PALETTE)]
    shift = (class_index // len(_PALETTE)) % 3
    return np.roll(colours, shift, axis=1)


def _blocky_noise(rng: np.random.Generator, height: int, width: int, block: int) -> np.ndarray:
    """Gaussian noise constant on `block` x `block` squares: texture with sharp edges at that
    scale, so an image stays sharp however much it is shrunk for analysis."""
    coarse = rng.standard_normal(((height + block - 1) // block, (width + block - 1) // block),
                                 dtype=np.float32)
    if block > 1:
        coarse = np.repeat(np.repeat(coarse, block, axis=0), block, axis=1)
    return coarse[:height, :width]


def photo_like(rng: np.random.Generator, height: int, width: int,
               class_index: int) -> np.ndarray:
    """A uint8 [height, width, 3] image with the statistics of a photo.

    A class-coloured gradient background, a sinusoidal texture whose frequency depends on the
    class, a few hard-edged elliptical "objects", multi-scale blocky grain and colour noise,
    contrast-stretched so luma's 1st/99th percentiles sit near 30/220. It is sharp, neither dark
    nor bright, and has high entropy; the layout is random, so images from different draws have
    perceptual hashes far apart.
    """
    if height < 1 or width < 1 or class_index < 0:
        raise ValueError(
            "height and width must be >= 1 and class_index >= 0. Received: "
            f"height={height}, width={width}, class_index={class_index}")
    colours = _class_colours(class_index)
    y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    x = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]

    # python floats, not numpy float64 scalars, so the full-size arrays stay float32
    angle = float(rng.uniform(0.0, 2.0 * np.pi))
    ramp = np.cos(angle) * (x - 0.5) + np.sin(angle) * (y - 0.5) + 0.5    # [h, w] in ~[0, 1]
    image = colours[0] + ramp[..., None] * rng.uniform(-0.8, 0.8, 3).astype(np.float32) * 120.0

    cycles = 2.0 + 1.5 * (class_index % 5) + float(rng.uniform(0.0, 1.5))
    theta = float(rng.uniform(0.0, np.pi))
    wave = np.sin(2.0 * np.pi * cycles * (np.cos(theta) * x + np.sin(theta) * y)
                  + float(rng.uniform(0.0, 2.0 * np.pi)))
    image += (wave * float(rng.uniform(20.0, 35.0)))[..., None]

    for _ in range(int(rng.integers(3, 7))):
        cy, cx = (float(v) for v in rng.uniform(0.0, 1.0, 2))
        ry, rx = (float(v) for v in rng.uniform(0.08, 0.35, 2))
        inside = ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 < 1.0
        colour = colours[1] + rng.uniform(-60.0, 60.0, 3)
        image[inside] = colour.astype(np.float32) + 0.3 * image[inside]

    grain = sum(_blocky_noise(rng, height, width, block) * amplitude
                for block, amplitude in ((1, 7.0), (2, 5.0), (4, 5.0), (8, 4.0)))
    image += grain[..., None]
    image += rng.standard_normal((height, width, 3), dtype=np.float32) * 3.0

    luma = image[::3, ::3] @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    low, high = np.percentile(luma, [1, 99])
    image = (image - low) * (190.0 / max(high - low, 1.0)) + 30.0
    return np.clip(image + 0.5, 0, 255).astype(np.uint8)


@dataclasses.dataclass(frozen=True)
class DemoDataset:
    """Where the demo data is and what the offline job should make of it.

    `expected`: every file under `root` (root-relative path) -> "accepted" or the reject reason.
    `csv_expected`: every faulty row of `labels_csv` (its path value) -> the reason it causes.
    A row naming a file that does not exist is itself rejected (`missing_file`, kind label_row);
    a row with a label outside the class table rejects the image it names (`unknown_class`,
    listed in `expected` too).
    """
    root: str
    labels_csv: str
    classes_txt: str
    boxes_csv: str
    expected: dict[str, str]
    csv_expected: dict[str, str]


def _encode(image: np.ndarray, fmt: str, quality: int = 92, progressive: bool = False) -> bytes:
    buffer = io.BytesIO()
    if fmt == "jpeg":
        Image.fromarray(image).save(buffer, format="JPEG", quality=quality,
                                    progressive=progressive)
    elif fmt == "png":
        Image.fromarray(image).save(buffer, format="PNG", compress_level=1)
    else:
        raise ValueError(f"Unknown format {fmt!r}. Expected one of ('jpeg', 'png').")
    return buffer.getvalue()


def _write(root: str, rel: str, data: bytes) -> None:
    path = os.path.join(root, *rel.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def _random_size(rng: np.random.Generator, low: int, high: int,
                 max_aspect: float = 3.0) -> tuple[int, int]:
    height = int(rng.integers(low, high + 1))
    width = int(rng.integers(max(low, int(height / max_aspect) + 1),
                             min(high, int(height * max_aspect)) + 1))
    return height, width


def _dark_version(image: np.ndarray) -> np.ndarray:
    """The same scene very dark: luma equalized onto [2, 34] (std ~9, entropy ~5 bits, so it is
    dark rather than flat), colour ratios kept."""
    rgb = image.astype(np.float32)
    luma = rgb @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    ranks = np.empty(luma.size, dtype=np.float32)
    ranks[np.argsort(luma, axis=None, kind="stable")] = np.arange(luma.size, dtype=np.float32)
    target = 2.0 + 32.0 * ranks.reshape(luma.shape) / max(luma.size - 1, 1)
    scaled = rgb * (target / np.maximum(luma, 1.0))[..., None]
    return np.clip(scaled + 0.5, 0, 255).astype(np.uint8)


def _write_csv(path: str, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


class _DemoWriter:
    """Writes demo files and remembers what the job should make of each (in the order the
    random draws are made, so the same seed gives byte-identical data)."""

    def __init__(self, workdir: str, seed: int):
        self.rng = np.random.default_rng(seed)
        self.data_dir = os.path.join(workdir, "data")
        self.root = os.path.join(self.data_dir, "images")
        self.expected: dict[str, str] = {}
        self.csv_expected: dict[str, str] = {}
        self.label_rows: list[list] = []
        self.box_rows: list[list] = []
        self.encoded: dict[str, bytes] = {}
        self.sizes: dict[str, tuple[int, int]] = {}

    def label_row(self, rel: str, label: str, split: str = "") -> None:
        source = "camera" if len(self.label_rows) % 3 else "web"
        self.label_rows.append([rel, label, split, source, f"{self.rng.uniform(0.6, 1.0):.2f}"])

    def add(self, rel: str, data: bytes, outcome: str, label: str | None,
            split: str = "") -> None:
        _write(self.root, rel, data)
        self.encoded[rel] = data
        self.expected[rel] = outcome
        if label is not None:
            self.label_row(rel, label, split)

    def fresh(self, class_index: int, low: int = 160, high: int = 480) -> np.ndarray:
        return photo_like(self.rng, *_random_size(self.rng, low, high, 2.0), class_index)

    def good_images(self, images_per_class: int) -> None:
        """JPEG (every fourth PNG), 96 to 640 px; the first image of three classes carries an
        explicit split; a few carry boxes (one image two)."""
        explicit_splits = {0: "train", 1: "validation", 2: "test"}
        for class_index, name in enumerate(DEMO_CLASSES):
            for i in range(images_per_class):
                fmt = "png" if i % 4 == 3 else "jpeg"
                rel = f"{name}/{name}_{i:03d}.{'png' if fmt == 'png' else 'jpg'}"
                height, width = _random_size(self.rng, 96, 640)
                image = photo_like(self.rng, height, width, class_index)
                self.sizes[rel] = (height, width)
                split = explicit_splits.get(class_index, "") if i == 0 else ""
                self.add(rel, _encode(image, fmt, int(self.rng.integers(85, 96))), "accepted",
                         name, split)
        for rel in ("cat/cat_001.jpg", "dog/dog_002.jpg", "bird/bird_001.jpg",
                    "bird/bird_001.jpg"):
            height, width = self.sizes[rel]
            x0 = int(self.rng.integers(0, width // 2))
            y0 = int(self.rng.integers(0, height // 2))
            x1 = int(self.rng.integers(x0 + 8, width + 1))
            y1 = int(self.rng.integers(y0 + 8, height + 1))
            self.box_rows.append([rel, x0, y0, x1, y1, rel.split("/")[0]])

    def bad_inputs(self) -> None:
        """One of each bad input, named after its expected outcome."""
        # An accepted image with an inverted box (xmin > xmax): the image is rejected as bad_box.
        self.add("cat/bad_box_inverted.jpg", _encode(self.fresh(0), "jpeg"), "bad_box", "cat")
        self.box_rows.append(["cat/bad_box_inverted.jpg", 120, 10, 20, 90, "cat"])
        truncated = _encode(self.fresh(0, 256, 400), "jpeg")
        self.add("cat/decode_error_truncated.jpg", truncated[: len(truncated) * 6 // 10],
                 "decode_error", "cat")
        self.add("dog/unknown_format_zero_bytes.jpg", b"", "unknown_format", "dog")
        self.add("bird/unknown_format_text.jpg", b"This is a text file, not a picture.\n",
                 "unknown_format", "bird")
        blank = np.full((120, 160, 3), (128, 140, 150), dtype=np.uint8)
        self.add("fish/low_information_blank.png", _encode(blank, "png"), "low_information",
                 "fish")
        self.add("cat/too_dark.jpg", _encode(_dark_version(self.fresh(0)), "jpeg", 95),
                 "too_dark", "cat")
        blurred = Image.fromarray(self.fresh(1)).filter(ImageFilter.GaussianBlur(radius=8))
        self.add("dog/blurry.jpg", _encode(np.asarray(blurred), "jpeg"), "blurry", "dog")
        self.add("cat/duplicate_of_cat_000.jpg", self.encoded["cat/cat_000.jpg"], "duplicate",
                 "cat")
        original = Image.open(io.BytesIO(self.encoded["dog/dog_001.jpg"])).convert("RGB")
        near = original.resize((original.width * 9 // 10, original.height * 9 // 10),
                               Image.Resampling.BILINEAR)
        self.add("dog/near_duplicate_of_dog_001.jpg", _encode(np.asarray(near), "jpeg", 80),
                 "near_duplicate", "dog")
        self.add("fish/unlabeled_no_csv_row.jpg", _encode(self.fresh(3), "jpeg"), "unlabeled",
                 None)
        self.add("bird/unknown_class_zebra.jpg", _encode(self.fresh(2), "jpeg"),
                 "unknown_class", "zebra")
        self.csv_expected["bird/unknown_class_zebra.jpg"] = "unknown_class"
        self.label_row("bird/missing_file_not_on_disk.jpg", "bird")
        self.csv_expected["bird/missing_file_not_on_disk.jpg"] = "missing_file"
        self.add("dog/png_named_jpg.jpg", _encode(self.fresh(1), "png"), "accepted", "dog")
        tiny = photo_like(self.rng, 16, 16, 3)
        self.add("fish/too_small_16x16.png", _encode(tiny, "png"), "too_small", "fish")

    def tables(self) -> DemoDataset:
        """labels.csv, boxes.csv and classes.txt, and the dataset description."""
        labels_csv = os.path.join(self.data_dir, "labels.csv")
        classes_txt = os.path.join(self.data_dir, CLASSES)  # the class-table format
        boxes_csv = os.path.join(self.data_dir, "boxes.csv")
        _write_csv(labels_csv, ["path", "label", "split", "source", "confidence"],
                   self.label_rows)
        _write_csv(boxes_csv, ["path", "xmin", "ymin", "xmax", "ymax", "label"], self.box_rows)
        with open(classes_txt, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{name}\n" for name in DEMO_CLASSES))
        return DemoDataset(root=self.root, labels_csv=labels_csv, classes_txt=classes_txt,
                           boxes_csv=boxes_csv, expected=self.expected,
                           csv_expected=self.csv_expected)


def generate_demo(workdir: str, seed: int = 0, images_per_class: int = 12) -> DemoDataset:
    """Writes the demo dataset under `workdir/data/` and returns what the job should find.

    Layout: `data/images/<class>/...` (the data root), `data/labels.csv`
    (path,label,split,source,confidence; paths relative to the root; split mostly empty),
    `data/classes.txt` (one class per line) and `data/boxes.csv` (path,xmin,ymin,xmax,ymax,label
    in pixels). Besides `images_per_class` good images per class (JPEG, every fourth PNG, 96 to
    640 px) it writes one of each bad input, named after its expected outcome.
    """
    if images_per_class < 4:
        raise ValueError(
            f"images_per_class must be at least 4 (the bad inputs reuse a few good images). "
            f"Received: images_per_class={images_per_class}")
    writer = _DemoWriter(workdir, seed)
    writer.good_images(images_per_class)
    writer.bad_inputs()
    return writer.tables()


_CORPUS_BASE = 1280      # side of the base canvases corpus images are cut from
_CORPUS_SIDES = (320, 1024)
_CORPUS_QUALITY = (75, 95)   # JPEG quality, uniform over this range
_CORPUS_PROGRESSIVE = 0.2    # fraction of JPEGs written progressive


def _power_law_field(rng: np.random.Generator, size: int, beta: float) -> np.ndarray:
    """A [size, size] float32 field with amplitude spectrum 1/f**beta (natural images are near
    beta = 1; larger is smoother), zero mean, unit standard deviation."""
    fy = np.fft.fftfreq(size).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(size).astype(np.float32)[None, :]
    amplitude = np.maximum(np.hypot(fy, fx), 1.0 / size) ** -beta
    spectrum = amplitude * (rng.standard_normal(amplitude.shape, dtype=np.float32)
                            + 1j * rng.standard_normal(amplitude.shape, dtype=np.float32))
    field = np.fft.irfft2(spectrum, s=(size, size)).astype(np.float32)
    return (field - field.mean()) / field.std()


def _draw_leaf(rng, image: np.ndarray, fine: np.ndarray, radius: float, colours) -> None:
    """One anti-aliased ellipse or rotated rectangle (in place): a base colour with a linear
    shading and, for some, a texture taken from `fine`."""
    size = image.shape[0]
    ry, rx = radius * float(rng.uniform(0.5, 1.5)), radius * float(rng.uniform(0.5, 1.5))
    cy, cx = (float(v) for v in rng.uniform(0.0, size, 2))
    extent = max(ry, rx) + 2.0
    y0, y1 = int(max(0.0, cy - extent)), int(min(size, cy + extent + 1))
    x0, x1 = int(max(0.0, cx - extent)), int(min(size, cx + extent + 1))
    angle = float(rng.uniform(0.0, np.pi))
    rectangle = rng.random() < 0.3
    base = colours[int(rng.integers(0, len(colours)))] + rng.uniform(-50.0, 50.0, 3)
    slopes = rng.uniform(-25.0, 25.0, 2)
    texture = float(rng.choice([0.0, 0.0, 3.0, 8.0, 18.0]))
    if y1 <= y0 or x1 <= x0:
        return
    yy = np.arange(y0, y1, dtype=np.float32)[:, None] - cy
    xx = np.arange(x0, x1, dtype=np.float32)[None, :] - cx
    a = np.cos(angle) * xx + np.sin(angle) * yy
    b = np.cos(angle) * yy - np.sin(angle) * xx
    if rectangle:
        distance = np.maximum(np.abs(a) - rx, np.abs(b) - ry)
    else:
        distance = (np.sqrt((a / rx) ** 2 + (b / ry) ** 2) - 1.0) * min(rx, ry)
    alpha = np.clip(0.5 - distance, 0.0, 1.0)[..., None]
    fill = (a * float(slopes[0]) + b * float(slopes[1])) / extent + fine[y0:y1, x0:x1] * texture
    region = image[y0:y1, x0:x1]
    region += alpha * (base.astype(np.float32) + fill[..., None] - region)


def _photo_canvas(rng: np.random.Generator, size: int, colours) -> np.ndarray:
    """A uint8 [size, size, 3] canvas with the structure of a photograph: a smooth 1/f
    background, occluding "dead leaves" (ellipses and rectangles whose radii follow a power
    law, each smooth or textured), a slight optical blur and mild sensor noise. It has large
    smooth areas, sharp edges and texture in parts, unlike noise (which makes JPEG's DCT
    scaling look useless and is not what users have)."""
    image = colours[0] + (_power_law_field(rng, size, 1.8)[..., None]
                          * rng.uniform(10.0, 30.0, 3).astype(np.float32))
    fine = _power_law_field(rng, size, 0.6)
    low, high, exponent = 6.0, 0.35 * size, 1.5
    uniform = rng.random(450)
    radii = (low ** -exponent - uniform * (low ** -exponent - high ** -exponent)) ** (-1 / exponent)
    for radius in radii:
        _draw_leaf(rng, image, fine, float(radius), colours)
    blurred = Image.fromarray(np.clip(image + 0.5, 0, 255).astype(np.uint8)).filter(
        ImageFilter.GaussianBlur(0.7))
    image = (np.asarray(blurred).astype(np.float32)
             + rng.standard_normal((size, size, 3), dtype=np.float32) * 1.5)
    luma = image[::3, ::3] @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    p01, p99 = np.percentile(luma, [1, 99])
    image = (image - p01) * (200.0 / max(p99 - p01, 1.0)) + 25.0
    return np.clip(image + 0.5, 0, 255).astype(np.uint8)


# Canvas sets drawn in this process: (generator state before, count, size) -> (the canvases,
# read-only; the generator's state after). At most `_CANVAS_SETS_KEPT` (a 1280 px set: 20 MB).
_CANVAS_SETS: dict = {}
_CANVAS_SETS_KEPT = 4


def photo_canvases(rng: np.random.Generator, count: int, size: int) -> list:
    """`count` read-only `_photo_canvas`es of `size` px drawn from `rng`, canvas k coloured by
    classes k and k + count. A set is ~1 s of CPU per canvas at 1280 px, and the bench's
    corpora and the tests draw the same sets again from the same seed (the photo-like corpora,
    the thumbnails): a set drawn from a generator state is kept, and drawing it again from
    that state returns it and moves the generator on as the draw did, so every file written
    stays byte-identical."""
    key = (repr(rng.bit_generator.state), count, size)
    if key not in _CANVAS_SETS:
        canvases = [_photo_canvas(rng, size, np.concatenate(
            [_class_colours(k), _class_colours(k + count)])) for k in range(count)]
        for canvas in canvases:
            canvas.setflags(write=False)  # shared by every later draw: cut from, never drawn on
        if len(_CANVAS_SETS) >= _CANVAS_SETS_KEPT:
            _CANVAS_SETS.pop(next(iter(_CANVAS_SETS)))
        _CANVAS_SETS[key] = (canvases, rng.bit_generator.state)
    canvases, state_after = _CANVAS_SETS[key]
    rng.bit_generator.state = state_after
    return list(canvases)


def _paste_patches(rng: np.random.Generator, image: np.ndarray, bases: list) -> None:
    """Pastes two rectangles cut from random canvases into `image` (in place): cheap (copies
    only), and it moves the low frequencies enough that crops of one canvas hash apart."""
    height, width = image.shape[:2]
    for _ in range(2):
        source = bases[int(rng.integers(0, len(bases)))]
        patch_h = int(rng.integers(height // 4, height // 2 + 1))
        patch_w = int(rng.integers(width // 4, width // 2 + 1))
        sy = int(rng.integers(0, source.shape[0] - patch_h + 1))
        sx = int(rng.integers(0, source.shape[1] - patch_w + 1))
        dy = int(rng.integers(0, height - patch_h + 1))
        dx = int(rng.integers(0, width - patch_w + 1))
        image[dy:dy + patch_h, dx:dx + patch_w] = source[sy:sy + patch_h, sx:sx + patch_w]


def generate_corpus(directory: str, n_images: int, seed: int = 0,
                    png_fraction: float = 0.05) -> list[str]:
    """Writes `n_images` photo-like images (320..1024 px per side) for benchmarks.

    JPEGs of quality 75..95 (a fifth of them progressive), except `round(n_images *
    png_fraction)` PNGs, spread over four class folders, plus `labels.csv` (path,label relative
    to `directory`). Returns the image paths in index order. Fast (no per-pixel arithmetic per
    image): one 1280 px `_photo_canvas` per class is drawn once; each image is a random crop of
    its class's canvas, possibly mirrored or flipped, with two rectangles pasted from random
    canvases, so perceptual hashes of different images stay far apart.
    """
    if isinstance(n_images, bool) or not isinstance(n_images, int) or n_images < 0:
        raise ValueError(f"n_images must be an integer >= 0. Received: n_images={n_images!r}")
    if not 0.0 <= png_fraction <= 1.0:
        raise ValueError(
            f"png_fraction must be in [0, 1]. Received: png_fraction={png_fraction!r}")
    rng = np.random.default_rng(seed)
    classes = DEMO_CLASSES
    bases = photo_canvases(rng, len(classes), _CORPUS_BASE)
    n_png = int(round(n_images * png_fraction))
    png_indices = set(rng.choice(n_images, size=n_png, replace=False).tolist()) if n_png else set()
    paths, rows = [], []
    for index in range(n_images):
        class_index = index % len(classes)
        height, width = (int(v) for v in rng.integers(_CORPUS_SIDES[0], _CORPUS_SIDES[1] + 1, 2))
        top = int(rng.integers(0, _CORPUS_BASE - height + 1))
        left = int(rng.integers(0, _CORPUS_BASE - width + 1))
        crop = bases[class_index][top:top + height, left:left + width]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        if rng.random() < 0.5:
            crop = crop[::-1]
        image = np.ascontiguousarray(crop)
        _paste_patches(rng, image, bases)
        quality = int(rng.integers(_CORPUS_QUALITY[0], _CORPUS_QUALITY[1] + 1))
        progressive = bool(rng.random() < _CORPUS_PROGRESSIVE)
        is_png = index in png_indices
        rel = f"{classes[class_index]}/img_{index:05d}.{'png' if is_png else 'jpg'}"
        _write(directory, rel, _encode(image, "png" if is_png else "jpeg", quality, progressive))
        paths.append(os.path.join(directory, *rel.split("/")))
        rows.append([rel, classes[class_index]])
    os.makedirs(directory, exist_ok=True)
    _write_csv(os.path.join(directory, "labels.csv"), ["path", "label"], rows)
    return paths
