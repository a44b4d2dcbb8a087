"""`pixelmill bench preprocess`, the job-cost part: marginal CPU from two runs, each target's
verdict, the decisions comparison (target 7), and the corpora it generates."""
from __future__ import annotations

import csv
import dataclasses
import os

import pytest
from PIL import Image

from runners.bench import bench_corpora as corpora
from runners.bench import bench_costs as costs
from runners.bench.bench_processes import JobRun
from runners.bench.bench_report import IdentityCheck


def _run(images, seconds=10.0, cpu=20.0, launcher=5.0, shards=(("a", "1"),), verdicts=None,
         launcher_run=None):
    return JobRun(images=images, accepted=images, rejects={}, seconds=seconds,
                  wall_seconds=seconds + 3.0, peak_tree_rss=0, max_process_rss=0,
                  cpu_seconds=cpu, launcher_cpu_seconds=launcher, shards=shards,
                  verdicts=verdicts or {}, launcher_run_cpu_seconds=launcher_run)


def _cost(name="photos", images=1000, small_images=100, cpu=(12.0, 3.0), launcher=(4.0, 3.1),
          decode_ms=3.0, job_seconds=10.0, naive_rate=40.0):
    small = None if small_images is None else _run(small_images, cpu=cpu[1], launcher=launcher[1])
    return costs.CorpusCost(name, "test corpus", _run(images, job_seconds, cpu[0], launcher[0]),
                            small, decode_rate=500.0, decode_ms=decode_ms, naive_rate=naive_rate)


def _verdicts(result) -> dict:
    return {what: passed for _, what, _, _, passed in costs.cost_targets(result)}


def test_marginal_cpu_takes_the_small_run_out():
    cost = _cost(cpu=(12.0, 3.0), launcher=(4.0, 3.1))
    assert cost.marginal_ms == pytest.approx(10.0)      # 9 s / 900 images
    assert cost.launcher_ms == pytest.approx(1.0)
    assert _cost(small_images=None).marginal_ms is None


def test_cpu_targets_compare_with_twice_the_decode_plus_slack():
    verdicts = _verdicts(costs.CostResult((_cost(cpu=(6.0, 0.87), launcher=(1.0, 0.73),
                                                 decode_ms=2.7),)))
    assert verdicts["photos: marginal CPU per image"] is True      # 5.7 <= 5.7
    assert verdicts["photos: launcher CPU per image"] is True      # 0.3 <= 0.3
    verdicts = _verdicts(costs.CostResult((_cost(cpu=(12.0, 3.0), decode_ms=2.7),)))
    assert verdicts["photos: marginal CPU per image"] is False     # 10 > 5.7
    assert verdicts["photos: launcher CPU per image"] is False


def test_end_to_end_target_depends_on_corpus_and_size():
    photos = _cost(job_seconds=10.0, naive_rate=40.0)              # 100 / 40 = 2.5x
    big = _cost(images=20000, job_seconds=200.0, naive_rate=40.0)  # 2.5x < 3x at 20,000
    thumbs = _cost("thumbnails", job_seconds=10.0, naive_rate=90.0)  # 1.1x
    verdicts = _verdicts(costs.CostResult((photos, big, thumbs)))
    assert verdicts["photos: end to end vs naive, 1000 images"] is True
    assert verdicts["photos: end to end vs naive, 20000 images"] is False
    assert verdicts["thumbnails: end to end vs naive, 1000 images"] is True


def test_the_scale_run_is_target_4_at_its_size_with_the_photos_floor():
    from runners.bench.bench_report import ScaleCheck
    photos = dataclasses.replace(_cost(job_seconds=10.0, naive_rate=40.0), job_decode_ms=2.0)
    result = costs.CostResult((photos,), imports_cpu_s=4.0, cores=2, decoder_import_s=2.0)
    missed = ScaleCheck(images=20000, job_rate=98.0, naive_rate=40.0)  # 2.45x < 3x
    row, = [row for row in costs.cost_targets(result, missed)
            if row[1] == "photos: end to end vs naive, 20000 images"]
    # allowed 20,000 / (40 x 3) = 166.7 s; floor max((4 + 40) / 2, 2 + 40 / 2) = 22.0 s
    assert row[2:] == ("2.45x (98 vs 40 images/s); floor 22.0 s, allowed 166.7 s; one run "
                       "(--scale_images)", ">= 3x", False)
    met = ScaleCheck(images=20000, job_rate=121.0, naive_rate=40.0)
    assert _verdicts(costs.CostResult((photos,)))[
        "photos: end to end vs naive, 1000 images"] is True  # no scale run: no row
    assert [row[4] for row in costs.cost_targets(costs.CostResult((photos,)), met)
            if row[1].endswith("20000 images")] == [True]
    below = ScaleCheck(images=5000, job_rate=90.0, naive_rate=40.0)  # under 20,000: 2x
    assert [row[3] for row in costs.cost_targets(result, below)
            if row[1].endswith("5000 images")] == [">= 2x"]


