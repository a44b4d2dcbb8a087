"""TensorFlow Transform analysis of the accepted images, and the step that exports the transform.

`AnalyzeAndWriteTransform` analyzes the accepted records in one combine (`TotalsFn`, into
`transforms.offline.tft_totals.Totals`): the rows per label (asset `class_frequencies`: class
weights, `tft_summary`), the exact per-channel pixel mean and std weighted by pixel count
(from each record's measured moments: no image is decoded a second time, no pixel is shipped
through TFT), and width/height quantiles. One step then writes the transform with these numbers and
the class table as constants and assets (`transforms.offline.tft_graph`: TFT's own tracing and
saving, outside Beam). `transform_fn/` is written next to the shards; its `preprocessing_fn`
maps `image/encoded` to the model's input with the training reader's own decoder (upright,
resized, normalized) and `image/class/text` to the id in the job's append-only class table
(asset `pixelmill_class_table`, never a frequency-ordered vocabulary whose ids would move
between runs; -1 outside it).

The analyzed constants are outputs too (`stats/*`), so stats.json, the training reader and the
serving graph read the same numbers. Analysis-only raw features (`analysis/*`) feed the
combine and nothing a model consumes; a serving client feeds only `image/encoded`.
This module imports no TensorFlow: the job's launcher imports it, and the transform is traced
in an isolated child when the launcher has no TensorFlow of its own (`tft_graph`).
Design notes (the formulas, why the transform is written outside TFT's Beam analysis):
docs/architecture.md, "TFT analysis".
"""
from __future__ import annotations

import contextlib
import itertools
import math
import sys
import threading
import time
from typing import Mapping, Sequence

import apache_beam as beam
import numpy as np

from transforms import codec
from transforms.offline import progress
from transforms.offline.beam_steps import Map
from transforms.offline.image_record import ImageRecord
from transforms.offline.per_bundle import CombineInBundles
from transforms.offline.tft_assets import CLASS_FREQUENCIES, CLASS_TABLE_ASSET, check_class_table
from transforms.offline.tft_outputs import (
    DEFAULT_SIZE_QUANTILES,
    IMAGE,
    LABEL,
    STATS_PREFIX,
    checked_arguments,
    job_summary,
)
from transforms.offline.tft_totals import (
    CHANNEL_SQSUM,
    CHANNEL_SUM,
    HEIGHT,
    PIXEL_COUNT,
    WIDTH,
    Totals,
)

__all__ = [
    "PIXEL_COUNT", "CHANNEL_SUM", "CHANNEL_SQSUM", "WIDTH", "HEIGHT", "ANALYSIS_FEATURES",
    "IMAGE", "LABEL", "STATS_PREFIX", "CLASS_TABLE_ASSET", "CLASS_FREQUENCIES",
    "DEFAULT_SIZE_QUANTILES", "raw_features", "RecordTotalsFn", "write_transform_isolated",
    "writer_started_ahead", "start_transform_write", "finish_transform_write",
    "AnalyzeAndWriteTransform", "job_summary",
]

# Raw features that exist only to feed the analysis (PIXEL_COUNT, CHANNEL_SUM, CHANNEL_SQSUM,
# WIDTH, HEIGHT: defined with the combine that reads them, `tft_totals`).
ANALYSIS_FEATURES = (PIXEL_COUNT, CHANNEL_SUM, CHANNEL_SQSUM, WIDTH, HEIGHT)


def _moments_of(width, height, moments: Sequence) -> tuple[int, list, list]:
    """(pixel_count, sums, square sums); a zero weight when the moments were not measured."""
    values = list(moments or ())
    if len(values) != 6 or any(v is None or not math.isfinite(float(v)) for v in values):
        return 0, [0.0] * 3, [0.0] * 3
    count = int(width) * int(height)
    return count, [count * float(v) for v in values[:3]], [count * float(v) for v in values[3:]]


