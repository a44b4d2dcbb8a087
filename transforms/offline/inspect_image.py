"""Inspect one image file: read, hash, sniff the header, decode with the shared TF decoder,
validate sizes and measure quality. The result is an `ImageRecord` whether accepted or not, so
every discovered file reaches the index with whatever was learned about it.

Order matters for safety and cost: the header is checked against `limits.max_pixels` before
anything is decoded, and decoding runs isolated in a subprocess (by default) so that a decoder
that crashes or hangs rejects that one file as `decoder_crash` instead of taking the job down.
"""
from __future__ import annotations

import collections
import hashlib

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from configs.schema import Config
from transforms.file_reads import read_bytes
from transforms.offline import image_header, isolation, progress, quality
from transforms.offline.image_record import ImageRecord
from transforms.offline.rejects import REASONS

__all__ = ["InspectImageFn", "IsolatedInspectFn", "InspectImages", "size_reject"]


def size_reject(width: int, height: int, limits) -> tuple[str, str] | None:
    """The size rules on stored dimensions (header or decoded): reason and detail, or None."""
    if width * height > limits.max_pixels:
        return "too_large", (f"{width}x{height} = {width * height} pixels > "
                             f"limits.max_pixels={limits.max_pixels}")
    if max(width, height) > limits.max_side:
        return "too_large", f"{width}x{height}: a side > limits.max_side={limits.max_side}"
    if min(width, height) < limits.min_side:
        return "too_small", f"{width}x{height}: a side < limits.min_side={limits.min_side}"
    aspect = max(width / height, height / width)
    if aspect > limits.max_aspect_ratio:
        return "bad_aspect_ratio", (f"{width}x{height}: aspect {aspect:.2f} > "
                                    f"limits.max_aspect_ratio={limits.max_aspect_ratio}")
    return None


_NOT_DECODED = REASONS.not_decoded


class _Tally:
    """Beam counters per outcome (`inspected`, `inspected_ok`, `rejected`, `rejected_<reason>`,
    `decoded`) and the same counts in this process's `progress` (the launcher's progress line),
    kept by the DoFn that sees the results: the worker, also when the decoding runs in a child
    process whose counters Beam would never collect."""

    def __init__(self, limits):
        self._max_pixels = limits.max_pixels
        self._counters = {}
        self._pending = collections.Counter()

    def _inc(self, name: str):
        self._pending[name] += 1

    def flush(self):
        """Adds the counts since the last flush to the Beam counters: once per bundle, as Beam
        commits them, since each `inc` looks up the step's metrics container (~5 us)."""
        for name, count in self._pending.items():
            counter = self._counters.get(name)
            if counter is None:
                counter = self._counters[name] = Metrics.counter("pixelmill", name)
            counter.inc(count)
        self._pending.clear()

    def _decoded(self, record: ImageRecord) -> bool:
        if record.reject is None:
            return True
        if record.reject.reason == "too_large":  # from the header, or a side after decoding
            return record.width * record.height <= self._max_pixels
        return record.reject.reason not in _NOT_DECODED

    def add(self, record: ImageRecord):
        progress.enter("inspecting")
        if self._decoded(record):
            self._inc("decoded")
        self._inc("inspected")
        self._inc("rejected_" + record.reject.reason if record.reject else "inspected_ok")
        if record.reject:
            self._inc("rejected")
        progress.add("inspected")
        progress.add("rejected" if record.reject else "accepted")


class InspectImageFn(beam.DoFn):
    """ImageRecord (uri, path, file_bytes) -> ImageRecord measured, with `reject` set when a rule
    fails. Expected failures become
    rejects here; anything that escapes (a crash, a hang) is the dead letter of the isolation."""

    def __init__(self, config: Config):
        self._config = config

    def setup(self):
        import tensorflow as tf  # imported in the worker (or the isolating subprocess)

        from transforms.decode import decode_image_array, pick_jpeg_ratio
        self._tf = tf
        self._decode_image = decode_image_array
        self._pick_jpeg_ratio = pick_jpeg_ratio
        self._tally = _Tally(self._config.limits)

    def process(self, planned: ImageRecord):
        record = self._inspect(planned)
        self._tally.add(record)
        yield record

    def finish_bundle(self):
        self._tally.flush()

    def _inspect(self, record: ImageRecord) -> ImageRecord:
        """The measured record. What is learned collects in `learned` and lands in one
        `ImageRecord.replace` (one copy per image, not one per step)."""
        try:
            data = read_bytes(record.uri)
        except OSError as exc:
            return record.rejected("unreadable", f"{type(exc).__name__}: {exc}")
        learned = {"sha256": hashlib.sha256(data).hexdigest(), "file_bytes": len(data)}

        def rejected(reason: str, detail: str) -> ImageRecord:
            return record.replace(**learned).rejected(reason, detail)

        try:
            header = image_header.read_header(data)
        except image_header.UnknownFormat as exc:
            return rejected("unknown_format", str(exc))
        except image_header.HeaderError as exc:
            return rejected("bad_header", str(exc))
        # With decode.exif_orientation the decoder turns the image upright, so the record's size
        # is the displayed one; the orientation (a fact about the bytes) is kept either way.
        upright = self._config.decode.exif_orientation
        width, height = header.displayed_size if upright else (header.width, header.height)
        learned.update(format=header.format, width=width, height=height,
                       orientation=header.orientation)
        limits = self._config.limits
        if header.width * header.height > limits.max_pixels:  # never decode a bomb
            return rejected(*size_reject(width, height, limits))
        scans = image_header.jpeg_scans(data) if header.format == "jpeg" else 0
        if scans > limits.max_jpeg_scans:  # nor a scan bomb: each scan is a pass over the image
            return rejected("too_large", f"{scans} JPEG scans > limits.max_jpeg_scans="
                                         f"{limits.max_jpeg_scans}; never decoded")
        if header.total_pixels > limits.max_total_pixels:  # giflib inflates every frame
            return rejected("too_large", (
                f"{header.frames} frames, {header.total_pixels} pixels in all > "
                f"limits.max_total_pixels={limits.max_total_pixels}"))
        analysis_size = self._config.quality.analysis_size
        # The analysis copy is at most analysis_size on its long side: decode at the smallest
        # DCT scale that still covers it, so little is left for small_copy to do.
        ratio = self._pick_jpeg_ratio(header.width, header.height, analysis_size, side="long")
        try:
            image = self._decode_image(data, jpeg_ratio=ratio, is_jpeg=header.format == "jpeg",
                                       orientation=header.orientation if upright else 1)
        except self._tf.errors.InvalidArgumentError as exc:
            return rejected("decode_error", _decoder_message(exc))
        rule = size_reject(width, height, limits)
        if rule:
            return rejected(*rule)
        dedup = self._config.dedup
        analysis = quality.analyse(image, analysis_size,
                                   center=dedup.near_duplicates and dedup.crop_tolerant)
        learned.update(
            metrics=tuple(sorted(analysis.metrics.items())),
            moments=tuple(analysis.means) + tuple(analysis.square_means), phash=analysis.phash,
            center_phash=analysis.center_phash)
        verdict = quality.judge(analysis.metrics, self._config.quality)
        if verdict:
            return rejected(*verdict)
        return record.replace(**learned)


