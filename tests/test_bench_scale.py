"""`pixelmill bench scale` at tiny sizes: every simulated step runs the job's PTransforms on
the metadata-only corpus, and the command prints its table, targets and the Dataflow plan."""
from __future__ import annotations

import collections
import json
import math

import apache_beam as beam
import pytest
from apache_beam.testing.util import equal_to

from runners.bench import bench_scale
from runners.bench.scale_sim import MAX_HAMMING, STEPS, ScaleCorpus
from tests.beamutil import assert_that, beam_pipeline


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


N = 600


def _expected(corpus: ScaleCorpus) -> dict:
    """What each step must find in the simulated corpus, computed here in plain Python from
    the corpus alone (not through the job's PTransforms)."""
    accepted = [i for i in range(N) if corpus.rejected(i) is None]
    shas = [corpus.sha256(i) for i in accepted]
    originals = [i for i in accepted if not corpus.is_copy(i)]
    hashes = [int(corpus.phash(i), 16) for i in originals]
    # images with a neighbour within MAX_HAMMING bits: the most that dedup can drop
    near = sum(any((h ^ other).bit_count() <= MAX_HAMMING
                   for other in hashes[:k] + hashes[k + 1:]) for k, h in enumerate(hashes))
    # the split and shard rules by hand (0.8 / 0.1 / 0.1, 128 MiB shards)
    fraction = {i: int(corpus.sha256(i)[:16], 16) / 2 ** 64 for i in accepted}
    split_of = {i: "train" if f < 0.8 else "validation" if f < 0.9 else "test"
                for i, f in fraction.items()}
    bytes_of = collections.Counter()
    for i in accepted:
        bytes_of[split_of[i]] += corpus.file_ref(i).file_bytes
    shards = {split: max(1, math.ceil(total / (128 * 2 ** 20))) for split, total in
              bytes_of.items()}
    per_shard = collections.Counter(
        (split_of[i], int(corpus.sha256(i)[16:32], 16) % shards[split_of[i]]) for i in accepted)
    return {"accepted": len(accepted), "duplicates": len(shas) - len(set(shas)),
            "near_at_most": near, "per_shard": sorted(per_shard.items()),
            "missing_rows": sum(len(list(corpus.label_rows(i))) - 1 for i in range(N))}


def _outputs(pipeline, labels) -> dict:
    """The output PCollection of each named transform of the built pipeline."""
    found = {}

    class Visitor(beam.pipeline.PipelineVisitor):
        def enter_composite_transform(self, node):
            self.visit_transform(node)

        def visit_transform(self, node):
            name = node.full_label.rsplit("/", 1)[-1]
            if name in labels and None in node.outputs:
                found[name] = node.outputs[None]
    pipeline.visit(Visitor())
    assert set(found) == set(labels), found
    return found


# step -> {transform label: expected output, from _expected}
CHECKS = {
    "generate": lambda e: {"CountRecords": [N]},
    "plan": lambda e: {"Countimages": [N], "Countmatched": [N], "Countskipped": [0],
                       "Countrejected": [0], "Countrow_rejects": [e["missing_rows"]]},
    "classes": lambda e: {"CountWithIds": [e["accepted"]], "CountUnknown": [0]},
    "dedup_exact": lambda e: {"CountDuplicates": [e["duplicates"]]},
    "split": lambda e: {"CountSplit": [e["accepted"]]},
    "shards": lambda e: {"RecordsPerShard": e["per_shard"],
                         "CountShards": [len(e["per_shard"])]},
}


@pytest.mark.parametrize("step", sorted(STEPS))
def test_every_step_runs_on_the_simulated_corpus(step, tmp_path):
    corpus = ScaleCorpus(N, seed=1)
    expected = _expected(corpus)
    pipeline = beam_pipeline()
    STEPS[step](pipeline, corpus, str(tmp_path))
    checks = CHECKS[step](expected) if step in CHECKS else {}
    if step == "dedup_near":
        checks = {"CountNearDuplicates": None}
    for label, pcoll in _outputs(pipeline, set(checks)).items():
        if checks[label] is None:
            assert_that(pcoll, lambda got: _near_in_range(got, expected["near_at_most"]),
                        label=f"Check{label}")
        else:
            assert_that(pcoll, equal_to(checks[label]), label=f"Check{label}")
    result = pipeline.run()
    result.wait_until_finish()
    if step == "accounting":
        counts = json.loads((tmp_path / "_work" / "counts.json").read_text())
        assert counts["images.discovered"] == N == counts["label_rows.total"]
        assert counts["images.accepted"] == expected["accepted"]
        assert counts["images.rejected"] == N - expected["accepted"]
    if step == "ledger":
        lines = (tmp_path / "rejects.jsonl").read_text().splitlines()
        assert lines and lines == sorted(lines, key=lambda l: (lambda r: (
            r["kind"], r["path"], r["reason"], r["detail"]))(json.loads(l)))
        reasons = collections.Counter(json.loads(line)["reason"] for line in lines)
        assert reasons["missing_file"] == expected["missing_rows"]
        assert sum(reasons.values()) - reasons["missing_file"] - reasons[
            "near_duplicate"] == N - expected["accepted"]
    if step == "dedup_near":
        counters = {c.key.metric.name: c.committed
                    for c in result.metrics().query()["counters"]}
        assert counters["near_dup_comparisons"] > 0


def _near_in_range(got, at_most):
    (count,) = got
    if not 0 < count <= at_most:
        raise AssertionError(f"{count} near duplicates; expected 1..{at_most}")


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
