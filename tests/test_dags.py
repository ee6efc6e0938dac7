"""DAG integrity (DagBag) and a real ``dag.test()`` of the ingest DAG in incremental mode."""

from __future__ import annotations

from datetime import UTC, datetime
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
    assert "laketide_example_changes" not in dagbag.dags  # no upsert stream configured
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


def test_close_dag_runs_carry_the_hour_they_close_as_partition_key(dagbag) -> None:  # type: ignore[no-untyped-def]
    from datetime import timedelta
    from unittest import mock

    import pendulum
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import TimeRestriction

    dag = dagbag.dags["laketide_close_clicks"]
    assert {t.task_id for t in dag.tasks} == {"plan", "decide_ready", "close_ready.verify", "close_ready.close",
                                              "wait_for_partition", "decide", "close_hour.verify",
                                              "close_hour.close", "find_reopened", "reclose", "note"}
    # the sensor waits for the last hour the plan names: the run's partition, unless the run was given a range
    assert dag.get_task("wait_for_partition").partition == "{{ ti.xcom_pull(task_ids='plan')[-1] }}"
    assert dag.get_task("wait_for_partition").deferrable
    # the note runs last whatever happened, and does not decide the run's state (a teardown)
    note = dag.get_task("note")
    assert note.is_teardown and not note.on_failure_fail_dagrun
    assert note.upstream_task_ids == {"close_ready.close", "close_hour.close", "reclose"}

    # the timetable as the scheduler runs it: the run at 04:00 (after 04:05, without catchup) closes 03:00, and its
    # partition key says so; the next one closes 04:00
    timetable = DagSerialization.from_dict(DagSerialization.to_dict(dag)).timetable
    assert timetable.partitioned
    start = pendulum.datetime(2026, 11, 22, 3, tz="UTC")
    restriction = TimeRestriction(pendulum.datetime(2000, 1, 1, tz="UTC"), None, catchup=False)
    with mock.patch("airflow.timetables.trigger.utcnow", return_value=start + timedelta(hours=1, minutes=5)):
        first = timetable.next_dagrun_info_v2(last_dagrun_info=None, restriction=restriction)
    assert first is not None
    assert (first.run_after, first.partition_key, first.partition_date) == (
        start + timedelta(hours=1), "2026-11-22T03:00:00", start)
    following = timetable.next_dagrun_info_v2(last_dagrun_info=first, restriction=restriction._replace(catchup=True))
    assert following is not None and following.partition_key == "2026-11-22T04:00:00"
    assert timetable.resolve_partition_date("2026-11-22T03:00:00") == start

    assert [a.uri for a in dag.get_task("close_hour.close").outlets] == ["iceberg://laketide/lake/clicks"]
    downstream = dagbag.dags["laketide_example_downstream"]
    assert "iceberg://laketide/lake/clicks" in str(downstream.timetable.asset_condition)


def test_the_daily_rollup_waits_for_all_24_hours_of_a_day(dagbag) -> None:  # type: ignore[no-untyped-def]
    """The example downstream DAG's schedule as the scheduler evaluates it: the close's hourly keys map to their
    UTC day; the day's run fires with its 24 hours, not with 23."""
    from airflow.serialization.serialized_objects import DagSerialization

    from laketide.close.closing import airflow_key

    dag = DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags["laketide_example_downstream"]))
    timetable = dag.timetable
    assert timetable.partitioned
    (asset,) = list(timetable.asset_condition.iter_assets())
    mapper = timetable.get_partition_mapper(name=asset[0].name, uri=asset[0].uri)
    day = [datetime(2026, 11, 22, h, tzinfo=UTC) for h in range(24)]
    keys = [airflow_key(h) for h in day]
    assert {mapper.to_downstream(k) for k in keys} == {"2026-11-22"}
    assert mapper.to_downstream(airflow_key(datetime(2026, 11, 23, 0, tzinfo=UTC))) == "2026-11-23"
    assert mapper.to_upstream("2026-11-22") == frozenset(keys)
    assert not mapper.wait_policy.is_satisfied_by_keys(matched=set(keys[:23]), expected=frozenset(keys)).satisfied
    assert mapper.wait_policy.is_satisfied_by_keys(matched=set(keys), expected=frozenset(keys)).satisfied
    assert timetable.resolve_partition_date("2026-11-22") == day[0]


def test_the_changes_example_runs_once_per_closed_hour_of_an_upsert_stream(
        airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    from laketide.airflow.downstream import hour_of
    from tests.helpers import ACCOUNT_FIELDS, ACCOUNT_UPSERT

    config_path = write_config(tmp_path, table="lake.account_changes", rejects_table="lake.account_changes_rejects",
                               event_time_field="changed_at", event_id_field="change_id", fields=ACCOUNT_FIELDS,
                               upsert=ACCOUNT_UPSERT)
    monkeypatch.setenv("LAKETIDE_CONFIG", str(config_path))
    bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
    assert bag.import_errors == {}
    dag = DagSerialization.from_dict(DagSerialization.to_dict(bag.dags["laketide_example_changes"]))
    assert dag.timetable.partitioned
    (asset,) = list(dag.timetable.asset_condition.iter_assets())
    assert asset[0].uri == "iceberg://laketide/lake/account_changes"  # the change log's closed hours
    mapper = dag.timetable.get_partition_mapper(name=asset[0].name, uri=asset[0].uri)
    assert mapper.to_downstream("2026-11-22T03:00:00") == "2026-11-22T03:00:00"  # one run per hour
    assert hour_of("2026-11-22T03:00:00") == datetime(2026, 11, 22, 3, tzinfo=UTC)
    with pytest.raises(ValueError, match="is not an hour like"):
        hour_of("2026-11-22")
