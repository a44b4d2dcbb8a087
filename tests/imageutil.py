"""Photo-like test images as arrays, encoded bytes and files: the one helper every test uses.

The pixels come from `runners.demo.data.photo_like` (sharp, neither dark nor bright, high
entropy, perceptual hashes far apart between seeds), so an image made here passes the quality
rules unless a test makes it fail on purpose. Same arguments, same bytes.
"""
from __future__ import annotations

import io
import os

import numpy as np
from PIL import Image

from runners.demo.data import photo_like

__all__ = ["photo", "encode", "photo_bytes", "write_bytes", "write_image", "write_photo"]


def photo(seed: int, height: int = 96, width: int = 128, class_index: int = 0) -> np.ndarray:
    """uint8 [height, width, 3] photo-like pixels drawn from `np.random.default_rng(seed)`."""
    return photo_like(np.random.default_rng(seed), height, width, class_index)


def encode(pixels: np.ndarray, fmt: str = "JPEG", quality: int = 92) -> bytes:
    """The pixels encoded by PIL in `fmt` (JPEG at `quality`; other formats use PIL defaults)."""
    buffer = io.BytesIO()
    options = {"quality": quality} if fmt.upper() in ("JPEG", "JPG") else {}
    Image.fromarray(pixels).save(buffer, fmt, **options)
    return buffer.getvalue()


def photo_bytes(seed: int, height: int = 96, width: int = 128, class_index: int = 0,
                fmt: str = "JPEG", quality: int = 92) -> bytes:
    """`photo(...)` encoded as `fmt`."""
    return encode(photo(seed, height, width, class_index), fmt, quality)


def write_bytes(path, data: bytes) -> str:
    """Writes `data` to `path`, creating its folders; returns the path as a string."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def write_image(path, pixels: np.ndarray, fmt: str = "JPEG", quality: int = 92) -> str:
    """`pixels` encoded as `fmt` and written to `path`."""
    return write_bytes(path, encode(pixels, fmt, quality))


def write_photo(path, seed: int, height: int = 96, width: int = 128, class_index: int = 0,
                fmt: str = "JPEG", quality: int = 92) -> str:
    """A photo-like image file: `photo_bytes(...)` written to `path`."""
    return write_bytes(path, photo_bytes(seed, height, width, class_index, fmt, quality))
