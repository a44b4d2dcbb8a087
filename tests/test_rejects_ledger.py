"""WriteRejectsLedger: one sorted rejects.jsonl merged from sorted runs, never gathered in one
list; the file is the same whatever the run size."""
from __future__ import annotations

import os
import random

import apache_beam as beam
import pytest

from tests.beamutil import beam_pipeline
from transforms.offline.outputs import WriteRejectsLedger
from transforms.offline.rejects import BOX_ROW, IMAGE, LABEL_ROW, Reject


def _rejects(n: int, seed: int = 0) -> list[Reject]:
    rng = random.Random(seed)
    kinds = [(IMAGE, "blurry"), (IMAGE, "duplicate"), (LABEL_ROW, "bad_csv_row"),
             (BOX_ROW, "missing_file")]
    out = []
    for i in range(n):
        kind, reason = rng.choice(kinds)
        path = f"{rng.choice(['a', 'b', 'é', 'z'])}/{rng.randint(0, n // 3):05d}.jpg"
        out.append(Reject(path=path, reason=reason, detail=f"d{rng.randint(0, 2)}", kind=kind,
                          sha256=f"{i:064x}" if kind == IMAGE else ""))
    return out


def _write(tmp_path, rejects, part_lines, name) -> str:
    path = os.path.join(tmp_path, name, "rejects.jsonl")
    pipeline = beam_pipeline()
    (pipeline | beam.Create(rejects) | WriteRejectsLedger(path, part_lines=part_lines))
    pipeline.run().wait_until_finish()
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    assert os.listdir(os.path.dirname(path)) == ["rejects.jsonl"]  # no range left behind
    return text


@pytest.mark.parametrize("part_lines,fan_in", [(7, 64), (7, 3), (100_000, 64)])
def test_ledger_is_sorted_and_the_same_whatever_the_run_size(tmp_path, monkeypatch, part_lines,
                                                             fan_in):
    from transforms.offline import outputs
    monkeypatch.setattr(outputs, "MERGE_FAN_IN", fan_in)  # 3: 43 runs merged in 3 passes
    rejects = _rejects(300)
    expected = "".join(r.to_json() + "\n" for r in sorted(
        rejects, key=lambda r: ((r.kind, r.path, r.reason, r.detail), r.to_json())))
    assert _write(tmp_path, rejects, part_lines, "out") == expected


def test_no_rejects_is_an_empty_ledger(tmp_path):
    assert _write(tmp_path, [], 7, "empty") == ""


def test_a_retried_join_finds_the_ledger_whole_and_removes_the_parts_left(tmp_path, monkeypatch):
    """`already_joined`: a retried join whose ledger is complete (a part already removed) removes
    the folder of parts with what is left in it (a failed bundle's run too), looking parts up
    until one is missing; with every part there, or no ledger yet, it leaves everything for the
    join."""
    from transforms import file_reads
    from transforms.offline import outputs
    parts_dir = tmp_path / "parts"
    parts_dir.mkdir()
    parts = [str(parts_dir / f"part-{i}") for i in range(3)]
    for part in parts:
        open(part, "w").close()
    ledger = str(tmp_path / "rejects.jsonl")
    assert not outputs.already_joined(parts, ledger, str(parts_dir))  # no ledger yet
    open(ledger, "w").close()
    assert not outputs.already_joined(parts, ledger, str(parts_dir))  # every part still there
    os.remove(parts[1])
    open(parts_dir / "a-failed-bundles-run", "w").close()
    looked_up = []
    exists = file_reads.exists
    monkeypatch.setattr(file_reads, "exists", lambda path: looked_up.append(path) or exists(path))
    assert outputs.already_joined(parts, ledger, str(parts_dir))
    assert looked_up == [ledger, parts[0], parts[1], str(parts_dir)]
    assert not parts_dir.exists() and os.path.exists(ledger)


def test_a_failed_bundles_run_is_not_merged_and_goes_with_the_folder(tmp_path):
    """The join merges only the runs of committed bundles (a retried bundle's first run is in
    no output) and leaves no run behind."""
    from transforms.offline import outputs
    runs_dir = tmp_path / "rejects.jsonl.parts"
    runs_dir.mkdir()
    rejects = sorted(_rejects(40), key=lambda r: ((r.kind, r.path, r.reason, r.detail),
                                                  r.to_json()))
    runs = []
    for number, part in enumerate((rejects[1::2], rejects[0::2], rejects[:5])):
        run = str(runs_dir / f"run-{number}")
        with open(run, "w", encoding="utf-8") as handle:
            handle.write("".join(r.to_json() + "\n" for r in part))
        runs.append(run)
    ledger = str(tmp_path / "rejects.jsonl")
    assert outputs._join_runs(runs[:2], ledger, str(runs_dir)) == ledger  # runs[2]: failed
    with open(ledger, encoding="utf-8") as handle:
        assert handle.read() == "".join(r.to_json() + "\n" for r in rejects)
    assert os.listdir(tmp_path) == ["rejects.jsonl"]
