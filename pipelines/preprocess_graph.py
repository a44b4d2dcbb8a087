"""The offline preprocessing graph: raw images + CSV labels -> a staged snapshot.

It reads as the data flow in the README, one named composite per phase:

    ReadInputs        discover files, read label/box CSV rows, read the archive's index
    InspectAndLabel   plan (join rows and the archive by path; skip unchanged files) -> inspect
                      (read, sha256, header, decode, validate, quality) -> resolve labels/boxes
    ClassTable        extend the append-only class table with the records' labels
    Dedup             class ids (in the exact step's groups: the table is then known without
                      keeping the records once more), exact (sha256; quality rejects too, so a
                      copy is always `duplicate`) then near (perceptual hash), tonight and
                      against the archive
    AssignSplits      split from the CSV or the sha256
    WriteSnapshot     shards + index rows (+ DALI indexes, per-split TFDV statistics), TFT
                      analysis, class table, shard list
    WriteLedgers      rejects.jsonl, index.parquet, the index summary for stats
    Accounting        every count, combined per key, for the job's own accounting check

The graph only composes steps from `transforms/`; `runners/jobs/preprocess.py` parses options and
`pipelines/snapshot.py` checks the accounting and publishes what this graph staged.
"""
from __future__ import annotations

import dataclasses
import json
import operator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.parquetio import ReadAllFromParquet

from configs.schema import Config
from pipelines import staged_run
from pipelines.job import PreprocessJob
from pipelines.phase_outputs import Counted, Deduped, DedupInputs, Inputs, Inspected
from pipelines.staged_run import BOX_ROWS, IMAGES, LABEL_ROWS, LIVE, count_key
from transforms import snapshot_layout as layout
from transforms.live_view import removal_key
from transforms.offline import classes, splits
from transforms.offline.beam_steps import Filter, FlatMap, Map
from transforms.offline.dedup import DropExactDuplicates, DropNearDuplicates
from transforms.offline.discover import DiscoverImages
from transforms.offline.gather import FoldToOne, Gather, InLists, constant, merged
from transforms.offline.image_record import ImageRecord
from transforms.offline.index_table import INDEX_SCHEMA, record_row, upgrade_row
from transforms.offline.index_writer import IndexParts, WriteIndexTable
from transforms.offline.inspect_image import InspectImages
from transforms.offline.join_labels import (
    KEPT,
    MATCHED,
    REJECTED,
    RETIRED,
    ROW_REJECTS,
    SKIPPED,
    PlanImages,
    ReadBoxRows,
    ReadLabelRows,
    resolve_labels,
    retire_inspected,
    routed,
)
from transforms.offline.outputs import WriteRejectsLedger, count_into, count_keys, write_text
from transforms.offline.rejects import BOX_ROW, IMAGE, LABEL_ROW, REASONS, Reject
from transforms.offline.tft_analysis import AnalyzeAndWriteTransform
from transforms.offline.write_shards import WriteShards
from transforms.reporting.feature_stats_files import WriteFeatureStatistics
from transforms.reporting.stats import MergeIndexSummariesFn

__all__ = ["PreprocessJob", "build_preprocess", "ReadInputs", "InspectAndLabel", "Dedup",
           "WriteSnapshot", "WriteLedgers", "Accounting"]

_ROW_COUNT = {LABEL_ROW: LABEL_ROWS, BOX_ROW: BOX_ROWS}


def _route(record: ImageRecord, keep_quality: bool = False):
    """A rejected record goes out tagged `rejected` (`join_labels.routed`). With `keep_quality`
    a quality reject stays with the candidates: exact dedup looks at it (a copy of a blurry
    image is a `duplicate`), and through the candidates' own steps its join has one input on a
    full run."""
    if keep_quality and record.reject is not None and record.reject.reason in REASONS.quality:
        return record
    return routed(record)


def _step_then_route(element, step, args, keep_quality):
    yield _route(step(element, *args), keep_quality)


class _Route(beam.PTransform):
    """Elements -> (still candidates, rejected): each element is `step(element, *args)` (a
    record), split by `_route` in the same Beam step: a step fewer per record and per job
    (each costs Beam per element, and to build and set up every run). The dedups split their
    own outputs (`routed=True`)."""

    def __init__(self, step, *args, keep_quality: bool = False):
        super().__init__()
        self._step, self._args, self._keep_quality = step, args, keep_quality

    def expand(self, records):
        route = FlatMap(_step_then_route, self._step, self._args, self._keep_quality)
        routed = records | "Route" >> route.with_outputs(REJECTED, main="ok")
        return routed.ok, routed[REJECTED]


