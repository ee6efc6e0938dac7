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
    (task,) = dag.tasks
    assert task.job_args == ["--group", "clicks", "--mode", "continuous"]  # a stream without a group: its own
    assert task._conn_id == "spark_default"
    once = dagbag.dags["laketide_ingest_clicks_once"]
    assert type(once.timetable).__name__ == "NullTimetable"  # manual runs only
    (task,) = once.tasks
    assert task.job_args == ["--stream", "clicks", "--mode", "incremental"]
    assert 4 in task.fatal_exit_codes  # beside a live writer: refused at once, not retried


@pytest.mark.slow
def test_one_off_run_beside_a_live_writer_is_refused_at_once(dagbag) -> None:  # type: ignore[no-untyped-def]
    import time

    from tests.helpers import kill_group, start_writer, wait_for_log

    config_path = dagbag.config_path
    produce(config_path, "--start", "2026-11-22T01:00:00+00:00", "--hours", "1", "--events-per-hour", "100",
            "--seed", "4")
    live = start_writer(config_path, mode="continuous")
    try:
        wait_for_log(config_path, "started in continuous mode", live)
        started = time.monotonic()
        run = dagbag.dags["laketide_ingest_clicks_once"].test()
        assert run.state == "failed"
        assert time.monotonic() - started < 180  # not queued, not retried
        ti = run.get_task_instance("writer")
        assert ti.try_number == 1
    finally:
        kill_group(live)


@pytest.mark.slow
def test_ingest_dag_runs_the_writer_incrementally(dagbag) -> None:  # type: ignore[no-untyped-def]
    config_path = dagbag.config_path
    produce(config_path, "--start", "2026-11-22T01:00:00+00:00", "--hours", "2", "--events-per-hour", "400",
            "--malformed-ratio", "0.05", "--seed", "3")
    run = dagbag.dags["laketide_ingest_clicks_once"].test()
    assert run.state == "success"
    lake = assert_exactly_once(config_path)
    assert sum(lake.values()) > 700
    stream = load(config_path).stream("clicks")
    assert (stream.checkpoint_path / "commits" / "0").exists()


def test_close_dag_closes_the_hour_that_just_ended(dagbag) -> None:  # type: ignore[no-untyped-def]
    from datetime import timedelta

    dag = dagbag.dags["laketide_close_clicks"]
    assert {t.task_id for t in dag.tasks} == {"plan", "decide_ready", "close_ready.verify", "close_ready.close",
                                              "wait_for_partition", "decide", "close_hour.verify",
                                              "close_hour.close", "find_reopened", "reclose"}
    # the sensor waits for the last hour the plan names: the data interval's, unless the run was given a range
    assert dag.get_task("wait_for_partition").partition == "{{ ti.xcom_pull(task_ids='plan')[-1] }}"
    assert dag.get_task("wait_for_partition").deferrable
    from airflow.timetables.interval import CronDataIntervalTimetable

    # the DAG's timetable as the scheduler runs it: a run after 04:05 closes [03:00, 04:00)
    assert type(dag.timetable).__name__ == "CronDataIntervalTimetable"
    scheduled = CronDataIntervalTimetable(dag.timetable.expression, dag.timetable.timezone)
    import pendulum

    start = pendulum.datetime(2026, 11, 22, 3, tz="UTC")
    interval = scheduled.infer_manual_data_interval(run_after=start + timedelta(hours=1, minutes=5))
    assert (interval.start, interval.end) == (start, start + timedelta(hours=1))
    assert [a.uri for a in dag.get_task("close_hour.close").outlets] == ["iceberg://laketide/lake/clicks"]
    downstream = dagbag.dags["laketide_example_downstream"]
    assert "iceberg://laketide/lake/clicks" in str(downstream.timetable.asset_condition)


@pytest.mark.slow
def test_the_documented_by_hand_command_runs_the_writer(tmp_path: Path) -> None:
    """``./laketide submit`` as docs/operations.md prints it, from a plain shell: the jars and the catalog reach
    the JVM at start."""
    import re
    import subprocess

    from tests.helpers import config_env

    config_path = write_config(tmp_path)
    produce(config_path, "--start", "2026-11-22T01:00:00+00:00", "--hours", "1", "--events-per-hour", "200",
            "--malformed-ratio", "0.05", "--seed", "5")
    docs = (REPO_ROOT / "docs" / "operations.md").read_text()
    documented = re.search(r"`(\./laketide submit ingest_stream\.py [^`]+)`", docs)
    assert documented, "the operations guide no longer shows the by-hand command"
    env = config_env(config_path)
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # a plain shell: no virtualenv on the path
    done = subprocess.run(["bash", "-c", documented.group(1)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ClassNotFoundException" not in done.stdout + done.stderr
    assert_exactly_once(config_path)
