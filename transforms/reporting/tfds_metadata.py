"""A snapshot as a TensorFlow Datasets dataset directory: `dataset_info.json`, `features.json`
and the class names, so `tfds.builder_from_directory(snapshot)` reads the shards as they are
(usage: docs/interop.md).

The files are what TFDS (>= 4.0) writes for a dataset it generated itself, made here from the
shard list, the class table and the run's meta columns without importing TFDS (only a test
dependency). `features.json` is one flat FeaturesDict holding every key of the record contract
(`transforms.codec`) under its full name, so TFDS parses the shards with no renaming and finds
`supervisedKeys` ("image/encoded", "image/class/label"), which a nested FeaturesDict hides:
`image/encoded` an Image (uint8, 3 channels); `image/class/label` a ClassLabel and
`image/object/class/label` a Sequence(ClassLabel), named from `image.class.label.labels.txt`;
`image/object/bbox/*` float32 lists (empty without boxes); other strings Text (lists for
`image/object/class/text`); sizes int64 and `quality/<metric>` float32 scalars.

Each split's `filepathTemplate` spells its folder and file names out and leaves only
`{SHARD_X_OF_Y}` to TFDS (the template becomes a regex; a second `{SPLIT}` redefines its group).
With `output.label_offset` k, ids 0..k-1 are named `background` (0) and `reserved_<i>`, so the
stored ids index the names directly. Gzip shards get no TFDS files: TFDS's TFRecord reader
passes no compression type (write `output.compression: none`, or read with `make_dataset`).
"""
from __future__ import annotations

import json
import re
from typing import Mapping, Sequence

from configs.schema import SPLITS
from transforms import codec
from transforms.offline.class_names import table_text
from transforms.snapshot_layout import shard_name

__all__ = ["DATASET_INFO", "FEATURES", "LABELS_FILE", "BOX_LABELS_FILE", "VERSION",
           "label_names", "features_json", "dataset_info_json", "tfds_files"]

DATASET_INFO = "dataset_info.json"
FEATURES = "features.json"
# TFDS names a ClassLabel's names file after its feature key, "/" -> "." (and a Sequence's
# inner feature after the sequence's key).
LABELS_FILE = "image.class.label.labels.txt"
BOX_LABELS_FILE = "image.object.class.label.labels.txt"
VERSION = "1.0.0"
_SHARD_PLACEHOLDER = "{SHARD_X_OF_Y}"

_FEATURES = "tensorflow_datasets.core.features."
_TEXT = {"pythonClassName": _FEATURES + "text_feature.Text", "text": {}}


def _tensor(dtype: str, dimensions: Sequence[str] = ()) -> dict:
    scalar = not dimensions
    return {"pythonClassName": _FEATURES + ("scalar.Scalar" if scalar else
                                             "tensor_feature.Tensor"),
            "tensor": {"shape": {"dimensions": list(dimensions)} if not scalar else {},
                       "dtype": dtype, "encoding": "none"}}


def _class_label(num_classes: int) -> dict:
    return {"pythonClassName": _FEATURES + "class_label_feature.ClassLabel",
            "classLabel": {"numClasses": str(num_classes)}}


def _sequence(feature: dict) -> dict:
    return {"pythonClassName": _FEATURES + "sequence_feature.Sequence",
            "sequence": {"feature": feature, "length": "-1"}}


def label_names(class_table: Sequence[str], label_offset: int = 0) -> list[str]:
    """The names of the stored ids: the reserved ids below `label_offset`, then the table."""
    reserved = ["background"] + [f"reserved_{i}" for i in range(1, label_offset)]
    return reserved[:label_offset] + list(class_table)


