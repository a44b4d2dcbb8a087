"""`pixelmill preview`: a PNG grid of training samples, original beside augmented.

    pixelmill preview --output_dir out --out grid.png
    pixelmill preview --output_dir gs://bucket/out --config configs/satellite.yaml --n 32 \
        --seed 7 --out grid.png

What a person checks before training: each cell shows a sample as the reader decodes it (left)
and as training step 0 of `--epoch` sees it after augmentation (right), with its boxes and class
names drawn (mixed labels as `name weight` pairs). The batch is the first batch of `--n`
samples that `make_dataset(split, batch_size=n, seed, epoch)` yields, augmented with exactly
the seed training uses for that step, so the grid shows real training inputs.
"""
from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from configs.schema import SPLITS, Config, load_config
from runners.flags import CommandParser

__all__ = ["Preview", "build_preview", "run"]

_PAIRS_PER_ROW = 4
_MIN_PANEL = 128  # small images are enlarged (nearest neighbour) to at least this many px
_GAP = 4          # between the two panels of a cell
_MARGIN = 12      # between cells and around the grid
_CAPTION_LINES = 2
_LINE_HEIGHT = 12
_BACKGROUND = (32, 32, 32)
_TEXT = (235, 235, 235)
_BOX_COLOURS = ((255, 64, 64), (64, 220, 64), (80, 160, 255), (255, 210, 0), (255, 80, 255),
                (0, 230, 230), (255, 150, 40), (180, 180, 255))


@dataclasses.dataclass(frozen=True)
class Preview:
    """The rendered grid and what it shows.

    `originals`/`augmented`: uint8 [n, H, W, 3] as drawn before boxes; `panels[i]`: the
    (left, top, right, bottom) pixel rectangles of sample i's (original, augmented) image in
    `image`; `captions[i]`: its (original, augmented) label text.
    """
    image: Image.Image
    originals: np.ndarray
    augmented: np.ndarray
    panels: list
    captions: list


def _to_uint8(images) -> np.ndarray:
    return np.round(np.clip(np.asarray(images), 0.0, 1.0) * 255.0).astype(np.uint8)


def _caption(labels: np.ndarray, class_names: list[str]) -> str:
    """'cat' for a one-hot row; 'cat 0.62 + dog 0.38' for a mixed one (largest first)."""
    order = [int(i) for i in np.argsort(-labels, kind="stable") if labels[i] > 0.005]
    if len(order) == 1 and labels[order[0]] > 0.995:
        return class_names[order[0]]
    return " + ".join(f"{class_names[i]} {labels[i]:.2f}" for i in order[:3])


def _draw_boxes(draw: ImageDraw.ImageDraw, panel: tuple, boxes: np.ndarray, labels: np.ndarray,
                count: int, class_names: list[str], font) -> None:
    left, top, right, bottom = panel
    width, height = right - left, bottom - top
    for (ymin, xmin, ymax, xmax), label in zip(boxes[:count], labels[:count]):
        colour = _BOX_COLOURS[int(label) % len(_BOX_COLOURS)]
        corners = (left + round(xmin * width), top + round(ymin * height),
                   left + max(round(xmax * width) - 1, 0), top + max(round(ymax * height) - 1, 0))
        draw.rectangle(corners, outline=colour, width=1)
        name = class_names[int(label)] if 0 <= int(label) < len(class_names) else str(label)
        draw.text((corners[0] + 2, corners[1] + 1), name, fill=colour, font=font)


def _batch_as_dict(batch) -> dict:
    if isinstance(batch, dict):
        return {key: value for key, value in batch.items() if key != "matrix"}
    images, labels = batch
    return {"images": images, "labels": labels}


