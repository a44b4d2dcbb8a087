"""Inspecting one image file, apart from Beam: read, hash, sniff the header, check the limits,
decode with the shared TF decoder, measure quality and judge. The result is an `ImageRecord`
whether accepted or not, so every discovered file reaches the index with whatever was learned.

Order matters for safety and cost: the header is checked against `limits.max_pixels` before
anything is decoded. The job's inspect step (`inspect_image`) runs an `ImageInspector` in the
Beam worker, or in isolating child processes (`IsolatedInspector`, `isolation.ChildPool`) so
that a decoder that crashes or hangs rejects that one file. This module imports no Beam, so
neither does the children's forkserver (`decoder_imports`): ~0.8 s of CPU less per job start.
"""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from configs.schema import Config
from transforms.file_reads import read_bytes
from transforms.offline import image_header, quality
from transforms.offline.image_record import ImageRecord
from transforms.offline.isolation import Later

__all__ = ["Read", "Decoded", "ImageInspector", "IsolatedInspector", "size_reject",
           "decoder_message"]


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


@dataclasses.dataclass
class Read:
    """An image between `ImageInspector.read` and `decode_read`: its record, what was learned
    so far, its bytes and how to decode them (DCT scale, JPEG or not, orientation to apply)."""
    record: ImageRecord
    learned: dict
    data: bytes
    jpeg_ratio: int
    is_jpeg: bool
    orientation: int
    tensor: object = None  # `data` as a string tensor, when made ahead (`IsolatedInspector`)


@dataclasses.dataclass
class Decoded:
    """An image between `ImageInspector.decode` and `measure`: its record, what was learned so
    far, and its pixels (uint8 [H, W, 3], at the analysis's DCT scale)."""
    record: ImageRecord
    learned: dict
    image: np.ndarray


def _rejected(record: ImageRecord, learned: dict, reason: str, detail: str) -> ImageRecord:
    return record.replace(**learned).rejected(reason, detail)


class ImageInspector:
    """ImageRecord (uri, path, file_bytes) -> ImageRecord measured, with `reject` set when a
    rule fails. Expected failures become rejects here; anything that escapes (a crash, a hang)
    is the caller's: the dead letter of the inline step, or the isolation's `decoder_crash`.
    Call `setup` once (it imports TensorFlow) before `inspect`."""

    def __init__(self, config: Config):
        self.config = config

    def setup(self) -> None:
        import tensorflow as tf  # imported in the worker (or the isolating child)

        from transforms.decode import decode_image_array, pick_jpeg_ratio, string_tensors
        self._tf = tf
        self._decode_image = decode_image_array
        self._pick_jpeg_ratio = pick_jpeg_ratio
        self._string_tensors = string_tensors

    def inspect(self, record: ImageRecord) -> ImageRecord:
        """The measured record. What is learned collects in `learned` and lands in one
        `ImageRecord.replace` (one copy per image, not one per step)."""
        decoded = self.decode(record)
        return decoded if isinstance(decoded, ImageRecord) else self.measure(decoded)

    def decode(self, record: ImageRecord) -> ImageRecord | Decoded:
        """`inspect`'s first step, `read` then `decode_read`: the rejected record, or what
        `measure` needs."""
        read = self.read(record)
        return read if isinstance(read, ImageRecord) else self.decode_read(read)

    def read(self, record: ImageRecord) -> ImageRecord | Read:
        """Read, hash, header, the limits a header can break: the rejected record, or what
        `decode_read` needs. Nothing is decoded here."""
        try:
            data = read_bytes(record.uri)
        except OSError as exc:
            return record.rejected("unreadable", f"{type(exc).__name__}: {exc}")
        learned = {"sha256": hashlib.sha256(data).hexdigest(), "file_bytes": len(data)}
        try:
            header = image_header.read_header(data)
        except image_header.UnknownFormat as exc:
            return _rejected(record, learned, "unknown_format", str(exc))
        except image_header.HeaderError as exc:
            return _rejected(record, learned, "bad_header", str(exc))
        # With decode.exif_orientation the decoder turns the image upright, so the record's size
        # is the displayed one; the orientation (a fact about the bytes) is kept either way.
        upright = self.config.decode.exif_orientation
        width, height = header.displayed_size if upright else (header.width, header.height)
        learned.update(format=header.format, width=width, height=height,
                       orientation=header.orientation)
        limits = self.config.limits
        if header.width * header.height > limits.max_pixels:  # never decode a bomb
            return _rejected(record, learned, *size_reject(width, height, limits))
        scans = image_header.jpeg_scans(data) if header.format == "jpeg" else 0
        if scans > limits.max_jpeg_scans:  # nor a scan bomb: each scan is a pass over the image
            return _rejected(record, learned, "too_large",
                             f"{scans} JPEG scans > limits.max_jpeg_scans="
                             f"{limits.max_jpeg_scans}; never decoded")
        if header.total_pixels > limits.max_total_pixels:  # giflib inflates every frame
            return _rejected(record, learned, "too_large", (
                f"{header.frames} frames, {header.total_pixels} pixels in all > "
                f"limits.max_total_pixels={limits.max_total_pixels}"))
        analysis_size = self.config.quality.analysis_size
        # The analysis copy is at most analysis_size on its long side: decode at the smallest
        # DCT scale that still covers it, so little is left for small_copy to do.
        ratio = self._pick_jpeg_ratio(header.width, header.height, analysis_size, side="long")
        return Read(record, learned, data, ratio, header.format == "jpeg",
                    header.orientation if upright else 1)

    def make_tensors(self, reads: list) -> None:
        """Sets the `tensor` of each of `reads` (what `decode_read` decodes), all made in one
        call (`transforms.decode.string_tensors`)."""
        for read, tensor in zip(reads, self._string_tensors([read.data for read in reads])):
            read.tensor = tensor

    def decode_read(self, read: Read) -> ImageRecord | Decoded:
        """The decode of what `read` returned, and the size rules on the image's size: the
        rejected record, or what `measure` needs."""
        record, learned = read.record, read.learned
        try:
            image = self._decode_image(read.data if read.tensor is None else read.tensor,
                                       jpeg_ratio=read.jpeg_ratio, is_jpeg=read.is_jpeg,
                                       orientation=read.orientation)
        except self._tf.errors.InvalidArgumentError as exc:
            return _rejected(record, learned, "decode_error", decoder_message(exc))
        rule = size_reject(learned["width"], learned["height"], self.config.limits)
        if rule:
            return _rejected(record, learned, *rule)
        return Decoded(record, learned, image)

    def measure(self, decoded: Decoded) -> ImageRecord:
        """`inspect`'s second step: the quality metrics and hashes of the decoded image, and the
        verdict."""
        dedup, learned = self.config.dedup, decoded.learned
        analysis = quality.analyse(decoded.image, self.config.quality.analysis_size,
                                   center=dedup.near_duplicates and dedup.crop_tolerant)
        learned.update(
            metrics=tuple(sorted(analysis.metrics.items())),
            moments=tuple(analysis.means) + tuple(analysis.square_means), phash=analysis.phash,
            center_phash=analysis.center_phash)
        verdict = quality.judge(analysis.metrics, self.config.quality)
        record = decoded.record.replace(**learned)
        return record.rejected(*verdict) if verdict else record