def test_many_classes_within_five_percent_of_four():
    photos = _cost(cpu=(100.0, 3.0))
    many = _cost("classes", small_images=None, cpu=(104.0, 0.0))
    rows = costs.cost_targets(costs.CostResult((photos, many)))
    assert [row[4] for row in rows if row[1] == "many-class CPU vs 4 classes"] == [True]
    assert not any(row[1].startswith("classes:") for row in rows)  # target 2 only
    slower = _cost("classes", small_images=None, cpu=(106.0, 0.0))
    assert _verdicts(costs.CostResult((photos, slower)))["many-class CPU vs 4 classes"] is False


def test_many_classes_reads_the_median_of_back_to_back_pairs():
    # One pair at 1.20x (a noisy neighbour) must not decide it when the other two agree.
    pairs = tuple((_run(1000, cpu=many), _run(1000, cpu=few))
                  for many, few in ((120.0, 100.0), (101.0, 100.0), (99.0, 100.0)))
    many = dataclasses.replace(_cost("classes", small_images=None), class_pairs=pairs)
    row, = [row for row in costs.cost_targets(costs.CostResult((_cost(), many)))
            if row[1] == "many-class CPU vs 4 classes"]
    assert row[2].startswith("1.010x (101.0 vs 100.0 s CPU, median of 3 pairs, ")
    assert row[4] is True
    worse = dataclasses.replace(many, class_pairs=pairs[:1] + tuple(
        (_run(1000, cpu=106.0), few) for _, few in pairs[1:]))
    assert _verdicts(costs.CostResult((_cost(), worse)))["many-class CPU vs 4 classes"] is False


def test_startup_tests_and_identity_rows():
    result = costs.CostResult((), startup=costs.Startup(20, 15.0, 10.0),
                              tests=costs.TestSuite(170.0, 0),
                              identity=IdentityCheck("multi_processing", 3, True),
                              baseline=(10, []))
    verdicts = _verdicts(result)
    assert verdicts["start-up, 20-image command vs bare imports"] is True
    assert verdicts["make test"] is True
    assert verdicts["shards across runners and workers"] is True
    assert verdicts["shards and verdicts vs --baseline"] is True
    assert _verdicts(costs.CostResult(()))["make test"] is None
    text = costs.format_costs(result)
    assert "1.50x (15.0 vs 10.0 s)" in text and text.splitlines()[-1].endswith("PASS")


def test_startup_is_the_median_of_its_rounds():
    # Three interleaved rounds: the verdict reads the median pair ratio, not one noisy pair.
    startup = costs.Startup(20, 14.0, 9.5, ratios=(1.4, 1.62, 1.45))
    assert startup.ratio == 1.45
    assert startup.text == "1.45x (14.0 vs 9.5 s, median of 3 rounds)"
    verdicts = _verdicts(costs.CostResult((), startup=startup))
    assert verdicts["start-up, 20-image command vs bare imports"] is True
    slow = costs.Startup(20, 15.0, 9.5, ratios=(1.4, 1.62, 1.55))
    assert _verdicts(costs.CostResult((), startup=slow))[
        "start-up, 20-image command vs bare imports"] is False


def test_startup_also_says_how_the_command_compares_with_the_imports_as_the_job_does_them():
    startup = costs.Startup(20, 8.0, 6.4, ratios=(1.25,), paused_s=5.0)
    assert startup.text == ("1.25x (8.0 vs 6.4 s); 1.60x the imports with the collector paused "
                            "(5.0 s)")


def test_decisions_compare_shards_and_every_verdict():
    before = {"photos": costs.decisions(_run(3, verdicts={"a.jpg": "blurry"}))}
    same = {"photos": costs.decisions(_run(3, verdicts={"a.jpg": "blurry"}))}
    assert costs.compare_decisions(same, before) == (2, [])
    moved = {"photos": costs.decisions(_run(3, shards=(("a", "2"),),
                                            verdicts={"b.jpg": "too_dark"}))}
    compared, differences = costs.compare_decisions(moved, before)
    assert differences == ["photos: shards differ", "photos: a.jpg: blurry -> None",
                           "photos: b.jpg: None -> too_dark"]


