"""`pixelmill bench train`: images/s of the training input, four ways, in one run.

    pixelmill bench train                       # 1024 512-px JPEGs -> 224 px, 10 epochs
    pixelmill bench train --images 512 --image_size 128 --epochs 12 --batch_size 32

It writes its own corpus (seeded synthetic JPEGs, the offline job's snapshot layout) to a temp
folder, then times, on the same shards and the same read path:

  (a) read      `make_dataset(augment=False)`: read, parse, decode, resize, batch
  (b) pixelmill `make_dataset()` with the config's full augmentation (geometry, pixel ops,
                mixup/cutmix), vectorized on whole batches; the geometry warps straight from
                the decoded images (its default `resample_once`: no separate resize pass)
  (c) keras     (a) + the Keras 3 preprocessing chain RandomFlip, RandomRotation(0.1),
                RandomZoom(0.1), RandomContrast(0.2), mapped over batches
  (d) tf.image  a per-sample `tf.image.stateless_random_*` chain (flip, pad + crop, brightness,
                contrast, saturation) before batching, as in the TF data-augmentation tutorial

All read paths skip normalization (the same cheap op for all four). Each runs `--epochs`
epochs after one warm-up epoch as one continuous iterator (tf.data's autotuner makes single
epochs jump); the table shows the median and the minimum images/s over the epochs, then the
ratios (b)/(c) and (b)/(a) against the targets (>= 3x and >= 0.75x). When a GPU is visible, it
adds (b) on the device: the read path batches on the CPU and the augmentation runs on the GPU,
end to end and augmentation alone.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import os
import statistics
import tempfile
import time
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf
from PIL import Image

from configs.schema import SPLITS, Config, load_config
from transforms import codec

__all__ = ["write_synthetic_snapshot", "measure_epochs", "run"]

_PALETTE = ((220, 60, 50), (60, 170, 70), (50, 90, 210), (230, 200, 40), (160, 70, 190),
            (40, 190, 200), (240, 130, 30), (120, 120, 120))


def _synthetic_image(rng: np.random.Generator, size: int, label: int,
                     boxes: Sequence[Sequence[float]]) -> np.ndarray:
    """A photo-like picture: a smooth random background tinted by the class, a few textured
    details, and a filled rectangle in the class colour for each (xmin, ymin, xmax, ymax) box."""
    coarse = rng.uniform(0, 255, size=(6, 6, 3)).astype(np.uint8)
    background = np.asarray(Image.fromarray(coarse).resize((size, size), Image.BICUBIC),
                            dtype=np.float32)
    tint = np.asarray(_PALETTE[label % len(_PALETTE)], dtype=np.float32)
    image = 0.5 * background + 0.5 * tint + rng.normal(0.0, 8.0, size=(size, size, 3))
    for xmin, ymin, xmax, ymax in boxes:
        top, left = int(ymin * size), int(xmin * size)
        bottom, right = max(int(ymax * size), top + 1), max(int(xmax * size), left + 1)
        image[top:bottom, left:right] = 255.0 - tint
    return np.clip(image, 0, 255).astype(np.uint8)


def _random_boxes(rng: np.random.Generator, count: int) -> list[tuple[float, ...]]:
    boxes = []
    for _ in range(count):
        width, height = rng.uniform(0.2, 0.5, size=2)
        xmin, ymin = rng.uniform(0.0, 1.0 - width), rng.uniform(0.0, 1.0 - height)
        boxes.append((float(xmin), float(ymin), float(xmin + width), float(ymin + height)))
    return boxes


def write_synthetic_snapshot(output_dir: str, *, counts: dict | None = None,
                             image_size: int = 32, num_classes: int = 3, num_shards: int = 2,
                             max_boxes: int = 0, compression: str = "none", seed: int = 0,
                             run_id: str = "synthetic", name: str = "images",
                             commit: bool = True) -> str:
    """Writes one snapshot in the offline job's layout and returns its folder.

    `OUTPUT/snapshots/<run_id>/{classes.txt, <split>/<name>-<split>.tfrecord-0000i-of-0000n[.gz],
    stats.json (pixel_stats on the 0-1 scale, by_split), manifest.json}`, plus `OUTPUT/LATEST`
    and `OUTPUT/classes.txt`. Records are made with `transforms.codec.encode_example` from
    seeded JPEGs; image i of a split has label `i % num_classes` and, when `max_boxes` > 0,
    1..max_boxes boxes. `commit=False` leaves out manifest.json and LATEST (a crashed run).
    """
    counts = {"train": 64} if counts is None else counts
    class_names = [f"class_{index}" for index in range(num_classes)]
    snapshot = f"{output_dir}/snapshots/{run_id}"
    suffix = ".gz" if compression == "gzip" else ""
    options = tf.io.TFRecordOptions(compression_type="GZIP" if suffix else "")
    pixel_sum, pixel_sq_sum, pixel_count = np.zeros(3), np.zeros(3), 0
    images_with_boxes, num_boxes = 0, 0
    files = []
    for split_index, (split, count) in enumerate(sorted(counts.items())):
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}. Expected one of {SPLITS}.")
        tf.io.gfile.makedirs(f"{snapshot}/{split}")
        paths = [f"{snapshot}/{split}/{name}-{split}.tfrecord-{shard:05d}-of-{num_shards:05d}"
                 f"{suffix}" for shard in range(num_shards)]
        writers = [tf.io.TFRecordWriter(path, options) for path in paths]
        for index in range(count):
            rng = np.random.default_rng([seed, split_index, index])
            label = index % num_classes
            boxes = _random_boxes(rng, int(rng.integers(1, max_boxes + 1))) if max_boxes else []
            pixels = _synthetic_image(rng, image_size, label, boxes)
            images_with_boxes += bool(boxes)
            num_boxes += len(boxes)
            flat = pixels.reshape(-1, 3).astype(np.float64) / 255.0
            pixel_sum += flat.sum(0)
            pixel_sq_sum += (flat ** 2).sum(0)
            pixel_count += pixels.shape[0] * pixels.shape[1]
            buffer = io.BytesIO()
            Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
            encoded = buffer.getvalue()
            box_labels = [(label + k) % num_classes for k in range(len(boxes))]
            writers[index % num_shards].write(codec.encode_example(
                encoded=encoded, image_format="jpeg", height=image_size, width=image_size,
                filename=f"{split}/{class_names[label]}/{index:06d}.jpg",
                sha256=hashlib.sha256(encoded).hexdigest(), label=label,
                label_text=class_names[label], boxes=boxes, box_labels=box_labels,
                box_texts=[class_names[k] for k in box_labels]))
        for writer in writers:
            writer.close()
        files.extend(paths)
    mean = pixel_sum / max(pixel_count, 1)
    std = np.sqrt(np.maximum(pixel_sq_sum / max(pixel_count, 1) - mean ** 2, 1e-12))
    table = "".join(f"{c}\n" for c in class_names)
    _write_text(f"{snapshot}/classes.txt", table)
    _write_text(f"{snapshot}/stats.json", json.dumps({
        "pixel_stats": {"mean": mean.round(6).tolist(), "std": std.round(6).tolist(),
                        "scale": "0-1"},
        "by_split": {split: counts.get(split, 0) for split in SPLITS},
        "boxes": {"images_with_boxes": images_with_boxes, "boxes": num_boxes}}, indent=2))
    if commit:
        _write_text(f"{snapshot}/manifest.json", json.dumps(
            {"run_id": run_id, "files": sorted(files), "synthetic": True}, indent=2))
        _write_text(f"{output_dir}/classes.txt", table)
        _write_text(f"{output_dir}/LATEST", f"{run_id}\n")
    return snapshot


def _write_text(path: str, text: str) -> None:
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(text)


def measure_epochs(dataset: tf.data.Dataset, steps_per_epoch: int, batch_size: int,
                   epochs: int, warmup_epochs: int = 1,
                   on_batch: Callable | None = None) -> list[float]:
    """images/s of each of `epochs` epochs after `warmup_epochs`, on one continuous iterator.

    `on_batch(step, batch)` runs on every batch (e.g. the augmentation on the GPU); the epoch's
    clock stops after its last result is fetched to the host, so queued device work counts.
    """
    iterator = iter(dataset)
    rates = []
    step = 0
    for epoch in range(warmup_epochs + epochs):
        start = time.perf_counter()
        last = None
        for _ in range(steps_per_epoch):
            batch = next(iterator)
            last = on_batch(step, batch) if on_batch is not None else batch
            step += 1
        tf.nest.flatten(last)[0].numpy()  # wait for the device
        elapsed = time.perf_counter() - start
        if epoch >= warmup_epochs:
            rates.append(steps_per_epoch * batch_size / elapsed)
    return rates


def _keras_chain(seed: int):
    """(c): the Keras 3 preprocessing layers the issue names, on [0, 1] images."""
    import keras
    return keras.Sequential([
        keras.layers.RandomFlip(seed=seed),
        keras.layers.RandomRotation(0.1, seed=seed + 1),
        keras.layers.RandomZoom(0.1, seed=seed + 2),
        keras.layers.RandomContrast(0.2, value_range=(0.0, 1.0), seed=seed + 3),
    ])


def _tutorial_chain(image_size: tuple[int, int], seed: int) -> Callable:
    """(d): a per-sample tf.image chain as in the TF data-augmentation tutorial (stateless ops,
    one seed per sample from its index)."""
    height, width = image_size

    def augment(index, sample):
        image, label = sample
        seeds = tf.random.experimental.stateless_split(
            tf.stack([tf.constant(seed, tf.int64), index]), num=5)
        image = tf.image.resize_with_crop_or_pad(image, height + 12, width + 12)
        image = tf.image.stateless_random_crop(image, [height, width, 3], seed=seeds[0])
        image = tf.image.stateless_random_flip_left_right(image, seed=seeds[1])
        image = tf.image.stateless_random_brightness(image, 0.2, seed=seeds[2])
        image = tf.image.stateless_random_contrast(image, 0.8, 1.2, seed=seeds[3])
        image = tf.image.stateless_random_saturation(image, 0.8, 1.2, seed=seeds[4])
        return tf.clip_by_value(image, 0.0, 1.0), label
    return augment


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="pixelmill bench train",
        description="images/s of the training input: read only, pixelmill augmentation, Keras "
                    "preprocessing layers, a per-sample tf.image chain; one run.")
    parser.add_argument("--images", type=int, default=1024, help="synthetic training images")
    parser.add_argument("--source_size", type=int, default=512,
                        help="side of the stored JPEGs (photo-like sizes; large JPEGs decode "
                             "DCT-scaled)")
    parser.add_argument("--image_size", type=int, default=224, help="side of the batches")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10, help="timed epochs (at least 10)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default=None, help="YAML whose online: section is (b)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. --set online.mix.enabled=false")
    parser.add_argument("--workdir", default=None,
                        help="where the corpus goes (default: a temp folder, removed after)")
    args = parser.parse_args(argv)
    for key, low in (("images", 1), ("source_size", 8), ("image_size", 8), ("batch_size", 1),
                     ("epochs", 10), ("shards", 1)):
        if getattr(args, key) < low:
            parser.error(f"--{key} must be >= {low}. Received: --{key}={getattr(args, key)}")
    if args.images < args.batch_size:
        parser.error(f"--images must be >= --batch_size. Received: --images={args.images}, "
                     f"--batch_size={args.batch_size}")
    return args


def _read(args, config: Config, workdir: str, augment: bool) -> tf.data.Dataset:
    from pipelines.training_input import make_dataset
    return make_dataset(workdir, batch_size=args.batch_size, config=config, seed=args.seed,
                        num_epochs=args.epochs + 1, augment=augment, normalize=False,
                        image_size=(args.image_size, args.image_size))


def _bench_cpu(args, config: Config, workdir: str) -> dict:
    """(a)-(d) on the same shards, each as one continuous iterator."""
    size = (args.image_size, args.image_size)
    keras_chain = _keras_chain(args.seed)
    paths = {
        "(a) read, no augmentation": lambda: _read(args, config, workdir, False),
        "(b) pixelmill full augmentation": lambda: _read(args, config, workdir, True),
        "(c) Keras 3 preprocessing layers": lambda: _read(args, config, workdir, False).map(
            lambda images, labels: (keras_chain(images, training=True), labels),
            num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE),
        "(d) per-sample tf.image chain": lambda: _read(
            args, config, workdir, False).unbatch().enumerate().map(
                _tutorial_chain(size, args.seed), num_parallel_calls=tf.data.AUTOTUNE).batch(
                    args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE),
    }
    results = {}
    for name, build in paths.items():
        logging.info("timing %s", name)
        results[name] = measure_epochs(build(), args.images // args.batch_size,
                                       args.batch_size, args.epochs)
    return results


def _bench_gpu(args, config: Config, workdir: str) -> dict:
    """(b) on the GPU: batches read on the CPU (path (a)), augmented on the device, XLA."""
    from pipelines.training_input import augment_batch
    from transforms.online.augment import build_batch_augmenter
    augmenter = build_batch_augmenter(config.online, num_classes=8, jit_compile=True)

    @tf.function
    def on_device(step, images, labels):
        with tf.device("/GPU:0"):
            out = augment_batch(augmenter, {"images": images, "labels": labels},
                                args.seed, 0, step)
            return out["images"], out["labels"]

    steps = args.images // args.batch_size
    results = {}
    logging.info("timing (b) on the GPU")
    results["(b) GPU: CPU read + GPU augmentation"] = measure_epochs(
        _read(args, config, workdir, False), steps, args.batch_size, args.epochs,
        on_batch=lambda step, batch: on_device(tf.constant(step, tf.int64), *batch))
    with tf.device("/GPU:0"):
        images, labels = (tf.identity(t) for t in next(iter(
            _read(args, config, workdir, False))))
    results["(b) GPU: augmentation alone, batch on device"] = measure_epochs(
        tf.data.Dataset.from_tensors(0).repeat(), steps, args.batch_size, args.epochs,
        on_batch=lambda step, _: on_device(tf.constant(step, tf.int64), images, labels))
    return results


def _table(results: dict) -> list[str]:
    return [f"{name:<52}{statistics.median(rates):>14.1f}{min(rates):>12.1f}"
            for name, rates in results.items()]


def _report(args, config: Config, results: dict) -> str:
    from transforms.online.augment import build_ops
    lines = [
        f"pixelmill bench train: {args.images} synthetic {args.source_size} px JPEGs in "
        f"{args.shards} shards -> {args.image_size}x{args.image_size}, batch {args.batch_size}, "
        f"{args.epochs} epochs after 1 warm-up, {_cpu_count()} CPU cores",
        f"(b) ops: {', '.join(op.name for op in build_ops(config.online)) or 'none'} (XLA)",
        "",
        f"{'path':<52}{'median img/s':>14}{'min img/s':>12}",
        *_table(results),
        "",
    ]
    median = {name[:3]: statistics.median(rates) for name, rates in results.items()}
    for label, numerator, denominator, target in (("(b)/(c)", "(b)", "(c)", 3.0),
                                                  ("(b)/(a)", "(b)", "(a)", 0.75)):
        ratio = median[numerator] / median[denominator]
        verdict = "met" if ratio >= target else "NOT met"
        lines.append(f"{label} = {ratio:.2f}x (target >= {target:g}x: {verdict})")
    return "\n".join(lines)


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _bench(args, config: Config, workdir: str) -> dict:
    started = time.perf_counter()
    write_synthetic_snapshot(workdir, counts={"train": args.images},
                             image_size=args.source_size, num_classes=8,
                             num_shards=args.shards, seed=args.seed, run_id="bench")
    logging.info("corpus written in %.1f s", time.perf_counter() - started)
    results = _bench_cpu(args, config, workdir)
    print(_report(args, config, results), flush=True)  # before the GPU part can fail
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        gpu_results = _bench_gpu(args, config, workdir)
        print(f"\n(b) on {gpus[0].name} "
              f"({tf.config.experimental.get_device_details(gpus[0]).get('device_name', 'GPU')})")
        print("\n".join(_table(gpu_results)), flush=True)
        results.update(gpu_results)
    return results


def run(argv=None) -> dict:
    """Writes the corpus, times (a)-(d) (and (b) on the GPU when there is one), prints the
    table; returns {path name: [images/s per timed epoch]}."""
    args = _parse_args(argv)
    config = load_config(args.config, args.set)
    if args.workdir:
        return _bench(args, config, args.workdir)
    with tempfile.TemporaryDirectory(prefix="pixelmill-bench-") as workdir:
        return _bench(args, config, workdir)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    run()
