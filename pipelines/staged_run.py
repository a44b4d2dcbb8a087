"""The hand-off between the graph and the publisher: the `_work/` files of a staged run.

`pipelines/preprocess_graph.py` writes them with the `write_*` transforms; `pipelines/snapshot.py`
reads them back with `read_staged`. The file names are `transforms.snapshot_layout`'s; the
count keys of `counts.json` (`<section>.<name>`, `reasons.<kind>.<reason>`,
`retired.<reason>`, `other_files.<extension>`) are built and parsed only here.
"""
from __future__ import annotations

import dataclasses

from pipelines.beam_files import read_json
from transforms.offline.file_kinds import OTHER_FILES, other_files_from_counts
from transforms.offline.outputs import WriteJson
from transforms.snapshot_layout import (
    WORK_COUNTS,
    WORK_INDEX_SUMMARY,
    WORK_META_COLUMNS,
    WORK_SHARDS,
    WORK_TRANSFORM_SUMMARY,
    work_file,
)

__all__ = ["IMAGES", "LABEL_ROWS", "BOX_ROWS", "LIVE", "SEEDED_COUNTS", "count_key",
           "reason_key", "retired_key", "other_files_key", "Counts", "StagedRun",
           "write_counts", "write_index_summary", "write_meta_columns", "write_shard_list",
           "write_transform_summary", "read_counts", "read_staged", "read_transform_summary"]

IMAGES, LABEL_ROWS, BOX_ROWS, LIVE = "images", "label_rows", "box_rows", "live"
_REASONS, _RETIRED = "reasons", "retired"


def count_key(section: str, name: str) -> str:
    """`images.discovered`, `label_rows.matched`, `live.kept`, ..."""
    return f"{section}.{name}"


def reason_key(kind: str, reason: str) -> str:
    """The count of rejects of `kind` (image, label_row, box_row) for `reason`."""
    return f"{_REASONS}.{kind}.{reason}"


def retired_key(reason: str) -> str:
    """The count of the archive's records retired for `reason` (`transforms.live_view`)."""
    return f"{_RETIRED}.{reason}"


def other_files_key(extension_key: str) -> str:
    """The count of listed files that are no image, per extension key (`file_kinds`)."""
    return f"{OTHER_FILES}.{extension_key}"


# Counts that are 0, not absent, when nothing was counted.
SEEDED_COUNTS = tuple(count_key(section, name) for section, name in (
    (IMAGES, "discovered"), (IMAGES, "accepted"), (IMAGES, "rejected"), (IMAGES, "skipped"),
    (LABEL_ROWS, "total"), (BOX_ROWS, "total"), (LIVE, "before"), (LIVE, "kept"),
    (LIVE, "retired")))


@dataclasses.dataclass(frozen=True)
class Counts:
    """`counts.json`: every count of the run by key."""
    values: dict

    def get(self, section: str, name: str) -> int:
        return int(self.values.get(count_key(section, name), 0))

    def _by_prefix(self, prefix: str) -> dict:
        start = prefix + "."
        return {key[len(start):]: int(value) for key, value in sorted(self.values.items())
                if key.startswith(start)}

    def rejects_by_kind(self) -> dict:
        """{kind: {reason: count}}, sorted."""
        result: dict = {}
        for key, value in self._by_prefix(_REASONS).items():
            kind, reason = key.split(".", 1)
            result.setdefault(kind, {})[reason] = value
        return {kind: dict(sorted(reasons.items())) for kind, reasons in sorted(result.items())}

    def retired_by_reason(self) -> dict:
        """{retirement reason: count}, sorted."""
        return self._by_prefix(_RETIRED)

    def other_files(self) -> dict:
        """{extension key: count} of the listed files that are no image, sorted."""
        return other_files_from_counts(self.values)


@dataclasses.dataclass(frozen=True)
class StagedRun:
    """What the graph left for the publisher in the staging folder's `_work/`."""
    counts: Counts
    index_summary: dict   # SummarizeIndexFn's output, what stats are made from
    shards: list          # one dict per shard file (path, bytes, sha256, records, ...), by path
    meta_columns: list    # the run's meta column names


def write_counts(staging: str) -> WriteJson:
    """Writes a singleton {count key: count} as `counts.json`."""
    return WriteJson(work_file(staging, WORK_COUNTS))


def write_index_summary(staging: str) -> WriteJson:
    return WriteJson(work_file(staging, WORK_INDEX_SUMMARY))


def write_meta_columns(staging: str) -> WriteJson:
    return WriteJson(work_file(staging, WORK_META_COLUMNS))


def write_shard_list(staging: str) -> WriteJson:
    return WriteJson(work_file(staging, WORK_SHARDS))


def write_transform_summary(staging: str) -> WriteJson:
    """Writes the TFT transform's summary (`tft_outputs.job_summary`) for stats.json."""
    return WriteJson(work_file(staging, WORK_TRANSFORM_SUMMARY))


def read_transform_summary(staging: str) -> dict:
    return read_json(work_file(staging, WORK_TRANSFORM_SUMMARY))


def read_counts(staging: str) -> Counts:
    return Counts(read_json(work_file(staging, WORK_COUNTS)))


def read_staged(staging: str) -> StagedRun:
    """The four `_work/` files of the staged run in `staging`."""
    return StagedRun(counts=read_counts(staging),
                     index_summary=read_json(work_file(staging, WORK_INDEX_SUMMARY)),
                     shards=read_json(work_file(staging, WORK_SHARDS)),
                     meta_columns=read_json(work_file(staging, WORK_META_COLUMNS)))
