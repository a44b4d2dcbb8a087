"""`pixelmill bench preprocess`: the report's arithmetic and verdicts, the corpus cache, the
process-tree memory probe, and one tiny end-to-end pass (2 images, 1 repetition)."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time

import pytest

from runners.bench import bench_loops as loops
from runners.bench import bench_preprocess as bench
from runners.bench import bench_processes as processes
from runners.bench import bench_report as report
from runners.errors import UsageError

_MB = 2**20


def _result(job_rates, decode_rates, naive_rates, memory=None, cpu=((), (), ()), **extra):
    runs = tuple(bench.JobRun(images=100, accepted=99, rejects={"blurry": 1}, seconds=100 / r,
                              wall_seconds=100 / r + 4.0, peak_tree_rss=1000 * _MB,
                              max_process_rss=400 * _MB, cpu_seconds=100 / r,
                              decode_processes=2) for r in job_rates)
    return bench.BenchResult(
        images=100, workers="default local run", decode_threads=2, overrides=(),
        job=bench.Measurement("job", "(a) job", tuple(job_rates), cpu[0]),
        decode=bench.Measurement("decode", "(b) decode", tuple(decode_rates), cpu[1]),
        naive=bench.Measurement("naive", "(c) naive", tuple(naive_rates), cpu[2]),
        job_runs=runs, naive_written=98, memory=memory, cores=2, **extra)


def _memory(small_seconds=6.0, large_seconds=8.0, large_peak=1000 * _MB):
    return bench.MemoryCheck(small_images=10, large_images=100, small_peak=1000 * _MB,
                             large_peak=large_peak, small_max_process=300 * _MB,
                             large_max_process=310 * _MB, small_seconds=small_seconds,
                             large_seconds=large_seconds, small_wall=small_seconds + 3.0)


def _verdicts(result) -> dict:
    return {(number, what): passed for number, what, _, _, passed in report.targets(result)}


def test_measurement_median_and_minimum():
    measurement = bench.Measurement("job", "", (30.0, 10.0, 20.0))
    assert (measurement.median, measurement.minimum) == (20.0, 10.0)


def test_table_rows_show_median_minimum_and_cpu():
    text = bench.format_report(_result([100.0, 50.0, 80.0], [100.0, 40.0, 90.0],
                                       [20.0, 25.0, 30.0],
                                       cpu=((30.0, 20.0, 25.0), (5.0, 4.0, 6.0), ())))
    rows = {match[1]: [match[2], match[3], match[4]] for match in re.finditer(
        r"^(job|decode|naive) +(\S+) +(\S+) +(\S+) +\(", text, re.M)}
    assert rows == {"job": ["80.0", "50.0", "25.0"], "decode": ["90.0", "40.0", "5.0"],
                    "naive": ["25.0", "20.0", "-"]}


def test_the_header_says_how_busy_the_machine_was_at_the_start_and_the_end():
    text = bench.format_report(_result([50.0], [100.0], [10.0], load=((0.4, 0.0891),
                                                                        (1.5, 0.1404))))
    assert text.splitlines()[1] == (
        "machine load average 0.4 at the start, 1.5 at the end (wall times stretch when it is "
        "above the cores; CPU per image much less); a fixed Python loop 0.089 s of CPU at the "
        "start, 0.140 s at the end (the same work: CPU figures grow with it when the host is "
        "busy; ~0.09 s quiet)")


def test_machine_state_is_the_load_average_and_the_fixed_loops_cpu(monkeypatch):
    monkeypatch.setattr(loops, "_LOOP_ROUNDS", 1000)
    monkeypatch.setattr(loops.os, "getloadavg", lambda: (0.7, 0.5, 0.3))
    load, loop = loops.machine_state()
    assert load == 0.7
    assert 0.0 <= loop < 0.05


def test_every_target_is_a_row_with_a_verdict():
    text = bench.format_report(_result([50.0], [100.0], [10.0], _memory()))
    numbers = [line.split()[0] for line in text.splitlines()[text.splitlines().index(
        next(line for line in text.splitlines() if line.startswith("#  target"))) + 1:]]
    assert set(numbers) == {"1", "2", "4", "5", "6", "7", "8"}  # 3 needs --inspect_images
    assert all(line.rstrip().endswith(("PASS", "MISS", "-")) for line in text.splitlines()
               if line[:1].isdigit())


def test_end_to_end_ratio_against_naive_uses_medians():
    verdicts = _verdicts(_result([40.0, 50.0, 60.0], [100.0] * 3, [20.0, 25.0, 30.0]))
    assert verdicts[("5", "end to end vs naive, 100 images")] is True     # 50 / 25 = 2.0x
    verdicts = _verdicts(_result([40.0], [100.0], [25.0]))
    assert verdicts[("5", "end to end vs naive, 100 images")] is False    # 1.6x


def test_marginal_rate_and_fixed_cost_take_the_small_run_out():
    memory = _memory(small_seconds=6.0, large_seconds=8.0)
    assert memory.marginal_rate == 45.0 and round(memory.fixed_seconds, 6) == round(
        6.0 - 10 / 45.0, 6)
    result = _result([50.0], [40.0], [10.0], memory)
    verdicts = _verdicts(result)
    assert verdicts[("5", "job marginal rate / decode limit")] is True    # 45 / 40
    assert verdicts[("4", "fixed cost of a full run")] is True            # 5.8 s
    assert "5.8 s in run() (+3.0 s process start and exit)" in bench.format_report(result)


def test_marginal_rate_is_not_measured_when_the_larger_run_was_not_slower():
    result = _result([50.0], [100.0], [10.0], _memory(small_seconds=8.0, large_seconds=8.0))
    assert _verdicts(result)[("5", "job marginal rate / decode limit")] is None


def test_memory_growth_passes_below_and_misses_at_the_target():
    assert _verdicts(_result([50.0], [100.0], [10.0], _memory(large_peak=1250 * _MB)))[
        ("6", "memory growth, 10x the images")] is True
    assert _verdicts(_result([50.0], [100.0], [10.0], _memory(large_peak=1300 * _MB)))[
        ("6", "memory growth, 10x the images")] is False


def test_a_job_process_that_crashed_after_its_result_is_flagged_and_misses_target_7():
    result = _result([50.0], [100.0], [10.0])
    crashed = dataclasses.replace(result, job_runs=(
        dataclasses.replace(result.job_runs[0], exit_code=-11),))
    assert ("peak tree memory 1000 MB; the process then exited with code -11"
            in bench.format_report(crashed))
    assert _verdicts(crashed)[("7", "exit codes (no segfault)")] is False
    assert _verdicts(result)[("7", "exit codes (no segfault)")] is True


def test_every_core_means_one_decoding_process_per_core():
    result = _result([50.0], [100.0], [10.0])
    assert _verdicts(result)[("2", "every core, decode isolated")] is True
    assert _verdicts(dataclasses.replace(result, cores=4))[
        ("2", "every core, decode isolated")] is False


def test_inspect_nightly_identity_and_scale_rows():
    result = _result([50.0], [100.0], [10.0], _memory(),
                     inspect=loops.InspectCost(images=300, inline_ms=2.5, isolated_ms=3.5),
                     nightly=processes.NightlyRun(wall_seconds=7.5, cpu_seconds=6.0,
                                                  exit_code=0, nothing_new=True),
                     identity=report.IdentityCheck("multi_processing", 3, identical=True),
                     scale=report.ScaleCheck(images=20000, job_rate=90.0, naive_rate=30.0))
    verdicts = _verdicts(result)
    assert verdicts[("3", "inspect CPU per image")] is False   # isolated 3.5 > 3 ms
    assert verdicts[("4", "nightly with nothing new")] is True
    assert verdicts[("8", "shards across runners and workers")] is True
    assert verdicts[("5", "end to end vs naive, 20000 images")] is True


def test_corpus_row_checks_the_photo_profile():
    profile = {"images": 100, "png_share": 0.05, "progressive_share": 0.2,
               "quality_range": (75.0, 95.0), "other": 0}
    result = _result([50.0], [100.0], [10.0], profile=profile, corpus="generated")
    assert _verdicts(result)[("1", "corpus is photo-like")] is True
    no_progressive = dict(profile, progressive_share=0.0)
    assert _verdicts(dataclasses.replace(result, profile=no_progressive))[
        ("1", "corpus is photo-like")] is False


@pytest.mark.slow
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


def test_the_sampler_reads_pss_at_its_own_slower_pace(monkeypatch):
    # PSS walks every mapping of every process of the job (~24 ms a sample): read at the first
    # sample and then once per pss_interval_s; RSS and CPU at every sample.
    reads = {"pss": 0, "rss": 0}

    def counted(name, value):
        def read(pid):
            reads[name] += 1
            return value
        return read

    monkeypatch.setattr(processes, "_pss_of", counted("pss", 5))
    monkeypatch.setattr(processes, "_rss_of", counted("rss", 7))
    sleeper = subprocess.Popen(["sleep", "60"])  # a tree of one process
    try:
        sampler = processes._PeakSampler(sleeper.pid, interval_s=0.01, pss_interval_s=3600.0)
        sampler.start()
        deadline = time.monotonic() + 30
        while reads["rss"] < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        peaks = sampler.stop()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert reads["rss"] >= 5 and reads["pss"] == 1
    assert peaks == (5, 7)


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

    monkeypatch.setattr("runners.demo.data.generate_corpus", generate)
    return calls


def test_the_benches_subprocesses_run_in_the_checkout():
    # where `make test`'s command (target 6) finds tests/ and every job finds its packages
    root = processes.REPO_ROOT
    assert os.path.isfile(os.path.join(root, "setup.py"))
    assert os.path.isfile(os.path.join(root, "tests", "test_bench_preprocess.py"))
    assert os.path.isdir(os.path.join(root, "runners", "bench"))


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
    (["--workers", "two"],
     "--workers must be 'default', 'in_memory' or a number >= 1. Received: 'two'"),
    (["--images", "20", "--memory_images", "20"],
     "--memory_images must be in [1, --images). Received: 20 with --images 20"),
    (["--scale_images", "-1"], "--scale_images must be >= 0. Received: -1"),
    (["--camera_launcher", "5"],
     "--camera_launcher must be 0 or >= 10 (its small run is a tenth). Received: 5"),
])
def test_bad_options_are_usage_errors(argv, message, tmp_path):
    with pytest.raises(UsageError, match=re.escape(message)):
        bench.run(argv + ["--workdir", str(tmp_path)])


@pytest.mark.slow
def test_one_tiny_run_prints_the_table_and_the_targets(tmp_path, capsys):
    code = bench.main(["--images", "2", "--repetitions", "1", "--workdir", str(tmp_path),
                       "--workers", "in_memory", "--set", "decode.isolation=inline",
                       "--set", "transform.enabled=false",
                       "--set", "report.thumbnails_per_reason=0",  # no forkserver to start
                       "--no-memory_check",
                       "--inspect_images", "2",
                       "--thumbnails", "3", "--camera", "0", "--classes", "30",
                       "--startup_images", "0", "--floor_rounds", "0"])
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(r"^job +\d+\.\d +\d+\.\d +\d+\.\d +\(a\)", out, re.M)
    assert re.search(r"^decode +\d+\.\d +\d+\.\d +\d+\.\d +\(b\) .*, 1 parallel$", out, re.M)
    assert re.search(r"^naive +\d+\.\d +\d+\.\d +\d+\.\d +\(c\)", out, re.M)
    peak = re.search(r"^job run 1: 2 discovered, 2 accepted, rejects: none; \d+\.\d s in "
                     r"run\(\) \(\d+\.\d s with process start\), peak tree memory (\d+) MB$",
                     out, re.M)
    assert peak and int(peak[1]) > 100  # Python + TensorFlow + Beam are resident
    assert re.search(r"^3 +inspect CPU per image +\d+\.\d ms inline, \d+\.\d ms isolated "
                     r"\(2 images\) +<= 3 ms +(PASS|MISS)$", out, re.M)
    assert re.search(r"^7 +exit codes \(no segfault\) +job processes exited \[0\] +0 +PASS$",
                     out, re.M)
    assert "naive loop wrote 2 records" in out
    assert re.search(r"^thumbnails +3 +\d+\.\d", out, re.M)      # the job-cost corpora
    assert re.search(r"^2 +many-class CPU vs 4 classes +\d\.\d{3}x .* (PASS|MISS)$", out, re.M)
    assert re.search(r"^4 +thumbnails: end to end vs naive, 3 images .* (PASS|MISS)$", out, re.M)
    assert re.search(r"^6 +make test +not measured \(--make_test\) .* -$", out, re.M)
    assert os.path.exists(tmp_path / "decisions.json")
    assert os.listdir(tmp_path / "corpus_2_seed0")  # cached for the next run
    assert not os.path.exists(tmp_path / "job_out")  # job output removed after timing


class _Stop(Exception):
    pass


@pytest.mark.parametrize("flags, expected", [(["--make_test"], ["make test", "corpora"]),
                                             ([], ["corpora"])])
def test_make_test_is_timed_first_and_only_with_its_flag(monkeypatch, tmp_path, flags,
                                                         expected):
    """Target 6 is an absolute time: the suite runs before any corpus is made or timed."""
    from runners.bench import bench_costs
    calls = []

    def corpora(*args):
        calls.append("corpora")
        raise _Stop

    monkeypatch.setattr(bench_costs, "time_test_suite", lambda workdir: calls.append("make test"))
    monkeypatch.setattr(bench, "_corpora", corpora)
    with pytest.raises(_Stop):
        bench.run(flags + ["--workdir", str(tmp_path)])
    assert calls == expected


def test_the_camera_launcher_pairs_are_n_and_a_tenth_in_turn(monkeypatch, tmp_path):
    """`--camera_launcher N`: per repetition, the job on N camera photos, then on N // 10."""
    made, timed = [], []

    def other_corpus(workdir, name, count, seed):
        made.append((name, count))
        return processes.Corpus(str(tmp_path), None, ((str(tmp_path / "a.jpg"), "a"),) * count,
                                seed)

    def time_job(corpus, output_dir, *args):
        timed.append(len(corpus.items))
        return bench.JobRun(images=len(corpus.items), accepted=0, rejects={}, seconds=1.0,
                            wall_seconds=1.0, peak_tree_rss=0, max_process_rss=0)

    monkeypatch.setattr(bench, "_other_corpus", other_corpus)
    monkeypatch.setattr(bench, "time_job", time_job)
    args = bench._parser().parse_args(["--repetitions", "2", "--camera_launcher", "200"])
    pairs = bench._launcher_pairs(args, str(tmp_path), "camera", args.camera_launcher)
    assert made == [("camera", 200), ("camera", 20)]
    assert timed == [200, 20, 200, 20]
    assert [(big.images, small.images) for big, small in pairs] == [(200, 20), (200, 20)]