def _split_rows(item):
    if isinstance(item, Reject):
        yield beam.pvalue.TaggedOutput(REJECTED, item)
    else:
        yield item


def _reject_forgotten(record: ImageRecord, paths: frozenset, shas: frozenset) -> ImageRecord:
    """An image `pixelmill forget` named (by path or content) is not brought back while its
    source still exists (`--allow_forgotten` lets it back)."""
    if record.reject is None and (record.path in paths or record.sha256 in shas):
        return record.rejected("forgotten", "named by `pixelmill forget` "
                               f"({'path' if record.path in paths else 'sha256'}); "
                               "--allow_forgotten lets it back")
    return record


def _assign_split(record: ImageRecord, ratios):
    return record.replace(split=splits.assign_split(record.sha256, ratios, record.split))


class ReadInputs(beam.PTransform):
    """Pipeline -> Inputs: the discovered files, the CSV rows and the archive's index rows. A
    kind of input the run was not given (no label CSV, no box CSV, no archive on a full run)
    is None, not an empty PCollection: the steps that would read nothing are not built (~7 ms
    of every run each; a folder-labelled full run has 13 fewer)."""

    def __init__(self, job: PreprocessJob):
        super().__init__()
        self._job = job

    def expand(self, pipeline):
        job = self._job
        discovered = pipeline | "DiscoverImages" >> DiscoverImages(
            list(job.data_roots), job.config.discovery.extensions,
            job.config.limits.max_file_bytes)
        label_items, label_rows, label_rejects = _csv_rows(
            pipeline, "Label", job.label_csvs, ReadLabelRows(job.config))
        box_items, box_rows, box_rejects = _csv_rows(
            pipeline, "Box", job.box_csvs, ReadBoxRows(job.config.labels.max_cell_bytes))
        return Inputs(refs=discovered.refs, discovery_rejects=discovered.rejected,
                      other_files=discovered.other_files,
                      label_items=label_items, label_rows=label_rows,
                      label_rejects=label_rejects, box_items=box_items,
                      box_rows=box_rows, box_rejects=box_rejects,
                      archive_rows=_read_archive(pipeline, job.archive, job.removed))


def _csv_rows(pipeline: beam.Pipeline, kind: str, paths, read: beam.PTransform) -> tuple:
    """(items, rows, rejects) of the `kind` CSVs at `paths` (every row parsed or a Reject, the
    parsed ones, the rejected ones); (None, None, None) without a path."""
    if not paths:
        return None, None, None
    items = (constant(pipeline, f"{kind}CsvPaths", paths, spread=True)
             | f"Read{kind}Rows" >> read)
    split = items | f"Split{kind}Rows" >> FlatMap(_split_rows).with_outputs(
        REJECTED, main="rows")
    return items, split.rows, split[REJECTED]


def _read_archive(pipeline: beam.Pipeline, archive: tuple, removed: frozenset):
    """Every row of the live snapshots' index tables, with its snapshot's run_id and whether
    its record was `removed` (retired by a later snapshot or forgotten; `live_view`)."""
    if not archive:
        return None
    run_ids = {path: run_id for run_id, path in archive}

    def with_run_id(item):
        filename, row = item
        run_id = run_ids[filename]
        return dict(upgrade_row(row), run_id=run_id,  # older indexes too
                    removed=removal_key(run_id, row["path"]) in removed)

    return (constant(pipeline, "ArchiveIndexPaths", sorted(run_ids), spread=True)
            | "ReadArchiveIndexes" >> ReadAllFromParquet(with_filename=True)
            | "TagRunId" >> Map(with_run_id))


