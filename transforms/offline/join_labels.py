"""Label and box CSVs joined to the discovered images with a Beam join (CoGroupByKey on the
root-relative path, grouped by `paths.match_key` so that a CSV path in NFC finds a file named
in NFD and a near miss in letter case can be named), so no process ever holds the whole label
table. A row names the file it equals, or else the one equal in NFC (`assign_rows`); the
record keeps the on-disk path.

The join runs on metadata only, before any image is read, and also brings in what earlier
committed snapshots remember about each path (their `index.parquet` rows): a file whose size,
modification time and labels are unchanged since it was last seen is skipped, so a nightly
rerun only reads what is new, changed, or newly labelled.

Every CSV row ends accounted for: matched to a discovered image (whatever that image's fate),
or rejected as `bad_csv_row`, `unsafe_path` or `missing_file`. Every image that is still a
candidate after `resolve_labels` has one label, or is rejected as `unlabeled`,
`label_conflict` or `bad_box`.
"""
from __future__ import annotations

import hashlib
import posixpath
import typing

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from configs.schema import Config, LabelsConfig
from transforms.file_reads import open_file
from transforms.live_view import retirement
from transforms.offline import boxes as box_rules
from transforms.offline import labels as label_rules
from transforms.offline import paths, progress
from transforms.offline.beam_steps import FlatMap, LeanDoFn
from transforms.offline.class_names import class_name_problem
from transforms.offline.csv_records import DEFAULT_MAX_CELL_BYTES, text_lines
from transforms.offline.gather import JoinByKey
from transforms.offline.image_record import ImageRecord
from transforms.offline.rejects import BOX_ROW, LABEL_ROW, REASONS, Reject

__all__ = ["ReadLabelRows", "ReadBoxRows", "PlanImages", "resolve_labels", "label_key",
           "ROW_REJECTS", "MATCHED", "SKIPPED", "REJECTED", "routed", "KEPT",
           "RETIRED", "label_names", "retire_inspected", "live_prior",
           "read_csv_header", "read_label_csv", "read_box_csv", "unchanged_since",
           "missing_file_rejects", "assign_rows"]

ROW_REJECTS = "row_rejects"
MATCHED = "matched"
SKIPPED = "skipped"
REJECTED = "rejected"
_KEY_SEPARATOR = "\x1f"
_BOXES_MARK = "#boxes:"


def routed(record: ImageRecord):
    """A record as the job's steps send it on: tagged `rejected` when it has a reject (the
    rejects ledger's side), as it is otherwise (still a candidate)."""
    return record if record.reject is None else beam.pvalue.TaggedOutput(REJECTED, record)
KEPT = "kept"
RETIRED = "retired"
# The index columns a retirement needs of a prior record (see `live_view.retirement`).
_PRIOR_FIELDS = ("run_id", "path", "sha256", "split", "label", "label_key")


def _csv_lines(path: str, max_cell_bytes: int = DEFAULT_MAX_CELL_BYTES):
    """The physical lines of a CSV (bytes that are not UTF-8 kept as surrogates, over-long
    lines cut: see `csv_records.text_lines`)."""
    with open_file(path) as handle:
        yield from text_lines(handle, max_cell_bytes)


def read_csv_header(path: str, max_cell_bytes: int = DEFAULT_MAX_CELL_BYTES) -> str:
    """The first line of a CSV (used to check columns before the job starts)."""
    for line in _csv_lines(path, max_cell_bytes):
        return line
    return ""


def read_label_csv(path: str, config: LabelsConfig):
    """LabelRow or Reject(kind=label_row), one per data row of one label CSV."""
    return label_rules.parse_label_csv(path, _csv_lines(path, config.max_cell_bytes), config)


def read_box_csv(path: str, max_cell_bytes: int = DEFAULT_MAX_CELL_BYTES):
    """BoxRow or Reject(kind=box_row), one per data row of one box CSV."""
    return box_rules.parse_box_csv(path, _csv_lines(path, max_cell_bytes), max_cell_bytes)


