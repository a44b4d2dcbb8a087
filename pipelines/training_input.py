"""The training input pipeline: committed shards -> reproducible, augmented batches.

    ds = make_dataset("gs://bucket/out", split="train", batch_size=64, seed=7, epoch=epoch)

The graph reads like the data flow; each step names the module that does it:

    select snapshot, list shards -> class table, boxes?, normalization
                                  transforms.snapshot_layout, pipelines.reader_metadata
    per epoch: file order (seed, epoch) -> replica's files (or records) -> interleave
      -> block shuffle [-> fresh/archive mix] -> skip start_step batches (still encoded)
                                  pipelines.reader_records
      -> parse + decode + resize -> batch     pipelines.reader_samples, transforms.decode
      -> augment (seeds from seed, epoch, step, replica)     transforms.online.augment
      -> normalize -> output structure -> prefetch           pipelines.reader_samples

The settings are one validated `ReaderSpec`; `read_dataset(output_dir, spec)` takes one
directly. Every random choice is a stateless function of `(seed, epoch, step, replica)`, so
the same arguments give the same batches on any machine and `start_step=s` resumes exactly.
With `resample_once` the reader's resize folds into the geometry warp (one bilinear pass).
Output structure, boxes, resuming and every argument: docs/training.md.
"""
from __future__ import annotations

import dataclasses
import functools
import logging

import tensorflow as tf

from configs.schema import Config, load_config
from pipelines.reader_cache import cache_dir_for, cached_snapshots, reader_files
from pipelines.reader_metadata import (
    batches_per_epoch,
    count_examples,
    has_boxes,
    normalization,
    orientation_recorded,
    read_class_names,
    read_label_offset,
    read_pixel_stats,
)
from pipelines.reader_records import (
    count_table,
    mix_records,
    read_records,
    removal_table,
    shards_by_records,
    without_autograph,
)
from pipelines.reader_samples import batch_samples, parse_sample, select_output
from pipelines.reader_spec import ReaderSpec
from transforms.live_view import LiveView, live_view, select_snapshots
from transforms.online.augment import BatchAugmenter, build_batch_augmenter
from transforms.online.seeds import epoch_seed, step_seed
from transforms.snapshot_layout import Snapshot, list_shards, list_split_shards

__all__ = [
    "ReaderSpec",
    "ReadPlan",
    "Snapshot",
    "select_snapshots",
    "list_shards",
    "read_class_names",
    "read_pixel_stats",
    "count_examples",
    "augment_batch",
    "plan_reading",
    "read_dataset",
    "make_dataset",
]

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    """What the reader resolved from the snapshots for one `ReaderSpec`, before any graph:
    the selected snapshots (at their local copies when cached: `pipelines.reader_cache`),
    the shard files (one group, or archive and fresh for a mix), the
    label width, whether there are boxes, the normalization numbers, this input pipeline's
    place among the replicas, the batch augmenter (None without augmentation), and the label
    offset the parse takes off the stored class ids (0 with `keep_label_offset`)."""
    spec: ReaderSpec
    snapshots: tuple
    file_groups: tuple
    num_classes: int
    with_boxes: bool
    normalization: tuple | None
    pipeline_id: int
    num_pipelines: int
    augmenter: BatchAugmenter | None
    label_offset: int = 0
    view: LiveView | None = None  # the selected snapshots' removed records (live_view)
    orientation_recorded: bool = False  # every record carries image/orientation

    @property
    def by_records(self) -> bool:
        """Whether replicas split records rather than files (a group has fewer shard files
        than input pipelines; `reader_records.shards_by_records`)."""
        return any(shards_by_records(len(g), self.num_pipelines) for g in self.file_groups)

    @property
    def to_canvas(self) -> bool:
        """Whether samples stay at their decoded size for the warp to resize (`resample_once`)."""
        return self.augmenter is not None and self.augmenter.takes_source


def _num_classes(class_names: list, requested: int | None, kept_offset: int = 0) -> int:
    needed = len(class_names) + kept_offset
    if requested is None:
        return needed
    if requested < needed:
        kept = f" plus the kept label offset {kept_offset}" if kept_offset else ""
        raise ValueError(
            f"num_classes must be at least the class table's length {len(class_names)}{kept}. "
            f"Received: num_classes={requested}")
    return requested