def raw_features(item: ImageRecord | Mapping) -> dict:
    """The raw features TFT analyzes for one accepted image, from an `ImageRecord` or an index
    row (`transforms.offline.index_table.make_row`, e.g. read back from `index.parquet`).

    `image/encoded` is empty: analysis never decodes (see the module docstring). An image
    whose channel moments were not measured gets pixel count 0: it counts in the vocabulary and
    the size quantiles but adds nothing to the pixel mean/std.
    """
    progress.enter("TFT")
    if isinstance(item, ImageRecord):
        rel, accepted = item.path, item.reject is None
        label, width, height, moments = item.label, item.width, item.height, item.moments
    elif isinstance(item, Mapping):
        rel, accepted = item.get("path"), item.get("accepted")
        label, width, height = item.get("label"), item.get("width"), item.get("height")
        moments = [item.get(name) for name in ("mean_r", "mean_g", "mean_b",
                                                 "sqmean_r", "sqmean_g", "sqmean_b")]
    else:
        raise ValueError(
            f"Expected an ImageRecord or an index row (dict). Received: {type(item).__name__}")
    if not accepted:
        raise ValueError(f"Only accepted images are analyzed. Received: {rel!r} (rejected)")
    if not label or width is None or height is None:
        raise ValueError(
            f"An accepted image needs a label, a width and a height. Received: {rel!r} with "
            f"label={label!r}, width={width!r}, height={height!r}")
    count, sums, square_sums = _moments_of(width, height, moments)
    return {
        codec.IMAGE_ENCODED: b"",
        codec.CLASS_TEXT: label.encode("utf-8"),
        PIXEL_COUNT: count,
        CHANNEL_SUM: np.asarray(sums, np.float32),
        CHANNEL_SQSUM: np.asarray(square_sums, np.float32),
        WIDTH: int(width),
        HEIGHT: int(height),
    }


class TotalsFn(beam.CombineFn):
    """Raw feature dicts of accepted records -> `Totals`."""

    def create_accumulator(self) -> Totals:
        return Totals()

    def add_input(self, totals: Totals, features: Mapping) -> Totals:
        totals.images += 1
        count = int(features[PIXEL_COUNT])
        if count > 0:
            totals.measured += 1
            totals.pixels += count
        # TFT cast the float32 features to float64: these are the same values.
        for total, value in zip(totals.sums, features[CHANNEL_SUM].tolist()):
            total.add_float(value)
        for total, value in zip(totals.square_sums, features[CHANNEL_SQSUM].tolist()):
            total.add_float(value)
        totals.label_counts[features[codec.CLASS_TEXT]] += 1
        totals.widths[int(features[WIDTH])] += 1
        totals.heights[int(features[HEIGHT])] += 1
        return totals

    def merge_accumulators(self, accumulators) -> Totals:
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for totals in accumulators:
            merged.images += totals.images
            merged.measured += totals.measured
            merged.pixels += totals.pixels
            for mine, theirs in zip(merged.sums + merged.square_sums,
                                    totals.sums + totals.square_sums):
                mine.merge(theirs)
            merged.label_counts.update(totals.label_counts)
            merged.widths.update(totals.widths)
            merged.heights.update(totals.heights)
        return merged

    def extract_output(self, totals: Totals) -> Totals:
        return totals


class RecordTotalsFn(TotalsFn):
    """Accepted ImageRecords or index rows -> `Totals`: `TotalsFn` of their `raw_features`
    (made where each is added, not as a step's elements of their own)."""

    def add_input(self, totals: Totals, item) -> Totals:
        return super().add_input(totals, raw_features(item))


class AnalyzeAndWriteTransform(beam.PTransform):
    """Accepted images -> `output_dir/transform_fn/` + `output_dir/transformed_metadata/`.

    Input: accepted `ImageRecord`s (or accepted index rows, see `raw_features`). `class_table`
    is the list of class names in id order, or the job's singleton PCollection of it. Returns
    the one-element PCollection of the transform's summary (`job_summary`: what `tft_summary`
    reads back from the written transform), which exists once the transform is written.
    Writing survives retried bundles (`transforms.offline.tft_write`).

    With `beside` (a PCollection), the transform is written while the steps that make it
    run, when this process started its writing child ahead (`start_transform_write`): the job
    passes its shard files, so that the child's ~0.4 s of tracing and saving overlaps the shard
    writing rather than preceding it (docs/benchmarks.md, twenty-first round).

    TFT's `AnalyzeDataset` is not used: with every number from the combine, it was handed no
    row and still added ~45 steps and a second SavedModel to every job (docs/benchmarks.md,
    eleventh round); its own in-place path writes the same transform in one step.
    """

    def __init__(self, output_dir: str, class_table, image_size,
                 size_quantiles: int = DEFAULT_SIZE_QUANTILES, exif_orientation: bool = True,
                 beside=None):
        super().__init__()
        checked_arguments(image_size, size_quantiles)
        if not isinstance(class_table, beam.PCollection):
            class_table = check_class_table(class_table, "class_table")
        self._output_dir = output_dir
        self._class_table = class_table
        self._arguments = (image_size, size_quantiles, exif_orientation)
        self._beside = beside

    def expand(self, accepted):
        totals = accepted | "Totals" >> CombineInBundles(RecordTotalsFn())
        class_table = self._class_table
        if isinstance(class_table, beam.PCollection):
            class_table = beam.pvalue.AsSingleton(class_table)
        output_dir, arguments = self._output_dir, self._arguments
        if self._beside is None:
            return totals | "WriteTransform" >> Map(
                lambda totals_, names: write_transform_isolated(output_dir, names, totals_,
                                                                *arguments),
                class_table)
        # Started in the totals' stage, awaited in a stage of its own that reads `beside` too,
        # so the steps making `beside` run while the writing child works.
        started = totals | "WriteTransform" >> Map(
            lambda totals_, names: start_transform_write(output_dir, names, totals_,
                                                         *arguments),
            class_table)
        return (accepted.pipeline | "Once" >> beam.Create([None])
                | "AwaitTransform" >> Map(
                    lambda _, token, _beside: finish_transform_write(token),
                    beam.pvalue.AsSingleton(started), beam.pvalue.AsIter(self._beside)))


