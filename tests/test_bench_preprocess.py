"""`pixelmill bench preprocess`: the report's arithmetic and verdicts, the corpus cache, the
process-tree memory probe, and one tiny end-to-end pass (20 images, 1 repetition)."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import pytest

from runners import bench_preprocess as bench
from runners.errors import UsageError

_MB = 2**20


def _result(job_rates, decode_rates, naive_rates, memory=None, cpu=((), (), ())):
    runs = tuple(bench.JobRun(images=100, accepted=99, rejects={"blurry": 1}, seconds=100 / r,
                              wall_seconds=100 / r + 4.0, peak_tree_rss=1000 * _MB,
                              max_process_rss=400 * _MB) for r in job_rates)
    return bench.BenchResult(
        images=100, workers="2 (multi_processing)", decode_threads=2, overrides=(),
        job=bench.Measurement("job", "(a) job", tuple(job_rates), cpu[0]),
        decode=bench.Measurement("decode", "(b) decode", tuple(decode_rates), cpu[1]),
        naive=bench.Measurement("naive", "(c) naive", tuple(naive_rates), cpu[2]),
        job_runs=runs, naive_written=98, memory=memory)


def test_measurement_median_and_minimum():
    measurement = bench.Measurement("job", "", (30.0, 10.0, 20.0))
    assert (measurement.median, measurement.minimum) == (20.0, 10.0)


def test_ratio_lines_use_medians_and_minimums_against_the_targets():
    text = bench.format_report(_result([100.0, 50.0, 80.0], [100.0, 40.0, 90.0],
                                       [20.0, 25.0, 30.0]))
    assert "job / decode    0.89x median    1.25x min   target >= 1.0x  MISS" in text
    assert "job / naive     3.20x median    2.50x min   target >= 3.0x  PASS" in text


def test_table_rows_show_median_and_minimum_images_per_second():
    text = bench.format_report(_result([100.0, 50.0, 80.0], [100.0, 40.0, 90.0],
                                       [20.0, 25.0, 30.0]))
    rows = {match[1]: [match[2], match[3], match[4]] for match in re.finditer(
        r"^(job|decode|naive) +(\S+) +(\S+) +(\S+) +\(", text, re.M)}
    assert rows == {"job": ["80.0", "50.0", "-"], "decode": ["90.0", "40.0", "-"],
                    "naive": ["25.0", "20.0", "-"]}


def test_cpu_per_image_column_and_line_use_medians():
    text = bench.format_report(_result([50.0, 60.0, 70.0], [100.0] * 3, [10.0] * 3,
                                       cpu=((30.0, 20.0, 25.0), (5.0, 4.0, 6.0), (8.0, 9.0, 10.0))))
    rows = {match[1]: match[2] for match in re.finditer(
        r"^(job|decode|naive) +\S+ +\S+ +(\S+) +\(", text, re.M)}
    assert rows == {"job": "25.0", "decode": "5.0", "naive": "9.0"}
    assert ("CPU per image: job 5.0x the decode limit's, 2.78x the naive loop's (job: whole "
            "process tree, start-up included)") in text


def test_job_runs_list_their_outcomes_and_time():
    text = bench.format_report(_result([50.0], [100.0], [10.0]))
    assert ("job run 1: 100 discovered, 99 accepted, rejects: blurry 1; 2.0 s in run() "
            "(6.0 s with process start), peak tree RSS 1000 MB") in text


def test_a_job_process_that_crashed_after_its_result_is_flagged():
    result = _result([50.0], [100.0], [10.0])
    crashed = dataclasses.replace(result, job_runs=(
        dataclasses.replace(result.job_runs[0], exit_code=-11),))
    assert ("peak tree RSS 1000 MB; the process then exited with code -11"
            in bench.format_report(crashed))
    assert "exited with code" not in bench.format_report(result)


def test_memory_line_passes_below_the_growth_target():
    memory = bench.MemoryCheck(small_images=10, large_images=100, small_peak=1000 * _MB,
                               large_peak=1250 * _MB, small_max_process=300 * _MB,
                               large_max_process=310 * _MB, small_seconds=6.0,
                               large_seconds=8.0)
    text = bench.format_report(_result([50.0], [100.0], [10.0], memory))
    assert ("memory: peak tree RSS 1000 MB at 10 images, 1250 MB at 100 (10x the images): "
            "1.25x   target < 1.3x  PASS   (largest process 300 MB -> 310 MB)") in text


def test_memory_line_misses_at_the_growth_target():
    memory = bench.MemoryCheck(small_images=10, large_images=100, small_peak=1000 * _MB,
                               large_peak=1300 * _MB, small_max_process=300 * _MB,
                               large_max_process=310 * _MB, small_seconds=6.0,
                               large_seconds=8.0)
    text = bench.format_report(_result([50.0], [100.0], [10.0], memory))
    assert "1.30x   target < 1.3x  MISS" in text


def test_marginal_rate_takes_the_fixed_cost_out():
    memory = bench.MemoryCheck(small_images=10, large_images=100, small_peak=1000 * _MB,
                               large_peak=1000 * _MB, small_max_process=300 * _MB,
                               large_max_process=300 * _MB, small_seconds=6.0,
                               large_seconds=8.0)
    text = bench.format_report(_result([50.0], [100.0], [10.0], memory))
    assert ("job marginal rate: 45.0 images/s (10 vs 100 images, fixed cost 5.8 s); vs decode "
            "median 0.45x, vs naive median 4.50x (steady state, not the targets)") in text


def test_marginal_rate_is_not_reported_when_the_larger_run_was_not_slower():
    memory = bench.MemoryCheck(small_images=10, large_images=100, small_peak=1000 * _MB,
                               large_peak=1000 * _MB, small_max_process=300 * _MB,
                               large_max_process=300 * _MB, small_seconds=8.0,
                               large_seconds=8.0)
    text = bench.format_report(_result([50.0], [100.0], [10.0], memory))
    assert "job marginal rate: not measurable (the larger run was not slower)" in text


def test_memory_line_says_when_not_checked():
    text = bench.format_report(_result([50.0], [100.0], [10.0]))
    assert "memory: not checked (--no-memory_check)" in text


def test_tree_rss_includes_child_processes():
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys, time; block = b'x' * (96 * 2**20); "
                              "print('ready', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        own = bench.tree_rss_bytes(child.pid)
        with_parent = bench.tree_rss_bytes(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert own >= 96 * _MB
    assert with_parent >= own + 10 * _MB   # this pytest process is resident too


@pytest.fixture
def fake_generator(monkeypatch):
    """Stands in for `demo_data.generate_corpus` (slow: real images) and counts its calls."""
    calls = []

    def generate(directory, n_images, seed=0):
        calls.append((n_images, seed))
        rows = []
        for index in range(n_images):
            rel = f"c{index % 2}/img_{index:05d}.jpg"
            os.makedirs(os.path.join(directory, f"c{index % 2}"), exist_ok=True)
            with open(os.path.join(directory, rel), "wb") as handle:
                handle.write(bytes([index]))
            rows.append(f"{rel},c{index % 2}\n")
        with open(os.path.join(directory, "labels.csv"), "w", encoding="utf-8") as handle:
            handle.write("path,label\n" + "".join(rows))

    monkeypatch.setattr("runners.demo_data.generate_corpus", generate)
    return calls


def test_corpus_is_generated_once_and_reused(tmp_path, fake_generator):
    first = bench.prepare_corpus(str(tmp_path), 3, seed=1)
    second = bench.prepare_corpus(str(tmp_path), 3, seed=1)
    assert fake_generator == [(3, 1)]
    assert second == first
    assert first.items == tuple((str(tmp_path / "corpus_3_seed1" / c / f"img_{i:05d}.jpg"), c)
                                for i, c in ((0, "c0"), (1, "c1"), (2, "c0")))


def test_corpus_of_another_size_or_seed_is_generated_beside_it(tmp_path, fake_generator):
    bench.prepare_corpus(str(tmp_path), 3, seed=1)
    bench.prepare_corpus(str(tmp_path), 4, seed=1)
    bench.prepare_corpus(str(tmp_path), 3, seed=2)
    assert fake_generator == [(3, 1), (4, 1), (3, 2)]
    assert sorted(os.listdir(tmp_path)) == ["corpus_3_seed1", "corpus_3_seed2",
                                            "corpus_4_seed1"]


def test_corpus_is_regenerated_when_a_file_is_missing(tmp_path, fake_generator):
    first = bench.prepare_corpus(str(tmp_path), 3, seed=1)
    os.remove(first.items[1][0])
    bench.prepare_corpus(str(tmp_path), 3, seed=1)
    assert fake_generator == [(3, 1), (3, 1)]
    assert all(os.path.exists(path) for path, _ in first.items)


def test_corpus_is_regenerated_after_an_interrupted_generation(tmp_path, fake_generator):
    first = bench.prepare_corpus(str(tmp_path), 3, seed=1)
    os.remove(os.path.join(first.root, "corpus.json"))  # the marker is written last
    bench.prepare_corpus(str(tmp_path), 3, seed=1)
    assert fake_generator == [(3, 1), (3, 1)]


@pytest.mark.parametrize("argv, message", [
    (["--repetitions", "0"], "--repetitions must be >= 1. Received: 0"),
    (["--workers", "two"], "--workers must be a number >= 1 or 'in_memory'. Received: 'two'"),
    (["--images", "20", "--memory_images", "20"],
     "--memory_images must be in [1, --images). Received: 20 with --images 20"),
])
def test_bad_options_are_usage_errors(argv, message, tmp_path):
    with pytest.raises(UsageError, match=re.escape(message)):
        bench.run(argv + ["--workdir", str(tmp_path)])


def test_one_tiny_run_prints_the_table_and_the_ratio_lines(tmp_path, capsys):
    code = bench.main(["--images", "6", "--repetitions", "1", "--workdir", str(tmp_path),
                       "--workers", "in_memory", "--set", "decode.isolation=inline",
                       "--set", "transform.enabled=false", "--no-memory_check"])
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(r"^job +\d+\.\d +\d+\.\d +\d+\.\d +\(a\)", out, re.M)
    assert re.search(r"^decode +\d+\.\d +\d+\.\d +\d+\.\d +\(b\) .*, 1 parallel$", out, re.M)
    assert re.search(r"^naive +\d+\.\d +\d+\.\d +\d+\.\d +\(c\)", out, re.M)
    assert re.search(r"^CPU per image: job \d+\.\dx the decode limit's", out, re.M)
    assert re.search(r"^job / decode +\d+\.\d\dx median +\d+\.\d\dx min +target >= 1\.0x "
                     r"+(PASS|MISS)$", out, re.M)
    assert re.search(r"^job / naive +\d+\.\d\dx median +\d+\.\d\dx min +target >= 3\.0x "
                     r"+(PASS|MISS)$", out, re.M)
    peak = re.search(r"^job run 1: 6 discovered, 6 accepted, rejects: none; \d+\.\d s in "
                     r"run\(\) \(\d+\.\d s with process start\), peak tree RSS (\d+) MB"
                     r"(; the process then exited with code -?\d+)?$",
                     out, re.M)
    assert peak and int(peak[1]) > 100  # Python + TensorFlow + Beam are resident
    assert "naive loop wrote 6 records" in out
    assert "memory: not checked (--no-memory_check)" in out
    assert os.listdir(tmp_path / "corpus_6_seed0")  # cached for the next run
    assert not os.path.exists(tmp_path / "job_out")  # job output removed after timing