def plan_reading(output_dir: str, spec: ReaderSpec,
                 input_context: tf.distribute.InputContext | None = None) -> ReadPlan:
    """Select snapshot -> list shards -> class table, boxes, normalization -> replica's share
    -> augmenter. Reads only small files (and, without box counts in stats.json, peeks at the
    first records); raises before any graph is built."""
    selected = select_snapshots(output_dir, spec.snapshots)
    view = live_view(output_dir, snapshots=selected)
    local = selected  # where shards and normalization are read: checked copies if cached
    cache = cache_dir_for(output_dir, spec.cache_dir)
    if cache is not None:
        local = cached_snapshots(selected, cache, reader_files(spec.split))
    files = list_split_shards(local, spec.split, spec.shard_name)
    stored_offset = read_label_offset(selected)
    kept_offset = stored_offset if spec.keep_label_offset else 0
    num_classes = _num_classes(read_class_names(selected), spec.num_classes, kept_offset)
    with_boxes = has_boxes(selected, files) if spec.with_boxes is None else spec.with_boxes
    numbers = normalization(spec.online.normalize, local, spec.normalize)
    pipeline_id, num_pipelines = 0, 1
    if input_context is not None:
        pipeline_id = input_context.input_pipeline_id
        num_pipelines = input_context.num_input_pipelines
    groups = (tuple(files),)
    if spec.selection.mix_weight is not None:
        groups = (tuple(list_split_shards(local[:-1], spec.split, spec.shard_name)),
                  tuple(list_split_shards(local[-1:], spec.split, spec.shard_name)))
    if any(shards_by_records(len(group), num_pipelines) for group in groups):
        _LOG.warning(
            "Split %r has %s shard files for %d input pipelines: sharding by records instead "
            "of files (every replica reads every file and keeps every %d-th record; more "
            "shards, output.num_shards, let replicas read disjoint files).", spec.split,
            " and ".join(str(len(g)) for g in groups), num_pipelines, num_pipelines)
    augmenter = None
    if spec.augment:
        augmenter = _shared_augmenter(spec.online, num_classes, spec.jit_compile,
                                      spec.image_size if spec.resample_once else None)
    return ReadPlan(spec, tuple(local), groups, num_classes, with_boxes, numbers,
                    pipeline_id, num_pipelines, augmenter, stored_offset - kept_offset, view,
                    orientation_recorded(selected))


@functools.lru_cache(maxsize=8)
def _shared_augmenter(online, num_classes, jit_compile, image_size) -> BatchAugmenter:
    """One augmenter per setting in this process, so its traced graph is shared by every
    dataset built with that setting (a dataset per epoch re-traces nothing)."""
    return build_batch_augmenter(online, num_classes, jit_compile=jit_compile,
                                 image_size=image_size)


def augment_batch(augmenter, batch: dict, seed: int, epoch, step, replica=0) -> dict:
    """Applies the batch augmenter with the seed of `(seed, epoch, step, replica)`: exactly what
    `make_dataset` does to that batch (the preview calls this to show a training batch).
    `augmenter` is a `BatchAugmenter` or its `traced` function (what the datasets call)."""
    return augmenter(batch, step_seed(seed, epoch, step, replica))


def _epoch_records(plan: ReadPlan, this_epoch: tf.Tensor, tables: tuple) -> tf.data.Dataset:
    """One epoch of encoded live records: the files in order, or the fresh/archive mix.
    `tables`: the removed records and the shards' record counts (`_reader_tables`)."""
    spec = plan.spec
    removed, counts = tables
    read = functools.partial(read_records, removed=removed, counts=counts, shuffle=spec.shuffle,
                             shuffle_buffer=spec.shuffle_buffer, cycle_length=spec.cycle_length,
                             pipeline_id=plan.pipeline_id, num_pipelines=plan.num_pipelines)
    weight = spec.selection.mix_weight
    if weight is None:
        return read(plan.file_groups[0], this_epoch)
    archive_files, fresh_files = plan.file_groups
    return mix_records(read(archive_files, this_epoch, tag="/archive"),
                       read(fresh_files, this_epoch, tag="/fresh"), this_epoch, weight)