def decoder_message(exc) -> str:
    """What the codec said, from TensorFlow's decode error."""
    message = getattr(exc, "message", None) or str(exc)
    # TF prefixes "{{function_node __wrapped__DecodeImage_device_/...}}"; keep what the codec said
    if "}}" in message:
        message = message.split("}}", 1)[1].strip()
    return message.split("[Op:")[0].strip()


class IsolatedInspector:
    """What an isolating child runs: the inspector, on one TensorFlow thread (the pool has one
    child per core it should use), in three steps (`isolation`): the reads of a message's
    images (`prepare`), then their decodes (`first`), then their analyses (`second`), up to
    `group_weight` bytes of decoded pixels held. Each step over many images in a row keeps its
    code in the CPU's caches: a thumbnail's inspection took ~0.03 ms less than with its read
    between two decodes."""

    group_weight = 16 << 20

    def __init__(self, inspector: ImageInspector):
        self.inspector = inspector

    def setup(self) -> None:
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        self.inspector.setup()

    def prepare(self, record: ImageRecord):
        read = self.inspector.read(record)
        return read if isinstance(read, ImageRecord) else Later(read, len(read.data))

    def prepared(self, reads: list) -> None:
        """Makes the string tensors of the small files among a message's `reads` in one call
        (`transforms.decode.string_tensors`): a tensor made alone costs a thumbnail's
        inspection ~0.015 ms more. A large file's (a photo's) stays its decode's to make: one
        more copy of its bytes would cost what the call saves."""
        small = [read for read in reads if len(read.data) <= SMALL_FILE_BYTES]
        if len(small) > 1:
            self.inspector.make_tensors(small)

    def first(self, read: Read):
        decoded = self.inspector.decode_read(read)
        if isinstance(decoded, ImageRecord):
            return decoded
        return Later(decoded, decoded.image.nbytes)

    def second(self, decoded: Decoded) -> ImageRecord:
        return self.inspector.measure(decoded)


SMALL_FILE_BYTES = 64 << 10  # files whose string tensors a child makes a message's at once

# Up to 64 images a message, fewer once their files pass 4 MiB together: a message each way
# costs the launcher ~0.1-0.2 ms of CPU and a child about as much, so thumbnails travel 64 to a
# message (32 before: the children's CPU per thumbnail 0.20-0.215 -> 0.19 ms, the launcher's
# 0.020-0.024 -> 0.016-0.017 ms) and photos (~0.1 MB) ~39 (photos went ~9 under 1 MiB: the
# launcher's share per photo 0.036-0.040 -> 0.020-0.022 ms); the cap leaves the children about
# as much work each at a run's end (39 photos are ~0.1 s of a child's work, 64 thumbnails
# ~0.013 s). Camera photos (2-3 MB) would go one at a time, but a message that carries one costs
# the launcher's main thread ~0.5 ms (a poll, a receive, the steps after it, on a cache the
# decoders have just used), so a message takes a quarter of each child's share of the queue,
# up to 16 (`isolation.ChildPool`), fewer as the queue runs short and one at a time at the
# run's end, where the balance is made. 200 camera photos: 179-181 -> 69 messages with 4 at
# least (thirty-seventh round); 1,000: the launcher's CPU per photo 0.72-0.75 -> 0.56-0.57
# ms with 16 and `IsolatedInspectFn`'s bursts (docs/benchmarks.md, forty-second round).
HELD_PER_CHILD = 128
BATCH_BYTES = 4 << 20
MIN_BATCH = 16


def decoding_pool(inspector: ImageInspector, processes: int, timeout_s: float):
    """The isolating children that inspect images; `put(key, record, record.file_bytes)`."""
    from transforms.offline import isolation
    return isolation.ChildPool(IsolatedInspector(inspector), processes, timeout_s,
                               preload=isolation.DECODER_PRELOAD, per_child=HELD_PER_CHILD,
                               batch_weight=BATCH_BYTES, min_batch=MIN_BATCH)
