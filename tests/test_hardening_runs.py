"""Runs, locks, retries and exits (issue 9): a run with nothing to accept still publishes its
rejects; failed and killed runs leave nothing behind; run ids are safe; exits are honest."""
from __future__ import annotations

import json
import os

import pytest

from pipelines.training_input import make_dataset
from tests.jobutil import rejects, run_job

FAST = ["decode.isolation=inline", "transform.enabled=false"]


def junk_folder(root):
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "a.jpg").write_bytes(b"junk")
    (root / "b.png").write_bytes(b"more junk")
    return root


# Case 4: a run that accepts no image.

def test_a_run_that_accepts_nothing_publishes_its_rejects_report_and_transform(tmp_path):
    out = tmp_path / "out"
    snapshot = run_job(junk_folder(tmp_path / "images"), out,
                       sets=["decode.isolation=inline", "transform.enabled=true"])
    assert snapshot.accounting["images"] == {"discovered": 2, "accepted": 0, "rejected": 2,
                                             "skipped": 0, "ok": True}
    assert sorted(r["reason"] for r in rejects(snapshot)) == ["unknown_format"] * 2
    for name in ("index.parquet", "stats.json", "stats.pb", "report.html", "manifest.json",
                 "transform_fn/saved_model.pb"):
        assert os.path.exists(os.path.join(snapshot.path, name)), name
    transform = json.load(open(os.path.join(snapshot.path, "stats.json")))["transform"]
    assert (transform["images"], transform["classes"], transform["labels_outside_table"]) == (
        0, [], {})
    assert (out / "LATEST").read_text().strip() == snapshot.run_id
    assert (out / "classes.txt").read_text() == ""
    with pytest.raises(FileNotFoundError, match="No shards for split 'train'"):
        make_dataset(str(out), split="train", batch_size=2)


# Case 18: exit codes.

def _cli(args, cwd):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "runners.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("where", ["file", "below_file"])
def test_an_output_dir_that_is_a_file_is_a_usage_error_in_one_line(tmp_path, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    out = blocker if where == "file" else blocker / "out"
    result = _cli(["preprocess", "--data_root", str(junk_folder(tmp_path / "images")),
                   "--output_dir", str(out)], cwd=os.path.dirname(os.path.dirname(__file__)))
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("pixelmill")]
    assert line.startswith(f"pixelmill preprocess: error: --output_dir {out} ")
    assert "expected a folder" in line


def test_a_failed_run_exits_1_with_the_error_and_without_interpreter_teardown(monkeypatch,
                                                                             capsys):
    from runners import cli

    def failing_main(argv):
        raise RuntimeError("the pipeline broke")

    exits = []

    def fake_exit(code):
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(cli, "main", failing_main)
    monkeypatch.setattr(cli.os, "_exit", fake_exit)
    monkeypatch.setattr(cli.logging, "shutdown", lambda: None)  # pytest's handlers stay open
    with pytest.raises(SystemExit):
        cli.console_main(["preprocess"])
    assert exits == [1]  # os._exit even when main raised: no teardown, no SIGSEGV (139)
    assert "RuntimeError: the pipeline broke" in capsys.readouterr().err


def test_a_run_that_raises_is_exit_1_with_the_error(tmp_path, monkeypatch, capsys):
    from runners import cli
    from runners import preprocess

    def broken(job, options):
        raise RuntimeError("a worker died")

    monkeypatch.setattr(preprocess, "execute", broken)
    code = cli.main(["preprocess", "--data_root", str(junk_folder(tmp_path / "images")),
                     "--output_dir", str(tmp_path / "out"), "--set", FAST[0], "--set", FAST[1]])
    assert code == 1
    assert capsys.readouterr().err.rstrip().endswith(
        "pixelmill preprocess: failed: RuntimeError: a worker died")