def features_json(num_labels: int, meta_columns: Sequence[str]) -> dict:
    """TFDS's `features.json`: a FeaturesDict of every key of the record contract."""
    image = {"pythonClassName": _FEATURES + "image_feature.Image",
             "image": {"shape": {"dimensions": ["-1", "-1", "3"]}, "dtype": "uint8"}}
    features = {codec.IMAGE_ENCODED: image, codec.CLASS_LABEL: _class_label(num_labels),
                codec.BOX_CLASS_LABEL: _sequence(_class_label(num_labels)),
                codec.BOX_CLASS_TEXT: _tensor("string", ["-1"])}
    for key in (codec.IMAGE_HEIGHT, codec.IMAGE_WIDTH, codec.IMAGE_CHANNELS,
                codec.IMAGE_ORIENTATION):
        features[key] = _tensor("int64")
    for key in (codec.BBOX_XMIN, codec.BBOX_YMIN, codec.BBOX_XMAX, codec.BBOX_YMAX):
        features[key] = _tensor("float32", ["-1"])
    for key in (codec.IMAGE_FORMAT, codec.IMAGE_FILENAME, codec.IMAGE_SHA256,
                codec.IMAGE_SOURCE_ID, codec.CLASS_TEXT):
        features[key] = dict(_TEXT)
    for metric in codec.QUALITY_METRICS:
        features[codec.QUALITY_PREFIX + metric] = _tensor("float32")
    for column in meta_columns:
        features[codec.META_PREFIX + column] = dict(_TEXT)
    return {"pythonClassName": _FEATURES + "features_dict.FeaturesDict",
            "featuresDict": {"features": dict(sorted(features.items()))}}


def _filepath_template(name: str, split: str) -> str:
    """The split's shard names with `{SHARD_X_OF_Y}` for the index and count (TFDS writes
    5 digits, as `shard_name` does)."""
    first = shard_name(name, split, 0, 1, "none")
    suffix = "-00000-of-00001"
    if not first.endswith(suffix):
        raise ValueError(f"Shard names must end in {suffix!r} for TFDS. Received: {first!r}")
    return first[:-len(suffix)] + "-" + _SHARD_PLACEHOLDER


def dataset_info_json(*, name: str, run_id: str, shards: Sequence[Mapping],
                      label_offset: int, description: str = "") -> dict:
    """TFDS's `dataset_info.json`: one split per split folder, with its shard lengths in shard
    order (`shards`: the job's shard list, `path`, `records` and `bytes` of each)."""
    by_split: dict = {}
    for shard in sorted(shards, key=lambda s: s["path"]):
        by_split.setdefault(shard["path"].split("/", 1)[0], []).append(shard)
    splits = []
    for split in [s for s in SPLITS if s in by_split] + sorted(set(by_split) - set(SPLITS)):
        entries = by_split[split]
        splits.append({
            "name": split,
            "numBytes": str(sum(int(s["bytes"]) for s in entries)),
            "shardLengths": [str(int(s["records"])) for s in entries],
            "filepathTemplate": _filepath_template(name, split),
        })
    return {
        "name": name if re.fullmatch(r"[A-Za-z]\w*", name) else "pixelmill",  # TFDS's name rule
        "version": VERSION,
        "description": description or (
            f"pixelmill snapshot {run_id}: validated, quality-filtered, deduplicated images. "
            f"Class ids are stored with label_offset={label_offset}."),
        "fileFormat": "tfrecord",
        "splits": splits,
        "supervisedKeys": {"input": codec.IMAGE_ENCODED, "output": codec.CLASS_LABEL},
    }


def tfds_files(*, name: str, run_id: str, shards: Sequence[Mapping],
               class_table: Sequence[str], meta_columns: Sequence[str],
               label_offset: int) -> dict[str, bytes]:
    """The TFDS files of a snapshot: file name -> contents (written next to the manifest)."""
    names = label_names(class_table, label_offset)
    text = table_text(names).encode("utf-8")
    info = dataset_info_json(name=name, run_id=run_id, shards=shards, label_offset=label_offset)
    return {
        DATASET_INFO: (json.dumps(info, indent=2, sort_keys=True) + "\n").encode("utf-8"),
        FEATURES: (json.dumps(features_json(len(names), meta_columns), indent=2,
                              sort_keys=True) + "\n").encode("utf-8"),
        LABELS_FILE: text,
        BOX_LABELS_FILE: text,
    }
