"""Writing the transform: TFT's layout, safe to run twice, the same bytes for the same inputs.

`write_transform` traces a `preprocessing_fn` that holds no analyzer (its analyzed numbers
and assets are already known: `transforms.offline.tft_graph`) with TFT's own tracing and
saving (`impl_helper.analyze_in_place`, what TFT does when nothing is left to analyze) into
a local scratch folder (TensorFlow 2.21 cannot open `s3://`), then copies `transform_fn/` and
`transformed_metadata/` into place through Beam's file systems, replacing what an earlier
attempt left: a runner may execute the bundle again (Dataflow
retries failed bundles; `--direct_runner_bundle_repeat` replays each one). Nothing here is
visible before the snapshot is published (its manifest is written last, after the job).
`impl_helper` is not TFT's public API: setup.py pins TFT, and the job's tests compare the
written transform with the numbers and ids it must hold.

Identical inputs give identical transform files, wherever and whenever the transform was made.
TF names every traced function by a per-process counter (`__inference_pruned_2391`), so the
same graph traced after any other tracing in the process (a retried bundle, a second job in one
process) gets other numbers. The copy's `saved_model.pb` numbers its functions by their order
instead (`_canonical_function_names`: the same graph gives the same file), its
`fingerprint.pb` is computed again for those bytes, and gets a content-derived uuid instead of
TF's random one. The class table is an anonymous table (see `tft_graph._lookup_class_ids`),
so no path is embedded.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from typing import Callable, Mapping

import tensorflow_transform as tft
from tensorflow_transform import impl_helper

from transforms.local_paths import is_local, join

__all__ = ["write_transform"]

_FINGERPRINT = "fingerprint.pb"  # the name TF's SavedModel writer gives the fingerprint


def _publish(source: str, destination: str) -> None:
    """Every file under the local folder `source` written below `destination` on any file
    system Beam knows (local, `gs://`, `s3://`: TensorFlow 2.21 cannot write `s3://`), without
    TFT's own metadata folder inside a SavedModel, as TFT's writer copies it. A local
    destination an earlier attempt left is replaced; a remote one is overwritten file by file
    (the same inputs give the same files)."""
    from transforms.s3_storage import create_file
    local = is_local(destination)
    if local and os.path.exists(destination):  # an earlier attempt of this bundle
        shutil.rmtree(destination)
    for folder, subfolders, files in os.walk(source):
        subfolders[:] = sorted(name for name in subfolders
                               if name != impl_helper.METADATA_DIR_NAME)
        relative = os.path.relpath(folder, source)
        target = destination if relative == "." else join(destination, *relative.split(os.sep))
        if local:
            os.makedirs(target, exist_ok=True)
        for name in sorted(files):
            with open(os.path.join(folder, name), "rb") as handle, create_file(
                    join(target, name), "uncompressed") as out:
                shutil.copyfileobj(handle, out)


def _copy_into_place(source: str, destination: str) -> str:
    """The SavedModel at the local `source` made canonical (in place) and published to
    `destination`."""
    _canonical_function_names(os.path.join(source, _SAVED_MODEL))
    _write_fingerprint(source)
    _publish(source, destination)
    return destination


_SAVED_MODEL = "saved_model.pb"
_NUMBERED = re.compile(r"^(.*)_(\d+)$")


def _canonical_function_names(path: str) -> None:
    """Renames the functions of the SavedModel at `path` from TF's per-process counters to
    their rank in counter order (`__inference_pruned_2391` -> `__inference_pruned_7`), in
    every field that names them (library, call ops, object graph, gradients)."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2
    with tf.io.gfile.GFile(path, "rb") as handle:
        model = saved_model_pb2.SavedModel.FromString(handle.read())
    names = {function.signature.name for meta_graph in model.meta_graphs
             for function in meta_graph.graph_def.library.function}
    numbered = sorted((int(match[2]), match[1], name) for name in names
                      if (match := _NUMBERED.match(name)))
    renames = {name: f"{prefix}_{rank}" for rank, (_, prefix, name) in enumerate(numbered)}
    if len(set(renames.values()) | (names - set(renames))) != len(names):
        raise ValueError(f"Canonical function names would collide in {path}")
    if renames:  # names also live inside other names (a loop's arguments name its cond)
        pattern = re.compile("|".join(re.escape(name) for name in sorted(
            renames, key=len, reverse=True)) + r"(?!\d)")
        _rename_strings(model, lambda text: pattern.sub(lambda m: renames[m[0]], text))
    _rename_numbered_captures(model)
    for meta_graph in model.meta_graphs:  # TF lists them by name, and the names changed
        library = meta_graph.graph_def.library
        ordered = sorted(library.function, key=lambda function: function.signature.name)
        ordered = [_copy(function) for function in ordered]
        del library.function[:]
        library.function.extend(ordered)
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(model.SerializeToString(deterministic=True))


