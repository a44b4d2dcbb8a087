"""Small PNG thumbnails of a few rejected images for the report, made with the shared decoder."""
from __future__ import annotations

from apache_beam.io.filesystems import FileSystems

__all__ = ["thumbnail_png"]


def thumbnail_png(path: str, max_side: int = 96, max_bytes: int = 64 * 1024 * 1024) -> bytes | None:
    """PNG bytes of the image at `path` shrunk to `max_side`, or None when it is missing,
    too big to read for a thumbnail, or does not decode (which is often why it was rejected)."""
    import tensorflow as tf
    from transforms.decode import decode_image
    from transforms.offline.image_header import HeaderError, read_header
    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            data = handle.read(max_bytes + 1)
    except OSError:
        return None
    if len(data) > max_bytes:
        return None
    try:
        header = read_header(data)
        if header.width * header.height > 40_000_000:
            return None
        image = decode_image(data)
    except (HeaderError, tf.errors.InvalidArgumentError):
        return None
    height, width = int(image.shape[0]), int(image.shape[1])
    scale = min(1.0, max_side / max(height, width))
    size = (max(1, round(height * scale)), max(1, round(width * scale)))
    small = tf.image.resize(image, size, method="area", antialias=True)
    return tf.io.encode_png(tf.cast(tf.round(small), tf.uint8)).numpy()
