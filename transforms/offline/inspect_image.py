"""Inspect one image file: read, hash, sniff the header, decode with the shared TF decoder,
validate sizes and measure quality. The result is an `ImageRecord` whether accepted or not, so
every discovered file reaches the index with whatever was learned about it.

Order matters for safety and cost: the header is checked against `limits.max_pixels` before
anything is decoded, and decoding runs isolated in a subprocess (by default) so that a decoder
that crashes or hangs rejects that one file as `decoder_crash` instead of taking the job down.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import logging
import multiprocessing
import sys
import time

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from configs.schema import Config
from transforms.offline import image_header, quality
from transforms.offline.image_record import ImageRecord

__all__ = ["InspectImageFn", "IsolatedInspectFn", "InspectImages", "size_reject"]

_LOG = logging.getLogger(__name__)


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


# Reasons given before or at the decode: such an image was never decoded successfully.
_NOT_DECODED = ("unreadable", "unknown_format", "bad_header", "decode_error", "decoder_crash")


class _Tally:
    """Beam counters per outcome (and `decoded`) plus a progress line every 10 s, kept by the
    DoFn that sees the results: the worker, also when the decoding runs in a child process
    whose counters Beam would never collect."""

    def __init__(self, limits):
        self._max_pixels = limits.max_pixels
        self._counters = {}
        self._seen = 0
        self._started = self._last_log = time.monotonic()

    def _inc(self, name: str):
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = Metrics.counter("pixelmill", name)
        counter.inc()

    def _decoded(self, record: ImageRecord) -> bool:
        if record.reject is None:
            return True
        if record.reject.reason == "too_large":  # from the header, or a side after decoding
            return record.width * record.height <= self._max_pixels
        return record.reject.reason not in _NOT_DECODED

    def add(self, record: ImageRecord):
        if self._decoded(record):
            self._inc("decoded")
        self._inc("rejected_" + record.reject.reason if record.reject else "inspected_ok")
        self._seen += 1
        now = time.monotonic()
        if now - self._last_log >= 10.0:
            rate = self._seen / max(now - self._started, 1e-9)
            _LOG.info("pixelmill: inspected %d images in this worker (%.0f/s)", self._seen, rate)
            self._last_log = now


class InspectImageFn(beam.DoFn):
    """ImageRecord (uri, path, file_bytes) -> ImageRecord measured, with `reject` set when a rule
    fails. Expected failures become
    rejects here; anything that escapes (a crash, a hang) is the dead letter of the isolation."""

    def __init__(self, config: Config):
        self._config = config

    def setup(self):
        import tensorflow as tf  # imported in the worker (or the isolating subprocess)
        from transforms.decode import decode_image, pick_jpeg_ratio
        self._tf = tf
        self._decode_image = decode_image
        self._pick_jpeg_ratio = pick_jpeg_ratio
        self._tally = _Tally(self._config.limits)

    def process(self, planned: ImageRecord):
        record = self._inspect(planned)
        self._tally.add(record)
        yield record

    def _inspect(self, record: ImageRecord) -> ImageRecord:
        try:
            with FileSystems.open(record.uri, compression_type="uncompressed") as handle:
                data = handle.read()
        except OSError as exc:
            return record.rejected("unreadable", f"{type(exc).__name__}: {exc}")
        record = dataclasses.replace(record, sha256=hashlib.sha256(data).hexdigest(),
                                     file_bytes=len(data))
        try:
            header = image_header.read_header(data)
        except image_header.UnknownFormat as exc:
            return record.rejected("unknown_format", str(exc))
        except image_header.HeaderError as exc:
            return record.rejected("bad_header", str(exc))
        record = dataclasses.replace(record, format=header.format, width=header.width,
                                     height=header.height)
        limits = self._config.limits
        if header.width * header.height > limits.max_pixels:  # never decode a bomb
            return record.rejected(*size_reject(header.width, header.height, limits))
        if header.total_pixels > limits.max_total_pixels:  # giflib inflates every frame
            return record.rejected("too_large", (
                f"{header.frames} frames, {header.total_pixels} pixels in all > "
                f"limits.max_total_pixels={limits.max_total_pixels}"))
        analysis_size = self._config.quality.analysis_size
        # The analysis copy is at most analysis_size on its long side: decode at the smallest
        # DCT scale that still covers it, so little is left for small_copy to do.
        ratio = self._pick_jpeg_ratio(header.width, header.height, analysis_size, side="long")
        try:
            image = self._decode_image(data, jpeg_ratio=ratio,
                                       is_jpeg=header.format == "jpeg").numpy()
        except self._tf.errors.InvalidArgumentError as exc:
            return record.rejected("decode_error", _decoder_message(exc))
        rule = size_reject(header.width, header.height, limits)
        if rule:
            return record.rejected(*rule)
        small = quality.small_copy(image, analysis_size)
        metrics = quality.measure(small)
        means, sqmeans = quality.channel_moments(small)
        record = dataclasses.replace(
            record, metrics=tuple(sorted(metrics.items())), moments=tuple(means) + tuple(sqmeans),
            phash=quality.perceptual_hash(small))
        verdict = quality.judge(metrics, self._config.quality)
        if verdict:
            return record.rejected(*verdict)
        return record


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


_CHILD_FN = None  # the InspectImageFn of an isolating child process


def _start_child(inspect_fn: "InspectImageFn") -> None:
    global _CHILD_FN
    _CHILD_FN = inspect_fn
    _CHILD_FN.setup()


def _inspect_in_child(record: ImageRecord) -> ImageRecord:
    return _CHILD_FN._inspect(record)


@contextlib.contextmanager
def _main_script_hidden():
    """Starts children without re-running the user's `__main__` script in them.

    multiprocessing prepares every spawned or forkserver child by running the parent's main
    script again (as `__mp_main__`). A script that calls the job without an
    `if __name__ == "__main__":` guard would then start the job again inside each decoding
    child, and every image would end as `decoder_crash`. The child needs nothing from
    `__main__`, so the script's path and spec are hidden while a child starts.
    """
    main = sys.modules["__main__"]
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__")
             if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


class IsolatedInspectFn(beam.DoFn):
    """InspectImageFn in a child process with a per-file timeout.

    The child comes from a forkserver, never from fork() of the Beam worker: the worker runs
    gRPC and TensorFlow threads, and a child forked while one of them holds an abseil mutex
    aborts ("Mutex::Fer with pending CondVar queueing"), which Beam's
    `with_exception_handling(use_subprocess=True)` (a fork()ed ProcessPoolExecutor) turned into
    a `decoder_crash` of a good image in about one run in three (2 of 200 images each time).
    A file is rejected only when the child dies or times out on it twice, each time in a fresh
    child: a child that died between files (or before this one started) blames nobody.
    """

    def __init__(self, inspect_fn: InspectImageFn, timeout_s: float):
        self._inspect_fn = inspect_fn  # pickled into each child
        self._timeout_s = timeout_s

    def setup(self):
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["tensorflow", "transforms.offline.inspect_image"])
        self._pool = None
        self._tally = _Tally(self._inspect_fn._config.limits)

    def _stop_child(self):
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(pool._processes.values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.kill()

    def _inspect_isolated(self, record: ImageRecord) -> ImageRecord:
        failure = None
        for _attempt in range(2):
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    1, mp_context=self._context, initializer=_start_child,
                    initargs=(self._inspect_fn,))
            try:
                with _main_script_hidden():  # the child process starts inside submit()
                    future = self._pool.submit(_inspect_in_child, record)
                return future.result(self._timeout_s)
            except concurrent.futures.process.BrokenProcessPool as exc:
                failure = f"the decoding process died: {exc}"
            except concurrent.futures.TimeoutError:
                failure = f"no result within decode.timeout_s={self._timeout_s}"
            self._stop_child()
        return record.rejected("decoder_crash", f"{failure} (twice, each in a fresh process)")

    def process(self, planned: ImageRecord):
        record = self._inspect_isolated(planned)
        self._tally.add(record)
        yield record

    def teardown(self):
        self._stop_child()


class InspectImages(beam.PTransform):
    """Planned ImageRecords -> inspected ImageRecords. With `decode.isolation: subprocess` each worker inspects in a
    child process (`IsolatedInspectFn`, started from a forkserver) with a per-file timeout; a
    crash or timeout restarts the child and, when it happens again, rejects that one file."""

    def __init__(self, config: Config):
        super().__init__()
        self._config = config

    def expand(self, refs):
        isolate = self._config.decode.isolation == "subprocess"
        inspect_fn = InspectImageFn(self._config)
        if isolate:
            inspect_fn = IsolatedInspectFn(inspect_fn, self._config.decode.timeout_s)
        good, crashed = refs | "Inspect" >> beam.ParDo(inspect_fn).with_exception_handling()
        crashed_records = crashed | "CrashToReject" >> beam.Map(_crash_to_record)
        return (good, crashed_records) | "AllInspected" >> beam.Flatten()

