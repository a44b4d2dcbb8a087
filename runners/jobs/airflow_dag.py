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
run holds the output folder's lock) marks the task skipped instead of failed, until the lock
has blocked --lock_blocked_max runs in a row: then the CLI exits 1 and the task fails; exit 3
(drift with --fail_on_drift) fails it too, so Airflow's alerting tells a person.
"""
from __future__ import annotations

import datetime

from airflow import DAG

try:  # Airflow 3 (and 2.x with the standard provider)
    from airflow.providers.standard.operators.bash import BashOperator
except ImportError:  # Airflow 2
    from airflow.operators.bash import BashOperator

__all__ = ["dag", "NIGHTLY_COMMAND"]


def _var(name: str, default: str = "") -> str:
    return f"var.value.get('{name}', '{default}')"


# A Jinja template: Airflow renders it (reading the Variables) when the task runs, not each time
# the scheduler parses this file. Paths must not contain spaces.
NIGHTLY_COMMAND = (
    "pixelmill nightly"
    " --data_root {{ " + _var("pixelmill_data_root", "/data/images") + " }}"
    " --output_dir {{ " + _var("pixelmill_output_dir", "/data/pixelmill") + " }}"
    "{% for path in " + _var("pixelmill_labels", "/data/labels.csv") + ".split(',') %}"
    "{% if path.strip() %} --labels {{ path.strip() }}{% endif %}{% endfor %}"
    "{% if " + _var("pixelmill_config") + " %} --config {{ " + _var("pixelmill_config")
    + " }}{% endif %}"
    "{% if " + _var("pixelmill_fail_on_drift", "false") + ".lower() == 'true' %}"
    " --fail_on_drift{% endif %}"
    " {{ " + _var("pixelmill_beam_args") + " }}"
)


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
        bash_command=NIGHTLY_COMMAND,
        skip_on_exit_code=75,
        execution_timeout=datetime.timedelta(hours=8),
    )
