"""Every JSON file the job writes is strict JSON: a NaN or an infinity is an error at write
time, never a bare `NaN`/`Infinity` token that other JSON readers (jq, BigQuery, browsers)
reject (issue 9, case 17: a NaN config value used to reach manifest.json and stats.json)."""
import json
import math
import os

import apache_beam as beam
import pytest

from pipelines import snapshot
from tests.beamutil import fn_api_pipeline
from transforms.offline.outputs import WriteJson


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_snapshot_json_writer_refuses_non_finite_numbers(tmp_path, value):
    path = str(tmp_path / "stats.json")
    with pytest.raises(ValueError, match="not JSON compliant"):
        snapshot._write_json(path, {"quality": {"blur_min": value}})
    assert not os.path.exists(path)


def test_snapshot_json_writer_writes_finite_data(tmp_path):
    path = str(tmp_path / "stats.json")
    snapshot._write_json(path, {"b": 1.5, "a": [1, 2]})
    with open(path) as handle:
        assert json.load(handle) == {"a": [1, 2], "b": 1.5}


def test_write_json_transform_refuses_nan(tmp_path):
    path = str(tmp_path / "counts.json")
    with pytest.raises(Exception, match="not JSON compliant"):
        with fn_api_pipeline() as pipeline:
            pipeline | beam.Create([{"x": math.nan}]) | WriteJson(path)
    assert not os.path.exists(path)
