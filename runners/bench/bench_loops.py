"""What `pixelmill bench preprocess` times inside its own process: the decode limit (full size
and at the job's DCT scale), the naive tutorial loop, and the job's inspection step alone
(inline and isolated), each as images/s and CPU milliseconds per image."""
from __future__ import annotations

import dataclasses
import io
import os
import resource
import time

__all__ = ["time_decode_limit", "job_scale_ratios", "job_scale_decode_ms", "time_naive_loop",
           "InspectCost", "time_inspect", "own_cpu_seconds", "machine_state"]


def own_cpu_seconds() -> float:
    """User + system CPU of this process, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


_LOOP_ROUNDS = 3_000_000  # the fixed loop of `machine_state`: ~0.09 s of CPU on a quiet core


def machine_state() -> tuple[float, float]:
    """(the 1-minute load average, CPU seconds of a fixed Python loop, the least of three):
    how busy the machine is as figures are measured. The load average counts this machine's
    own work; the loop is the same work every time, so its time also grows when the host's
    other machines share this one's cores, and every CPU figure with it: 0.085-0.10 s on the
    quiet 2-core machine of docs/benchmarks.md, 0.16-0.18 s at its busiest (2026-12-07)."""
    def loop() -> float:
        started, total = time.process_time(), 0
        for number in range(_LOOP_ROUNDS):
            total += number * number
        return time.process_time() - started
    return os.getloadavg()[0], min(loop() for _ in range(3))


def _decoding(paths, decode, threads: int):
    """A tf.data pipeline that reads every file and `decode`s its bytes, `threads` at a time;
    only a scalar per file leaves it. Iterate it with `_run_all`."""
    import tensorflow as tf
    if threads < 1:
        raise ValueError(f"threads must be >= 1. Received: threads={threads}")
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    return (tf.data.Dataset.from_tensor_slices(list(paths))
            .map(lambda path: tf.size(decode(tf.io.read_file(path))),
                 num_parallel_calls=threads, deterministic=False)
            .with_options(options))


def _run_all(dataset, files: int) -> None:
    count = sum(1 for _ in dataset)
    if count != files:
        raise RuntimeError(f"decoded {count} of {files} files")


def _decode_whole(data):
    import tensorflow as tf
    return tf.io.decode_image(data, channels=3, expand_animations=False)


def time_decode_limit(paths, threads: int) -> float:
    """Seconds for tf.data to read and `tf.io.decode_image` every file, `threads` at a time."""
    paths = list(paths)
    dataset = _decoding(paths, _decode_whole, threads)
    started = time.perf_counter()
    _run_all(dataset, len(paths))
    return time.perf_counter() - started


def job_scale_ratios(paths, analysis_size: int) -> dict:
    """{DCT ratio: [paths]}: the ratio the inspection decodes each file at (JPEGs by
    `pick_jpeg_ratio` to `analysis_size` on the long side, other formats 1)."""
    from transforms.decode import pick_jpeg_ratio
    from transforms.offline import image_header
    by_ratio: dict = {}
    for path in paths:
        with open(path, "rb") as handle:
            header = image_header.read_header(handle.read())
        ratio = (pick_jpeg_ratio(header.width, header.height, analysis_size, side="long")
                 if header.format == "jpeg" else 1)
        by_ratio.setdefault(ratio, []).append(path)
    return by_ratio


def job_scale_decode_ms(paths, analysis_size: int, threads: int) -> float:
    """CPU ms per image of the bare tf.data decode at the job's own scale: each JPEG at the DCT
    ratio the inspection picks for it (`pick_jpeg_ratio` to `analysis_size`, long side), any
    other file whole. The least decoding a job that judges these files' pixels can do, so the
    floor of the end-to-end targets (`bench_costs`) counts this, not the full-size decode."""
    import tensorflow as tf
    by_ratio = job_scale_ratios(paths, analysis_size)
    started = own_cpu_seconds()
    for ratio, group in sorted(by_ratio.items()):
        _run_all(_decoding(group, _decode_whole if ratio == 1 else
                           lambda data, ratio=ratio: tf.io.decode_jpeg(data, channels=3,
                                                                       ratio=ratio),
                           threads), len(group))
    return 1000.0 * (own_cpu_seconds() - started) / max(1, len(paths))


def time_naive_loop(items, output_path: str, min_variance: float) -> tuple[float, int]:
    """The tutorial loop in this process: (seconds, records written)."""
    import numpy as np
    import tensorflow as tf
    from PIL import Image

    def int64(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    def bytes_(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    class_ids: dict = {}
    written = 0
    started = time.perf_counter()
    with tf.io.TFRecordWriter(output_path) as writer:
        for path, label in items:
            with open(path, "rb") as handle:
                data = handle.read()
            pixels = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            if pixels.var() < min_variance:
                continue
            example = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": bytes_(data),
                "image/height": int64(pixels.shape[0]),
                "image/width": int64(pixels.shape[1]),
                "image/class/label": int64(class_ids.setdefault(label, len(class_ids))),
                "image/class/text": bytes_(label.encode()),
            }))
            writer.write(example.SerializeToString())
            written += 1
    return time.perf_counter() - started, written


@dataclasses.dataclass(frozen=True)
class InspectCost:
    """CPU milliseconds per image of the job's inspection step (read, sha256, header, decode,
    quality analysis, pHash) on a sample of the corpus, after a warm-up."""
    images: int
    inline_ms: float        # an ImageInspector in this process
    isolated_ms: float      # through one isolating child: this process plus the child


def _records(paths):
    from transforms.offline.image_record import ImageRecord
    return [ImageRecord(uri=path, path=os.path.basename(path), file_bytes=os.path.getsize(path))
            for path in paths]


def _isolated_ms(inspector, records, timeout_s: float) -> float:
    from transforms.offline import isolation
    from transforms.offline.image_inspection import decoding_pool
    pool = decoding_pool(inspector, 1, timeout_s)  # the job's batches
    try:
        def run_all(batch):
            for key, record in enumerate(batch):
                pool.put(key, record, record.file_bytes)
            while pool.in_flight:
                pool.poll(wait=True)

        run_all(records[:10])  # warm-up: the child's TensorFlow and first decodes
        child_before = isolation.process_cpu_seconds(pool.pids()[0])
        own_before = own_cpu_seconds()
        run_all(records)
        child = isolation.process_cpu_seconds(pool.pids()[0]) - child_before
        return 1000.0 * (child + own_cpu_seconds() - own_before) / len(records)
    finally:
        pool.close()


def time_inspect(paths, config, sample: int = 300) -> InspectCost:
    """`InspectCost` on the first `sample` of `paths` (inline after a warm-up of 10)."""
    from transforms.offline.image_inspection import ImageInspector
    records = _records(list(paths)[:sample])
    inspector = ImageInspector(config)
    inspector.setup()
    for record in records[:10]:
        inspector.inspect(record)
    started = own_cpu_seconds()
    for record in records:
        inspector.inspect(record)
    inline = 1000.0 * (own_cpu_seconds() - started) / len(records)
    isolated = _isolated_ms(ImageInspector(config), records, config.decode.timeout_s)
    return InspectCost(images=len(records), inline_ms=inline, isolated_ms=isolated)
