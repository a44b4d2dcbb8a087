"""What a nightly run remembers of each committed snapshot: its `summary.json`.

A night decides whether anything is new (an accepted image, or a reject line that no earlier
snapshot reported) and checks tonight's stats for drift against the archive. Both used to read
every earlier snapshot's `rejects.jsonl` and `stats.json`, so what a night read grew with the
whole history, and with every reject line reported again night after night. Instead every
snapshot carries one small summary, written when it is published:

    {"version": 1,
     "stats": the part of stats.json drift reads (`reporting.drift.drift_view`): image counts,
              counts per split, class and reason, the quality histograms; O(classes x bins),
     "reported_rejects": ["3f9a0c...", ...] sorted: a 64-bit fingerprint (16 hex digits) of
              each reject key this snapshot reported first (`reject_key`: kind, path, reason,
              sha256); all of its rejects for a run that did not look at history}

A night reads one summary per committed snapshot, so its reading is the listing and index
rows it joins against, tonight's own ledger, and the summaries: their stats parts grow with
the number of snapshots (a few KB each), their fingerprints with the number of distinct
rejects ever reported (each once, 19 bytes, whatever the length of its path and detail).
Two distinct keys share a fingerprint with probability 2^-64: the only effect would be a
night whose sole news is that reject not being published. A snapshot published before
summaries existed is read the old way, from its stats.json and rejects.jsonl.
"""
from __future__ import annotations

import hashlib
import json
from typing import Iterable, Mapping

from transforms import snapshot_layout as layout
from transforms.reporting.drift import drift_view

__all__ = ["VERSION", "reject_key", "fingerprint", "snapshot_summary", "read_history"]

VERSION = 1


def reject_key(line: Mapping) -> tuple:
    """What makes a reject line news: the same input (kind, path, content) rejected for the
    same reason in an earlier snapshot is not."""
    return line["kind"], line["path"], line["reason"], line.get("sha256", "")


def fingerprint(key: tuple) -> str:
    """64 bits of the sha256 of a reject key, as 16 hex digits."""
    text = "\x1f".join(str(part) for part in key)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def snapshot_summary(stats: Mapping, reject_keys: Iterable[tuple] = (),
                     fingerprints: Iterable[str] = ()) -> dict:
    """The summary of a snapshot with these stats, which reported these reject keys (or keys
    with these fingerprints) first."""
    reported = set(fingerprints) | {fingerprint(tuple(key)) for key in reject_keys}
    return {"version": VERSION, "stats": drift_view(stats), "reported_rejects": sorted(reported)}


def _ledger_fingerprints(text: str) -> set:
    return {fingerprint(reject_key(json.loads(line))) for line in text.splitlines() if line}


def read_history(snapshot_dirs: Iterable[str],
                 storage: layout.Storage = layout.GFILE) -> tuple[list[dict], set, list[str]]:
    """(drift views of the snapshots' stats, oldest first; the fingerprints of every reject
    they reported; the snapshots that had no summary and were read from stats.json and
    rejects.jsonl)."""
    views, keys, old_style = [], set(), []
    for folder in snapshot_dirs:
        path = layout.join(folder, layout.SUMMARY)
        if storage.exists(path):
            summary = json.loads(storage.read_text(path))
            if summary.get("version") != VERSION:
                raise ValueError(f"{path}: summary version {summary.get('version')!r} is not "
                                 f"one this pixelmill reads (expected {VERSION})")
            views.append(summary["stats"])
            keys.update(summary["reported_rejects"])
            continue
        old_style.append(folder)
        views.append(drift_view(json.loads(storage.read_text(layout.join(folder,
                                                                         layout.STATS)))))
        keys |= _ledger_fingerprints(storage.read_text(layout.join(folder, layout.REJECTS)))
    return views, keys, old_style
