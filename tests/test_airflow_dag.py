"""The Airflow DAG loads in a DagBag (only when Airflow is installed: the `airflow` extra;
checked with Airflow 3.x after `airflow db migrate`)."""
from __future__ import annotations

import os

import pytest

airflow = pytest.importorskip("airflow")

DAG_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "runners", "airflow_dag.py")


def test_dag_loads_without_import_errors(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    from airflow.models import DagBag
    from sqlalchemy.exc import OperationalError
    try:
        bag = DagBag(dag_folder=DAG_FILE)
    except OperationalError as exc:  # Airflow 3 parses into its metadata database
        pytest.skip(f"Airflow's metadata database is not initialized (`airflow db migrate`): {exc}")
    assert bag.import_errors == {}
    dag = bag.get_dag("pixelmill_nightly")
    assert [task.task_id for task in dag.tasks] == ["pixelmill_nightly"]
    assert dag.tasks[0].bash_command.startswith("pixelmill nightly")


def test_command_template_passes_labels_config_and_beam_flags_through():
    import jinja2

    from runners.airflow_dag import NIGHTLY_COMMAND
    values = {"pixelmill_data_root": "gs://b/images", "pixelmill_output_dir": "gs://b/out",
              "pixelmill_labels": "gs://b/a.csv, gs://b/b.csv", "pixelmill_config": "",
              "pixelmill_fail_on_drift": "true",
              "pixelmill_beam_args": "--runner DataflowRunner --region us-central1"}

    class Values:
        def get(self, name, default=""):
            return values.get(name, default)

    rendered = jinja2.Template(NIGHTLY_COMMAND).render(var={"value": Values()})
    assert rendered == ("pixelmill nightly --data_root gs://b/images --output_dir gs://b/out "
                        "--labels gs://b/a.csv --labels gs://b/b.csv --fail_on_drift "
                        "--runner DataflowRunner --region us-central1")
