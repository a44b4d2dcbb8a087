"""Small single-file outputs of the job: the rejects ledger and JSON summaries.

Each is gathered to one element and written once, sorted, so the files are identical across
runners and reruns.
"""
from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

__all__ = ["WriteRejectsLedger", "WriteJson", "CountInto"]


def _write_text(path: str, text: str) -> str:
    with FileSystems.create(path) as handle:
        handle.write(text.encode("utf-8"))
    return path


class WriteRejectsLedger(beam.PTransform):
    """Rejects -> `rejects.jsonl`, one JSON object per line, sorted by (kind, path, reason)."""

    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def expand(self, rejects):
        path = self._path
        return (rejects
                | "AllRejects" >> beam.combiners.ToList()
                | "WriteLedger" >> beam.Map(lambda items: _write_text(path, "".join(
                    r.to_json() + "\n" for r in sorted(
                        items, key=lambda r: (r.kind, r.path, r.reason, r.detail))))))


class WriteJson(beam.PTransform):
    """A singleton PCollection of JSON-able data -> one pretty, key-sorted JSON file."""

    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def expand(self, value):
        path = self._path
        return value | "WriteJsonFile" >> beam.Map(
            lambda data: _write_text(path, json.dumps(  # strict: NaN is an error, not `NaN`
                data, indent=2, sort_keys=True, allow_nan=False) + "\n"))


class CountInto(beam.PTransform):
    """Counts a PCollection into a `(name, n)` pair (0 when empty), for the accounting."""

    def __init__(self, name: str):
        super().__init__()
        self._name = name

    def expand(self, pcoll):
        name = self._name
        return (pcoll
                | "Count" >> beam.combiners.Count.Globally()
                | "Name" >> beam.Map(lambda n: (name, n)))