def _copy(message):
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


def _rename_strings(message, rename) -> None:
    """Applies `rename` (str -> str), in place, to every string field and string map key of
    `message`, recursively."""
    from google.protobuf.descriptor import FieldDescriptor
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions(
                ).map_entry:
            holds_messages = (field.message_type.fields_by_name["value"].type
                              == FieldDescriptor.TYPE_MESSAGE)
            entries = []
            for key in list(value):
                item = value[key]
                if holds_messages:
                    _rename_strings(item, rename)
                    item = _copy(item)
                elif isinstance(item, str):
                    item = rename(item)
                entries.append((rename(key) if isinstance(key, str) else key, item))
            value.clear()  # rebuilt: a new key may be an old key not yet renamed
            for key, item in entries:
                if holds_messages:
                    value[key].CopyFrom(item)
                else:
                    value[key] = item
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            for item in (value if field.is_repeated else [value]):
                _rename_strings(item, rename)
        elif field.type == FieldDescriptor.TYPE_STRING:
            if field.is_repeated:
                value[:] = [rename(item) for item in value]
            else:
                setattr(message, field.name, rename(value))


def _rename_numbered_captures(model) -> None:
    """A captured resource's argument is named by a process counter too (its
    `_user_specified_name` is a bare number, "2431"): numbered by rank the same way."""
    named = [attrs.attr["_user_specified_name"] for meta_graph in model.meta_graphs
             for function in meta_graph.graph_def.library.function
             for attrs in function.arg_attr.values()
             if "_user_specified_name" in attrs.attr
             and attrs.attr["_user_specified_name"].s.isdigit()]
    ranks = {number: rank for rank, number in enumerate(sorted({int(n.s) for n in named}))}
    for attr in named:
        attr.s = str(ranks[int(attr.s)]).encode()


def _write_fingerprint(export_dir: str) -> None:
    """`fingerprint.pb` (when TF wrote one) computed again for the SavedModel as it now is (its
    checksum covers the renamed file's bytes), with a `uuid` derived from its hashes instead of
    TF's random one, so identical transforms are identical files."""
    import tensorflow as tf
    from tensorflow.core.protobuf import fingerprint_pb2
    from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting
    path = os.path.join(export_dir, _FINGERPRINT)
    if not tf.io.gfile.exists(path):
        return
    fingerprint = fingerprint_pb2.FingerprintDef.FromString(
        fingerprinting.CreateFingerprintDef(export_dir))
    fingerprint.ClearField("uuid")
    digest = hashlib.sha256(fingerprint.SerializeToString(deterministic=True)).digest()
    fingerprint.uuid = str(int.from_bytes(digest[:16], "big"))
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(fingerprint.SerializeToString(deterministic=True))


def write_transform(preprocessing_fn: Callable, input_specs: Mapping, asset_map: Mapping,
                    path: str, scratch_dir: str) -> str:
    """`path/transform_fn/` and `path/transformed_metadata/` (with `asset_map`, asset key ->
    file name, as TFT's `WriteTransformFn` writes it) for `preprocessing_fn` over inputs of
    `input_specs` (name -> `tf.TypeSpec`), made in the local folder `scratch_dir` (TF saves
    and reads back only what it can open) and then published. Returns the transform_fn
    folder."""
    scratch = os.path.join(scratch_dir, "transform")
    impl_helper.analyze_in_place(preprocessing_fn, False, None, dict(input_specs), scratch)
    metadata = os.path.join(scratch, tft.TFTransformOutput.TRANSFORMED_METADATA_DIR)
    with open(os.path.join(metadata, tft.TFTransformOutput.ASSET_MAP), "w") as handle:
        handle.write(json.dumps(dict(asset_map)))
    _publish(metadata, join(path, tft.TFTransformOutput.TRANSFORMED_METADATA_DIR))
    return _copy_into_place(os.path.join(scratch, tft.TFTransformOutput.TRANSFORM_FN_DIR),
                            join(path, tft.TFTransformOutput.TRANSFORM_FN_DIR))
