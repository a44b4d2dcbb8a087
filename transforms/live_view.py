"""The live view: which records of the committed snapshots are current, for every reader.

A *base* snapshot (a full `pixelmill preprocess`, a first night, `pixelmill compact`; its
manifest says `"base": true`) holds everything that was live when it was written. Each night
after it adds a snapshot with tonight's records and `retired.jsonl`: one line per earlier
record it retires, with the reason (`relabeled`, `replaced`, `deleted`, ...) and the snapshot
the record lives in. `pixelmill forget` retires records in `OUTPUT/forgotten.jsonl`.

    live set = records of the newest base and every later snapshot - retired records

so there is at most one live record per source path. `make_dataset` applies the removals
while reading; `pixelmill compact` writes a new base holding exactly the live set, which
readers that know nothing of pixelmill (TFDS, DALI, tfrecord indexes) then read from LATEST.
A record is named by (snapshot run_id, source path): a snapshot holds a path at most once.
Snapshots written before bases existed count as one chain from the oldest.
"""
from __future__ import annotations

import json
from typing import Iterable, NamedTuple, Sequence

from transforms import snapshot_layout as layout
from transforms.snapshot_layout import GFILE, Snapshot, Storage, join

__all__ = ["RETIREMENT_FIELDS", "RETIREMENT_REASONS", "LiveView", "retirement",
           "read_retirements", "live_view", "read_manifest", "is_base", "live_snapshots",
           "select_snapshots", "live_count",
           "removal_keys", "removal_key", "KEY_SEPARATOR"]

# One retirement line: the record (`snapshot`, `path`, `sha256`, `split`, `label`) and why it
# is no longer live (`reason`, `detail`); the ledger's place says which run retired it.
RETIREMENT_FIELDS = ("path", "sha256", "split", "label", "snapshot", "reason", "detail")
# Why a record stops being live.
RETIREMENT_REASONS = {
    "relabeled": "same content, new labels or boxes: tonight's record replaces it",
    "replaced": "new content at the same path (or the path is now rejected at discovery)",
    "reinspected": "the file's time changed but not its content or labels; written anew",
    "deleted": "the file is no longer under the data root",
    "forgotten": "`pixelmill forget` named it: never read again, bytes removed from shards",
}
KEY_SEPARATOR = "\x1f"


def retirement(row: dict, reason: str, detail: str) -> dict:
    """The ledger line retiring the record an index row (with its `run_id`) describes."""
    if reason not in RETIREMENT_REASONS:
        raise ValueError(f"Unknown retirement reason {reason!r}. Expected one of "
                         f"{tuple(RETIREMENT_REASONS)}.")
    return {"path": row["path"], "sha256": row.get("sha256") or "", "split": row.get("split"),
            "label": row.get("label"), "snapshot": row["run_id"], "reason": reason,
            "detail": detail}


def read_manifest(snapshot: Snapshot, storage: Storage = GFILE) -> dict:
    """The snapshot's manifest.json as a dict (the one the Snapshot carries, if any)."""
    if snapshot.manifest is not None:
        return snapshot.manifest
    try:
        manifest = json.loads(storage.read_text(join(snapshot.path, layout.MANIFEST)))
    except ValueError as exc:
        raise ValueError(f"{join(snapshot.path, layout.MANIFEST)} does not parse: {exc}") from exc
    return manifest if isinstance(manifest, dict) else {}


def is_base(snapshot: Snapshot, storage: Storage = GFILE) -> bool:
    """Whether the snapshot holds everything live when it was written (manifest `base`)."""
    return bool(read_manifest(snapshot, storage).get("base"))


def live_snapshots(output_dir: str, storage: Storage = GFILE) -> list[Snapshot]:
    """The committed snapshots of the live view, oldest first: the newest base and every later
    one (all of them when none is a base)."""
    committed = layout.committed_snapshots(output_dir, storage)
    start = 0
    for index in range(len(committed) - 1, -1, -1):
        if is_base(committed[index], storage):
            start = index
            break
    return committed[start:]