def _decoder_message(exc) -> str:
    message = getattr(exc, "message", None) or str(exc)
    # TF prefixes "{{function_node __wrapped__DecodeImage_device_/...}}"; keep what the codec said
    if "}}" in message:
        message = message.split("}}", 1)[1].strip()
    return message.split("[Op:")[0].strip()


def _crash_to_record(dead_letter) -> ImageRecord:
    record, (exc_type, exc_message, _traceback) = dead_letter
    kind = getattr(exc_type, "__name__", str(exc_type))
    return record.rejected("decoder_crash", f"{kind}: {str(exc_message)[:500]}")


class _IsolatedWorker:
    """What an isolating child runs: the InspectImageFn's inspection, on one TensorFlow thread
    (the pool has one child per core it should use)."""

    def __init__(self, inspect_fn: InspectImageFn):
        self._inspect_fn = inspect_fn

    def setup(self) -> None:
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        self._inspect_fn.setup()

    def run(self, record: ImageRecord) -> ImageRecord:
        return self._inspect_fn._inspect(record)


def _failure_record(record: ImageRecord, failure: isolation.Failure) -> ImageRecord:
    return record.rejected("decoder_crash", failure.detail)


class IsolatedInspectFn(beam.DoFn):
    """InspectImageFn in `processes` child processes (`isolation.ChildPool`) with a per-file
    timeout: a file on which a child dies is retried once in a fresh child and then rejected
    as `decoder_crash`; a file that takes longer than `decode.timeout_s` is rejected at once
    (not retried: it would hang again). Elements are buffered (two of the pool's batches per
    child) so the children always have work and a batch of images travels per message;
    results leave in the order they complete, in their own element's window."""

    def __init__(self, inspect_fn: InspectImageFn, timeout_s: float, processes: int):
        self._inspect_fn = inspect_fn  # pickled into each child
        self._timeout_s = timeout_s
        self._processes = processes

    def setup(self):
        self._tally = _Tally(self._inspect_fn._config.limits)
        self._pool = isolation.ChildPool(
            _IsolatedWorker(self._inspect_fn), self._processes, self._timeout_s,
            preload=isolation.DECODER_PRELOAD)
        self._waiting: dict = {}
        self._next_key = 0

    def _emit(self, done):
        for key, result in done:
            record, timestamp, window = self._waiting.pop(key)
            if isinstance(result, isolation.Failure):
                result = _failure_record(record, result)
            self._tally.add(result)
            yield WindowedValue(result, timestamp, [window])

    def process(self, planned: ImageRecord, timestamp=beam.DoFn.TimestampParam,
                window=beam.DoFn.WindowParam):
        key, self._next_key = self._next_key, self._next_key + 1
        self._waiting[key] = (planned, timestamp, window)
        self._pool.put(key, planned)
        full = self._pool.in_flight >= 2 * self._processes * isolation.QUEUED_PER_CHILD
        yield from self._emit(self._pool.poll(wait=full))

    def finish_bundle(self):
        while self._pool.in_flight:
            yield from self._emit(self._pool.poll(wait=True))
        self._tally.flush()

    def teardown(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()


class InspectImages(beam.PTransform):
    """Planned ImageRecords -> inspected ImageRecords. With `decode.isolation: subprocess` each
    worker inspects in `decode.processes` child processes (`IsolatedInspectFn`; the launcher
    resolves 0, auto, before the graph is built) with a per-file timeout; otherwise in the
    worker itself."""

    def __init__(self, config: Config):
        super().__init__()
        self._config = config

    def expand(self, refs):
        inspect_fn = InspectImageFn(self._config)
        if self._config.decode.isolation == "subprocess":  # every failure is caught per file
            return refs | "Inspect" >> beam.ParDo(IsolatedInspectFn(
                inspect_fn, self._config.decode.timeout_s,
                max(1, self._config.decode.processes)))
        good, crashed = refs | "Inspect" >> beam.ParDo(inspect_fn).with_exception_handling()
        crashed_records = crashed | "CrashToReject" >> beam.Map(_crash_to_record)
        return (good, crashed_records) | "AllInspected" >> beam.Flatten()
