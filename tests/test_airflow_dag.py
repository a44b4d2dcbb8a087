"""The Airflow DAG loads in a DagBag (only when Airflow is installed: the `airflow` extra)."""
from __future__ import annotations

import os

import pytest

airflow = pytest.importorskip("airflow")


def test_dag_loads_without_import_errors():
    from airflow.models import DagBag
    folder = os.path.join(os.path.dirname(os.path.dirname(__file__)), "runners", "airflow_dag.py")
    bag = DagBag(dag_folder=folder, include_examples=False)
    assert bag.import_errors == {}
    dag = bag.get_dag("pixelmill_nightly")
    assert [task.task_id for task in dag.tasks] == ["pixelmill_nightly"]
    assert "pixelmill nightly" in dag.tasks[0].bash_command


def test_nightly_command_passes_beam_flags_through():
    from runners.airflow_dag import nightly_command
    command = nightly_command("gs://b/images", "gs://b/a.csv, gs://b/b.csv", "gs://b/out",
                              beam_args="--runner DataflowRunner --region us-central1",
                              fail_on_drift=True)
    assert command == ("pixelmill nightly --data_root gs://b/images --output_dir gs://b/out "
                       "--labels gs://b/a.csv --labels gs://b/b.csv --fail_on_drift "
                       "--runner DataflowRunner --region us-central1")