# Writing a transform is seconds of tracing and saving; a bound that only a stuck child meets.
_WRITE_TIMEOUT_S = 3600.0
_READY_POLL_S = 0.01  # how often `_first_ready` looks at the writing children
_SHARE_WINDOW_S = 0.2  # over how long `_first_ready` measures the share of a core they get


# Writing children being started ahead of the step that uses one (`writer_started_ahead`).
_AHEAD: list = []


def write_transform_isolated(output_dir: str, class_table: Sequence[str], totals: Totals,
                             image_size, size_quantiles: int = DEFAULT_SIZE_QUANTILES,
                             exif_orientation: bool = True) -> dict:
    """`tft_graph.write_analyzed_transform` (same arguments, same files, same summary), run in
    this process when it has imported TensorFlow already, else in a child of the decoders'
    forkserver (`isolation.ChildPool`), so that a launcher that decodes in children never
    imports TensorFlow itself. The arguments are checked here; the child's error, if any, is
    raised as a RuntimeError that names it."""
    return finish_transform_write(start_transform_write(
        output_dir, class_table, totals, image_size, size_quantiles, exif_orientation))


# Writes handed to a child started ahead and not yet awaited: key -> (output folder, pool,
# the `_WriterAhead` it came from).
_PENDING: dict = {}
_PENDING_KEYS = itertools.count()


def start_transform_write(output_dir: str, class_table: Sequence[str], totals: Totals,
                          image_size, size_quantiles: int = DEFAULT_SIZE_QUANTILES,
                          exif_orientation: bool = True) -> tuple:
    """`write_transform_isolated` in two halves: a token for `finish_transform_write`, which
    returns the summary. With a writing child started ahead in this process
    (`writer_started_ahead`), the child is handed the write and the caller goes on while it
    writes; the token only means something to this process. Otherwise the write is done here
    and now, and the token carries its summary (any process may finish it: a Beam worker)."""
    if not isinstance(totals, Totals):
        raise ValueError(f"totals must be a tft_totals.Totals (TotalsFn's output). "
                         f"Received: {type(totals).__name__}")
    names = check_class_table(class_table, "class_table", allow_empty=True)
    checked_arguments(image_size, size_quantiles)
    arguments = (output_dir, names, totals, image_size, size_quantiles, exif_orientation)
    if _tensorflow_loaded():  # a child would only import it a second time
        from transforms.offline.tft_graph import write_analyzed_transform
        return ("written", write_analyzed_transform(*arguments))
    ahead = _AHEAD.pop() if _AHEAD else None
    pool = _first_ready(ahead.take(), ahead.warm_up) if ahead is not None else _writer_pool()
    try:
        pool.put(0, arguments)
        pool.send_queued()
    except BaseException:
        pool.close()
        raise
    if ahead is None:
        return ("written", _awaited(output_dir, pool))
    key = next(_PENDING_KEYS)
    _PENDING[key] = (output_dir, pool, ahead)
    return ("pending", key)


