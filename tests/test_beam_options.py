"""The job's Beam options: construction-time type inference off, one view per options class,
and nothing it wrote moves."""
from __future__ import annotations

import copy
import hashlib
import os
import pickle

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    TypeOptions,
)

from configs.schema import load_config
from pipelines.job import PreprocessJob
from runners import beam_runner
from runners.jobs import preprocess
from tests.jobutil import index_rows, rejects, run_job, shard_files


def test_the_job_builds_its_graph_without_beams_type_inference():
    options = preprocess.parse_options(["--data_root", "d", "--output_dir", "o"])[0]
    assert options.view_as(TypeOptions).pipeline_type_check is False
    assert options.view_as(TypeOptions).runtime_type_check is False
    assert options.get_all_options()["pipeline_type_check"] is False


def test_a_view_is_made_once_per_class_and_shares_every_value():
    options = beam_runner.beam_options(["--direct_num_workers", "3", "--runner", "Direct"])
    assert isinstance(options, beam_runner.JobOptions)
    direct = options.view_as(DirectOptions)
    assert options.view_as(DirectOptions) is direct
    assert options.view_as(StandardOptions) is not direct
    assert direct.direct_num_workers == 3
    direct.direct_num_workers = 5  # a value set through one view is every view's and the
    assert options.view_as(DirectOptions).direct_num_workers == 5   # options' own
    assert options.get_all_options()["direct_num_workers"] == 5
    assert options.view_as(StandardOptions).runner == "Direct"


def test_the_options_pickle_and_copy_without_their_views():
    options = beam_runner.beam_options(["--direct_num_workers", "3"])
    options.view_as(DirectOptions).direct_num_workers = 4
    for again in (pickle.loads(pickle.dumps(options)), copy.deepcopy(options)):
        assert "_views" not in again.__dict__
        assert again.get_all_options() == options.get_all_options()
        assert again.view_as(DirectOptions).direct_num_workers == 4
        assert again.view_as(DirectOptions) is not options.view_as(DirectOptions)


def _digests(snapshot) -> dict:
    digests = {}
    for path in shard_files(snapshot):
        with open(path, "rb") as handle:
            digests[os.path.relpath(path, snapshot.path)] = hashlib.sha256(
                handle.read()).hexdigest()
    return digests


def test_with_beams_type_inference_on_the_job_writes_the_same_bytes(folder_snapshot, tmp_path,
                                                                     monkeypatch):
    """conftest's folder_snapshot, run again with Beam's default options (type inference on)."""
    monkeypatch.setattr(beam_runner, "beam_options", PipelineOptions)
    monkeypatch.setattr(preprocess, "beam_options", PipelineOptions)
    again = run_job(folder_snapshot.root, tmp_path / "out", sets=["output.num_shards=8"])
    assert preprocess.parse_options(["--data_root", "d", "--output_dir", "o"])[0].view_as(
        TypeOptions).pipeline_type_check is True
    assert _digests(again) == _digests(folder_snapshot.snapshot)
    assert len(_digests(again)) == 24  # 8 shards in each of 3 splits
    assert rejects(again) == rejects(folder_snapshot.snapshot)
    assert index_rows(again) == index_rows(folder_snapshot.snapshot)


def test_the_local_runner_shuffles_in_lanes_and_a_named_runner_key_by_key():
    job = PreprocessJob(data_roots=("d",), label_csvs=(), box_csvs=(), class_table=(),
                        frozen_classes=False, staging_dir="o/.staging/r", config=load_config())
    assert job.shuffle_lanes is None
    local = beam_runner.with_shuffle_lanes(job, beam_runner.beam_options([]))
    assert local.shuffle_lanes == beam_runner.LOCAL_SHUFFLE_LANES == 64
    assert beam_runner.with_shuffle_lanes(job, beam_runner.beam_options(
        ["--direct_running_mode=multi_processing"])).shuffle_lanes == 64
    named = beam_runner.with_shuffle_lanes(local, beam_runner.beam_options(
        ["--runner", "DataflowRunner"]))
    assert named.shuffle_lanes is None
