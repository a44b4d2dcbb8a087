"""`ImageRecord`: everything known about one discovered image as it moves through the job.

Accepted or not, every discovered image stays an ImageRecord to the end, so the index gets one
row per input with whatever was learned about it before a rule rejected it.
"""
from __future__ import annotations

import dataclasses
import operator

from transforms.offline import quality_rules
from transforms.offline.rejects import IMAGE, Reject

__all__ = ["ImageRecord", "RECORD_METRICS"]


@dataclasses.dataclass(frozen=True)
class ImageRecord:
    """Everything known about one discovered image as it moves through the job."""
    uri: str                       # where to read it: full path or URL (gs://...)
    path: str                      # relative to the data root: identity, CSV key,
                                   # image/filename, and `path` in rejects and the index
    file_bytes: int                # size of the file (the index column `bytes`)
    mtime: float | None = None     # last modified (seconds), from the file system listing
    label_key: str = ""            # the labels the CSV rows give it (see join_labels.label_key)
    label_rows: tuple = ()         # its LabelRows, until labels are resolved
    box_rows: tuple = ()           # its BoxRows, until labels are resolved
    sha256: str = ""
    format: str = ""
    width: int | None = None
    height: int | None = None
    metrics: tuple = ()            # ((name, value), ...) sorted
    moments: tuple = ()            # (mean_r, mean_g, mean_b, sqmean_r, sqmean_g, sqmean_b)
    phash: str | None = None
    reject: Reject | None = None
    label: str | None = None
    label_id: int | None = None
    split: str | None = None
    meta: tuple = ()               # ((column, value), ...) sorted
    boxes: tuple = ()              # ((xmin, ymin, xmax, ymax, label_text), ...) normalized
    center_phash: str | None = None  # perceptual hash of the central region; only with
                                     # dedup.crop_tolerant (quality.center_hash)
    retires: tuple = ()            # the path's live records before tonight, as index values
                                   # (join_labels._PRIOR_FIELDS): retired once it is inspected
    orientation: int = 1           # EXIF orientation of the bytes (width/height: as decoded)

    def __reduce__(self):
        """Pickled as its field values in order, without their names: Beam's fallback coder
        pickles every record at every shuffle, so fewer bytes mean less shuffle and memory
        (figures: docs/benchmarks.md). Metrics named as the record contract names them (every
        inspected record's) travel as their values alone. Unpickling fills the fields in
        without running `__init__` again (a third of the cost of a load)."""
        values = _FIELD_VALUES(self)
        metrics = self.metrics
        if len(metrics) == len(RECORD_METRICS) and tuple(map(_NAME, metrics)) == RECORD_METRICS:
            values = list(values)
            values[_METRICS_AT] = tuple(map(_VALUE, metrics))
            return _with_contract_metrics, tuple(values)
        return _restore, values

    def replace(self, **changes) -> "ImageRecord":
        """`dataclasses.replace(self, **changes)` without running `__init__` again (a record
        is replaced at several steps of the job: this costs a fifth)."""
        if not changes.keys() <= _FIELD_SET:
            raise TypeError(f"ImageRecord has no field {sorted(changes.keys() - _FIELD_SET)}")
        record = object.__new__(ImageRecord)
        record.__dict__.update(self.__dict__)
        record.__dict__.update(changes)
        return record

    def rejected(self, reason: str, detail: str) -> "ImageRecord":
        return self.replace(reject=Reject(
            path=self.path, reason=reason, detail=detail, kind=IMAGE, sha256=self.sha256))


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(ImageRecord))
_FIELD_SET = frozenset(_FIELD_NAMES)
_METRICS_AT = _FIELD_NAMES.index("metrics")
_FIELD_VALUES = operator.attrgetter(*_FIELD_NAMES)
_NAME, _VALUE = operator.itemgetter(0), operator.itemgetter(1)
RECORD_METRICS = tuple(sorted(quality_rules.metric_names()))
"""The metric names of an inspected record, in its `metrics` order (sorted by name)."""


def _restore(*values) -> ImageRecord:
    """The ImageRecord `__reduce__` took apart (its values are a record's, checked already)."""
    record = object.__new__(ImageRecord)
    record.__dict__.update(zip(_FIELD_NAMES, values))
    return record


def _with_contract_metrics(*values) -> ImageRecord:
    """An ImageRecord from `__reduce__`'s values whose metrics are the values alone."""
    record = _restore(*values)
    record.__dict__["metrics"] = tuple(zip(RECORD_METRICS, values[_METRICS_AT]))
    return record
