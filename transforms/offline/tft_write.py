"""Writing TFT's transform so that a retried bundle writes it again instead of failing.

TFT's `WriteTransformFn` copies the SavedModel and the metadata into unique temporary folders
and then renames them into place. A runner that executes that last bundle again (Dataflow
retries failed bundles; Beam's `--direct_runner_bundle_repeat` replays every bundle to test
exactly that) finds the temporary folder already renamed away: `NotFoundError`, and the job
fails. `WriteTransformFnOnce` writes the same two folders with steps that can run twice: the
metadata is written in place (TFT's metadata writer replaces its files atomically), and the
SavedModel is copied into place after removing what an earlier attempt left. Nothing here is
visible before the snapshot is published (its manifest is written last, after the job).

The copy's `fingerprint.pb` gets a content-derived uuid instead of TF's random one, so two runs
on identical inputs write identical transform files (`saved_model.pb` already is, now that the
class table is an anonymous table: see `tft_analysis._lookup_class_ids`). A retried bundle
traces the graph a second time in the same process, so TF's function-name counters, and only
they, differ in its `saved_model.pb`; what the transform computes is the same.
"""
from __future__ import annotations

import hashlib
import os

import apache_beam as beam
import tensorflow_transform as tft
from tensorflow_transform import impl_helper
from tensorflow_transform.beam.tft_beam_io import beam_metadata_io

__all__ = ["WriteTransformFnOnce"]

_FINGERPRINT = "fingerprint.pb"  # the name TF's SavedModel writer gives the fingerprint


def _copy_tree(source: str, destination: str) -> None:
    """`source` copied to `destination` (which must not exist), without TFT's own metadata
    folder inside a SavedModel, as TFT's writer copies it."""
    import tensorflow as tf
    if not tf.io.gfile.isdir(source):
        tf.io.gfile.copy(source, destination)
        return
    if os.path.basename(os.path.normpath(source)) == impl_helper.METADATA_DIR_NAME:
        return
    tf.io.gfile.makedirs(destination)
    for name in sorted(tf.io.gfile.listdir(source)):
        _copy_tree(os.path.join(source, name.rstrip("/")),
                   os.path.join(destination, name.rstrip("/")))


def _copy_into_place(source: str, destination: str, _metadata_path: str) -> str:
    import tensorflow as tf
    if tf.io.gfile.exists(destination):  # an earlier attempt of this bundle
        tf.io.gfile.rmtree(destination)
    _copy_tree(source, destination)
    _settle_fingerprint(os.path.join(destination, _FINGERPRINT))
    return destination


def _settle_fingerprint(path: str) -> None:
    """TF writes a random `uuid` into a SavedModel's `fingerprint.pb` (its hashes are of the
    content): replaced by one derived from those hashes, so identical transforms are
    identical files."""
    import tensorflow as tf
    from tensorflow.core.protobuf import fingerprint_pb2
    if not tf.io.gfile.exists(path):
        return
    with tf.io.gfile.GFile(path, "rb") as handle:
        fingerprint = fingerprint_pb2.FingerprintDef.FromString(handle.read())
    fingerprint.ClearField("uuid")
    digest = hashlib.sha256(fingerprint.SerializeToString(deterministic=True)).digest()
    fingerprint.uuid = str(int.from_bytes(digest[:16], "big"))
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(fingerprint.SerializeToString(deterministic=True))


class WriteTransformFnOnce(beam.PTransform):
    """(saved_model_dir, metadata) from `tft_beam.AnalyzeDataset` -> `path/transform_fn/` and
    `path/transformed_metadata/`, the layout of TFT's `WriteTransformFn`. Returns a
    one-element PCollection (the transform_fn folder) that exists once both are written."""

    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def _extract_input_pvalues(self, transform_fn):
        saved_model_dir, metadata = transform_fn
        pvalues = [saved_model_dir]
        if isinstance(metadata, beam_metadata_io.BeamDatasetMetadata):
            pvalues.append(metadata.deferred_metadata)
        return transform_fn, pvalues

    def expand(self, transform_fn):
        saved_model_dir, metadata = transform_fn
        metadata_path = os.path.join(self._path, tft.TFTransformOutput.TRANSFORMED_METADATA_DIR)
        transform_fn_path = os.path.join(self._path, tft.TFTransformOutput.TRANSFORM_FN_DIR)
        written = metadata | "WriteMetadata" >> beam_metadata_io.WriteMetadata(
            metadata_path, saved_model_dir.pipeline)
        return saved_model_dir | "CopyTransformFn" >> beam.Map(
            _copy_into_place, transform_fn_path, beam.pvalue.AsSingleton(written))
