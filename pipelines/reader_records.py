"""The training reader's record steps: shard files -> one epoch of serialized records.

    file order (seed, epoch) -> this replica's files -> interleave (less removed records)
    [-> this replica's records] -> block shuffle (seed, epoch) [-> mix: fresh vs archive]

Every order is a stateless function of the epoch's seed (`transforms.online.seeds`), folded
with a step name, so two readers with the same (seed, epoch) read the same records in the same
order, and nothing here reads TensorFlow's global seed. Records stay encoded: skipping records
to resume is cheap.
"""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from transforms import codec
from transforms.live_view import KEY_SEPARATOR, LiveView, removal_keys
from transforms.online.seeds import fold_in, fold_in_name, uniform
from transforms.snapshot_layout import tfrecord_compression

__all__ = ["without_autograph", "permutation", "file_order", "shards_by_records",
           "interleave_files", "block_shuffle", "read_records", "mix_records", "removal_table",
           "without_removed", "count_table", "checked_shard"]

_FILENAME_ONLY = {codec.IMAGE_FILENAME: tf.io.FixedLenFeature([], tf.string)}


def permutation(size: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """A stateless random permutation of range(size) (philox, stable argsort)."""
    keys = uniform(tf.reshape(size, [1]), seed)
    return tf.argsort(keys, stable=True)


def without_autograph(fn):
    """`fn`, for a `tf.data` transformation, traced as written: the reader's functions use TF
    ops and TF control flow only, and autograph's conversion of them (and of everything they
    call) cost seconds at the first dataset of a process (docs/benchmarks.md)."""
    return tf.autograph.experimental.do_not_convert(fn)


def file_order(files: Sequence[str], seed: tf.Tensor | None) -> tuple[tf.Tensor, tf.Tensor]:
    """(paths, compression types) of the shard files: permuted with `seed`, or as given
    (sorted) when `seed` is None."""
    paths = tf.constant(list(files))
    kinds = tf.constant([tfrecord_compression(f) for f in files])
    if seed is None:
        return paths, kinds
    order = permutation(tf.size(paths), seed)
    return tf.gather(paths, order), tf.gather(kinds, order)


def shards_by_records(num_files: int, num_pipelines: int) -> bool:
    """True when replicas must split records, not files: fewer shard files than input
    pipelines (tf.distribute's own fallback from FILE to DATA sharding)."""
    return num_pipelines > num_files


def removal_table(view: LiveView | None) -> tf.lookup.StaticHashTable | None:
    """A table of the view's removed records (`live_view.removal_key` -> 1), or None when
    nothing is removed (then the reader parses nothing extra)."""
    keys = removal_keys(view) if view is not None else []
    if not keys:
        return None
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(keys), tf.ones([len(keys)], tf.int64)), default_value=0)


def without_removed(records: tf.data.Dataset, shard_path: tf.Tensor,
                    removed: tf.lookup.StaticHashTable) -> tf.data.Dataset:
    """The records of one shard less those the live view removed: a record is named by its
    snapshot (from the shard's path, `.../snapshots/<run_id>/<split>/<file>`) and its
    `image/filename`."""
    run_id = tf.strings.split(shard_path, "/")[-3]

    def live(serialized):
        name = tf.io.parse_single_example(serialized, _FILENAME_ONLY)[codec.IMAGE_FILENAME]
        return tf.equal(removed.lookup(tf.strings.join([run_id, name], KEY_SEPARATOR)), 0)
    return records.filter(without_autograph(live))


def count_table(counts: dict) -> tf.lookup.StaticHashTable | None:
    """A table of each shard's record count (path -> count, from the manifests), or None when
    a count is unknown (then shards are read unchecked, as before)."""
    if not counts or any(not isinstance(n, int) for n in counts.values()):
        return None
    paths = sorted(counts)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(paths), tf.constant([counts[p] for p in paths], tf.int64)), default_value=-1)


def checked_shard(shard_path: tf.Tensor, kind: tf.Tensor, expected: tf.Tensor
                  ) -> tf.data.Dataset:
    """One shard's records, failing with the shard's path when it holds fewer readable records
    than its manifest says (a corrupt or truncated record ends the read; TensorFlow's own
    error names no file). Same records in the same order as a plain read of a sound shard."""
    end = tf.data.Dataset.from_tensors((tf.constant(-1, tf.int64), tf.constant(b"")))
    items = tf.data.TFRecordDataset(shard_path, kind).ignore_errors().enumerate().concatenate(end)

    def step(seen, item):
        index, record = item
        at_end = index < 0
        sound = tf.logical_or(tf.logical_not(at_end), tf.equal(seen, expected))
        check = tf.debugging.Assert(sound, [
            "Corrupt or truncated shard", shard_path, "read", seen, "records of", expected,
            "(manifest.json); `pixelmill verify OUTPUT` names what is wrong"], summarize=8)
        with tf.control_dependencies([check]):
            seen = tf.where(at_end, seen, index + 1)
        return seen, (record, at_end)
    return items.scan(tf.constant(0, tf.int64), without_autograph(step)).filter(
        without_autograph(lambda record, at_end: tf.logical_not(at_end))).map(
        without_autograph(lambda record, at_end: record))


