"""Single-file outputs of the job: the rejects ledger and JSON summaries.

The JSON summaries are small (one combined element each). The rejects ledger grows with the
data, so it is never gathered into one list: it is written sorted in ranges, in parallel, and
the ranges are then joined in order into the one file. Both are sorted, so the files are
identical across runners and reruns.
"""
from __future__ import annotations

import bisect
import heapq
import json
import math
import zlib

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from transforms import file_changes, file_reads
from transforms.offline.beam_steps import LeanDoFn, Map
from transforms.offline.gather import Gather, combined
from transforms.s3_storage import create_file

__all__ = ["WriteRejectsLedger", "WriteJson", "count_into", "count_keys", "LEDGER_PART_LINES",
           "write_text", "SampleAndCountFn", "range_bounds", "range_cuts", "already_joined",
           "remove_parts"]

LEDGER_PART_LINES = 200_000   # lines per sorted range of the ledger (~40 MB on one worker)
_LEDGER_SAMPLE = 1024         # keys sampled to cut the ranges (at most this many ranges)
_COPY_CHUNK = 1 << 20


def write_text(path: str, text: str) -> str:
    with create_file(path) as handle:
        handle.write(text.encode("utf-8"))
    return path


def _ledger_line(reject):
    return (reject.kind, reject.path, reject.reason, reject.detail), reject.to_json() + "\n"


class SampleAndCountFn(beam.CombineFn):
    """(sort key, line) pairs -> (sample of at most `size` sort keys, number of pairs).

    The sample is the keys of the `size` lines with the lowest CRC-32 (bottom-k): uniform as
    far as the hash is, the same on every runner, and merged exactly. One combine where a
    count and a random sample were two global combines of the same lines."""

    def __init__(self, size: int):
        self._size = size

    def create_accumulator(self):
        return [], 0

    def add_input(self, accumulator, item):
        key, line = item
        return self.add_hashed(accumulator, ((zlib.crc32(line.encode("utf-8")), key),))

    def add_hashed(self, accumulator, hashed_keys):
        """Adds (hash, sort key) pairs: for subclasses that add many items per element."""
        sample, count = accumulator
        for hashed_key in hashed_keys:
            sample.append(hashed_key)
            count += 1
            if len(sample) >= 2 * self._size:
                sample = heapq.nsmallest(self._size, sample)
        return sample, count

    def merge_accumulators(self, accumulators):
        samples, total = [], 0
        for sample, count in accumulators:
            samples.extend(sample)
            total += count
        return heapq.nsmallest(self._size, samples), total

    def extract_output(self, accumulator):
        sample, count = accumulator
        return [key for _hash, key in heapq.nsmallest(self._size, sample)], count


