"""Single-file outputs of the job: the rejects ledger and JSON summaries.

The JSON summaries are small (one combined element each). The rejects ledger grows with the
data, so it is never gathered into one list: each bundle's lines are written as sorted runs
where they are made, and the runs are then merged into the one file (the index's writer,
`transforms.offline.index_writer`, does the same with its rows). It is sorted, so the file is
identical across runners and reruns.
"""
from __future__ import annotations

import heapq
import json
import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from transforms import file_changes, file_reads
from transforms.offline.beam_steps import LeanDoFn, Map
from transforms.offline.gather import Gather
from transforms.s3_storage import create_file

__all__ = ["WriteRejectsLedger", "WriteJson", "count_into", "count_keys", "LEDGER_PART_LINES",
           "MERGE_FAN_IN", "write_text", "already_joined", "remove_runs",
           "fewer_runs", "SortedRunsFn"]

LEDGER_PART_LINES = 200_000   # lines per sorted run of the ledger at most (~40 MB held)
MERGE_FAN_IN = 64             # sorted runs read at once by a merge (the rest: more passes)
_COPY_CHUNK = 1 << 20


def write_text(path: str, text: str) -> str:
    with create_file(path) as handle:
        handle.write(text.encode("utf-8"))
    return path


def _ledger_line(reject):
    return (reject.kind, reject.path, reject.reason, reject.detail), reject.to_json() + "\n"


class SortedRunsFn(LeanDoFn):
    """Elements -> the paths of sorted runs under `runs_dir`, written by this step (global
    window): a bundle's elements as `_held(element)`, `run_size` at most a run (each weighs
    `_size(element)`; a run may pass it by one element), sorted and written by a subclass's
    `_write(held, path)`. A run a failed bundle wrote is in no committed output: the merge
    removes it with the folder (`remove_runs`). The first pass of a merge sort, for the
    rejects ledger and the index."""

    SUFFIX = ""  # the runs' file name extension

    def __init__(self, runs_dir: str, run_size: int):
        self._runs_dir = runs_dir
        self._run_size = run_size

    def start_bundle(self):
        self._held: list = []
        self._weight = 0

    def process(self, element):
        self._held.append(self._hold(element))
        self._weight += self._size(element)
        if self._weight >= self._run_size:
            yield self._write_run()

    def finish_bundle(self):
        if self._held:
            yield GlobalWindows.windowed_value(self._write_run())

    def _write_run(self) -> str:
        held, self._held, self._weight = self._held, [], 0
        path = FileSystems.join(self._runs_dir, f"run-{uuid.uuid4().hex}{self.SUFFIX}")
        self._write(held, path)
        return path

    def _hold(self, element):
        return element

    def _size(self, element) -> int:
        return 1

    def _write(self, held: list, path: str) -> None:
        raise NotImplementedError


class _LedgerRunsFn(SortedRunsFn):
    """Rejects -> sorted runs of their ledger lines, by (sort key, line)."""

    def _hold(self, reject):
        return _ledger_line(reject)

    def _write(self, held: list, path: str) -> None:
        held.sort()
        write_text(path, "".join(line for _key, line in held))


def _lines(handle):
    """The lines (bytes, each with its newline) of a binary stream, read a chunk at a time."""
    rest = b""
    while chunk := handle.read(_COPY_CHUNK):
        *lines, rest = (rest + chunk).split(b"\n")
        for line in lines:
            yield line + b"\n"
    if rest:
        yield rest


def _run_entries(run: str):
    """(sort key, line) of each line of a sorted run, in its order: the key read back from
    the line (`Reject.to_json` holds every field of it, exactly)."""
    with file_reads.open_file(run) as handle:
        for raw in _lines(handle):
            line = raw.decode("utf-8")
            fields = json.loads(line)
            yield (fields["kind"], fields["path"], fields["reason"], fields["detail"]), line


def _merged_bytes(runs: list):
    """The lines of the sorted `runs` in one order, as chunks of bytes: one run is copied as
    it is; several are merged by (sort key, line), as one sort of all their lines would give."""
    if len(runs) == 1:
        with file_reads.open_file(runs[0]) as handle:
            while chunk := handle.read(_COPY_CHUNK):
                yield chunk
        return
    held, size = [], 0
    for _key, line in heapq.merge(*map(_run_entries, runs)):
        held.append(line)
        size += len(line)
        if size >= _COPY_CHUNK:
            yield "".join(held).encode("utf-8")
            held, size = [], 0
    if held:
        yield "".join(held).encode("utf-8")


