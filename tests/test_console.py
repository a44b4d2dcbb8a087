"""The console (issue 21 item 6): pixelmill's own lines only unless -v, a progress line on a
terminal and phase lines elsewhere, and a failure's one-line cause with the traceback in a log
file named in that line."""
from __future__ import annotations

import errno
import io
import logging
import os
import pty
import re
import subprocess
import sys
import time

import pytest

from runners import cli, console, progress_report
from transforms.offline import progress

_LIBRARY_LINE = re.compile(
    r"^[IWEF]0000 |cuInit|cudart|cpu_feature_guard|struct2tensor|apache_beam|"
    r"tensorflow_transform|BatchElements|absl|tensorflow|oneDNN|tftransform_tmp")


def test_verbose_is_a_global_flag_stripped_before_the_command_parses():
    assert console.split_verbose(["demo", "-v", "--workdir", "x"]) == (
        ["demo", "--workdir", "x"], True)
    assert console.split_verbose(["--verbose", "verify", "OUT"]) == (["verify", "OUT"], True)
    assert console.split_verbose(["demo", "--", "-v"]) == (["demo", "--", "-v"], False)


@pytest.mark.parametrize("line, noise", [
    ("I0000 00:00:1796193781.089480   20558 port.cc:153] oneDNN custom operations are on.", 1),
    ("E0000 00:00:1796193578.899504   30954 cuda_platform.cc:52] failed call to cuInit", 1),
    ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
     1),
    ("To enable the following instructions: AVX2 FMA, in other operations, rebuild", 1),
    ("Premature end of JPEG file", 1),
    ("Traceback (most recent call last):", 0),
    ("pixelmill demo: failed: OSError: [Errno 28] No space left on device", 0),
])
def test_native_library_lines_are_noise_and_everything_else_is_not(line, noise):
    assert console.is_noise(line) is bool(noise)


