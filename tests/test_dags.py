"""DAG integrity (DagBag) and a real ``dag.test()`` of the ingest DAG in incremental mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from laketide.config import REPO_ROOT
from tests.helpers import load, write_config
from tests.test_writer import assert_exactly_once, produce


@pytest.fixture()
def dagbag(airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    config_path = write_config(tmp_path)
    monkeypatch.setenv("LAKETIDE_CONFIG", str(config_path))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
    bag.config_path = config_path  # type: ignore[attr-defined]
    return bag


def test_dagbag_integrity(dagbag) -> None:  # type: ignore[no-untyped-def]
    assert dagbag.import_errors == {}
    assert "laketide_ingest_clicks" in dagbag.dags
    for dag_id, dag in dagbag.dags.items():
        assert "laketide" in dag.tags, f"{dag_id} has no 'laketide' tag"
        assert dag.doc_md, f"{dag_id} has no documentation"
        for task in dag.tasks:
            assert task.retries >= 1, f"{dag_id}.{task.task_id} has no retries"


def test_ingest_dag_shape(dagbag) -> None:  # type: ignore[no-untyped-def]
    dag = dagbag.dags["laketide_ingest_clicks"]
    assert dag.max_active_runs == 1
    assert type(dag.timetable).__name__ == "ContinuousTimetable"
    assert dag.params["mode"] == "continuous"
    (task,) = dag.tasks
    assert task.job_args == ["--stream", "clicks", "--mode", "{{ params.mode }}"]
    assert task._conn_id == "spark_default"


def test_wrong_param_is_refused_and_changes_nothing(dagbag) -> None:  # type: ignore[no-untyped-def]
    from airflow.sdk.exceptions import ParamValidationError

    config_path = dagbag.config_path
    with pytest.raises(ParamValidationError, match="'sometimes' is not one of"):
        dagbag.dags["laketide_ingest_clicks"].test(run_conf={"mode": "sometimes"})
    assert not (config_path.parent / "catalog.db").exists()
    assert not load(config_path).stream("clicks").checkpoint_path.exists()


@pytest.mark.slow
def test_ingest_dag_runs_the_writer_incrementally(dagbag) -> None:  # type: ignore[no-untyped-def]
    config_path = dagbag.config_path
    produce(config_path, "--start", "2026-11-22T01:00:00+00:00", "--hours", "2", "--events-per-hour", "400",
            "--malformed-ratio", "0.05", "--seed", "3")
    run = dagbag.dags["laketide_ingest_clicks"].test(run_conf={"mode": "incremental"})
    assert run.state == "success"
    lake = assert_exactly_once(config_path)
    assert sum(lake.values()) > 700
    stream = load(config_path).stream("clicks")
    assert (stream.checkpoint_path / "commits" / "0").exists()