def _merge_into(runs: list, path: str) -> None:
    with create_file(path) as out:
        for chunk in _merged_bytes(runs):
            out.write(chunk)


def fewer_runs(runs: list, runs_dir: str, merge_into) -> list:
    """`runs` (sorted runs' paths), merged `MERGE_FAN_IN` at a time by `merge_into(runs, path)`
    into new runs under `runs_dir` until `MERGE_FAN_IN` at most are left: a merge sort's
    passes. A merge reads a buffer of each of its runs at once; on a runner with many small
    bundles (a run each) the runs may number in the thousands, where the local runner's are a
    few. The new runs are removed with the folder (`remove_runs`)."""
    runs = sorted(runs)
    while len(runs) > MERGE_FAN_IN:
        merged = []
        for start in range(0, len(runs), MERGE_FAN_IN):
            group = runs[start:start + MERGE_FAN_IN]
            if len(group) == 1:
                merged.extend(group)
                continue
            path = FileSystems.join(runs_dir, f"pass-{uuid.uuid4().hex}")
            merge_into(group, path)
            merged.append(path)
        runs = merged
    return runs


def _join_runs(runs: list, path: str, runs_dir: str) -> str:
    """Merges the sorted runs into `path` (streamed), then removes them and their folder.

    A retried bundle (Dataflow retries them; `--direct_runner_bundle_repeat` replays them)
    may find runs already removed: they are removed only after `path` is complete, so then
    `path` is the finished ledger and only the rest of the cleanup is left."""
    if already_joined(runs, path, runs_dir):
        return path
    _merge_into(fewer_runs(runs, runs_dir, _merge_into), path)
    remove_runs(runs_dir)
    return path


def remove_runs(runs_dir: str) -> None:
    """Deletes everything under `runs_dir`, and the folder when it is a local one: the merged
    runs, a merge's passes and what a failed bundle wrote (in no output, so listed here)."""
    left = file_reads.match(FileSystems.join(runs_dir, "*"))
    if left:
        file_changes.delete([metadata.path for metadata in left])
    if file_reads.exists(runs_dir):  # a local folder, now empty
        file_changes.delete([runs_dir])


def already_joined(parts: list, path: str, parts_dir: str) -> bool:
    """Whether a retried join finds `path` complete (some parts already removed); then it
    removes what is left under `parts_dir` as the join would have (`remove_runs`: a failed
    bundle's run too, which no list names and an object store keeps without a folder to go
    with). The parts are looked up in turn until one is missing (on an object store, one
    request each)."""
    if not (parts and file_reads.exists(path)):
        return False
    if all(file_reads.exists(part) for part in parts):
        return False
    remove_runs(parts_dir)
    return True


class WriteRejectsLedger(beam.PTransform):
    """Rejects -> `rejects.jsonl`, one JSON object per line, sorted by (kind, path, reason,
    detail) (then by the line, so equal keys have one order too).

    Without gathering the ledger anywhere: each bundle's lines are sorted and written as runs
    of `part_lines` at most under `<path>.parts/` by the step that receives them, and one step
    merges the runs (a merge sort's last pass: one run is copied). How the lines fall into
    runs changes nothing in the file. Two stages of Beam's local runner where ranges cut from
    a sample were five (the sample's shuffle, the lines waiting for its cuts, the ranges'
    shuffle, their join), ~10 ms of every run each; the merge reads each line's key back, a
    few us a line in the one step, when there are several runs."""

    def __init__(self, path: str, part_lines: int = LEDGER_PART_LINES):
        super().__init__()
        self._path = path
        self._part_lines = part_lines

    def expand(self, rejects):
        path = self._path
        runs_dir = path + ".parts"
        return (rejects
                | "SortedRuns" >> beam.ParDo(_LedgerRunsFn(runs_dir, self._part_lines))
                | "JoinRuns" >> Gather(_join_runs, path, runs_dir))  # a path each


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