@pytest.mark.slow
def test_drain_forwards_what_native_code_wrote_without_waiting():
    # What native code writes to fd 2 just before the hard exit reaches the real stderr,
    # noise dropped and an unterminated last line kept, and drain does not wait for more.
    script = (
        "import os, sys, time\n"
        "from runners import console\n"
        "console.quiet_native_output()\n"
        "os.write(2, b'kept line\\nI0000 00:00:1 port.cc:153] oneDNN custom operations\\n')\n"
        "time.sleep(0.05)\n"
        "os.write(2, b'late line\\nno newline')\n"
        "started = time.perf_counter()\n"
        "console.drain()\n"
        "print(f'drained in {time.perf_counter() - started:.3f}', flush=True)\n"
        "os._exit(0)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["kept line", "late line", "no newline"]
    assert float(done.stdout.split()[-1]) < 0.1


def _console_lines(verbose: bool) -> list[str]:
    stream = io.StringIO()
    saved = sys.stderr
    sys.stderr = stream
    try:
        console.configure_logging(verbose)
    finally:
        sys.stderr = saved
    logging.getLogger("runners.locking.locked_run").warning("run x failed")
    logging.getLogger("transforms.offline.dedup").info("compared")
    logging.getLogger("apache_beam.transforms.util").info("BatchElements statistics: ...")
    logging.getLogger("absl").warning("You are passing instance dicts and DatasetMetadata")
    logging.getLogger("tensorflow").info("struct2tensor is not available.")
    return stream.getvalue().splitlines()


def test_default_console_shows_pixelmill_lines_only_and_verbose_shows_all():
    try:
        assert _console_lines(False) == ["pixelmill: warning: run x failed",
                                         "pixelmill: compared"]
        verbose = _console_lines(True)
        assert len(verbose) == 5 and "INFO apache_beam.transforms.util: BatchElements" in \
            verbose[2]
    finally:
        console.configure_logging(False)


def _state(phase, since, **counts):
    return progress.Progress(phase, since, since, counts)


def test_progress_line_counts_rate_and_eta_while_inspecting_then_names_the_phase():
    listing = progress_report.format_line(_state("discovering", 0.0, listed=1200), 5.0)
    assert listing == "discovering: 1,200 files listed"  # no total yet: no ETA
    line = progress_report.format_line(_state("inspecting", 0.0, discovered=1000, inspected=200,
                                              accepted=190, rejected=10), 10.0)
    assert line == ("inspecting 200/1,000 (accepted 190, rejected 10) 20 images/s, ETA 0:40")
    nightly = progress_report.format_line(_state("inspecting", 0.0, discovered=100, skipped=90,
                                                 inspected=5, accepted=5), 1.0)
    assert nightly.startswith("inspecting 5/10 ") and nightly.endswith("ETA 0:01")
    assert progress_report.format_line(_state("writing", 0.0, written=7), 61.0) == \
        "writing: 7 records in shards (1:01)"
    assert progress_report.format_line(_state("TFT", 0.0, discovered=9, accepted=8), 3.0) == \
        "TFT (9 discovered, 8 passed inspection) (0:03)"


def _read_all(fd: int) -> bytes:
    chunks = []
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_on_a_pseudo_terminal_the_progress_line_is_rewritten_in_place_every_second(
        monkeypatch):
    """At least one update a second; the test ticks every 0.1 s instead of every 0.5 s and
    sleeps about a quarter as long, so it sees as many updates in a quarter of the time."""
    assert progress_report.TTY_INTERVAL_S <= 1.0
    monkeypatch.setattr(progress_report, "TTY_INTERVAL_S", 0.1)
    master, slave = pty.openpty()
    with os.fdopen(slave, "w", buffering=1) as terminal:
        with progress_report.reporting(terminal):
            progress.enter("discovering")
            progress.add("listed", 3)
            progress.add("discovered", 3)
            time.sleep(0.25)
            progress.enter("inspecting")
            for _ in range(3):
                progress.add("inspected")
                progress.add("accepted")
                time.sleep(0.15)
            progress.enter("dedup")
            time.sleep(0.25)
            logging.getLogger("runners.test").warning("a log line clears the progress line")
        shown = _read_all(master).decode()
    os.close(master)
    updates = [part for part in shown.split("\r") if part.startswith("pixelmill: ")]
    assert len(updates) >= 5, shown  # at least one per second
    inspecting = [u for u in updates if u.startswith("pixelmill: inspecting")]
    assert any("3/3 (accepted 3, rejected 0)" in u for u in inspecting), shown
    assert any(u.startswith("pixelmill: dedup (3 discovered") for u in updates), shown
    assert "\n" not in "".join(updates[:-1]).replace("\x1b[K", ""), shown  # rewritten in place
    assert shown.endswith("\r\x1b[K"), shown  # the line is erased when the run ends


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_without_a_terminal_each_phase_is_one_log_line(monkeypatch):
    monkeypatch.setattr(progress_report, "TTY_INTERVAL_S", 0.1)  # the ticks that see a phase
    stream, records = io.StringIO(), _Records()
    logger = logging.getLogger("runners.progress_report")
    logger.addHandler(records)
    level = logger.level
    logger.setLevel(logging.INFO)  # as `console.configure_logging` sets it; alone, too
    try:
        with progress_report.reporting(stream):
            progress.enter("inspecting")
            progress.add("discovered", 2)
            time.sleep(0.25)
            progress.enter("writing")
            time.sleep(0.25)
            progress.enter("publishing")  # ends before the next tick: logged all the same
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    assert stream.getvalue() == ""
    assert [line.split()[0].rstrip(":") for line in records.lines] == [
        "inspecting", "writing", "publishing"]


def _fail(monkeypatch, tmp_path, capsys, *flags):
    import runners.jobs.preprocess as preprocess

    def disk_full(argv):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(preprocess, "run", disk_full)
    out = tmp_path / "out"
    code = cli.main(["preprocess", *flags, "--output_dir", str(out), "--data_root", "x"])
    return code, capsys.readouterr().err.splitlines(), out


def test_a_failure_prints_its_cause_first_and_the_traceback_to_a_named_log(
        monkeypatch, tmp_path, capsys):
    code, err, out = _fail(monkeypatch, tmp_path, capsys)
    assert code == cli.EXIT_FAILED
    assert err[0].startswith("pixelmill preprocess: failed: OSError: [Errno 28] No space left "
                             f"on device (traceback in {out}/.logs/"), err
    assert len(err) == 1 and "Traceback" not in "\n".join(err)
    log = err[0].split("(traceback in ", 1)[1].rstrip(")")
    text = open(log, encoding="utf-8").read()
    assert "Traceback (most recent call last)" in text and "disk_full" in text


def test_with_verbose_the_traceback_follows_the_cause_on_the_console(
        monkeypatch, tmp_path, capsys):
    code, err, _ = _fail(monkeypatch, tmp_path, capsys, "-v")
    assert code == cli.EXIT_FAILED
    assert err[0].startswith("pixelmill preprocess: failed: OSError: [Errno 28]"), err
    assert "Traceback (most recent call last):" in err[1:] and "disk_full" in "\n".join(err)
    console.configure_logging(False)


@pytest.mark.slow
def test_a_default_demo_run_shows_no_library_line_on_stderr(tmp_path):
    """The console of a default run: pixelmill's lines only (`pixelmill demo`, not a
    terminal: one line per phase), nothing from TensorFlow, absl, CUDA, Beam or TFT."""
    result = subprocess.run([sys.executable, "-m", "runners.cli", "demo", "--workdir",
                             str(tmp_path / "demo")], capture_output=True, text=True,
                            timeout=600, cwd=os.path.dirname(os.path.dirname(__file__)),
                            env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1"})  # TF's default
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    assert lines and not [line for line in lines if _LIBRARY_LINE.search(line)], result.stderr
    assert all(line.startswith("pixelmill: ") for line in lines), result.stderr
    assert [line.split()[1] for line in lines][-1] == "publishing", result.stderr
    assert "images: 61 discovered = " in result.stdout