def test_thumbnails_are_small_jpegs_with_labels(tmp_path):
    corpora.generate_thumbnails(str(tmp_path), 6, seed=1)
    with open(tmp_path / "labels.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6
    for row in rows:
        with Image.open(tmp_path / row["path"]) as image:
            assert image.format == "JPEG" and all(64 <= side <= 128 for side in image.size)


def test_camera_images_have_the_configured_size(tmp_path, monkeypatch):
    monkeypatch.setattr(corpora, "_CAMERA_SIZE", (300, 400))
    corpora.generate_camera(str(tmp_path), 2, seed=1)
    with Image.open(tmp_path / "cat" / "camera_0000.jpg") as image:
        assert image.size == (400, 300)


def test_many_classes_labels_every_path_and_lists_every_class(tmp_path):
    labels, table = corpora.write_many_classes(["a/1.jpg", "b/2.jpg", "c/3.jpg"],
                                               str(tmp_path), 2)
    with open(labels, newline="", encoding="utf-8") as handle:
        assert [(r["path"], r["label"]) for r in csv.DictReader(handle)] == [
            ("a/1.jpg", "class_00000"), ("b/2.jpg", "class_00001"), ("c/3.jpg", "class_00000")]
    with open(table, encoding="utf-8") as handle:
        assert handle.read().split() == ["class_00000", "class_00001"]


def test_a_cached_corpus_is_generated_once(tmp_path):
    calls = []
    spec = {"corpus": "thumbnails", "images": 1}
    root = str(tmp_path / "c")
    assert corpora.cached_corpus(root, spec, lambda folder: calls.append(os.makedirs(folder)))
    assert not corpora.cached_corpus(root, spec, lambda folder: calls.append(folder))
    assert corpora.cached_corpus(root, dict(spec, images=2), lambda f: calls.append(
        os.makedirs(f)))
    assert len(calls) == 2


def test_a_negative_marginal_is_noise_without_a_verdict():
    cost = _cost(images=20, small_images=2, cpu=(60.0, 61.0), launcher=(30.0, 30.5))
    rows = {what: (measured, passed) for _, what, measured, _, passed
            in costs.cost_targets(costs.CostResult((cost,)))}
    measured, passed = rows["photos: launcher CPU per image"]
    assert passed is None and "below the noise of the fixed cost" in measured
    assert rows["photos: marginal CPU per image"][1] is None


def _thumbnail_cost(naive_rate, job_decode_ms=0.3):
    cost = _cost("thumbnails", images=1000, job_seconds=10.0, naive_rate=naive_rate)
    return dataclasses.replace(cost, job_decode_ms=job_decode_ms)


def test_an_end_to_end_target_below_its_floor_is_blocked():
    # 1,000 thumbnails, naive 300/s, 1x wanted: the job may take 3.33 s.
    # Floor on 2 cores: (6.0 s imports + 1,000 x 0.3 ms) / 2 = 3.15 s: reachable, a MISS.
    reachable = costs.CostResult((_thumbnail_cost(300.0),), imports_cpu_s=6.0, cores=2)
    rows = {row[1]: row for row in costs.cost_targets(reachable)}
    row = rows["thumbnails: end to end vs naive, 1000 images"]
    assert row[4] is False and row[2].endswith("floor 3.1 s, allowed 3.3 s")
    # (7.0 + 0.3) / 2 = 3.65 s > 3.33 s: no job could do it on this machine.
    blocked = costs.CostResult((_thumbnail_cost(300.0),), imports_cpu_s=7.0, cores=2)
    assert _verdicts(blocked)["thumbnails: end to end vs naive, 1000 images"] == costs.BLOCKED
    line = [line for line in costs.format_costs(blocked).splitlines()
            if "end to end vs naive" in line]
    assert line[0].rstrip().endswith("BLOCKED")


def test_the_import_before_the_first_decode_is_a_floor_no_core_can_share():
    # The same job as above, reachable when every import is spread over 2 cores: (6.0 +
    # 0.3) / 2 = 3.15 s. But no decode starts before TensorFlow's 3.2 s import, and the
    # 0.3 s of decode then takes 0.15 s on 2 cores: 3.35 s > 3.33 s allowed.
    blocked = costs.CostResult((_thumbnail_cost(300.0),), imports_cpu_s=6.0, cores=2,
                               decoder_import_s=3.2)
    row = {row[1]: row for row in costs.cost_targets(blocked)}[
        "thumbnails: end to end vs naive, 1000 images"]
    assert row[4] == costs.BLOCKED and row[2].endswith("floor 3.4 s, allowed 3.3 s")
    assert "3.2 s of TensorFlow's import before any decode" in costs.format_costs(blocked)
    # A shorter import leaves the spread bound the floor: (6.0 + 0.3) / 2 = 3.15 s.
    spread = costs.CostResult((_thumbnail_cost(300.0),), imports_cpu_s=6.0, cores=2,
                              decoder_import_s=2.0)
    row = [r for r in costs.cost_targets(spread) if r[0] == "4"][0]
    assert row[4] is False and row[2].endswith("floor 3.1 s, allowed 3.3 s")
    assert _thumbnail_cost(300.0).floor_s(6.0, 2, 3.2) == 3.2 + 0.3 / 2
    assert _thumbnail_cost(300.0).floor_s(6.0, 2, 2.0) == (6.0 + 0.3) / 2


def test_the_decoder_import_is_timed_as_the_lesser_of_wall_and_cpu(monkeypatch, tmp_path):
    rounds = iter([(3.5, 3.1), (2.9, 3.3), (4.0, 3.0)])  # (wall, CPU) of three processes
    seen = []
    monkeypatch.setattr(costs, "_run_imports",
                        lambda code, workdir: seen.append(code) or next(rounds))
    assert costs.measure_decoder_import_s(str(tmp_path), 3) == 3.0  # median of 3.1, 2.9, 3.0
    assert seen == ["import gc; gc.disable(); import tensorflow"] * 3


def test_a_met_target_passes_and_no_floor_without_the_imports_or_the_scaled_decode():
    passing = costs.CostResult((_thumbnail_cost(50.0),), imports_cpu_s=70.0, cores=2)
    assert _verdicts(passing)["thumbnails: end to end vs naive, 1000 images"] is True  # 2x
    for result in (costs.CostResult((_thumbnail_cost(300.0),)),
                   costs.CostResult((_thumbnail_cost(300.0, None),), imports_cpu_s=70.0)):
        row = [r for r in costs.cost_targets(result) if r[0] == "4"][0]
        assert row[4] is False and "floor" not in row[2]


def test_the_scaled_decode_groups_files_by_the_inspections_ratio(tmp_path):
    from runners.bench.bench_loops import job_scale_decode_ms, job_scale_ratios
    sizes = {"big.jpg": (2100, 1000), "mid.jpg": (600, 300), "small.jpg": (100, 80),
             "big.png": (2100, 1000)}
    paths = {}
    for name, size in sizes.items():
        paths[name] = str(tmp_path / name)
        Image.new("RGB", size, (90, 120, 30)).save(paths[name])
    # Long side over 256: 2100 // 8 = 262; 600 // 2 = 300 but 600 // 4 = 150; PNG is never scaled.
    assert job_scale_ratios(list(paths.values()), 256) == {
        8: [paths["big.jpg"]], 2: [paths["mid.jpg"]],
        1: [paths["small.jpg"], paths["big.png"]]}
    assert job_scale_decode_ms(list(paths.values()), 256, threads=1) > 0.0


def test_with_repetitions_the_marginals_are_the_median_of_the_pairs():
    # (big, small) CPU per pair over 900 extra images: 9/900, 45/900, 10.8/900 ms per image.
    pairs = ((_run(1000, cpu=12.0, launcher=4.0), _run(100, cpu=3.0, launcher=3.1)),
             (_run(1000, cpu=50.0, launcher=9.0), _run(100, cpu=5.0, launcher=3.0)),
             (_run(1000, cpu=13.8, launcher=4.2), _run(100, cpu=3.0, launcher=3.0)))
    cost = dataclasses.replace(_cost(), pairs=pairs)
    assert cost.marginal_ms == pytest.approx(12.0)     # the median, not the 50 s outlier
    assert cost.launcher_ms == pytest.approx(4.0 / 3)  # 0.9/900, 6/900, 1.2/900 -> 1.2/900
    assert dataclasses.replace(_cost(small_images=None), pairs=()).marginal_ms is None


def test_the_launcher_figure_is_its_cpu_inside_run_when_every_run_reports_it():
    """The launcher's imports (and exit) cost the same for any number of images but move by
    up to 0.4 s between runs: left out when every run of the pairs reports its CPU inside
    `run()`; the whole process's otherwise."""
    # whole process: 4.0 - 3.1 s over 900 extra images; inside run(): 2.8 - 1.9 s (1.0 ms)
    pairs = ((_run(1000, launcher=4.0, launcher_run=2.8), _run(100, launcher=3.1,
                                                                launcher_run=1.9)),)
    assert dataclasses.replace(_cost(), pairs=pairs).launcher_ms == pytest.approx(1.0)
    pairs = ((_run(1000, launcher=4.0, launcher_run=2.2), _run(100, launcher=3.1)),)
    assert dataclasses.replace(_cost(), pairs=pairs).launcher_ms == pytest.approx(1.0)
    pairs = ((_run(1000, launcher=4.0, launcher_run=2.2), _run(100, launcher=2.8,
                                                                launcher_run=1.9)),)
    assert dataclasses.replace(_cost(), pairs=pairs).launcher_ms == pytest.approx(1.0 / 3)


def test_a_timed_job_reports_its_launchers_cpu_inside_run(monkeypatch, tmp_path, capsys):
    """`_job_child` prints the CPU of its own process around `run()`; `time_job` keeps it."""
    from runners import beam_runner
    from runners.bench import bench_processes as processes
    from runners.bench.bench_loops import own_cpu_seconds
    from runners.jobs import preprocess

    class Snapshot:
        path = str(tmp_path)
        accounting = {"images": {"discovered": 3, "accepted": 3}}
        manifest = {"files": [], "config": {"decode": {"processes": 1}}}

    def busy_run(argv):
        deadline = own_cpu_seconds() + 0.05
        while own_cpu_seconds() < deadline:
            pass
        return Snapshot()

    (tmp_path / "rejects.jsonl").write_text("")
    monkeypatch.setattr(preprocess, "run", busy_run)
    monkeypatch.setattr(preprocess, "parse_options", lambda argv: (None,))
    monkeypatch.setattr(beam_runner, "decode_processes", lambda options, configured: 1)
    assert processes._job_child(["--data_root", "x"]) == 0
    stdout = capsys.readouterr().out
    monkeypatch.setattr(processes, "_run_measured", lambda code, argv, log: processes._Finished(
        stdout, 0, 2.0, 3.0, 0, 0, 0, 1.5))
    run = processes.time_job(processes.Corpus(str(tmp_path), None, (), 0),
                             str(tmp_path / "out"))
    assert (run.images, run.launcher_cpu_seconds) == (3, 1.5)
    assert 0.05 <= run.launcher_run_cpu_seconds < 1.0


def test_the_suite_is_timed_with_the_makefiles_command_and_environment(monkeypatch, tmp_path):
    """Target 6 times `make test`'s recipe: the same pytest arguments, and bytecode caches
    written whatever the environment's PYTHONDONTWRITEBYTECODE says."""
    import re
    import sys

    from runners.bench.bench_processes import REPO_ROOT
    with open(os.path.join(REPO_ROOT, "Makefile"), encoding="utf-8") as handle:
        (recipe,) = re.findall(r"^test: .*\n\t(.*)$", handle.read(), flags=re.MULTILINE)
    calls = []
    monkeypatch.setattr(costs, "_run_wall",
                        lambda argv, log, **env: calls.append((argv, env)) or (1.5, 0))
    assert costs.time_test_suite(str(tmp_path)) == costs.TestSuite(1.5, 0)
    (argv, env), = calls
    assert argv[0] == sys.executable
    assert recipe == " ".join([*(f"{key}={value}" for key, value in env.items()),
                               "$(BIN)/python", *argv[1:]])


def test_launcher_pairs_give_the_launcher_figure_and_say_their_sizes():
    """The camera launcher comes from its own larger pairs (200 vs 20) when given: the
    corpus's 50-vs-5 pairs keep the marginal; the row names the launcher pairs' sizes."""
    cost = dataclasses.replace(_cost(name="camera", images=50, small_images=5,
                                     cpu=(60.0, 15.0), launcher=(4.0, 3.1)),
                               launcher_pairs=((_run(200, launcher=4.2), _run(20, launcher=3.3)),
                                               (_run(200, launcher=4.5), _run(20, launcher=3.3)),
                                               (_run(200, launcher=4.0), _run(20, launcher=3.1))))
    assert cost.marginal_ms == pytest.approx(1000.0)          # 45 s / 45 images
    assert cost.launcher_ms == pytest.approx(5.0)             # median of 5.0, 6.67, 5.0 ms
    assert cost.launcher_images == (200, 20)
    assert _cost().launcher_images is None
    rows = {what: measured for _, what, measured, _, _ in costs._cpu_rows(cost)}
    assert rows["camera: launcher CPU per image"] == "5.00 ms (200 vs 20 images)"
    assert rows["camera: marginal CPU per image"] == "1000.00 ms (bare decode 3.00 ms)"