def interleave_files(paths: tf.Tensor, kinds: tf.Tensor, num_files: int, cycle_length: int,
                     pipeline_id: int = 0, num_pipelines: int = 1,
                     removed: tf.lookup.StaticHashTable | None = None,
                     counts: tf.lookup.StaticHashTable | None = None,
                     by_records: bool = False) -> tf.data.Dataset:
    """The records of this input pipeline's files (every `num_pipelines`-th file from
    `pipeline_id`: replicas read disjoint files), `cycle_length` files at once, one record from
    each in turn, deterministically; without the `removed` records (`removal_table`), each
    shard checked against its record count when `counts` is given (`count_table`).

    `by_records` (see `shards_by_records`): every replica reads every file in the same order
    and keeps every `num_pipelines`-th live record from `pipeline_id`, so the replicas' records
    are disjoint and together complete, whatever the epoch's file order."""
    files_every, files_from = (1, 0) if by_records else (num_pipelines, pipeline_id)
    per_pipeline = len(range(files_from, num_files, files_every))

    def records(path, kind):
        shard = (tf.data.TFRecordDataset(path, kind) if counts is None
                 else checked_shard(path, kind, counts.lookup(path)))
        return shard if removed is None else without_removed(shard, path, removed)
    interleaved = tf.data.Dataset.from_tensor_slices((paths, kinds)).shard(
        files_every, files_from).interleave(
            without_autograph(records),
            cycle_length=min(cycle_length, per_pipeline), block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return interleaved.shard(num_pipelines, pipeline_id) if by_records else interleaved


def block_shuffle(records: tf.data.Dataset, block_size: int,
                  seed: tf.Tensor) -> tf.data.Dataset:
    """Permutes consecutive blocks of `block_size` records, block i with the sub-seed
    `fold_in(seed, i)`: a stateless shuffle (no RNG state, unaffected by the global seed)."""
    def permute(block_index, block):
        block_seed = fold_in(seed, block_index)
        return tf.gather(block, permutation(tf.size(block), block_seed))
    return records.batch(block_size).enumerate().map(without_autograph(permute)).unbatch()


def read_records(files: Sequence[str], epoch_seed: tf.Tensor, *, shuffle: bool,
                 shuffle_buffer: int, cycle_length: int, pipeline_id: int = 0,
                 num_pipelines: int = 1, tag: str = "",
                 removed: tf.lookup.StaticHashTable | None = None,
                 counts: tf.lookup.StaticHashTable | None = None) -> tf.data.Dataset:
    """One epoch of this input pipeline's live records of `files`: file order -> interleave
    (less `removed`, each shard checked against `counts`; by files, or by records with fewer
    files than pipelines) -> block shuffle. `tag` names the group in the seeds ("/fresh",
    "/archive"), so groups get independent orders; no seed depends on the replica, so all
    replicas agree on the file order."""
    order_seed = fold_in_name(epoch_seed, f"reader/file_order{tag}") if shuffle else None
    paths, kinds = file_order(files, order_seed)
    records = interleave_files(paths, kinds, len(files), cycle_length, pipeline_id,
                               num_pipelines, removed, counts,
                               by_records=shards_by_records(len(files), num_pipelines))
    if shuffle:
        records = block_shuffle(records, shuffle_buffer,
                                fold_in_name(epoch_seed, f"reader/record_order{tag}"))
    return records


def mix_records(archive: tf.data.Dataset, fresh: tf.data.Dataset, epoch_seed: tf.Tensor,
                weight: float) -> tf.data.Dataset:
    """Each record drawn from `fresh` with probability `weight`, else from the repeated
    `archive`; the epoch ends when `fresh` is used up, so it sees every fresh record once and
    about (1 - weight) / weight as many archived ones. The draws are stateless functions of
    (epoch seed, record index)."""
    mix_seed = fold_in_name(epoch_seed, "reader/mix")
    choices = tf.data.Dataset.range(tf.int64.max).map(without_autograph(
        lambda i: tf.cast(uniform(  # TF's default fold-in algorithm here, as always
            [], tf.random.experimental.stateless_fold_in(mix_seed, i)) < weight, tf.int64)))
    return tf.data.Dataset.choose_from_datasets(
        [archive.repeat(), fresh], choices, stop_on_empty_dataset=True)
