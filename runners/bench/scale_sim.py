"""A metadata-only corpus of any size and the job's scaling steps on it, for `bench scale`.

No image bytes exist: image `i` of a `ScaleCorpus` is a pure function of `(seed, i)` (one
blake2b digest), so every step regenerates exactly the same corpus inside its own workers from
a list of index ranges, and nothing of size N passes through the launcher. The corpus has the
structure that makes the job's shuffles and the near-duplicate search work:

- paths `c07/000123/img_000123456.jpg` in `classes` class folders, file sizes 20 KB - 2 MB;
- `exact_share` exact copies (the sha256 of an earlier image);
- `near_share` near duplicates: an earlier image's perceptual hash with 1-3 bits flipped (the
  cluster around each image's hash stays small, as with re-encodes and crops);
- `hot_clusters` hot clusters sharing `hot_share` of the images: near-identical hashes (0-2
  bits from one centre, most exactly equal), as product shots on white or burst photos;
- `reject_share` images rejected at inspection (simulated reasons), `missing_rows` label rows
  naming no file, and one label row per image.

Each `STEPS` entry adds one of the job's steps (the real PTransforms from `transforms/` and
`pipelines/`, run on this corpus) to a pipeline; `bench_scale` runs and measures each alone.
Steps import TensorFlow only when their module needs it (class table, shard assignment,
accounting), so the others' processes start and stay small.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import apache_beam as beam
import pyarrow as pa

from configs.schema import load_config
from transforms import snapshot_layout as layout
from transforms.offline import quality_rules, splits
from transforms.offline.beam_steps import Filter, FlatMap, Map
from transforms.offline.classes import AssignClassIdFn, ClassTable
from transforms.offline.dedup import DropExactDuplicates, DropNearDuplicates
from transforms.offline.discover import FileRef
from transforms.offline.gather import InLists
from transforms.offline.image_record import RECORD_METRICS, ImageRecord
from transforms.offline.index_table import IndexPart
from transforms.offline.join_labels import MATCHED, REJECTED, ROW_REJECTS, SKIPPED, PlanImages
from transforms.offline.labels import LabelRow
from transforms.offline.outputs import WriteRejectsLedger
from transforms.offline.rejects import IMAGE, LABEL_ROW, Reject
from transforms.reporting.history import reject_key, snapshot_summary

__all__ = ["ScaleCorpus", "STEPS", "MAX_HAMMING", "write_archive"]

MAX_HAMMING = 4            # the base config's dedup.max_hamming
_CHUNK = 20_000            # images generated per element of the seed list
_REASONS = ("blurry", "too_dark", "too_small", "decode_error")


@dataclasses.dataclass(frozen=True)
class ScaleCorpus:
    """The synthetic corpus (see the module docstring); `images` may be in the billions."""
    images: int
    seed: int = 0
    classes: int = 20
    exact_share: float = 0.02
    near_share: float = 0.05
    hot_clusters: int = 3
    hot_share: float = 0.03
    reject_share: float = 0.03
    missing_rows: float = 0.005

    def chunks(self) -> list[tuple[int, int]]:
        return [(s, min(self.images, s + _CHUNK)) for s in range(0, self.images, _CHUNK)]

    def _digest(self, kind: str, i: int) -> int:
        data = f"{self.seed}:{kind}:{i}".encode()
        return int.from_bytes(hashlib.blake2b(data, digest_size=24).digest(), "big")

    def path(self, i: int) -> str:
        return f"c{i % self.classes:02d}/{i // 1000:06d}/img_{i:09d}.jpg"

    def _draw(self, i: int) -> tuple[float, int]:
        digest = self._digest("draw", i)
        return (digest & 0xFFFFFFFF) / 2 ** 32, digest >> 32

    def is_copy(self, i: int) -> bool:
        """An exact copy of an earlier image (the same bytes, so the same sha256)."""
        return bool(i) and self._draw(i)[0] < self.exact_share

    def sha256(self, i: int) -> str:
        if self.is_copy(i):
            i = self._draw(i)[1] % i
        return hashlib.sha256(f"{self.seed}:image:{i}".encode()).hexdigest()

    def _flip(self, value: int, digest: int, bits: int) -> int:
        for k in range(bits):
            value ^= 1 << ((digest >> (6 * k)) & 63)
        return value

    def phash(self, i: int) -> str:
        draw, rest = self._draw(i)
        value = self._digest("phash", i) & (2 ** 64 - 1)
        near_start = self.exact_share
        hot_start = near_start + self.near_share
        if self.hot_clusters and hot_start <= draw < hot_start + self.hot_share:
            centre = self._digest("hot", rest % self.hot_clusters) & (2 ** 64 - 1)
            value = self._flip(centre, rest >> 8, (0, 0, 0, 0, 1, 1, 2)[rest % 7])
        elif i and near_start <= draw < hot_start:
            earlier = rest % i
            value = self._flip(self._digest("phash", earlier) & (2 ** 64 - 1), rest >> 40,
                               1 + rest % 3)
        return f"{value:016x}"

    def rejected(self, i: int) -> str | None:
        draw = self._digest("inspect", i) / 2 ** 192
        return _REASONS[i % len(_REASONS)] if draw < self.reject_share else None

    def file_ref(self, i: int) -> FileRef:
        return FileRef(uri=f"gs://bucket/data/{self.path(i)}", path=self.path(i),
                       file_bytes=20_000 + self._digest("size", i) % 2_000_000, mtime=1.7e9)

    def label_rows(self, i: int):
        yield LabelRow(path=self.path(i), label=f"class_{i % self.classes:02d}", split=None,
                       meta=(), source=f"labels.csv:{i + 2}")
        if self._digest("row", i) / 2 ** 192 < self.missing_rows:
            yield LabelRow(path=f"missing/{i:09d}.jpg", label="class_00", split=None, meta=(),
                           source=f"labels.csv:{i + 2}b")

    def record(self, i: int) -> ImageRecord:
        """The image as inspection and labels leave it (sha256, size, hash, metrics, label)."""
        ref = self.file_ref(i)
        digest = self._digest("metrics", i)
        metrics = tuple((name, ((digest >> (8 * k)) & 0xFF) / 255.0)
                        for k, name in enumerate(RECORD_METRICS))
        record = ImageRecord(uri=ref.uri, path=ref.path, file_bytes=ref.file_bytes,
                             mtime=ref.mtime, sha256=self.sha256(i), format="jpeg",
                             width=640 + i % 640, height=480 + i % 480, metrics=metrics,
                             phash=self.phash(i), label=f"class_{i % self.classes:02d}")
        reason = self.rejected(i)
        return record.rejected(reason, "simulated") if reason else record


def _generate(pipeline, corpus: ScaleCorpus, name: str, fn):
    return (pipeline
            | f"{name}Ranges" >> beam.Create(corpus.chunks())
            | f"Spread{name}" >> beam.Reshuffle()
            | f"Generate{name}" >> FlatMap(lambda r: (y for i in range(*r) for y in fn(i))))


def _records(pipeline, corpus: ScaleCorpus, accepted_only: bool = True,
             originals_only: bool = False):
    """The records inspection leaves: all, those it accepted, or those and no exact copy."""
    def generate(i):
        if originals_only and corpus.is_copy(i):
            return []
        record = corpus.record(i)
        return [record] if record.reject is None or not accepted_only else []
    return _generate(pipeline, corpus, "Records", generate)


def _count(pcoll, name: str):
    return pcoll | f"Count{name}" >> beam.combiners.Count.Globally()


def step_generate(pipeline, corpus, _workdir):
    """The input alone: records generated and counted (the cost every other step includes)."""
    _count(_records(pipeline, corpus, accepted_only=False), "Records")


def step_plan(pipeline, corpus, _workdir):
    """PlanImages: files and label rows joined by path (a full run: no boxes, no archive)."""
    config = load_config()
    refs = _generate(pipeline, corpus, "Refs", lambda i: [corpus.file_ref(i)])
    rows = _generate(pipeline, corpus, "Rows", corpus.label_rows)
    no_rejects = pipeline | "NoRejects" >> beam.Create([])
    planned = ({"refs": refs, "rejected": no_rejects, "labels": rows}
               | PlanImages(config, False))
    for tag in ("images", REJECTED, SKIPPED, ROW_REJECTS):
        _count(planned[tag], tag)
    planned[MATCHED] | "Countmatched" >> _RowsMatched()  # (kind, rows) summed per bundle


@beam.ptransform_fn
def _RowsMatched(pairs):  # noqa: N802 (a transform, named as one)
    """(row kind, rows matched) pairs -> the rows matched in all."""
    return pairs | "Rows" >> Map(lambda pair: pair[1]) | "Sum" >> beam.CombineGlobally(sum)


def step_classes(pipeline, corpus, _workdir):
    """The class table (distinct labels, bounded) and a class id per record (the job gives
    them in the exact dedup's groups; here on the records as they come)."""
    records = _records(pipeline, corpus)
    table = records | ClassTable((), False)
    assigned = records | "AssignClassIds" >> beam.ParDo(AssignClassIdFn(),
                                                        beam.pvalue.AsSingleton(table))
    _count(assigned | Filter(lambda r: r.reject is None), "WithIds")
    _count(assigned | Filter(lambda r: r.reject is not None), "Unknown")


def step_dedup_exact(pipeline, corpus, _workdir):
    """DropExactDuplicates: grouped by sha256, lowest path kept."""
    archive = pipeline | "NoArchive" >> beam.Create([])
    kept = _records(pipeline, corpus) | DropExactDuplicates(archive)
    _count(kept | Filter(lambda r: r.reject is not None), "Duplicates")


def step_dedup_near(pipeline, corpus, _workdir):
    """DropNearDuplicates on the images that are not exact copies."""
    archive = pipeline | "NoArchive" >> beam.Create([])
    kept = _records(pipeline, corpus, originals_only=True) | DropNearDuplicates(
        MAX_HAMMING, archive)
    _count(kept | Filter(lambda r: r.reject is not None), "NearDuplicates")


def step_split(pipeline, corpus, _workdir):
    """The split of every accepted record, from its sha256."""
    ratios = load_config().split
    split = _records(pipeline, corpus) | Map(
        lambda r: dataclasses.replace(r, split=splits.assign_split(r.sha256, ratios)))
    _count(split, "Split")


def step_shards(pipeline, corpus, _workdir):
    """WriteShards' assignment without the writing: shard counts from bytes per split, each
    record keyed by its shard, grouped per shard (what one shard writer receives)."""
    from transforms.offline.write_shards import AssignShards  # imports TensorFlow
    config = load_config()
    ratios = config.split
    records = _records(pipeline, corpus) | "Split" >> Map(
        lambda r: dataclasses.replace(r, split=splits.assign_split(r.sha256, ratios)))
    keyed, _counts = records | "AssignShards" >> AssignShards(config.output)
    per_shard = (keyed
                 | "GroupByShard" >> beam.GroupByKey()
                 | "RecordsPerShard" >> beam.MapTuple(lambda key, rs: (key, sum(1 for _ in rs))))
    _count(per_shard, "Shards")


def _paths_part(records: list):
    """An IndexPart of the records' paths alone: what Accounting counts of one."""
    return IndexPart(pa.RecordBatch.from_pydict({"path": [r.path for r in records]}), b"")


def step_accounting(pipeline, corpus, workdir):
    """Accounting: every count through combiners into counts.json."""
    from pipelines.phase_outputs import Counted, Inputs, Inspected
    from pipelines.preprocess_graph import Accounting  # imports TensorFlow: only when needed
    records = _records(pipeline, corpus, accepted_only=False)
    rejects = records | "Rejects" >> FlatMap(lambda r: [r.reject] if r.reject else [])
    empty = pipeline | "Nothing" >> beam.Create([])
    inputs = Inputs(refs=records, discovery_rejects=empty, other_files=empty,
                    label_items=records, label_rows=empty, label_rejects=empty,
                    box_items=None, box_rows=None, box_rejects=None,
                    archive_rows=None)  # a full run: no boxes; no archive, no live set
    inspected = Inspected(labelled=empty, rejected=(empty,),
                          row_rejects=empty, skipped=empty,
                          matched=records | Map(lambda r: (LABEL_ROW, 1)),
                          kept=empty, retired=empty)
    accepted_parts = (records
                      | "Accepted" >> Filter(lambda r: r.reject is None)
                      | "AcceptedLists" >> InLists()  # the job's: an IndexPart a shard
                      | "AcceptedParts" >> Map(_paths_part))
    counted = Counted(accepted_parts=accepted_parts, image_rejects=rejects, all_rejects=rejects)
    (inputs.pvalues(), inspected, counted) | Accounting(workdir)


def step_ledger(pipeline, corpus, workdir):
    """WriteRejectsLedger: every reject (inspection, duplicates, rows) into one sorted file."""
    def rejects(i):
        reason = corpus.rejected(i)
        if reason or corpus._draw(i)[0] < corpus.exact_share + corpus.near_share:
            yield Reject(path=corpus.path(i), reason=reason or "near_duplicate",
                         detail="simulated", kind=IMAGE, sha256=corpus.sha256(i))
        for row in list(corpus.label_rows(i))[1:]:
            yield Reject(path=row.path, reason="missing_file", detail="simulated",
                         kind=LABEL_ROW)
    _generate(pipeline, corpus, "Rejects", rejects) | WriteRejectsLedger(
        os.path.join(workdir, layout.REJECTS))


def _night_stats(corpus: ScaleCorpus, first: int, last: int, rejected: dict) -> dict:
    """stats.json's counts and histograms for the images first..last-1 (what drift reads)."""
    per_class = {}
    for i in range(first, last):
        if i not in rejected:
            name = f"class_{i % corpus.classes:02d}"
            per_class[name] = per_class.get(name, 0) + 1
    accepted = sum(per_class.values())
    quality = {metric: {"histogram": {"edges": list(edges), "counts": [
        accepted // (len(edges) - 1)] * (len(edges) - 1)}}
               for metric, edges in quality_rules.histogram_edges().items()}
    return {"images": {"accepted": accepted, "rejected": len(rejected),
                       "discovered": last - first},
            "by_split": {"train": accepted}, "by_split_class": {"train": per_class},
            "by_reason": {"blurry": len(rejected)}, "quality": quality}


def write_archive(folder: str, corpus: ScaleCorpus, snapshots: int) -> list[str]:
    """`snapshots` committed snapshots of the corpus (the first holds half of it, the others
    equal nightly increments) with what a night reads of them: summary.json, and the
    stats.json and rejects.jsonl a night used to read. Returns the snapshot folders."""
    folders, first, half = [], 0, corpus.images // 2
    bounds = [0] + ([half + (corpus.images - half) * k // (snapshots - 1)
                     for k in range(snapshots)] if snapshots > 1 else [corpus.images])
    for n, last in enumerate(bounds[1:]):
        path = os.path.join(folder, layout.SNAPSHOTS, f"run{n:04d}")
        os.makedirs(path, exist_ok=True)
        rejected = {i: reason for i in range(first, last) if (reason := corpus.rejected(i))}
        stats = _night_stats(corpus, first, last, rejected)
        lines = [Reject(path=corpus.path(i), reason=reason, detail=(
            f"simulated detail of the rule that rejected image {i}"), kind=IMAGE,
            sha256=corpus.sha256(i)).to_json() for i, reason in rejected.items()]
        with open(os.path.join(path, layout.REJECTS), "w", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
        with open(os.path.join(path, layout.STATS), "w", encoding="utf-8") as handle:
            json.dump(stats, handle, indent=2, sort_keys=True)
        keys = [reject_key(json.loads(line)) for line in lines]
        with open(os.path.join(path, layout.SUMMARY), "w", encoding="utf-8") as handle:
            json.dump(snapshot_summary(stats, keys), handle, indent=2, sort_keys=True)
        folders.append(path)
        first = last
    return folders


STEPS = {
    "generate": step_generate,
    "plan": step_plan,
    "classes": step_classes,
    "dedup_exact": step_dedup_exact,
    "dedup_near": step_dedup_near,
    "split": step_split,
    "shards": step_shards,
    "accounting": step_accounting,
    "ledger": step_ledger,
}