def build_preview(output_dir: str, config: Config, split: str = "train", n: int = 16,
                  seed: int | None = None, epoch: int = 0, jit_compile: bool = True) -> Preview:
    """Reads the first `n` samples of (split, seed, epoch), augments them as training step 0
    does (`jit_compile` as in `make_dataset`), and renders the grid."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an integer >= 1. Received: n={n!r}")
    from pipelines.reader_metadata import read_class_names  # TensorFlow: after the flags
    from pipelines.training_input import augment_batch, make_dataset
    from transforms.live_view import select_snapshots
    from transforms.online.augment import build_batch_augmenter
    seed = config.online.seed if seed is None else seed
    class_names = read_class_names(select_snapshots(output_dir))
    dataset = make_dataset(output_dir, split, batch_size=n, config=config, seed=seed,
                           epoch=epoch, augment=False, normalize=False, drop_remainder=False)
    batch = _batch_as_dict(next(iter(dataset)))
    augmenter = build_batch_augmenter(config.online, len(class_names), jit_compile=jit_compile)
    augmented = augment_batch(augmenter, batch, seed, epoch, 0)
    batch = {key: np.asarray(value) for key, value in batch.items()}
    augmented = {key: np.asarray(value) for key, value in augmented.items()}
    return _render(batch, augmented, class_names)


def _render(batch: dict, augmented: dict, class_names: list[str]) -> Preview:
    originals, changed = _to_uint8(batch["images"]), _to_uint8(augmented["images"])
    count, height, width = originals.shape[:3]
    zoom = max(1, math.ceil(_MIN_PANEL / max(height, width)))
    panel_w, panel_h = width * zoom, height * zoom
    cell_w, cell_h = 2 * panel_w + _GAP, panel_h + _CAPTION_LINES * _LINE_HEIGHT + 4
    columns = min(count, _PAIRS_PER_ROW)
    rows = math.ceil(count / columns)
    grid = Image.new("RGB", (_MARGIN + columns * (cell_w + _MARGIN),
                             _MARGIN + rows * (cell_h + _MARGIN)), _BACKGROUND)
    draw = ImageDraw.Draw(grid)
    font = ImageFont.load_default()
    panels, captions = [], []
    for index in range(count):
        left = _MARGIN + (index % columns) * (cell_w + _MARGIN)
        top = _MARGIN + (index // columns) * (cell_h + _MARGIN)
        pair = ((left, top, left + panel_w, top + panel_h),
                (left + panel_w + _GAP, top, left + 2 * panel_w + _GAP, top + panel_h))
        texts = (_caption(batch["labels"][index], class_names),
                 _caption(augmented["labels"][index], class_names))
        for panel, pixels, text, source in zip(pair, (originals[index], changed[index]), texts,
                                               (batch, augmented)):
            grid.paste(Image.fromarray(pixels).resize((panel_w, panel_h), Image.NEAREST),
                       panel[:2])
            if "boxes" in source:
                _draw_boxes(draw, panel, source["boxes"][index], source["box_labels"][index],
                            int(source["num_boxes"][index]), class_names, font)
            draw.multiline_text((panel[0], panel[3] + 2), _wrap(text, panel_w), fill=_TEXT,
                                font=font, spacing=1)
        panels.append(pair)
        captions.append(texts)
    return Preview(grid, originals, changed, panels, captions)


def _wrap(text: str, width_px: int, char_px: int = 6) -> str:
    """At most `_CAPTION_LINES` lines of about `width_px` px (the default font is ~6 px/char)."""
    per_line = max(4, width_px // char_px)
    lines = [text[i:i + per_line] for i in range(0, len(text), per_line)]
    return "\n".join(lines[:_CAPTION_LINES])


def _parse_args(argv):
    parser = CommandParser(
        prog="pixelmill preview",
        description="PNG grid of training samples: original beside augmented, boxes and class "
                    "names drawn.")
    parser.add_argument("--output_dir", required=True, help="the offline job's OUTPUT folder")
    parser.add_argument("--config", default=None, help="YAML (default configs/base.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. --set online.geometry.rot90=true")
    parser.add_argument("--split", default="train", choices=SPLITS)
    parser.add_argument("--n", type=int, default=16, help="samples in the grid")
    parser.add_argument("--seed", type=int, default=None, help="default: online.seed")
    parser.add_argument("--epoch", type=int, default=0)
    parser.add_argument("--out", required=True, help="PNG to write (local or gs://)")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n must be >= 1. Received: --n={args.n}")
    if args.epoch < 0:
        parser.error(f"--epoch must be >= 0. Received: --epoch={args.epoch}")
    return args


def run(argv=None) -> Preview:
    """Builds the preview for the command line `argv` and writes the PNG to `--out`."""
    args = _parse_args(argv)
    config = load_config(args.config, args.set)
    preview = build_preview(args.output_dir, config, split=args.split, n=args.n,
                            seed=args.seed, epoch=args.epoch)
    import tensorflow as tf  # after the flags: `--help` and usage errors stay light
    with tf.io.gfile.GFile(args.out, "wb") as handle:
        preview.image.save(handle, format="PNG")
    logging.info("wrote %s: %d samples, original | augmented", args.out,
                 len(preview.originals))
    return preview


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    run()