def _one_epoch(plan: ReadPlan, epoch_index: tf.Tensor, tables: tuple) -> tf.data.Dataset:
    """records -> skip -> parse + decode -> batch -> augment -> normalize, for one epoch."""
    spec = plan.spec
    records = _epoch_records(plan, epoch_seed(spec.seed, epoch_index), tables)
    first_step = tf.where(epoch_index == spec.epoch, tf.constant(spec.start_step, tf.int64),
                          tf.constant(0, tf.int64))
    parse = functools.partial(parse_sample, image_size=spec.image_size,
                              num_classes=plan.num_classes, with_boxes=plan.with_boxes,
                              max_boxes=spec.max_boxes, to_canvas=plan.to_canvas,
                              label_offset=plan.label_offset,
                              exif_orientation=spec.exif_orientation,
                              orientation_recorded=plan.orientation_recorded)
    samples = records.skip(first_step * spec.batch_size).map(
        without_autograph(parse), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    batches = batch_samples(samples, spec.batch_size, spec.drop_remainder, spec.image_size,
                            plan.to_canvas)
    if plan.augmenter is not None:
        steps = tf.data.Dataset.range(first_step, tf.int64.max)
        batches = tf.data.Dataset.zip((steps, batches)).map(
            without_autograph(lambda step, batch: augment_batch(
                plan.augmenter.traced, batch, spec.seed, epoch_index, step, plan.pipeline_id)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return batches.map(without_autograph(
        lambda batch: select_output(batch, plan.with_boxes, plan.normalization)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _with_known_cardinality(dataset: tf.data.Dataset, plan: ReadPlan) -> tf.data.Dataset:
    """Asserts the batch count when the records read are known (one input pipeline, or
    sharding by records: every n-th live record; no mix) and stats.json has the counts; a
    start_step past the epoch is an error. Sharding by files leaves it unknown."""
    spec = plan.spec
    if ((plan.num_pipelines != 1 and not plan.by_records)
            or spec.selection.mix_weight is not None):
        return dataset
    per_epoch = batches_per_epoch(plan.view, spec.split, spec.batch_size,
                                  spec.drop_remainder,
                                  share=(plan.pipeline_id, plan.num_pipelines))
    if per_epoch is None:
        return dataset
    if spec.start_step >= max(per_epoch, 1):
        raise ValueError(
            f"start_step must be below the {per_epoch} batches of an epoch of split "
            f"{spec.split!r} at batch_size={spec.batch_size}. Received: "
            f"start_step={spec.start_step}")
    return dataset.apply(tf.data.experimental.assert_cardinality(
        spec.num_epochs * per_epoch - spec.start_step))


def _shard_counts(plan: ReadPlan) -> dict:
    """Each planned shard's record count as its snapshot's manifest lists it (None unknown)."""
    listed = {}
    for snapshot in plan.snapshots:
        for entry in (snapshot.manifest or {}).get("files", []):
            if isinstance(entry, dict) and "path" in entry:
                listed[f"{snapshot.path}/{entry['path']}"] = entry.get("records")
    return {path: listed.get(path) for group in plan.file_groups for path in group}


def read_dataset(output_dir: str, spec: ReaderSpec,
                 input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """The batches `spec` describes, from the committed snapshots under `output_dir`:
    plan -> epochs `spec.epoch ..` one after the other -> known cardinality -> prefetch."""
    plan = plan_reading(output_dir, spec, input_context)
    tables = (removal_table(plan.view), count_table(_shard_counts(plan)))
    options = tf.data.Options()
    options.deterministic = True
    dataset = tf.data.Dataset.range(spec.epoch, spec.epoch + spec.num_epochs).flat_map(
        without_autograph(lambda epoch_index: _one_epoch(plan, epoch_index, tables)))
    dataset = _with_known_cardinality(dataset, plan)
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def make_dataset(output_dir: str, split: str = "train", batch_size: int = 32,
                 config: Config | None = None, seed: int | None = None, epoch: int = 0,
                 start_step: int = 0, input_context: tf.distribute.InputContext | None = None,
                 snapshots="latest", *, num_epochs: int = 1, augment: bool | None = None,
                 normalize: bool = True, shuffle: bool | None = None,
                 drop_remainder: bool | None = None, with_boxes: bool | None = None,
                 max_boxes: int = 100, num_classes: int | None = None,
                 image_size: int | tuple[int, int] | None = None, shuffle_buffer: int = 1024,
                 cycle_length: int = 8, jit_compile: bool = True,
                 resample_once: bool = True, keep_label_offset: bool = False,
                 cache_dir: str | None = None) -> tf.data.Dataset:
    """Batches of one split of the committed snapshot, reproducible from `(seed, epoch, step)`.

    Args:
      output_dir: the offline job's OUTPUT folder (local, gs:// or s3://; s3:// snapshots are
        read from a checked local copy under `cache_dir`, see `pipelines.reader_cache`).
      config: the pixelmill config (`configs/base.yaml` when None). `config.online` gives the
        image size, the seed, the augmentation and the normalization; `config.output.name` the
        shard name.
      input_context: per-replica sharding by files (replicas see disjoint files within an
        epoch), or by records when the split has fewer shard files than input pipelines
        (logged); its `input_pipeline_id` is the replica in the augmentation seed.
      split, batch_size, seed, epoch, start_step, snapshots and the keyword-only arguments:
        the `ReaderSpec` fields of the same names (documented there).
    """
    spec = ReaderSpec.from_config(
        config or load_config(), split=split, batch_size=batch_size, seed=seed, epoch=epoch,
        start_step=start_step, snapshots=snapshots, num_epochs=num_epochs, augment=augment,
        normalize=normalize, shuffle=shuffle, drop_remainder=drop_remainder,
        with_boxes=with_boxes, max_boxes=max_boxes, num_classes=num_classes,
        image_size=image_size, shuffle_buffer=shuffle_buffer, cycle_length=cycle_length,
        jit_compile=jit_compile, resample_once=resample_once,
        keep_label_offset=keep_label_offset, cache_dir=cache_dir)
    return read_dataset(output_dir, spec, input_context)
