"""The serving model: raw JPEG/PNG bytes in, the trained model's predictions out.

The snapshot's TFT transform (`transforms.offline.tft_analysis`) holds the decode, resize and the
dataset's normalization; wrapping the trained Keras model with
`tft.TFTransformOutput(...).transform_features_layer()` means a client sends encoded images and
gets exactly the preprocessing training used: no train/serve skew.

    serving = build_serving_model(model, "gs://bucket/out/snapshots/<run_id>")
    serving.save("gs://bucket/models/classifier/1")      # SavedModel, signature serving_default
    # a client (TF Serving, Vertex, or tf.saved_model.load):
    loaded = tf.saved_model.load("gs://bucket/models/classifier/1")
    loaded.signatures["serving_default"](image_bytes=tf.constant([jpeg_bytes, png_bytes]))
    # -> {"predictions": float32 [2, num_classes]}

The wrapper is a `tf.Module`, not a Keras model: TFT's layer is a tf_keras (Keras 2) object and
the training model is Keras 3, which cannot be nested in one functional model; a module tracks
both and exports one signature.
"""
from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

from transforms import codec
from transforms.offline.tft_analysis import IMAGE

__all__ = ["ServingModel", "build_serving_model", "SERVING_INPUT", "PREDICTIONS"]

SERVING_INPUT = "image_bytes"
PREDICTIONS = "predictions"


class ServingModel(tf.Module):
    """A trained model behind the snapshot's transform, with a bytes-in `serving_default`."""

    def __init__(self, keras_model, transform_output_dir: str, name: str | None = None):
        super().__init__(name=name)
        self.model = keras_model
        self.transform_output_dir = transform_output_dir
        self.transform_layer = tft.TFTransformOutput(
            transform_output_dir).transform_features_layer()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=SERVING_INPUT)])
    def serving_default(self, image_bytes):
        """Encoded images [batch] -> `{"predictions": ...}` (or the model's own output dict)."""
        transformed = self.transform_layer({codec.IMAGE_ENCODED: image_bytes})
        outputs = self.model(transformed[IMAGE], training=False)
        if isinstance(outputs, dict):
            return outputs
        return {PREDICTIONS: outputs}

    def __call__(self, image_bytes):
        return self.serving_default(tf.convert_to_tensor(image_bytes, tf.string))

    def save(self, export_dir: str) -> None:
        """Writes a SavedModel whose `serving_default` signature takes `image_bytes`; the
        transform's assets (class table, vocabularies) travel with it."""
        tf.saved_model.save(self, export_dir,
                            signatures={"serving_default": self.serving_default})


def build_serving_model(keras_model, transform_output_dir: str) -> ServingModel:
    """Wraps `keras_model` (which takes the transform's `image`: float32 [B, H, W, 3],
    normalized) with the transform written in `transform_output_dir` (a snapshot folder holding
    `transform_fn/` and `transformed_metadata/`)."""
    output = tft.TFTransformOutput(transform_output_dir)
    spec = output.transformed_feature_spec().get(IMAGE)
    if spec is None:
        raise ValueError(
            f"{transform_output_dir} has no {IMAGE!r} output; it is not a pixelmill transform. "
            f"Received outputs: {sorted(output.transformed_feature_spec())}")
    expected = tuple(spec.shape)
    model_input = getattr(keras_model, "input_shape", None)
    if isinstance(model_input, tuple) and len(model_input) == 4:
        if tuple(model_input[1:]) != expected and None not in model_input[1:]:
            raise ValueError(
                f"The model takes images of shape {tuple(model_input[1:])}, but the transform "
                f"in {transform_output_dir} produces {expected}. Received: keras_model with "
                f"input_shape={model_input}")
    return ServingModel(keras_model, transform_output_dir)
