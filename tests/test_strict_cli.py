"""Strict command lines (issue 21 items 4 and 10): unknown and foreign flags, bad durations and
counts, duplicate YAML keys, the heartbeat's pace, `--version`, and help without TensorFlow or
Beam."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import pytest

from configs.schema import ConfigError, load_config
from runners import cli, version
from runners.errors import UsageError
from runners.flags import command_help
from runners.locking.locked_run import clean_unfinished
from runners.locking.run_lock import RunLock

_REPO = __file__.rsplit("/tests/", 1)[0]


def _usage_line(capsys, argv) -> str:
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("typo,suggestion", [
    (["--lables", "labels.csv"], "Did you mean --labels?"),
    (["--output-dir", "out"], "Did you mean --output_dir?"),
    (["--runer", "DirectRunner"], "Did you mean --runner?"),
    (["--dataflow_label=team=ml"], "Did you mean --dataflow_labels?"),
])
def test_an_unknown_flag_is_a_usage_error_with_a_suggestion(tmp_path, capsys, typo, suggestion):
    line = _usage_line(capsys, ["preprocess", "--data_root", str(tmp_path), "--output_dir",
                                str(tmp_path / "out"), *typo])
    assert typo[0].split("=")[0] in line and suggestion in line
    assert not (tmp_path / "out").exists()


def test_a_stray_argument_is_a_usage_error(tmp_path, capsys):
    line = _usage_line(capsys, ["preprocess", "--data_root", str(tmp_path), "--output_dir",
                                str(tmp_path / "out"), "labels.csv"])
    assert "'labels.csv'" in line


@pytest.mark.parametrize("flag", [["--fail_on_drift"], ["--lock_stale_hours", "1"],
                                  ["--always_run_job"], ["--quick_look_max_files=5"]])
def test_a_nightly_flag_on_preprocess_is_a_usage_error(tmp_path, capsys, flag):
    line = _usage_line(capsys, ["preprocess", "--data_root", str(tmp_path), "--output_dir",
                                str(tmp_path / "out"), *flag])
    assert "pixelmill nightly" in line and flag[0].split("=")[0] in line


@pytest.mark.parametrize("flag,value,allowed", [
    ("--lock_stale_hours", "0", "> 0"), ("--lock_stale_hours", "-1", "> 0"),
    ("--lock_stale_hours", "nan", "> 0"), ("--lock_stale_hours", "soon", "> 0"),
    ("--lock_blocked_max", "0", ">= 1"), ("--quick_look_max_files", "-1", ">= 0"),
])
def test_nightly_durations_and_counts_must_be_in_range(tmp_path, capsys, flag, value, allowed):
    line = _usage_line(capsys, ["nightly", "--data_root", str(tmp_path), "--output_dir",
                                str(tmp_path / "out"), flag, value])
    assert flag in line and allowed in line and repr(value) in line


def test_the_lock_refuses_durations_that_are_not_positive(tmp_path):
    for stale in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="stale_after_s"):
            RunLock(str(tmp_path), "r", stale_after_s=stale)
    with pytest.raises(ValueError, match="heartbeat_s"):
        RunLock(str(tmp_path), "r", heartbeat_s=0)


def test_the_heartbeat_sleeps_between_beats_whatever_the_stale_time(tmp_path):
    lock = RunLock(str(tmp_path), "r", stale_after_s=1e-6)
    beats = []
    refresh = lock._store.refresh
    lock._store.refresh = lambda data: beats.append(time.monotonic()) or refresh(data)
    with lock:
        time.sleep(0.5)
    assert 1 <= len(beats) <= 12  # at most one beat every 0.05 s, not a busy loop


@pytest.mark.parametrize("text,key,line", [
    ("quality:\n  min_std: 1.0\n  min_std: 2.0\n", "quality.min_std", 3),
    ("quality:\n  min_std: 1.0\nsplits: {}\nquality: {}\n", "quality", 4),
])
def test_a_duplicate_yaml_key_is_a_config_error_naming_key_and_line(tmp_path, text, key, line):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"duplicate key '{key}' at line {line}"):
        load_config(str(path), ())


def test_yaml_merge_keys_and_one_key_in_two_sections_are_fine(tmp_path):
    from configs.yaml_files import read_yaml
    path = tmp_path / "ok.yaml"
    path.write_text("a: &d {min_std: 1.0, seed: 1}\nb:\n  <<: *d\n  min_std: 2.0\n"
                    "c:\n  min_std: 3.0\n")
    assert read_yaml(str(path)) == {"a": {"min_std": 1.0, "seed": 1},
                                    "b": {"min_std": 2.0, "seed": 1}, "c": {"min_std": 3.0}}


def test_argparse_commands_take_no_abbreviations_and_say_so_in_one_line(tmp_path, capsys):
    line = _usage_line(capsys, ["forget", "--output-dir", str(tmp_path), "--path", "a.jpg"])
    assert "--output-dir" in line and "Did you mean --output_dir?" in line
    line = _usage_line(capsys, ["compact", "--output", str(tmp_path)])
    assert "--output" in line
    line = _usage_line(capsys, ["demo", "--images_per_class", "0"])
    assert "--images_per_class" in line and ">= 1" in line


def _real_flags(command: str) -> set:
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    from runners.options import JOB_OPTIONS
    parser = _BeamArgumentParser(add_help=False)
    for option_class in JOB_OPTIONS[command]:
        option_class._add_argparse_args(parser)
    return {name for action in parser._actions for name in action.option_strings}


@pytest.mark.parametrize("command", ["preprocess", "nightly"])
def test_the_light_help_lists_every_option_the_real_parser_has(command):
    text = command_help(command, f"runners.jobs.{command}")
    flags = _real_flags(command)
    assert "--fail_on_drift" in flags or command == "preprocess"
    for flag in flags:
        assert flag in text, flag
    assert f"pixelmill {command}" in text and "Beam pipeline option" in text


def test_version_is_the_installed_one_else_setup_pys(capsys, monkeypatch):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"pixelmill {version.version()}"
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", missing)
    assert version.version() == version._from_setup() and version.version()[0].isdigit()


def test_leftovers_without_a_manifest_go_and_manifested_ones_stay(tmp_path):
    out = tmp_path / "out"
    (out / "snapshots" / "killed_in_move" / "train").mkdir(parents=True)  # empty folders only
    (out / "snapshots" / "half" / "train").mkdir(parents=True)
    (out / "snapshots" / "half" / "train" / "part").write_bytes(b"x")
    (out / "snapshots" / "good").mkdir(parents=True)
    (out / "snapshots" / "good" / "manifest.json").write_text(json.dumps({"ok": True}))
    (out / "snapshots" / "broken").mkdir(parents=True)
    (out / "snapshots" / "broken" / "manifest.json").write_text("{not json")
    (out / ".staging" / "dead" / "_work").mkdir(parents=True)
    clean_unfinished(str(out))
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == ["broken", "good"]
    assert not (out / ".staging").exists() or not any((out / ".staging").iterdir())


_LIGHT_CHECK = """
import sys
from runners import cli
for argv in {argvs!r}:
    try:
        cli.main(argv)
    except SystemExit:
        pass
print("HEAVY", sorted({{m.split(".")[0] for m in sys.modules}} & {{"tensorflow", "apache_beam"}}))
"""


@pytest.mark.slow
def test_help_and_version_load_neither_tensorflow_nor_beam():
    argvs = [["--help"], ["--version"], ["preprocess", "--help"], ["nightly", "--help"],
             *([command, "--help"] for command in ("forget", "compact", "demo", "verify",
                                                   "preview"))]
    result = subprocess.run([sys.executable, "-c", _LIGHT_CHECK.format(argvs=argvs)],
                            cwd=_REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "HEAVY []"
    assert "--lock_stale_hours" in result.stdout and "--output_dir" in result.stdout


def test_command_parser_is_argparse():
    from runners.flags import CommandParser
    assert issubclass(CommandParser, argparse.ArgumentParser)
    with pytest.raises(UsageError, match="unrecognized argument '--sed'. Did you mean --seed"):
        parser = CommandParser(prog="x")
        parser.add_argument("--seed", type=int)
        parser.parse_args(["--sed", "1"])
