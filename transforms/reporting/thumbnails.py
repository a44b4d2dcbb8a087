"""Small PNG thumbnails of a few rejected images for the report, made with the shared decoder in
an isolated child process: the launcher never decodes untrusted bytes itself.

The files shown are rejected ones, some for being hostile: a scan-bomb JPEG stalled the
launcher while it decoded for its thumbnail, with no timeout (docs/benchmarks.md), and a
large-frame GIF could exhaust the launcher's memory. `thumbnails_png` decodes them the way the
job inspects images (`transforms.offline.isolation.ChildPool`: a forkserver child per file
batch, a per-file timeout, a crash or hang costs only that thumbnail), and only files that pass
the header checks (`limits.max_pixels`, `limits.max_jpeg_scans`).
"""
from __future__ import annotations

from transforms.file_reads import read_bytes

__all__ = ["thumbnail_png", "thumbnails_png"]

_MAX_BYTES = 64 * 2**20


def thumbnail_png(path: str, max_side: int = 96, max_bytes: int = _MAX_BYTES,
                  max_pixels: int = 40_000_000, max_scans: int = 100,
                  exif_orientation: bool = True) -> bytes | None:
    """PNG bytes of the image at `path` shrunk to `max_side` (upright unless
    `exif_orientation` is False), or None when it is missing, too big to read or decode for a
    thumbnail, or does not decode (often why it was rejected).
    It decodes untrusted bytes: call it in an isolated process (`thumbnails_png`)."""
    import tensorflow as tf

    from transforms.decode import decode_image
    from transforms.offline.image_header import HeaderError, jpeg_scans, read_header
    try:
        data = read_bytes(path, max_bytes + 1)
    except OSError:
        return None
    if len(data) > max_bytes:
        return None
    try:
        header = read_header(data)
        if header.width * header.height > max_pixels:
            return None
        if header.format == "jpeg" and jpeg_scans(data) > max_scans:
            return None
        image = decode_image(data, orientation=header.orientation if exif_orientation else 1)
    except (HeaderError, tf.errors.InvalidArgumentError):
        return None
    height, width = int(image.shape[0]), int(image.shape[1])
    scale = min(1.0, max_side / max(height, width))
    size = (max(1, round(height * scale)), max(1, round(width * scale)))
    small = tf.image.resize(image, size, method="area", antialias=True)
    return tf.io.encode_png(tf.cast(tf.round(small), tf.uint8)).numpy()


class _ThumbnailWorker:
    """What the isolated child runs: `thumbnail_png` with the job's limits and orientation."""

    def __init__(self, limits, exif_orientation: bool = True):
        self._limits = limits
        self._exif_orientation = exif_orientation

    def setup(self) -> None:
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)

    def run(self, path: str) -> bytes | None:
        return thumbnail_png(path, max_pixels=self._limits.max_pixels,
                             max_scans=self._limits.max_jpeg_scans,
                             exif_orientation=self._exif_orientation)


def thumbnails_png(paths, limits, timeout_s: float, exif_orientation: bool = True) -> dict:
    """{path: PNG bytes or None} for `paths`, each thumbnail made in an isolated child process
    with a `timeout_s` limit per file (None for a file that crashed, hung or does not decode);
    upright unless `exif_orientation` is False (`decode.exif_orientation`)."""
    from transforms.offline import isolation
    paths = list(dict.fromkeys(paths))
    if not paths:
        return {}
    pool = isolation.ChildPool(_ThumbnailWorker(limits, exif_orientation), 1, timeout_s,
                               preload=isolation.DECODER_PRELOAD)
    results = {}
    try:
        for key, path in enumerate(paths):
            pool.put(key, path)
        while pool.in_flight:
            for key, result in pool.poll(wait=True):
                results[paths[key]] = None if isinstance(result, isolation.Failure) else result
    finally:
        pool.close()
    return results
