"""The other corpora of `pixelmill bench preprocess`, beside the photo-like one
(`demo_data.generate_corpus`): thumbnails, camera-size JPEGs, and a many-class labelling of the
photo-like corpus. Each is generated once under the bench's workdir and reused (a marker file,
written last, names what was generated).
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np

__all__ = ["generate_thumbnails", "generate_camera", "write_many_classes", "cached_corpus"]

_MARKER = "corpus.json"
_THUMB_SIDES = (64, 128)
_CAMERA_SIZE = (3000, 4000)     # height, width: 12 MP
_QUALITY = (75, 95)


def _write_labelled(directory: str, rows: list) -> None:
    from runners.demo import data as demo_data
    os.makedirs(directory, exist_ok=True)
    demo_data._write_csv(os.path.join(directory, "labels.csv"), ["path", "label"], rows)


def generate_thumbnails(directory: str, n_images: int, seed: int = 0) -> None:
    """`n_images` JPEGs of 64..128 px per side (an icon / CIFAR-sized dataset): crops of 2..4
    times that size from photo-like canvases, downsampled (so they stay sharp), in four class
    folders, plus `labels.csv`."""
    from PIL import Image

    from runners.demo import data as demo_data
    rng = np.random.default_rng(seed)
    classes = demo_data.DEMO_CLASSES
    bases = demo_data.photo_canvases(rng, len(classes), 1280)
    rows = []
    for index in range(n_images):
        k = index % len(classes)
        height, width = (int(v) for v in rng.integers(_THUMB_SIDES[0], _THUMB_SIDES[1] + 1, 2))
        factor = int(rng.integers(2, 5))
        top = int(rng.integers(0, 1280 - height * factor + 1))
        left = int(rng.integers(0, 1280 - width * factor + 1))
        crop = bases[k][top:top + height * factor, left:left + width * factor]
        small = Image.fromarray(np.ascontiguousarray(crop)).resize((width, height),
                                                                    Image.BILINEAR)
        quality = int(rng.integers(_QUALITY[0], _QUALITY[1] + 1))
        rel = f"{classes[k]}/thumb_{index:06d}.jpg"
        demo_data._write(directory, rel, demo_data._encode(np.asarray(small), "jpeg", quality))
        rows.append([rel, classes[k]])
    _write_labelled(directory, rows)


def generate_camera(directory: str, n_images: int, seed: int = 0) -> None:
    """`n_images` 4000x3000 JPEGs (quality 85..95), each a mosaic of photo-like canvases (not
    an upscaled one, which the blur rule would reject), in four class folders, plus
    `labels.csv`."""
    from runners.demo import data as demo_data
    rng = np.random.default_rng(seed)
    classes = demo_data.DEMO_CLASSES
    tiles = demo_data.photo_canvases(rng, 6, 1024)
    height, width = _CAMERA_SIZE
    rows = []
    for index in range(n_images):
        k = index % len(classes)
        image = np.empty((height, width, 3), dtype=np.uint8)
        for top in range(0, height, 1024):
            for left in range(0, width, 1024):
                tile = tiles[int(rng.integers(0, len(tiles)))]
                if rng.random() < 0.5:
                    tile = tile[:, ::-1]
                block = image[top:top + 1024, left:left + 1024]
                block[...] = tile[:block.shape[0], :block.shape[1]]
        quality = int(rng.integers(85, 96))
        rel = f"{classes[k]}/camera_{index:04d}.jpg"
        demo_data._write(directory, rel, demo_data._encode(image, "jpeg", quality))
        rows.append([rel, classes[k]])
    _write_labelled(directory, rows)


def write_many_classes(paths, directory: str, n_classes: int) -> tuple[str, str]:
    """A labelling of `paths` (relative to their data root) over `n_classes` classes:
    `directory` gets `labels.csv` (image i labelled `class_<i mod n>`) and `classes.txt` (all
    `n_classes` names, for `--classes`). Returns their paths."""
    from runners.demo import data as demo_data
    os.makedirs(directory, exist_ok=True)
    names = [f"class_{index:05d}" for index in range(n_classes)]
    labels = os.path.join(directory, "labels.csv")
    demo_data._write_csv(labels, ["path", "label"],
                         [[path, names[index % n_classes]] for index, path in enumerate(paths)])
    table = os.path.join(directory, "class_table.txt")
    with open(table, "w", encoding="utf-8") as handle:
        handle.write("".join(name + "\n" for name in names))
    return labels, table


def cached_corpus(root: str, spec: dict, generate) -> bool:
    """Calls `generate(root)` unless `root` holds a complete corpus made from `spec` (its
    marker, written last). Returns whether it generated."""
    marker = os.path.join(root, _MARKER)
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as handle:
            if json.load(handle) == spec:
                return False
    shutil.rmtree(root, ignore_errors=True)
    generate(root)
    with open(marker, "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    return True