class ReadLabelRows(beam.PTransform):
    """CSV paths -> LabelRow or Reject(kind=label_row), one per data row. A `beam.Create` of
    more than one path already spreads them over workers: no Reshuffle here."""

    def __init__(self, config: Config):
        super().__init__()
        self._config = config

    def expand(self, csv_paths):
        labels_config = self._config.labels
        return csv_paths | "ParseLabelCsv" >> FlatMap(read_label_csv, labels_config)


class ReadBoxRows(beam.PTransform):
    """Box CSV paths -> BoxRow or Reject(kind=box_row), one per data row. Cells are capped
    at `max_cell_bytes` as in label CSVs (`labels.max_cell_bytes`)."""

    def __init__(self, max_cell_bytes: int = DEFAULT_MAX_CELL_BYTES):
        super().__init__()
        self._max_cell_bytes = max_cell_bytes

    def expand(self, csv_paths):
        cap = self._max_cell_bytes
        return csv_paths | "ParseBoxCsv" >> FlatMap(read_box_csv, cap)


def _folder_label(rel: str) -> str | None:
    return posixpath.basename(posixpath.dirname(rel)) if "/" in rel else None


def label_key(rel: str, label_rows, renames: dict, folder_labels: bool, box_rows=()) -> str:
    """What the CSVs (or the folder) say the image's labels and boxes are, as one comparable
    string. A skipped file must have the same key as when it was last seen: a corrected label
    or box makes the night read it again. Boxes add a digest of their rows (only when there
    are any, so keys of images without boxes are what they always were)."""
    key = ""
    if label_rows:
        names = sorted({renames.get(r.label, r.label) for r in label_rows})
        splits = sorted({r.split for r in label_rows if r.split})
        key = _KEY_SEPARATOR.join(names) + ("|" + ",".join(splits) if splits else "")
    elif folder_labels:
        folder = _folder_label(rel)
        key = renames.get(folder, folder) if folder else ""
    if box_rows:
        boxes = sorted(repr((r.xmin, r.ymin, r.xmax, r.ymax, renames.get(r.label, r.label)))
                       for r in box_rows)
        digest = hashlib.sha256("\n".join(boxes).encode("utf-8", "surrogatepass")).hexdigest()
        key += f"{_BOXES_MARK}{digest[:16]}"
    return key


def label_names(key: str) -> str:
    """A label key as a person reads it: `cat`, `cat, dog|train`, `cat +boxes`."""
    names, _, boxes = key.partition(_BOXES_MARK)
    return (names.replace(_KEY_SEPARATOR, ", ") or "no label") + (" +boxes" if boxes else "")


def resolve_labels(record: ImageRecord, config: Config, folder_labels: bool) -> ImageRecord:
    """Gives a still-accepted record its label, split, meta and boxes from its CSV rows (or
    its folder), or rejects it. The rows are dropped from the record afterwards."""
    label_rows = sorted(record.label_rows, key=lambda r: r.source)
    box_rows = sorted(record.box_rows, key=lambda r: r.source)
    record = record.replace(label_rows=(), box_rows=())
    if record.reject:
        return record
    renames = dict(config.classes.renames)
    if label_rows:
        labels = sorted({renames.get(r.label, r.label) for r in label_rows})
        sources = ", ".join(r.source for r in label_rows)
        if len(labels) > 1:
            return record.rejected("label_conflict", f"labels {labels} from {sources}")
        splits = sorted({r.split for r in label_rows if r.split})
        if len(splits) > 1:
            return record.rejected("label_conflict", f"splits {splits} from {sources}")
        meta = {}
        for row in label_rows:
            for column, value in row.meta:
                meta.setdefault(column, value)
        record = record.replace(label=labels[0],
                                split=splits[0] if splits else None,
                                meta=tuple(sorted(meta.items())))
    elif folder_labels and _folder_label(record.path):
        folder = _folder_label(record.path)
        problem = class_name_problem(folder)
        if problem:
            return record.rejected("bad_label", f"the class folder name {problem}")
        record = record.replace(label=renames.get(folder, folder))
    else:
        why = ("no label CSV row names this image" if not folder_labels
               else "not inside a class folder (<root>/<class>/<image>)")
        return record.rejected("unlabeled", why)
    if box_rows:
        try:
            resolved = box_rules.resolve_boxes(
                box_rows, record.width, record.height, config.boxes)
        except box_rules.BadBox as exc:
            return record.rejected("bad_box", str(exc))
        record = record.replace(boxes=tuple(
            (x0, y0, x1, y1, renames.get(label, label)) for x0, y0, x1, y1, label in resolved))
    return record