def test_target_twos_pairs_alternate_which_job_runs_first(monkeypatch, tmp_path):
    """The many-class job and the 4-class job of each repetition run back to back, the 4-class
    one first in odd repetitions: a fixed order would give one side the warmer caches."""
    corpus = processes.Corpus(str(tmp_path), str(tmp_path / "labels.csv"),
                              ((str(tmp_path / "a.jpg"), "a"),), 0)
    many = dataclasses.replace(corpus, classes_file=str(tmp_path / "classes.txt"))
    order = []

    def time_job(timed, output_dir, *args):
        order.append("many" if timed is many else "four")
        return bench.JobRun(images=len(order), accepted=0, rejects={}, seconds=1.0,
                            wall_seconds=1.0, peak_tree_rss=0, max_process_rss=0)

    monkeypatch.setattr(bench, "_many_classes", lambda *args: many)
    monkeypatch.setattr(bench, "time_job", time_job)
    monkeypatch.setattr(bench, "time_decode_limit", lambda paths, threads: 1.0)
    monkeypatch.setattr(bench, "time_naive_loop", lambda items, path, variance: (1.0, 1))
    monkeypatch.setattr(bench.os, "remove", lambda path: None)
    args = bench._parser().parse_args(["--repetitions", "4", "--classes", "30"])
    job_runs, class_runs, *_ = bench._repetitions(args, corpus, str(tmp_path), 2, 1.0)
    assert order == ["four", "many", "many", "four", "four", "many", "many", "four"]
    runs = zip(job_runs + class_runs, ["four"] * 4 + ["many"] * 4)
    kinds = {run.images: kind for run, kind in runs}
    assert [kinds[number] for number in range(1, 9)] == order  # each run in its own list