class InspectAndLabel(beam.PTransform):
    """Inputs (as `Inputs.pvalues()`) -> Inspected: every image planned against its CSV rows
    and the archive (each file alone when there are neither), inspected and labelled."""

    def __init__(self, job: PreprocessJob):
        super().__init__()
        self._config = job.config
        self._folder_labels = job.folder_labels
        self._forgotten = (job.forgotten_paths, job.forgotten_shas)
        self._joined = job.joins_by_path
        self._lanes = job.shuffle_lanes

    def expand(self, pvalues):
        inputs = Inputs.of(pvalues)
        config, folder_labels = self._config, self._folder_labels
        to_plan = {"refs": inputs.refs, "rejected": inputs.discovery_rejects,
                   "labels": inputs.label_rows, "boxes": inputs.box_rows,
                   "prior": inputs.archive_rows}
        planned = ({name: pcoll for name, pcoll in to_plan.items() if pcoll is not None}
                   | "PlanImages" >> PlanImages(config, folder_labels, self._forgotten,
                                                self._joined, self._lanes))
        inspected = planned.images | "InspectImages" >> InspectImages(config)
        retired = planned[RETIRED]
        if inputs.archive_rows is not None:  # only a record the archive has can be replaced
            retired = ((retired, inspected | "RetireReplaced" >> FlatMap(retire_inspected))
                       | "AllRetired" >> beam.Flatten())
        if any(self._forgotten):
            inspected = inspected | "RejectForgotten" >> Map(_reject_forgotten,
                                                             *self._forgotten)
        labelled, rejected_inspected = (
            inspected | "ResolveLabels" >> _Route(resolve_labels, config, folder_labels,
                                                  keep_quality=True))
        # Discovery rejects carry no CSV rows and stay rejected (no quality rule judged them):
        # they join the rejects alone, and the inspected records pass through no Flatten. The
        # two go on apart, to the job's one Flatten of rejected images: a Flatten of a Flatten
        # is one more stage of Beam's local runner (~8 ms a run).
        rejected = (rejected_inspected, planned[REJECTED])
        return Inspected(labelled=labelled, rejected=rejected, row_rejects=planned[ROW_REJECTS],
                         skipped=planned[SKIPPED], matched=planned[MATCHED], kept=planned[KEPT],
                         retired=retired)


class Dedup(beam.PTransform):
    """DedupInputs -> Deduped: exact duplicates by sha256 among the records and the quality
    rejects (the lowest path of a group keeps its own outcome, every other copy is `duplicate`:
    copies share their quality verdict, so a copy is never named blurry instead), each
    candidate given its class id in its group first (an unknown label or box class is
    rejected there and takes no part), then (when `dedup.near_duplicates`) near duplicates by
    perceptual hash among the records, both tonight and against the archive."""

    def __init__(self, config: Config, has_archive: bool = True, lanes: int | None = None):
        super().__init__()
        self._config = config
        self._has_archive = has_archive  # False: a full run, no archived hashes to search
        self._lanes = lanes  # shuffles in lanes (gather.GroupByKeyInLanes); None: key by key

    def expand(self, inputs: DedupInputs):
        records, archive_accepted, class_table = inputs
        archive_shas = None if not self._has_archive else (
            archive_accepted | "ArchiveShas" >> Map(
                lambda r: (r["sha256"], (r["run_id"], r["path"]))))
        unique, rejected_exact = records | "DropExactDuplicates" >> DropExactDuplicates(
            archive_shas, class_table, self._lanes, routed=True)
        rejected = [rejected_exact]
        if self._config.dedup.near_duplicates:
            archive_hashes = None if not self._has_archive else (
                archive_accepted
                | "ArchiveWithHash" >> Filter(lambda r: r["phash"])
                | "ArchiveHashes" >> Map(lambda r: (r["path"], r["phash"], r["run_id"])))
            dedup = self._config.dedup
            archive_centers = None
            if dedup.crop_tolerant and self._has_archive:  # archived with a centre hash
                archive_centers = (archive_accepted
                                   | "ArchiveWithCenter" >> Filter(
                                       lambda r: r.get("center_phash"))
                                   | "ArchiveCenters" >> Map(
                                       lambda r: (r["path"], r["center_phash"], r["run_id"])))
            unique, rejected_near = unique | "DropNearDuplicates" >> DropNearDuplicates(
                dedup.max_hamming, archive_hashes,
                crop_max_hamming=dedup.crop_max_hamming if dedup.crop_tolerant else None,
                archive_centers=archive_centers, lanes=self._lanes, routed=True)
            rejected.append(rejected_near)
        return Deduped(unique=unique, rejected=tuple(rejected))


