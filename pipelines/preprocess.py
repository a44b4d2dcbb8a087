"""The offline preprocessing graph: raw images + CSV labels -> a staged snapshot.

    discover -> plan (join CSV rows and the archive's memory by path; skip unchanged files)
      -> inspect (read, sha256, header, decode, validate, quality) -> resolve labels/boxes
      -> class ids -> exact dedup -> near dedup (tonight and against the archive) -> split
      -> write shards; TFT analysis (label frequencies, exact pixel mean/std, size quantiles)
      -> transform_fn/ + transformed_metadata/
    every reject -> rejects.jsonl; every inspected image -> index.parquet; counts -> accounting

The graph only composes steps from `transforms/`; `runners/preprocess.py` parses options and
`pipelines/snapshot.py` checks the accounting and publishes what this graph staged.
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.parquetio import ReadAllFromParquet, WriteToParquet

from configs.schema import Config
from transforms.offline import classes, splits
from transforms.offline.dedup import DropExactDuplicates, DropNearDuplicates
from transforms.offline.discover import DiscoverImages
from transforms.offline.index_table import INDEX_SCHEMA, record_row
from transforms.offline.image_record import ImageRecord
from transforms.offline.inspect_image import InspectImages
from transforms.offline.join_labels import (MATCHED, ROW_REJECTS, SKIPPED, PlanImages, ReadBoxRows,
                                    ReadLabelRows, resolve_labels)
from transforms.offline.outputs import CountInto, WriteJson, WriteRejectsLedger
from transforms.offline.rejects import BOX_ROW, IMAGE, LABEL_ROW, Reject
from transforms.reporting.stats import SummarizeIndexFn
from transforms.offline.tft_analysis import AnalyzeAndWriteTransform
from transforms.offline.write_shards import FILES, WriteShards

__all__ = ["PreprocessJob", "build_preprocess", "WORK_DIR", "work_file"]

WORK_DIR = "_work"  # job-internal summaries inside the staging folder; not published


def work_file(staging_dir: str, name: str) -> str:
    return FileSystems.join(staging_dir, WORK_DIR, name)


@dataclasses.dataclass(frozen=True)
class PreprocessJob:
    """Everything the graph needs, resolved and validated by the runner before it is built."""
    data_roots: tuple
    label_csvs: tuple
    box_csvs: tuple
    class_table: tuple          # the table this run starts from (ids of these names are fixed)
    frozen_classes: bool
    staging_dir: str
    config: Config
    archive: tuple = ()         # (run_id, index.parquet path) of committed snapshots (nightly)


REJECTED = "rejected"
_ROW_COUNT = {LABEL_ROW: "label_rows", BOX_ROW: "box_rows"}


def _route(record: ImageRecord):
    if record.reject is not None:
        yield beam.pvalue.TaggedOutput(REJECTED, record)
    else:
        yield record


class _Route(beam.PTransform):
    """Splits ImageRecords into (still candidates, rejected)."""

    def expand(self, records):
        routed = records | "Route" >> beam.FlatMap(_route).with_outputs(REJECTED, main="ok")
        return routed.ok, routed[REJECTED]


def _split_rows(item):
    if isinstance(item, Reject):
        yield beam.pvalue.TaggedOutput(REJECTED, item)
    else:
        yield item


def _labels_of(record: ImageRecord):
    yield record.label
    for box in record.boxes:
        yield box[4]


def _assign_class_id(record: ImageRecord, table):
    ids = {name: i for i, name in enumerate(table)}
    if record.label not in ids:
        return record.rejected("unknown_class", (
            f"label {record.label!r} is not in the class table ({len(table)} classes: "
            f"{', '.join(table[:20])}{', ...' if len(table) > 20 else ''})"))
    unknown = sorted({box[4] for box in record.boxes} - set(ids))
    if unknown:
        return record.rejected("bad_box", f"box classes {unknown} are not in the class table")
    return dataclasses.replace(record, label_id=ids[record.label])


def _assign_split(record: ImageRecord, ratios):
    return dataclasses.replace(record, split=splits.assign_split(record.sha256, ratios,
                                                                 record.split))


def _merge_counts(pairs) -> dict:
    merged = {}
    for name, value in pairs:
        merged[name] = merged.get(name, 0) + value
    return merged


def _archive_rows(pipeline: beam.Pipeline, archive: tuple):
    """Every row of the committed snapshots' index tables, with its snapshot's run_id."""
    if not archive:
        return pipeline | "NoArchive" >> beam.Create([])
    run_ids = {path: run_id for run_id, path in archive}

    def with_run_id(item):
        filename, row = item
        return dict(row, run_id=run_ids[filename])

    return (pipeline
            | "ArchiveIndexPaths" >> beam.Create(sorted(run_ids))
            | "ReadArchiveIndexes" >> ReadAllFromParquet(with_filename=True)
            | "TagRunId" >> beam.Map(with_run_id))


def build_preprocess(pipeline: beam.Pipeline, job: PreprocessJob) -> None:
    """Adds the whole job to `pipeline`; everything it writes lands in `job.staging_dir`."""
    config = job.config
    staging = job.staging_dir

    refs, discovery_rejects = pipeline | "DiscoverImages" >> DiscoverImages(
        list(job.data_roots), config.discovery.extensions)
    label_items = (pipeline
                   | "LabelCsvPaths" >> beam.Create(list(job.label_csvs))
                   | "ReadLabelRows" >> ReadLabelRows(config))
    label_parsed = label_items | "SplitLabelRows" >> beam.FlatMap(_split_rows).with_outputs(
        REJECTED, main="rows")
    box_items = (pipeline
                 | "BoxCsvPaths" >> beam.Create(list(job.box_csvs))
                 | "ReadBoxRows" >> ReadBoxRows())
    box_parsed = box_items | "SplitBoxRows" >> beam.FlatMap(_split_rows).with_outputs(
        REJECTED, main="rows")
    archive_rows = _archive_rows(pipeline, job.archive)
    archive_accepted = archive_rows | "ArchiveAccepted" >> beam.Filter(lambda r: r["accepted"])

    folder_labels = not job.label_csvs and config.labels.folder_labels
    planned = ((refs, discovery_rejects, label_parsed.rows, box_parsed.rows, archive_rows)
               | "PlanImages" >> PlanImages(config, folder_labels))
    inspected = planned.images | "InspectImages" >> InspectImages(config)
    labelled, rejected_before_classes = (
        (inspected, planned[REJECTED])
        | "AllImages" >> beam.Flatten()
        | "ResolveLabels" >> beam.Map(resolve_labels, config, folder_labels)
        | "RouteLabelled" >> _Route())

    frozen, start_table = job.frozen_classes, list(job.class_table)
    class_table = (labelled
                   | "LabelNames" >> beam.FlatMap(_labels_of)
                   | "DistinctLabels" >> beam.Distinct()
                   | "AllLabels" >> beam.combiners.ToList()
                   | "ClassTable" >> beam.Map(
                       lambda labels: classes.extend_class_table(start_table, labels, frozen)))
    with_ids, rejected_class = (
        labelled
        | "AssignClassIds" >> beam.Map(_assign_class_id, beam.pvalue.AsSingleton(class_table))
        | "RouteClassIds" >> _Route())
    archive_shas = archive_accepted | "ArchiveShas" >> beam.Map(
        lambda r: (r["sha256"], (r["run_id"], r["path"])))
    unique, rejected_exact = (with_ids
                              | "DropExactDuplicates" >> DropExactDuplicates(archive_shas)
                              | "RouteExact" >> _Route())
    rejected_stages = [rejected_before_classes, rejected_class, rejected_exact]
    if config.dedup.near_duplicates:
        archive_hashes = (archive_accepted
                          | "ArchiveWithHash" >> beam.Filter(lambda r: r["phash"])
                          | "ArchiveHashes" >> beam.Map(
                              lambda r: (r["path"], r["phash"], r["run_id"])))
        unique, rejected_near = (unique
                                 | "DropNearDuplicates" >> DropNearDuplicates(
                                     config.dedup.max_hamming, archive_hashes)
                                 | "RouteNear" >> _Route())
        rejected_stages.append(rejected_near)
    accepted = unique | "AssignSplits" >> beam.Map(_assign_split, config.split)
    written = accepted | "WriteShards" >> WriteShards(staging, config.output, class_table)
    # The TFT transform covers everything committed so far plus tonight (the archive is empty
    # on a full run): normalization and class weights describe the whole training set.
    if config.transform.enabled:
        ((accepted, archive_accepted)
         | "AcceptedSoFar" >> beam.Flatten()
         | "AnalyzeAndWriteTransform" >> AnalyzeAndWriteTransform(
             staging, class_table, config.online.image_size, work_file(staging, "tft_tmp"),
             size_quantiles=config.transform.size_quantiles))

    rejected_images = rejected_stages | "AllRejectedImages" >> beam.Flatten()
    image_rejects = rejected_images | "ImageRejects" >> beam.Map(lambda r: r.reject)
    all_rejects = ((image_rejects, label_parsed[REJECTED], box_parsed[REJECTED],
                    planned[ROW_REJECTS])
                   | "AllRejects" >> beam.Flatten())
    all_rejects | "WriteRejectsLedger" >> WriteRejectsLedger(
        FileSystems.join(staging, "rejects.jsonl"))

    index_rows = ((written.index,
                   rejected_images | "RejectedIndexRows" >> beam.Map(record_row))
                  | "AllIndexRows" >> beam.Flatten())
    index_rows | "WriteIndex" >> WriteToParquet(
        FileSystems.join(staging, "index"), INDEX_SCHEMA, num_shards=1,
        shard_name_template="", file_name_suffix=".parquet")
    (index_rows
     | "SummarizeIndex" >> beam.CombineGlobally(SummarizeIndexFn())
     | "WriteIndexSummary" >> WriteJson(work_file(staging, "index_summary.json")))

    (written[FILES]
     | "AllShardFiles" >> beam.combiners.ToList()
     | "SortShardFiles" >> beam.Map(lambda files: sorted(
         (dataclasses.asdict(f) for f in files), key=lambda f: f["path"]))
     | "WriteShardList" >> WriteJson(work_file(staging, "shards.json")))
    class_table | "WriteClassTable" >> beam.Map(
        lambda names: classes.write_class_table(FileSystems.join(staging, "classes.txt"), names))

    counts = [
        refs | "CountDiscoveredOk" >> CountInto("images.discovered"),
        discovery_rejects | "CountDiscoveryRejects" >> CountInto("images.discovered"),
        written.index | "CountAccepted" >> CountInto("images.accepted"),
        image_rejects | "CountImageRejects" >> CountInto("images.rejected"),
        planned[SKIPPED] | "CountSkipped" >> CountInto("images.skipped"),
        label_items | "CountLabelRows" >> CountInto("label_rows.total"),
        box_items | "CountBoxRows" >> CountInto("box_rows.total"),
        (all_rejects
         | "RowRejects" >> beam.Filter(lambda r: r.kind != IMAGE)
         | "RowRejectPairs" >> beam.Map(lambda r: (_ROW_COUNT[r.kind] + ".rejected", 1))),
        (planned[MATCHED]
         | "MatchedPairs" >> beam.Map(lambda kv: (_ROW_COUNT[kv[0]] + ".matched", kv[1]))),
        (all_rejects
         | "ReasonKeys" >> beam.Map(lambda r: (f"reasons.{r.kind}.{r.reason}", 1))),
    ]
    (counts
     | "AllCounts" >> beam.Flatten()
     | "GatherCounts" >> beam.combiners.ToList()
     | "MergeCounts" >> beam.Map(_merge_counts)
     | "WriteCounts" >> WriteJson(work_file(staging, "counts.json")))
