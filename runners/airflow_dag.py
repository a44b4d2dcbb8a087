"""Airflow DAG: run `pixelmill nightly` once a day (no home-made scheduler).

Drop this file (or a one-line import of it) into Airflow's dags folder on a machine where
pixelmill is installed (`pip install -e '.[airflow]'`). Configure it with Airflow Variables:

    pixelmill_data_root     gs://bucket/images
    pixelmill_labels        gs://bucket/labels.csv       (comma-separated for several)
    pixelmill_output_dir    gs://bucket/pixelmill
    pixelmill_config        configs/base.yaml            (optional)
    pixelmill_beam_args     --runner DataflowRunner --project P --region R
                            --temp_location gs://bucket/tmp --setup_file /opt/pixelmill/setup.py
    pixelmill_fail_on_drift true|false                   (optional, default false)

The task calls the CLI, so Dataflow flags pass straight through to Beam. Exit code 75 (another
run holds the output folder's lock) marks the task skipped instead of failed; exit 3 (drift
with --fail_on_drift) fails it, so Airflow's alerting tells a person.
"""
from __future__ import annotations

import datetime
import shlex

from airflow import DAG
from airflow.models import Variable
from airflow.operators.bash import BashOperator

__all__ = ["dag", "nightly_command"]


def nightly_command(data_root: str, labels: str, output_dir: str, config: str = "",
                    beam_args: str = "", fail_on_drift: bool = False) -> str:
    """The shell command the task runs (quoted; templating-free, so it can be tested)."""
    parts = ["pixelmill", "nightly", "--data_root", data_root, "--output_dir", output_dir]
    for path in filter(None, (p.strip() for p in labels.split(","))):
        parts += ["--labels", path]
    if config:
        parts += ["--config", config]
    if fail_on_drift:
        parts.append("--fail_on_drift")
    return " ".join(shlex.quote(p) for p in parts) + (" " + beam_args if beam_args else "")


with DAG(
    dag_id="pixelmill_nightly",
    description="Incremental pixelmill snapshot of new images, with drift check",
    schedule="0 2 * * *",
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": datetime.timedelta(minutes=30)},
    tags=["pixelmill", "data"],
) as dag:
    BashOperator(
        task_id="pixelmill_nightly",
        bash_command=nightly_command(
            data_root=Variable.get("pixelmill_data_root", default_var="/data/images"),
            labels=Variable.get("pixelmill_labels", default_var="/data/labels.csv"),
            output_dir=Variable.get("pixelmill_output_dir", default_var="/data/pixelmill"),
            config=Variable.get("pixelmill_config", default_var=""),
            beam_args=Variable.get("pixelmill_beam_args", default_var=""),
            fail_on_drift=Variable.get("pixelmill_fail_on_drift", default_var="false")
            .lower() == "true"),
        skip_on_exit_code=75,
        execution_timeout=datetime.timedelta(hours=8),
    )