class WriteSnapshot(beam.PTransform):
    """(accepted records with splits, archive's accepted rows, class table) -> WriteShards'
    outputs (`index` rows, tagged shard `files`). Also writes the TFT transform, the class
    table and the shard list into the staging folder."""

    def __init__(self, job: PreprocessJob):
        super().__init__()
        self._job = job

    def expand(self, inputs):
        accepted, archive_accepted, class_table = inputs
        config, staging = self._job.config, self._job.staging_dir
        # Shards are written in child processes when the images were decoded in them.
        writers = (max(1, config.decode.processes)
                   if config.decode.isolation == "subprocess" else 0)
        written = accepted | "WriteShards" >> WriteShards(staging, config.output, class_table,
                                                          writers, self._job.shuffle_lanes)
        # Every record gets every meta column of the run; TFDS's features.json lists them.
        (written.plan
         | "MetaColumns" >> Map(operator.attrgetter("meta_columns"))
         | "WriteMetaColumns" >> staged_run.write_meta_columns(staging))
        # The TFT transform covers everything committed so far plus tonight: normalization and
        # class weights describe the whole training set. A full run has no archive, and no
        # Flatten: Beam's local runner copies every element of one once more. It is written
        # beside the shards, and its summary follows them.
        if config.transform.enabled:
            (merged([accepted, archive_accepted if self._job.archive else None],
                    "AcceptedSoFar")
             | "AnalyzeAndWriteTransform" >> AnalyzeAndWriteTransform(
                 staging, class_table, config.online.image_size,
                 size_quantiles=config.transform.size_quantiles,
                 exif_orientation=config.decode.exif_orientation, beside=written.files)
             | "WriteTransformSummary" >> staged_run.write_transform_summary(staging))
        written.features | "WriteFeatureStatistics" >> WriteFeatureStatistics(staging)
        (written.files
         | "ShardFileDicts" >> Map(lambda files: [dataclasses.asdict(f) for f in files])
         | "WriteShardList" >> staged_run.write_shard_list(staging))
        class_table | "WriteClassTable" >> Map(
            lambda names: classes.write_class_table(FileSystems.join(staging, layout.CLASSES),
                                                    names))
        return written


class WriteRetirements(beam.PTransform):
    """Retirement lines -> `retired.jsonl`, sorted by (snapshot, path): one line per record
    of an earlier snapshot that is no longer live (`transforms.live_view`). A night retires
    what changed, so the lines are gathered in one list."""

    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def expand(self, lines):
        path = self._path
        return lines | "WriteRetiredLedger" >> Gather(lambda items: write_text(path, "".join(
            json.dumps(line, sort_keys=True) + "\n"
            for line in sorted(items, key=lambda i: (i["snapshot"], i["path"])))))


class WriteLedgers(beam.PTransform):
    """(`IndexPart`s of the accepted images' index rows, rejected ImageRecords, every Reject) ->
    rejects.jsonl, index.parquet (one row per inspected image) and the index summary stats are
    made from. `in_lists`: the rejected images' rows meet in lists (`gather.InLists`; global
    window), where Beam's local runner would keep each row."""

    def __init__(self, staging_dir: str, in_lists: bool = False):
        super().__init__()
        self._staging = staging_dir
        self._in_lists = in_lists

    def expand(self, inputs):
        accepted_parts, rejected_images, all_rejects = inputs
        staging = self._staging
        all_rejects | "WriteRejectsLedger" >> WriteRejectsLedger(
            FileSystems.join(staging, layout.REJECTS))
        rejected_rows = rejected_images | "RejectedIndexRows" >> Map(record_row)
        if self._in_lists:
            rejected_rows = rejected_rows | "RejectedRowLists" >> InLists()
        rejected_parts = rejected_rows | "RejectedIndexParts" >> IndexParts(self._in_lists)
        index_parts = (accepted_parts, rejected_parts) | "AllIndexParts" >> beam.Flatten()
        (index_parts
         | "IndexBatches" >> Map(operator.attrgetter("batch"))
         | "WriteIndex" >> WriteIndexTable(FileSystems.join(staging, layout.INDEX),
                                           INDEX_SCHEMA))
        return (index_parts
                | "IndexSummaries" >> Map(operator.attrgetter("summary"))
                | "SummarizeIndex" >> FoldToOne(MergeIndexSummariesFn())
                | "WriteIndexSummary" >> staged_run.write_index_summary(staging))


def _seeded_counts(sums) -> dict:
    """{count key: count} from the (key, partial sum) pairs, summed per key, every seeded key
    there (nothing counted is 0)."""
    counts = dict.fromkeys(staged_run.SEEDED_COUNTS, 0)
    for key, count in sums:
        counts[key] = counts.get(key, 0) + count
    return counts


def _reject_counts(reject: Reject) -> tuple:
    """A Reject's counts: its reason, and a CSV row's rejection among its kind's rows."""
    reason = (staged_run.reason_key(reject.kind, reject.reason), 1)
    if reject.kind == IMAGE:
        return (reason,)
    return reason, (count_key(_ROW_COUNT[reject.kind], "rejected"), 1)