def range_bounds(sample_and_count, part_lines: int) -> list:
    """Sort keys that cut `count` lines into ranges of about `part_lines` (from a sample)."""
    sample, count = sample_and_count
    parts = min(len(sample), math.ceil(count / part_lines)) if count else 0
    ordered = sorted(sample)
    return sorted({ordered[len(ordered) * k // parts] for k in range(1, parts)})


def range_cuts(items, sample_fn: SampleAndCountFn, per_range: int) -> beam.pvalue.AsSingleton:
    """The sort keys that cut `items` (what `sample_fn` samples) into ranges of about
    `per_range`, as a side input: `range_bounds` of the sample, combined without Beam's
    default (`gather.combined`; no sample: no cuts)."""
    return combined(items, sample_fn, "SampleAndCount", range_bounds, "RangeBounds", (per_range,))


def _write_range(item, parts_dir: str) -> tuple:
    index, lines = item
    path = FileSystems.join(parts_dir, f"part-{index:05d}")
    write_text(path, "".join(line for _key, line in sorted(lines)))
    return index, path


def _join_ranges(ranges, path: str, parts_dir: str) -> str:
    """Concatenates the written ranges in order into `path` (streamed), then removes them.

    A retried bundle (Dataflow retries them; `--direct_runner_bundle_repeat` replays them)
    may find ranges already removed: the parts are removed only after `path` is complete, so
    then `path` is the finished ledger and only the rest of the cleanup is left."""
    parts = [part for _index, part in ranges]
    if already_joined(parts, path, parts_dir):
        return path
    with create_file(path) as out:
        for _index, part in sorted(ranges):
            with file_reads.open_file(part) as handle:
                while chunk := handle.read(_COPY_CHUNK):
                    out.write(chunk)
    remove_parts(parts, parts_dir)
    return path


def already_joined(parts: list, path: str, parts_dir: str) -> bool:
    """Whether a retried join finds `path` complete (some parts already removed); then it
    removes what is left of the parts. Each part is looked up once (on an object store, one
    request each)."""
    if not (parts and file_reads.exists(path)):
        return False
    left = [part for part in parts if file_reads.exists(part)]
    if len(left) == len(parts):
        return False
    remove_parts(left, parts_dir)
    return True


def remove_parts(parts: list, parts_dir: str) -> None:
    """Deletes the written parts, then their folder when it is a local one (now empty)."""
    if parts:
        file_changes.delete(parts)
    if file_reads.exists(parts_dir):  # a local folder, now empty
        file_changes.delete([parts_dir])


class WriteRejectsLedger(beam.PTransform):
    """Rejects -> `rejects.jsonl`, one JSON object per line, sorted by (kind, path, reason,
    detail) (then by the line, so equal keys have one order too).

    Without gathering the ledger anywhere: the sort keys are range-partitioned at boundaries
    cut from a fixed-size sample (so each range holds about `part_lines` lines), each range
    is sorted and written on its own under `<path>.parts/`, and the ranges are concatenated in
    order. Where the boundaries fall changes nothing in the file."""

    def __init__(self, path: str, part_lines: int = LEDGER_PART_LINES):
        super().__init__()
        self._path = path
        self._part_lines = part_lines

    def expand(self, rejects):
        path, part_lines = self._path, self._part_lines
        parts_dir = path + ".parts"
        lines = rejects | "LedgerLines" >> Map(_ledger_line)
        cuts = range_cuts(lines, SampleAndCountFn(_LEDGER_SAMPLE), part_lines)
        return (lines
                | "KeyByRange" >> Map(
                    lambda kv, cuts: (bisect.bisect_right(cuts, kv[0]), kv), cuts)
                | "GroupByRange" >> beam.GroupByKey()
                | "WriteRange" >> Map(_write_range, parts_dir)
                | "JoinRanges" >> Gather(_join_ranges, path, parts_dir))  # (index, path) each


class WriteJson(beam.PTransform):
    """A singleton PCollection of JSON-able data -> one compact, key-sorted JSON file (strict:
    NaN is an error, not `NaN`). For the job's own `_work/` files, which are never published:
    Python encodes JSON in C only without `indent`, ~5x faster: with 21,841 classes (the
    transform's summary holds an entry per class) the stage writing it took 0.12 s of launcher
    CPU pretty, 0.05 s compact (docs/benchmarks.md, twenty-second round)."""

    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def expand(self, value):
        path = self._path
        # The output type is declared: Beam would otherwise disassemble the lambda and all
        # it calls (json.dumps) at every build, ~35 ms.
        return value | "WriteJsonFile" >> Map(
            lambda data: write_text(path, json.dumps(
                data, sort_keys=True, allow_nan=False) + "\n")).with_output_types(str)


class _CountPerBundleFn(LeanDoFn):
    """Elements -> one `(key, count)` pair per key a bundle saw, at its end; `key_counts` maps
    an element to the (key, count) pairs it adds to (none: not counted)."""

    def __init__(self, key_counts):
        self._key_counts = key_counts

    def start_bundle(self):
        self._counts: dict = {}

    def process(self, element):
        for key, count in self._key_counts(element):
            self._counts[key] = self._counts.get(key, 0) + count

    def finish_bundle(self):
        counts, self._counts = self._counts, {}
        for pair in counts.items():
            yield GlobalWindows.windowed_value(pair)


def count_keys(key_counts) -> beam.PTransform:
    """The accounting's counts of a PCollection: `key_counts(element)` gives the (key, count)
    pairs the element adds to (several: one step counts it under every key it belongs to),
    summed per key within each bundle, for the accounting's one `CombinePerKey(sum)`. Partial
    sums leave a bundle, not a pair per element: the counts' Flatten before that combine would
    otherwise copy every element of every counted PCollection once more (Beam's local runner
    materializes a Flatten of several steps), per image several times. Nothing comes out of
    an empty PCollection; the accounting seeds each key with 0."""
    return beam.ParDo(_CountPerBundleFn(key_counts))


def count_into(name: str) -> beam.PTransform:
    """`count_keys` with every element counted once under `name`."""
    return count_keys(lambda _: ((name, 1),))