def _first_ready(ahead_pool, warm_up: tuple | None):
    """The pool of the child started ahead, once set up; or, if it gets less than half a core
    meanwhile, the first set up of it and a child started then at the job's priority (the
    other is closed). The child started ahead sets itself up at a lower priority: on an idle
    machine it runs at full speed once the decoders are done, and is waited for; on a machine
    busy with other work it gets a tenth of a core, and the job would wait for it (the camera
    job beside two busy processes: docs/benchmarks.md, twenty-fourth round)."""
    from transforms.offline.isolation import process_cpu_seconds
    pools = [ahead_pool]
    try:
        ahead_pool.poll(wait=False)
        since, (pid,) = time.monotonic(), ahead_pool.pids()
        used = process_cpu_seconds(pid)
        while not any(pool.ready for pool in pools):
            time.sleep(_READY_POLL_S)
            for pool in pools:
                pool.poll(wait=False)
            elapsed = time.monotonic() - since
            if len(pools) == 1 and elapsed >= _SHARE_WINDOW_S:
                now = process_cpu_seconds(pid)  # None: not Linux, or a replaced child
                if None not in (used, now) and now - used < elapsed / 2:
                    pools.append(_writer_pool(warm_up))
                since, (pid,) = time.monotonic(), ahead_pool.pids()
                used = process_cpu_seconds(pid)
    except BaseException:
        for pool in pools:
            pool.close()
        raise
    winner = next(pool for pool in pools if pool.ready)
    for pool in pools:
        if pool is not winner:
            pool.close()
    return winner


def finish_transform_write(token: tuple) -> dict:
    """The summary of the write `token` (from `start_transform_write`) stands for, once that
    write is done; raises a RuntimeError naming the child's error when it failed."""
    kind, value = token
    if kind == "written":
        return value
    if value not in _PENDING:
        raise RuntimeError(f"The transform's write {value} was started in another process, or "
                           f"finished already; a pending write is finished where it started.")
    output_dir, pool, _ahead = _PENDING.pop(value)
    return _awaited(output_dir, pool)


def _awaited(output_dir: str, pool) -> dict:
    """The one result of `pool` (closed after), the child's failure raised."""
    from transforms.offline import isolation
    try:
        done = []
        while not done:
            done = pool.poll(wait=True)
    finally:
        pool.close()
    [(_key, result)] = done
    if isinstance(result, isolation.Failure):
        raise RuntimeError(f"Writing the transform into {output_dir} failed in its process "
                           f"({result.kind}): {result.detail}")
    return result


def _tensorflow_loaded() -> bool:
    return "tensorflow" in sys.modules


def _writer_pool(warm_up: tuple | None = None, background: bool = False):
    from transforms.offline import isolation
    from transforms.offline.tft_child import TransformWriter
    return isolation.ChildPool(TransformWriter(warm_up, background), 1, _WRITE_TIMEOUT_S,
                               preload=isolation.DECODER_PRELOAD, role="transform's writing",
                               timeout_name=None)


class _WriterAhead:
    """A writing child being started on a thread of its own: starting a child waits for the
    forkserver's imports (TensorFlow: seconds), which the launcher does not wait for. Closing
    does not wait either (a run stopped early): a child started after `close` is closed by the
    thread that started it."""

    def __init__(self, warm_up: tuple | None = None):
        self.warm_up = warm_up  # what its child traces in its set-up (`_first_ready`)
        self._lock = threading.Lock()
        self._pool = None
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._start, name="pixelmill-transform-writer",
                                        daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            pool = _writer_pool(self.warm_up, background=True)
        except BaseException as exc:  # noqa: BLE001 - raised again by take()
            self._error = exc
            return
        with self._lock:
            late, self._pool = self._closed, None if self._closed else pool
        if late:
            pool.close()

    def take(self):
        """The started pool (its child may still be importing); raises what starting raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        with self._lock:
            pool, self._pool = self._pool, None
        return pool

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


@contextlib.contextmanager
def writer_started_ahead(enabled: bool = True, image_size=None, exif_orientation: bool = True):
    """Starts the child that `write_transform_isolated` writes with now (when `enabled` and
    this process has no TensorFlow, so the step will want a child): its TF and TFT imports
    (~1.5 s) and, given the job's `image_size`, the tracing that does not depend on the
    analyzed numbers (`tft_graph.warm_up`, ~0.5 s) then overlap the job instead of following
    its last combine. The step takes it; at exit it is stopped if nothing did, or if nothing
    awaited the write it was handed (a failed run)."""
    warm_up = None if image_size is None else (image_size, exif_orientation)
    ahead = _WriterAhead(warm_up) if enabled and not _tensorflow_loaded() else None
    if ahead is not None:
        _AHEAD.append(ahead)
    try:
        yield
    finally:
        if ahead is not None:
            if ahead in _AHEAD:
                _AHEAD.remove(ahead)
            ahead.close()
            for key in [k for k, (_, _, owner) in _PENDING.items() if owner is ahead]:
                _PENDING.pop(key)[1].close()  # started, never awaited: a failed run
