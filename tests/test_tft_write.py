"""Writing the transform (transforms/offline/tft_write.py): the written SavedModel does not
depend on what the process traced before (TF numbers traced functions by process counters)."""
from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from transforms.offline import tft_write


class _Doubler(tf.Module):
    """A model like the transform: a loop (its arguments are named after their cond function)
    and an anonymous lookup table from a vocabulary asset (an argument named by a bare
    counter, and creator/initializer functions)."""

    def __init__(self, vocabulary: str):
        super().__init__()
        self.vocabulary = tf.saved_model.Asset(vocabulary)
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                self.vocabulary, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER),
            default_value=-1, experimental_is_anonymous=True)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32),
                                  tf.TensorSpec([None], tf.string)])
    def apply(self, values, keys):
        doubled = tf.map_fn(lambda value: value * 2.0 + 1.0, values)
        return doubled, self.table.lookup(keys)


def _save(path: str, traces_before: int) -> str:
    for index in range(traces_before):  # other tracing in the process moves the counters
        tf.function(lambda index=index: tf.constant(index) + 1).get_concrete_function()
    vocabulary = os.path.join(os.path.dirname(path), "classes.txt")
    with open(vocabulary, "w") as handle:
        handle.write("a\nb\n")
    tf.saved_model.save(_Doubler(vocabulary), path)
    return path


def _files(folder: str) -> dict:
    return {name: open(os.path.join(folder, name), "rb").read()
            for name in ("saved_model.pb", "fingerprint.pb")}


def test_the_written_transform_is_the_same_whatever_was_traced_before(tmp_path):
    first = _save(str(tmp_path / "a"), traces_before=0)
    second = _save(str(tmp_path / "b"), traces_before=7)
    assert _files(first)["saved_model.pb"] != _files(second)["saved_model.pb"]
    written = [tft_write._copy_into_place(source, str(tmp_path / f"out_{index}"))
               for index, source in enumerate((first, second))]
    assert _files(written[0]) == _files(written[1])
    loaded = tf.saved_model.load(written[1])
    doubled, ids = loaded.apply(tf.constant([1.0, 2.5]), tf.constant(["b", "z"]))
    np.testing.assert_array_equal(doubled.numpy(), [3.0, 6.0])
    np.testing.assert_array_equal(ids.numpy(), [1, -1])


def test_a_written_transform_keeps_a_fingerprint_of_its_own_bytes(tmp_path):
    from tensorflow.core.protobuf import fingerprint_pb2
    from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting
    written = tft_write._copy_into_place(_save(str(tmp_path / "a"), 3), str(tmp_path / "out"))
    stored = fingerprint_pb2.FingerprintDef.FromString(_files(written)["fingerprint.pb"])
    fresh = fingerprint_pb2.FingerprintDef.FromString(fingerprinting.CreateFingerprintDef(written))
    assert stored.saved_model_checksum == fresh.saved_model_checksum != 0
    assert stored.graph_def_program_hash == fresh.graph_def_program_hash