def unchanged_since(ref, prior: dict | None, key: str, forgotten=(frozenset(), frozenset())
                    ) -> bool:
    """Whether a discovered file (`FileRef`) whose labels give `key` is the one its latest
    remembered index row (`prior`, None when never seen) describes, and need not be read again:
    same size, modification time and labels, and not an outcome worth retrying. A `forgotten`
    reject stays only while `forgotten` (paths, sha256s) still names the file."""
    if prior is not None and prior["reason"] == "forgotten" and not (
            ref.path in forgotten[0] or prior.get("sha256") in forgotten[1]):
        return False
    return (prior is not None
            and prior["bytes"] == ref.file_bytes
            and prior["mtime"] is not None and ref.mtime is not None
            and abs(prior["mtime"] - ref.mtime) < 1e-3
            and (prior["label_key"] or "") == key
            and prior["reason"] not in REASONS.retried)


def missing_file_rejects(label_rows, box_rows, hints: dict | None = None) -> list[Reject]:
    """The rejects of CSV rows whose path names no discovered file; `hints` (row path ->
    sentence, from `assign_rows`) names the files that differ only in case or normalization."""
    hints = hints or {}
    return [Reject(path=row.path, reason="missing_file", kind=kind,
                   detail=f"{row.source}: no image {row.path!r} was discovered under the "
                          f"data root" + (f"; {hints[row.path]}" if row.path in hints else ""))
            for row, kind in [(r, LABEL_ROW) for r in label_rows]
            + [(r, BOX_ROW) for r in box_rows]]


def assign_rows(rows, discovered) -> tuple[dict, list, dict]:
    """(discovered path -> the rows that name it, the rows that name no discovered path, row
    path -> why it missed, for the ones that missed narrowly): each row by
    `paths.match_row_path` against the `discovered` paths with its `match_key`."""
    by_key: dict = {}
    for path in discovered:
        by_key.setdefault(paths.match_key(path), set()).add(path)
    named, missing, hints = {}, [], {}
    for row in rows:
        path, hint = paths.match_row_path(row.path, by_key.get(paths.match_key(row.path), ()))
        if path is None:
            missing.append(row)
            if hint:
                hints[row.path] = hint
        else:
            named.setdefault(path, []).append(row)
    return named, missing, hints


