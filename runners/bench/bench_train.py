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
from transforms import snapshot_layout as layout

__all__ = ["synthetic_image", "write_corpus", "measure_epochs", "run"]

_PALETTE = ((220, 60, 50), (60, 170, 70), (50, 90, 210), (230, 200, 40), (160, 70, 190),
            (40, 190, 200), (240, 130, 30), (120, 120, 120))


def synthetic_image(rng: np.random.Generator, size: int, label: int,
                    boxes: Sequence[Sequence[float]] = ()) -> np.ndarray:
    """A photo-like picture: a smooth random background tinted by the class, a few textured
    details, and a filled rectangle in the class colour for each (xmin, ymin, xmax, ymax) box
    (the reader's tests draw boxes; the benchmark does not)."""
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


def write_corpus(output_dir: str, images: int, image_size: int, num_classes: int,
                 num_shards: int, seed: int, run_id: str = "bench") -> str:
    """Writes the benchmark's corpus as one committed snapshot and returns its folder.

    `images` seeded JPEGs (`synthetic_image`, quality 90; image i has label
    `i % num_classes` and lies in shard `i % num_shards`) in the train split, in the layout
    `transforms.snapshot_layout` owns: shards, classes.txt and stats.json (the counts the reader
    needs: by_split and boxes), then manifest.json (the commit point), classes.txt and LATEST.
    """
    class_names = [f"class_{index}" for index in range(num_classes)]
    snapshot = layout.snapshot_dir(output_dir, run_id)
    paths = [layout.join(snapshot, layout.shard_name("images", "train", shard, num_shards, "none"))
             for shard in range(num_shards)]
    tf.io.gfile.makedirs(layout.join(snapshot, "train"))
    writers = [tf.io.TFRecordWriter(path) for path in paths]
    for index in range(images):
        rng = np.random.default_rng([seed, 0, index])
        label = index % num_classes
        buffer = io.BytesIO()
        Image.fromarray(synthetic_image(rng, image_size, label)).save(
            buffer, format="JPEG", quality=90)
        encoded = buffer.getvalue()
        writers[index % num_shards].write(codec.encode_example(
            encoded=encoded, image_format="jpeg", height=image_size, width=image_size,
            filename=f"train/{class_names[label]}/{index:06d}.jpg",
            sha256=hashlib.sha256(encoded).hexdigest(), label=label,
            label_text=class_names[label]))
    for writer in writers:
        writer.close()
    table = "".join(f"{name}\n" for name in class_names)
    for path, text in (
            (layout.join(snapshot, layout.CLASSES), table),
            (layout.join(snapshot, layout.STATS), json.dumps({
                "by_split": {split: images if split == "train" else 0 for split in SPLITS},
                "boxes": {"images_with_boxes": 0, "boxes": 0}}, indent=2)),
            (layout.join(snapshot, layout.MANIFEST), json.dumps(
                {"run_id": run_id, "synthetic": True, "files": [
                    {"path": path[len(snapshot) + 1:]} for path in sorted(paths)]}, indent=2)),
            (layout.join(output_dir, layout.CLASSES), table),
            (layout.join(output_dir, layout.LATEST), f"{run_id}\n")):
        with tf.io.gfile.GFile(path, "w") as handle:
            handle.write(text)
    return snapshot


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
    write_corpus(workdir, images=args.images, image_size=args.source_size, num_classes=8,
                 num_shards=args.shards, seed=args.seed)
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