def read_retirements(path: str, storage: Storage = GFILE) -> list[dict]:
    """The lines of a retirement ledger (`retired.jsonl`, `forgotten.jsonl`); [] when absent.
    A line that does not parse is an error naming the file and the line."""
    if not storage.exists(path):
        return []
    lines = []
    for number, text in enumerate(storage.read_text(path).splitlines(), 1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
            if not isinstance(line, dict) or not {"path", "snapshot"} <= set(line):
                raise ValueError("expected an object with 'path' and 'snapshot'")
        except ValueError as exc:
            raise ValueError(f"{path}: line {number} is not a retirement line ({exc})") from exc
        lines.append(line)
    return lines


class LiveView(NamedTuple):
    """The live snapshots (oldest first) and, per run_id, the removed records as
    {path: split} (records retired by a later snapshot or forgotten)."""
    snapshots: tuple
    removed: dict

    def removed_count(self, run_id: str, split: str) -> int:
        """Removed records of one snapshot's split."""
        return sum(1 for s in self.removed.get(run_id, {}).values() if s == split)

    def removed_rows(self, run_id: str) -> dict:
        return self.removed.get(run_id, {})


def _removals(lines: Iterable[dict], run_ids: set) -> dict:
    removed: dict = {}
    for line in lines:
        if line["snapshot"] in run_ids:
            removed.setdefault(line["snapshot"], {})[line["path"]] = line.get("split")
    return removed


def live_view(output_dir: str, storage: Storage = GFILE,
              snapshots: Sequence[Snapshot] | None = None) -> LiveView:
    """The live view of `output_dir`; `snapshots` (default: `live_snapshots`) limits the
    removals to the records of those snapshots. Removals come from the retirement ledgers of
    the live snapshots and `OUTPUT/forgotten.jsonl`."""
    live = live_snapshots(output_dir, storage)
    chosen = list(live if snapshots is None else snapshots)
    ledgers = [join(s.path, layout.RETIRED) for s in live + [c for c in chosen if c not in live]
               if _retired_any(s, storage)]
    lines = [line for path in ledgers for line in read_retirements(path, storage)]
    lines += read_retirements(join(output_dir, layout.FORGOTTEN), storage)
    return LiveView(tuple(chosen), _removals(lines, {s.run_id for s in chosen}))


def _retired_any(snapshot: Snapshot, storage: Storage) -> bool:
    """Whether the snapshot's ledger may hold lines: its manifest's count says so (a quiet
    night's empty ledger is not read), or the count is missing (read it)."""
    live = read_manifest(snapshot, storage).get("accounting", {}).get("live", {})
    return live.get("retired", 1) != 0


def live_count(view: LiveView, storage: Storage = GFILE) -> int:
    """How many records the view reads: per snapshot, its manifest's accepted images less its
    removed records. What a run would shrink (`runners.jobs.guard`)."""
    total = 0
    for snapshot in view.snapshots:
        accepted = int(read_manifest(snapshot, storage).get("accounting", {})
                       .get("images", {}).get("accepted", 0))
        total += max(0, accepted - len(view.removed_rows(snapshot.run_id)))
    return total


def removal_key(run_id: str, path: str) -> str:
    """One removed record as one string (what the reader's lookup table holds)."""
    return f"{run_id}{KEY_SEPARATOR}{path}"


def removal_keys(view: LiveView) -> list[str]:
    """Every removed record of the view as `removal_key`s, sorted."""
    return sorted(removal_key(run_id, path) for run_id, paths in view.removed.items()
                  for path in paths)


def select_snapshots(output_dir: str, snapshots="latest",
                     storage: Storage = GFILE) -> list[Snapshot]:
    """The committed snapshots to read, oldest first.

    `"latest"`: `latest_snapshot`. `"all"`: the live snapshots (`live_snapshots`: the newest
    base and every later one; see `transforms.live_view`). `N` or `"last:N"`: the
    newest N. `"mix:W"`: all of them, the newest drawn with weight W against the archive (see
    `pipelines.training_input.make_dataset`); needs at least two. Uncommitted snapshots are
    never selected.
    """
    kind, value = layout.parse_selection(snapshots)
    if kind == "latest":
        return [layout.latest_snapshot(output_dir, storage)]
    committed = live_snapshots(output_dir, storage)
    if not committed:
        layout.latest_snapshot(output_dir, storage)  # raises the "no committed snapshot" error
    if kind == "last":
        return committed[-value:]
    if kind == "mix" and len(committed) < 2:
        raise ValueError(
            f"snapshots={snapshots!r} mixes the newest snapshot with the archive, but "
            f"{output_dir} has {len(committed)} live snapshot(s) (since its newest base).")
    return committed
