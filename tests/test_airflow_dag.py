"""The Airflow DAG file, tested without Airflow: minimal fake `airflow` modules in sys.modules
record what the file gives `DAG` and `BashOperator`, and Jinja (Airflow's template engine)
renders the command. With the `airflow` extra installed, the last test also loads the file in a
real DagBag (checked with Airflow 3.x after `airflow db migrate`)."""
from __future__ import annotations

import datetime
import importlib.util
import os
import sys
import types

import jinja2
import pytest

DAG_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "runners", "jobs", "airflow_dag.py")


class _FakeDag:
    """Records its keyword arguments and the operators created inside its `with` block."""
    current = None

    def __init__(self, **kwargs):
        self.kwargs, self.tasks = kwargs, []

    def __enter__(self):
        _FakeDag.current = self
        return self

    def __exit__(self, *exc):
        _FakeDag.current = None
        return False


class _FakeBashOperator:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        if _FakeDag.current is None:
            raise RuntimeError("BashOperator created outside a DAG block")
        _FakeDag.current.tasks.append(self)


def _load(monkeypatch, airflow_major: int) -> types.ModuleType:
    """The DAG file executed against fake Airflow 3 (operator in the standard provider) or
    Airflow 2 (operator in `airflow.operators.bash`, no provider module)."""
    bash_module = ("airflow.providers.standard.operators.bash" if airflow_major == 3
                   else "airflow.operators.bash")
    names = ["airflow", *[bash_module.rsplit(".", depth)[0] for depth in
                          range(bash_module.count(".") - 1, 0, -1)], bash_module]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    if airflow_major == 2:  # the provider import must fail as it does on Airflow 2
        monkeypatch.setitem(sys.modules, "airflow.providers", None)
    sys.modules["airflow"].DAG = _FakeDag
    sys.modules[bash_module].BashOperator = _FakeBashOperator
    spec = importlib.util.spec_from_file_location("_pixelmill_airflow_dag_under_test", DAG_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _render(command: str, values: dict) -> str:
    class Values:
        def get(self, name, default=""):
            return values.get(name, default)
    return jinja2.Template(command).render(var={"value": Values()})


@pytest.mark.parametrize("airflow_major", [3, 2])
def test_the_dag_runs_pixelmill_nightly_daily_with_one_run_at_a_time(monkeypatch,
                                                                    airflow_major):
    module = _load(monkeypatch, airflow_major)
    dag = module.dag
    assert isinstance(dag, _FakeDag)
    assert dag.kwargs["dag_id"] == "pixelmill_nightly"
    assert dag.kwargs["schedule"] == "0 2 * * *"  # 02:00 every day
    assert dag.kwargs["catchup"] is False and dag.kwargs["max_active_runs"] == 1
    assert dag.kwargs["start_date"] == datetime.datetime(2026, 1, 1)
    assert dag.kwargs["default_args"] == {"retries": 1,
                                          "retry_delay": datetime.timedelta(minutes=30)}
    (task,) = dag.tasks
    assert task.kwargs["task_id"] == "pixelmill_nightly"
    assert task.kwargs["skip_on_exit_code"] == 75  # the CLI's "lock held" exit code
    assert task.kwargs["execution_timeout"] == datetime.timedelta(hours=8)
    assert task.kwargs["bash_command"] is module.NIGHTLY_COMMAND


def test_command_template_passes_labels_config_and_beam_flags_through(monkeypatch):
    command = _load(monkeypatch, 3).dag.tasks[0].kwargs["bash_command"]
    values = {"pixelmill_data_root": "gs://b/images", "pixelmill_output_dir": "gs://b/out",
              "pixelmill_labels": "gs://b/a.csv, gs://b/b.csv", "pixelmill_config": "",
              "pixelmill_fail_on_drift": "true",
              "pixelmill_beam_args": "--runner DataflowRunner --region us-central1"}
    assert _render(command, values) == (
        "pixelmill nightly --data_root gs://b/images --output_dir gs://b/out "
        "--labels gs://b/a.csv --labels gs://b/b.csv --fail_on_drift "
        "--runner DataflowRunner --region us-central1")


def test_command_template_defaults_and_optional_flags(monkeypatch):
    command = _load(monkeypatch, 3).NIGHTLY_COMMAND
    assert _render(command, {}).split() == [
        "pixelmill", "nightly", "--data_root", "/data/images", "--output_dir",
        "/data/pixelmill", "--labels", "/data/labels.csv"]
    rendered = _render(command, {"pixelmill_config": "configs/satellite.yaml",
                                 "pixelmill_fail_on_drift": "False",
                                 "pixelmill_labels": "a.csv,,"})
    assert rendered.split() == [
        "pixelmill", "nightly", "--data_root", "/data/images", "--output_dir",
        "/data/pixelmill", "--labels", "a.csv", "--config", "configs/satellite.yaml"]


def test_dag_loads_in_a_real_dagbag_when_airflow_is_installed(monkeypatch):
    pytest.importorskip("airflow")
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