class Accounting(beam.PTransform):
    """(Inputs as `Inputs.pvalues()`, Inspected, Counted) -> `_work/counts.json`
    (`pipelines.staged_run`): how many inputs were discovered, accepted, rejected (per reason)
    and skipped, how many CSV rows matched or were rejected, how many live records were kept or
    retired, and how many other files (no images) were listed per extension. Counts go through
    combiners (constant memory whatever the number of inputs); an absent input counts 0."""

    def __init__(self, staging_dir: str):
        super().__init__()
        self._staging = staging_dir

    def expand(self, parts):
        pvalues, inspected, counted = parts
        inputs = Inputs.of(pvalues)
        steps = [
            (inputs.refs, "CountDiscoveredOk", count_into(count_key(IMAGES, "discovered"))),
            (inputs.discovery_rejects, "CountDiscoveryRejects",
             count_into(count_key(IMAGES, "discovered"))),
            (counted.accepted_parts, "CountAccepted", count_keys(
                lambda part: ((count_key(IMAGES, "accepted"), part.batch.num_rows),))),
            (counted.image_rejects, "CountImageRejects",
             count_into(count_key(IMAGES, "rejected"))),
            (inspected.skipped, "CountSkipped", count_into(count_key(IMAGES, "skipped"))),
            (inputs.label_items, "CountLabelRows", count_into(count_key(LABEL_ROWS, "total"))),
            (inputs.box_items, "CountBoxRows", count_into(count_key(BOX_ROWS, "total"))),
            (counted.all_rejects, "CountRejects", count_keys(_reject_counts)),
            (inspected.matched, "CountMatched", count_keys(
                lambda kv: ((count_key(_ROW_COUNT[kv[0]], "matched"), kv[1]),))),
            (inputs.archive_rows, "CountLiveBefore", count_keys(
                lambda r: ((count_key(LIVE, "before"), 1),)
                if r["accepted"] and not r["removed"] else ())),
            (inspected.kept, "CountKept", count_into(count_key(LIVE, "kept"))),
            (inspected.retired, "CountRetired", count_keys(
                lambda line: ((count_key(LIVE, "retired"), 1),
                              (staged_run.retired_key(line["reason"]), 1)))),
            (inputs.other_files, "CountOtherFiles", count_keys(
                lambda key: ((staged_run.other_files_key(key), 1),))),
        ]
        counts = [pcoll | label >> step for pcoll, label, step in steps if pcoll is not None]
        return (counts
                | "AllCounts" >> beam.Flatten()
                | "CountsDict" >> Gather(_seeded_counts)
                | "WriteCounts" >> staged_run.write_counts(self._staging))


def build_preprocess(pipeline: beam.Pipeline, job: PreprocessJob) -> None:
    """Adds the whole job to `pipeline`; everything it writes lands in `job.staging_dir`."""
    config = job.config
    inputs = pipeline | "ReadInputs" >> ReadInputs(job)
    inspected = inputs.pvalues() | "InspectAndLabel" >> InspectAndLabel(job)
    archive_accepted = inspected.kept  # the archive's records that stay live tonight
    class_table = inspected.labelled | "ClassTable" >> classes.ClassTable(
        job.class_table, job.frozen_classes, few_bundles=job.shuffle_lanes is not None)
    retired_ledger = FileSystems.join(job.staging_dir, layout.RETIRED)
    if job.archive:
        inspected.retired | "WriteRetirements" >> WriteRetirements(retired_ledger)
    else:  # only an archived record retires: a full run's ledger is empty, written in the
        # class table's stage rather than a stage of its own (~10 ms of every run)
        class_table | "WriteEmptyRetirements" >> Map(lambda _: write_text(retired_ledger, ""))
    deduped = (DedupInputs(inspected.labelled, archive_accepted, class_table)
               | "Dedup" >> Dedup(config, has_archive=bool(job.archive),
                                lanes=job.shuffle_lanes))
    accepted = deduped.unique | "AssignSplits" >> Map(_assign_split, config.split)
    written = ((accepted, archive_accepted, class_table)
               | "WriteSnapshot" >> WriteSnapshot(job))

    rejected_images = ([*inspected.rejected, *deduped.rejected]
                       | "AllRejectedImages" >> beam.Flatten())
    image_rejects = rejected_images | "ImageRejects" >> Map(lambda r: r.reject)
    all_rejects = merged((image_rejects, inputs.label_rejects, inputs.box_rejects,
                          inspected.row_rejects), "AllRejects")
    (written.index, rejected_images, all_rejects) | "WriteLedgers" >> WriteLedgers(
        job.staging_dir, in_lists=job.shuffle_lanes is not None)
    ((inputs.pvalues(), inspected, Counted(written.index, image_rejects, all_rejects))
     | "Accounting" >> Accounting(job.staging_dir))
