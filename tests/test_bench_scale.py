"""`pixelmill bench scale` at tiny sizes: every simulated step runs the job's PTransforms on
the metadata-only corpus, and the command prints its table, targets and the Dataflow plan."""
from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from runners import bench_scale
from runners.scale_sim import STEPS, ScaleCorpus


def test_corpus_is_a_pure_function_of_the_index_with_copies_and_hot_clusters():
    corpus = ScaleCorpus(4000, seed=3)
    assert [corpus.record(i) for i in (5, 77)] == [ScaleCorpus(4000, seed=3).record(i)
                                                    for i in (5, 77)]
    copies = [i for i in range(4000) if corpus.is_copy(i)]
    assert 40 <= len(copies) <= 120  # exact_share 2%
    assert all(corpus.sha256(i) in {corpus.sha256(j) for j in range(i)} for i in copies[:10])
    hashes = [int(corpus.phash(i), 16) for i in range(4000)]
    centres = {h for h in hashes if hashes.count(h) > 5}
    assert 1 <= len(centres) <= corpus.hot_clusters  # equal hashes: the hot clusters' centres


@pytest.mark.parametrize("step", sorted(STEPS))
def test_every_step_runs_on_the_simulated_corpus(step, tmp_path):
    pipeline = beam.Pipeline(runner=FnApiRunner())
    STEPS[step](pipeline, ScaleCorpus(600, seed=1), str(tmp_path))
    result = pipeline.run()
    result.wait_until_finish()
    if step == "accounting":
        counts = json.loads((tmp_path / "_work" / "counts.json").read_text())
        assert counts["images.discovered"] == 600 == counts["label_rows.total"]
    if step == "ledger":
        lines = (tmp_path / "rejects.jsonl").read_text().splitlines()
        assert lines and lines == sorted(lines, key=lambda l: (lambda r: (
            r["kind"], r["path"], r["reason"], r["detail"]))(json.loads(l)))
    if step == "dedup_near":
        counters = {c.key.metric.name: c.committed
                    for c in result.metrics().query()["counters"]}
        assert counters["near_dup_comparisons"] > 0


@pytest.mark.slow
def test_bench_scale_prints_the_table_the_targets_and_the_plan(tmp_path, capsys):
    results = bench_scale.run([
        "--sizes", "300", "--steps", "dedup_near", "--hot_cluster", "300",
        "--nightly_rows", "3000", "--nightly_snapshots", "3", "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert {(r.step, r.label) for r in results} == {("dedup_near", ""), ("dedup_near", "hot"),
                                                    ("dedup_near", "random")}
    assert all(r.wall_s > 0 and r.cpu_s > 0 and r.peak_rss > 0 for r in results)
    assert next(r for r in results if not r.label).shuffled > 300  # five band keys per image
    for text in ("whole path", "hot cluster of 300", "peak memory at 300",
                 "nightly no-op on an archive of 3,000 rows in 3 snapshots reads 3 files",
                 "Plan for 100,000,000 images on Dataflow", "assumptions:"):
        assert text in out
    assert out.count("PASS") + out.count("MISS") == 3


def test_bench_scale_rejects_bad_flags():
    from runners.errors import UsageError
    with pytest.raises(UsageError, match="Unknown step"):
        bench_scale.run(["--steps", "dedup_nearr"])
    with pytest.raises(UsageError, match="--sizes must be comma-separated integers"):
        bench_scale.run(["--sizes", "1e6"])
