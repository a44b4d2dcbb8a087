"""The decode for the model (transforms.decode): one DCT-scale rule in its Python and graph forms,
and decode_for_model taking the stored size from a record or from the JPEG header alike."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tests.imageutil import encode, photo, photo_bytes
from transforms.decode import (
    JPEG_RATIOS,
    decode_for_model,
    decode_image,
    decode_scaled,
    jpeg_ratio_index,
    pick_jpeg_ratio,
)


def _photo_bytes(seed: int, height: int, width: int, fmt: str = "JPEG") -> bytes:
    return photo_bytes(seed, height, width, fmt=fmt, quality=75)  # PIL's default quality


@pytest.mark.parametrize("height,width,target,expected", [
    (100, 100, 224, 1), (448, 600, 224, 2), (447, 600, 224, 1), (896, 900, 224, 4),
    (2000, 3000, 224, 8), (4000, 9000, 100, 8), (16, 16, 16, 1), (32, 17, 8, 2),
])
def test_python_and_graph_rules_agree(height, width, target, expected):
    assert pick_jpeg_ratio(width, height, target) == expected
    index = jpeg_ratio_index(tf.constant(height, tf.int64), tf.constant(width, tf.int64), target)
    assert JPEG_RATIOS[int(index)] == expected


def test_long_side_rule_for_the_analysis_copy():
    assert pick_jpeg_ratio(1024, 768, 256, side="long") == 4
    assert pick_jpeg_ratio(1024, 768, 256, side="short") == 2
    with pytest.raises(ValueError, match="Unknown side 'wide'"):
        pick_jpeg_ratio(10, 10, 5, side="wide")


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_stored_size_from_record_or_header_gives_the_same_image(fmt):
    encoded = tf.constant(_photo_bytes(1, height=70, width=90, fmt=fmt))
    from_header = decode_for_model(encoded, (16, 24)).numpy()
    from_record = decode_for_model(encoded, (16, 24), (tf.constant(70, tf.int64),
                                                       tf.constant(90, tf.int64))).numpy()
    np.testing.assert_array_equal(from_header, from_record)
    assert from_header.shape == (16, 24, 3) and from_header.dtype == np.float32
    assert 0.0 <= from_header.min() and from_header.max() <= 1.0


def test_jpeg_is_decoded_at_the_dct_scale_then_resized():
    """70 x 90 for 16 px: ratio 4 (short side 17 >= 16; ratio 8 would give 8)."""
    encoded = tf.constant(_photo_bytes(2, height=70, width=90))
    assert pick_jpeg_ratio(90, 70, 16) == 4
    scaled = decode_scaled(encoded, (16, 16)).numpy()
    np.testing.assert_array_equal(scaled, decode_image(encoded, jpeg_ratio=4).numpy())
    assert scaled.shape == (18, 23, 3)                  # libjpeg rounds 70/4, 90/4 up
    expected = tf.image.resize(scaled, (16, 16)).numpy() / 255.0
    np.testing.assert_array_equal(decode_for_model(encoded, (16, 16)).numpy(), expected)


def _encoded(fmt: str, mode: str, height: int, width: int) -> bytes:
    """`imageutil`'s photo in PIL `mode` (RGB, L, RGBA), encoded as `fmt` (GIF: a palette)."""
    return encode(np.asarray(Image.fromarray(photo(3, height, width, 0)).convert(mode)), fmt,
                  quality=90)


@pytest.mark.parametrize("fmt,mode,stored,ratio", [
    ("JPEG", "RGB", None, 4),          # 70 x 90 for 16 px: the header's size, DCT ratio 4
    ("JPEG", "L", None, 4),            # grey JPEG: libjpeg's RGB at ratio 4
    ("JPEG", "RGB", (20, 20), 1),      # a record's (small) size wins over the header's
    ("PNG", "RGB", None, 1),           # no header size for other formats: full size
    ("PNG", "RGBA", (700, 900), 1),    # a large stored size never scales a non-JPEG
    ("GIF", "RGB", (700, 900), 1),
])
def test_decode_scaled_scales_only_jpegs_and_decodes_the_rest_once(fmt, mode, stored, ratio):
    encoded = tf.constant(_encoded(fmt, mode, 70, 90))
    size = None if stored is None else (tf.constant(stored[0], tf.int64),
                                        tf.constant(stored[1], tf.int64))
    np.testing.assert_array_equal(decode_scaled(encoded, (16, 16), size).numpy(),
                                  decode_image(encoded, jpeg_ratio=ratio).numpy())


def test_a_corrupt_image_is_an_error_in_the_scaled_decode():
    data = _encoded("JPEG", "RGB", 70, 90)
    with pytest.raises(tf.errors.InvalidArgumentError):
        decode_scaled(tf.constant(data[:200]), (16, 16)).numpy()