# Output type declared (what Beam infers anyway: Any), so that building the graph does not
# disassemble `process` and everything it calls (tens of ms per DoFn and job).
@beam.typehints.with_output_types(typing.Any)
class _PlanFn(LeanDoFn):
    def __init__(self, config: Config, folder_labels: bool, forgotten: tuple):
        self._forgotten = forgotten
        self._config = config
        self._folder_labels = folder_labels
        self._renames = dict(config.classes.renames)

    def start_bundle(self):
        self._matched: dict = {}  # row kind -> rows matched to a file in this bundle

    def finish_bundle(self):
        """The bundle's matched rows, one (row kind, count) per kind: the accounting sums
        them, and a pair per planned file was an element of two more steps."""
        matched, self._matched = self._matched, {}
        for pair in matched.items():
            yield beam.pvalue.TaggedOutput(MATCHED, GlobalWindows.windowed_value(pair))

    def process(self, item):
        """One `match_key` group: split into the exact paths it holds, each planned alone
        (rows to the path they name, see `assign_rows`)."""
        _, grouped = item
        by_path: dict = {}

        def part(path: str) -> dict:
            return by_path.setdefault(path, {name: [] for name in grouped})

        for name, key in (("refs", _path_of), ("rejected", _path_of),
                          ("prior", lambda row: row["path"])):
            for element in grouped[name]:
                part(key(element))[name].append(element)
        discovered = [path for path, parts in by_path.items()
                      if parts["refs"] or parts["rejected"]]
        hints = {}
        for name in ("labels", "boxes"):
            named, missing, missed = assign_rows(grouped[name], discovered)
            hints.update(missed)
            for row in missing:
                part(row.path)[name].append(row)
            for path, rows in named.items():
                part(path)[name].extend(rows)
        for rel in sorted(by_path):
            yield from self._plan(rel, by_path[rel], hints)

    def _plan(self, rel: str, grouped: dict, hints: dict):
        refs = list(grouped["refs"])
        rejected = list(grouped["rejected"])
        label_rows = tuple(sorted(grouped["labels"], key=lambda r: r.source))
        box_rows = tuple(sorted(grouped["boxes"], key=lambda r: r.source))
        priors = sorted(grouped["prior"], key=lambda row: row["run_id"])
        latest = priors[-1] if priors else None
        live = [row for row in priors if row["accepted"] and not row.get("removed")]
        if not refs and not rejected:
            for reject in missing_file_rejects(label_rows, box_rows, hints):
                yield beam.pvalue.TaggedOutput(ROW_REJECTS, reject)
            for row in live:
                yield beam.pvalue.TaggedOutput(RETIRED, retirement(
                    row, "deleted", "the file is no longer under the data root"))
            return
        matched = self._matched
        if label_rows:
            matched[LABEL_ROW] = matched.get(LABEL_ROW, 0) + len(label_rows)
        if box_rows:
            matched[BOX_ROW] = matched.get(BOX_ROW, 0) + len(box_rows)
        for record in rejected:
            yield beam.pvalue.TaggedOutput(REJECTED, record)
            for row in live:
                yield beam.pvalue.TaggedOutput(RETIRED, retirement(
                    row, "replaced", f"the file at this path is now rejected: "
                                     f"{record.reject.reason}"))
            live = []
        key = label_key(rel, label_rows, self._renames, self._folder_labels, box_rows)
        for ref in refs:  # discovery guarantees at most one file per relative path
            kept = live_prior(latest, live)
            if (kept is not None or (latest is not None and not latest["accepted"])) \
                    and unchanged_since(ref, latest, key, self._forgotten):
                yield beam.pvalue.TaggedOutput(SKIPPED, (rel, latest["run_id"]))
                progress.add("skipped")
                for row in live:
                    if row is kept:
                        yield beam.pvalue.TaggedOutput(KEPT, row)
                    else:  # an older record of the path a later one superseded
                        yield beam.pvalue.TaggedOutput(RETIRED, retirement(
                            row, "replaced", f"superseded by the record of snapshot "
                                             f"{latest['run_id']}"))
                continue
            yield ImageRecord(uri=ref.uri, path=ref.path, file_bytes=ref.file_bytes,
                              mtime=ref.mtime,
                              label_key=key, label_rows=label_rows, box_rows=box_rows,
                              retires=tuple(tuple(row.get(name) for name in _PRIOR_FIELDS)
                                            for row in live))


class _PlanAloneFn(_PlanFn):
    """`_PlanFn` for a run with nothing to join a file with (no CSV, no archive): each
    discovered file is planned alone, as its one-file group would be."""

    def process(self, ref):
        yield from self._plan(ref.path, {"refs": [ref], "rejected": [], "labels": [],
                                         "boxes": [], "prior": []}, {})


class _PlannedAlone:
    """PlanImages' outputs without a join: the plan step's, and the discovery rejects as they
    came (the join passes them through unchanged when no row or archive row names them)."""

    def __init__(self, planned, rejected):
        self.images = planned.images
        self._planned, self._rejected = planned, rejected

    def __getitem__(self, tag):
        return self._rejected if tag == REJECTED else self._planned[tag]


def _path_of(element) -> str:
    return element.path


def live_prior(latest: dict | None, live: list) -> dict | None:
    """The live record of a path: its latest index row, when that row is accepted and no
    later snapshot retired it (`live` holds the path's accepted rows not retired)."""
    return latest if latest is not None and any(row is latest for row in live) else None


def retire_inspected(record: ImageRecord):
    """The retirement lines of the records an inspected image replaces (its path's live
    records before tonight): `relabeled` when its content is the same and its labels or boxes
    changed, `replaced` when its content changed, `reinspected` when neither did (the file's
    time changed, so it was read again and its record is written anew)."""
    for values in record.retires:
        prior = dict(zip(_PRIOR_FIELDS, values))
        old_key = prior.get("label_key") or ""
        if record.sha256 and record.sha256 == prior["sha256"]:
            if old_key == record.label_key:
                reason, detail = "reinspected", ("the file's modification time changed; same "
                                                 "content and labels, record written anew")
            else:
                reason, detail = "relabeled", (f"same content; labels now "
                                               f"{label_names(record.label_key)}, were "
                                               f"{label_names(old_key)}")
        else:
            reason = "replaced"
            detail = (f"new content at the same path (sha256 {record.sha256[:12] or '-'}..., "
                      f"was {prior['sha256'][:12]}...)")
        yield retirement(prior, reason, detail)


def _by_path(item):
    return paths.match_key(item.path), item


def _row_by_path(row: dict):
    return paths.match_key(row["path"]), row


class PlanImages(beam.PTransform):
    """Joins, by root-relative path, the discovered files, the images rejected at discovery,
    the label and box rows, and the latest remembered index row of each path. A row names a
    file by its exact path or, failing that, by its path in Unicode NFC (`assign_rows`).

    Outputs: main, ImageRecords to inspect (carrying their rows, and the live records they
    will retire); `rejected`, discovery rejects; `skipped`, (path, run_id) of unchanged files
    already in a snapshot; `row_rejects`, rows naming no discovered file (`missing_file`);
    `matched`, (row kind, rows matched) summed per bundle; `kept`, the archive rows of records
    that stay live (unchanged files); `retired`, retirement lines of records whose file is
    gone or now rejected at discovery (`transforms.live_view`). An index row is live when it is its path's latest,
    accepted, and not `removed` (retired by a later snapshot or forgotten).

    Inputs: {"refs", "rejected", "labels", "boxes", "prior"}: PCollections, the last three
    absent when the run has no such input. `joined=False` says no CSV and no archive was
    given (a full run labelled by its folders): each file is then planned alone, with the same
    outputs, without the join (its Flatten and group copy every record twice). `lanes`: the
    join's shuffle in lanes (`gather.GroupByKeyInLanes`; None: key by key).
    """

    def __init__(self, config: Config, folder_labels: bool,
                 forgotten: tuple = (frozenset(), frozenset()), joined: bool = True,
                 lanes: int | None = None):
        super().__init__()
        self._config = config
        self._folder_labels = folder_labels
        self._forgotten = forgotten  # (paths, sha256s) `pixelmill forget` named
        self._joined = joined
        self._lanes = lanes

    def expand(self, inputs):
        if not self._joined:
            planned = inputs["refs"] | "PlanAlone" >> beam.ParDo(_PlanAloneFn(
                self._config, self._folder_labels, self._forgotten)).with_outputs(
                    SKIPPED, ROW_REJECTS, MATCHED, KEPT, RETIRED, main="images")
            return _PlannedAlone(planned, inputs["rejected"])
        keys = {"refs": _by_path, "rejected": _by_path, "labels": _by_path, "boxes": _by_path,
                "prior": _row_by_path}
        return (inputs
                | "JoinByPath" >> JoinByKey(keys, tags=keys,
                                            packed=("refs", "rejected", "labels", "boxes"),
                                            lanes=self._lanes)
                | "Plan" >> beam.ParDo(_PlanFn(self._config, self._folder_labels,
                                               self._forgotten)).with_outputs(
                    REJECTED, SKIPPED, ROW_REJECTS, MATCHED, KEPT, RETIRED, main="images"))