def _encoded_variants() -> list:
    pixels = photo(3, height=40, width=56)
    grey = pixels[..., 0]
    rgba = np.dstack([pixels, np.full(grey.shape, 200, np.uint8)])

    def saved(image: Image.Image, fmt: str, **options) -> bytes:
        import io
        buffer = io.BytesIO()
        image.save(buffer, fmt, **options)
        return buffer.getvalue()

    return [("jpeg", encode(pixels)), ("grey jpeg", encode(grey)), ("png", encode(pixels, "PNG")),
            ("grey png", encode(grey, "PNG")), ("rgba png", encode(rgba, "PNG")),
            ("grey+alpha png", saved(Image.fromarray(rgba).convert("LA"), "PNG")),
            ("16-bit png", saved(Image.fromarray(grey.astype(np.uint16) * 257), "PNG")),
            ("palette gif", saved(Image.fromarray(pixels).convert("P"), "GIF")),
            ("bmp", encode(pixels, "BMP")), ("webp", saved(Image.fromarray(rgba), "WEBP"))]


@pytest.mark.parametrize("name, data", _encoded_variants())
@pytest.mark.parametrize("ratio", [1, 2])
def test_decode_image_array_gives_decode_image_pixels(name, data, ratio):
    from transforms.decode import decode_image_array
    is_jpeg = data[:2] == b"\xff\xd8"
    for flag, orientation in [(is_jpeg, 1), (None, 1), (is_jpeg, 6), (is_jpeg, 7), (None, 3),
                              (is_jpeg, 9), (is_jpeg, None)]:
        expected = decode_image(data, jpeg_ratio=ratio if is_jpeg else 1, is_jpeg=flag,
                                orientation=orientation).numpy()
        array = decode_image_array(data, jpeg_ratio=ratio if is_jpeg else 1, is_jpeg=flag,
                                   orientation=orientation)
        assert array.dtype == np.uint8 and array.flags.c_contiguous
        np.testing.assert_array_equal(array, expected)


def test_decode_image_array_of_an_upright_rgb_image_is_a_read_only_view_not_a_copy():
    """The inspection only reads the pixels; a copy of them was ~1% of a photo's inspection."""
    from transforms.decode import decode_image_array
    pixels = np.arange(16 * 24 * 3, dtype=np.uint8).reshape(16, 24, 3)
    for data, ratio in [(encode(pixels, "JPEG"), 2), (encode(pixels, "PNG"), 1)]:
        array = decode_image_array(data, jpeg_ratio=ratio, is_jpeg=ratio == 2, orientation=1)
        assert not array.flags.writeable and not array.flags.owndata
        with pytest.raises(ValueError, match="read-only"):
            array[0, 0, 0] = 1


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\xff\xfe\x00", bytes(range(256)) * 64])
def test_string_tensor_holds_the_bytes_as_they_are(data):
    from transforms.decode import string_tensor
    for given in (data, bytearray(data), memoryview(data), tf.constant(data)):
        tensor = string_tensor(given)
        assert tensor.dtype == tf.string and tensor.shape == () and tensor.numpy() == data


def test_string_tensors_hold_each_bytes_as_string_tensor_would():
    from transforms.decode import string_tensor, string_tensors
    values = [b"", b"\x00", b"\x00\xff\xfe\x00", bytes(range(256)) * 64, b"ab", b"ab"]
    for given in ([values[3]], values, [bytearray(v) for v in values]):
        tensors = string_tensors(given)
        assert len(tensors) == len(given)
        for tensor, value in zip(tensors, given):
            assert tensor.dtype == tf.string and tensor.shape == ()
            assert tensor.numpy() == bytes(value) == string_tensor(value).numpy()


@pytest.mark.parametrize("data", [b"\xff\xd8\xff\xe0 truncated", b"\x89PNG\r\n\x1a\n broken"])
def test_decode_image_array_raises_what_decode_image_raises(data):
    from transforms.decode import decode_image_array
    is_jpeg = data[:2] == b"\xff\xd8"
    with pytest.raises(tf.errors.InvalidArgumentError) as expected:
        decode_image(data, jpeg_ratio=2 if is_jpeg else 1, is_jpeg=is_jpeg)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        decode_image_array(data, jpeg_ratio=2 if is_jpeg else 1, is_jpeg=is_jpeg, orientation=1)
    # the op's message is what a reject's detail keeps (the eager op name after it is not)
    assert raised.value.message.split("[Op:")[0] == expected.value.message.split("[Op:")[0]


def test_a_scaled_jpeg_decode_takes_tensorflows_eager_fast_path(monkeypatch):
    """The offline inspection decodes each JPEG at a DCT scale in eager mode; an op call that
    misses the fast path costs ~0.025 ms more (an int where the op wants a float attribute)."""
    from tensorflow.python.ops import gen_image_ops

    from transforms.decode import decode_image_array
    [(_, data)] = [variant for variant in _encoded_variants() if variant[0] == "jpeg"]

    def slow_path(*args, **kwargs):
        raise AssertionError("DecodeJpeg took the eager slow path")

    monkeypatch.setattr(gen_image_ops, "decode_jpeg_eager_fallback", slow_path)
    array = decode_image_array(data, jpeg_ratio=2, is_jpeg=True, orientation=1)
    assert array.shape[-1] == 3
