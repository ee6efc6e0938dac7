"""``dag.test()`` of the close DAG over a real lake, with every way a close is announced: a complete hour closes
(status recorded, an Asset event partitioned by the hour, the done-markers: a marker file, a POST to a real HTTP
endpoint on 127.0.0.1 and a callable; the run's note set through a real Airflow API server), a tampered hour
fails verification with its counts (nothing announced), late rows after a close reopen the hour, which is
verified and closed again with the new counts and announced again (a re-close), and an endpoint that fails
(HTTP 500, then unreachable) is retried and alerted while the hour stays closed.

The tests of this module share one lake and run in order (each builds on the previous state)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.closing import airflow_key
from laketide.close.markers import marker_file
from laketide.close.notes import label
from laketide.close.partitions import State
from laketide.close.reconcile import reconcile
from laketide.close.status import history
from laketide.lake.catalog import load_catalog
from tests.airflow_api import ApiServer, api_server
from tests.endpoint import ALERT_ENV, SINK_ENV, Endpoint, lines
from tests.helpers import ingest
from tests.lake import Lake, build_lake, land_late

pytestmark = pytest.mark.slow
DAG_ID = "laketide_close_clicks"
MARKERS = "LAKETIDE__STREAMS__CLICKS__DONE_MARKERS__"


@dataclass
class Env:
    lake: Lake
    dag: Any
    endpoint: Endpoint
    sink: Path
    alerts: Path
    api: ApiServer
    #: the test process's Spark session, on which the writer runs (``tests.helpers.ingest``)
    spark: Any
    #: when the module's lake was built
    since: datetime

    def marker_path(self, hour: int) -> Path:
        from laketide.config import load_config

        config = load_config(self.lake.config_path)  # with the module's environment: its done-markers
        return marker_file(config, config.stream("clicks"), self.lake.key(hour))

    def marker(self, hour: int) -> dict[str, Any]:
        return json.loads(self.marker_path(hour).read_text())


@pytest.fixture(scope="module")
def env(airflow_db: Path, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    since = datetime.now(UTC)
    lake = build_lake(tmp_path_factory.mktemp("close-lake"), spark)
    side = tmp_path_factory.mktemp("close-side")
    endpoint = Endpoint()
    with api_server(airflow_db, side / "api-server.log") as api, pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAKETIDE_CONFIG", str(lake.config_path))
        mp.setenv("LAKETIDE__CLOSE__POKE_INTERVAL", "1s")
        mp.setenv("LAKETIDE__CLOSE__SENSOR_TIMEOUT", "90s")
        mp.setenv("LAKETIDE__CLOSE__ALERT_CALLBACK", "tests.endpoint:alert")
        mp.setenv("AIRFLOW_CONN_LAKETIDE_AIRFLOW_API", api.connection())
        mp.setenv(f"{MARKERS}FILE", "{warehouse}/_done/{stream}/{date}/{hour}/_SUCCESS")
        mp.setenv(f"{MARKERS}HTTP__URL", endpoint.url)
        mp.setenv(f"{MARKERS}HTTP__ATTEMPTS", "2")
        mp.setenv(f"{MARKERS}HTTP__BACKOFF", "0.2s")
        mp.setenv(f"{MARKERS}HTTP__TIMEOUT", "5s")
        mp.setenv(f"{MARKERS}CALLABLE", "tests.endpoint:record")
        mp.setenv(f"{MARKERS}RETRIES", "1")
        mp.setenv(f"{MARKERS}RETRY_DELAY", "1s")
        mp.setenv(SINK_ENV, str(side / "callable.jsonl"))
        mp.setenv(ALERT_ENV, str(side / "alerts.jsonl"))
        from airflow.dag_processing.dagbag import DagBag

        from laketide.config import REPO_ROOT

        bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
        assert bag.import_errors == {}
        # with done-markers configured, each close, re-close and the redo's re-close has a task that fires them
        close = bag.dags[DAG_ID]
        assert {"close_hour.done_markers", "close_ready.done_markers", "reclose_done_markers"} <= set(close.task_ids)
        assert close.get_task("close_hour.done_markers").upstream_task_ids == {"close_hour.close"}
        assert bag.dags["laketide_redo"].get_task("done_markers_clicks").upstream_task_ids == {"reclose_clicks"}
        yield Env(lake, bag.dags[DAG_ID], endpoint, side / "callable.jsonl", side / "alerts.jsonl", api, spark, since)
    endpoint.stop()


def states(lake: Lake, hour: int) -> list[State]:
    return [r.state for r in history(lake.config, "clicks", lake.hours[hour])]


def asset_events(env: Env, partition: str) -> list[dict[str, Any]]:
    """The close DAG's Asset events of a partition since this module's lake was built (the worker's Airflow database
    may hold another module's closes of the same hour): their extra, and the event's own partition key."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (session.query(AssetEvent)
                .filter(AssetEvent.source_dag_id == DAG_ID, AssetEvent.timestamp >= env.since)
                .order_by(AssetEvent.id).all())
        return [{**e.extra, "partition_key": e.partition_key} for e in rows if e.extra.get("partition") == partition]


def run_note(run: Any) -> str | None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.query(DagRun).filter(DagRun.run_id == run.run_id).one().note  # type: ignore[no-any-return]


def lake_rows(lake: Lake) -> dict[str, tuple[int, int, int]]:
    return {p.partition: (p.audit, p.lake, p.rejects) for p in reconcile(lake.config, lake.stream).partitions}


def close_run(dag: Any, hour: datetime, later: timedelta = timedelta(0)) -> Any:
    """``dag.test()`` of a manual run (no partition key) at the hour's end, or ``later`` in the next hour: it closes
    the last hour that ended before its logical date."""
    run = dag.test(logical_date=hour + timedelta(hours=1) + later)
    assert run.partition_key is None
    (plan,) = [ti for ti in run.get_task_instances() if ti.task_id == "plan"]
    assert plan.xcom_pull(task_ids="plan") == [hour.isoformat()]
    return run


def keyed_run(dag: Any, hour: datetime) -> Any:
    """``dag.test()`` of a run that carries the hour as its partition key, as a scheduled run, a backfill's or
    one triggered with a key does (``dag.test()`` itself creates runs without one: the run it creates is given
    the key the scheduler would give it)."""
    from airflow.serialization.definitions.dag import SerializedDAG

    key = airflow_key(hour)
    real = SerializedDAG.create_dagrun

    def create_dagrun(self: Any, **kwargs: Any) -> Any:
        return real(self, **kwargs, partition_key=key, partition_date=self.timetable.resolve_partition_date(key))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SerializedDAG, "create_dagrun", create_dagrun)
        run = dag.test(logical_date=hour + timedelta(hours=1))
    assert run.partition_key == key
    return run


def task_states(run: Any) -> dict[str, str]:
    """State per task (the close of the run's one hour is the mapped group's only instance: ``close_hour.*``)."""
    return {ti.task_id.removeprefix("close_hour."): ti.state for ti in run.get_task_instances()}


def test_complete_hour_closes_with_status_partitioned_event_markers_and_note(env: Env) -> None:
    lake, dag = env.lake, env.dag
    run = keyed_run(dag, lake.hours[0])
    assert run.state == "success", task_states(run)
    assert states(lake, 0) == [State.COMPLETE, State.VERIFIED, State.CLOSED]
    closed = history(lake.config, "clicks", lake.hours[0])[-1]
    audit, rows, rejects = lake_rows(lake)[lake.key(0)]
    assert (closed.audit, closed.rows, closed.rejects) == (audit, rows, rejects)
    current = load_catalog(lake.config.catalog).load_table("lake.clicks").metadata.current_snapshot_id
    assert closed.snapshot_id == current

    # one Asset event, partitioned by the hour (Airflow's key), the close record as its extra
    (event,) = asset_events(env, lake.key(0))
    record = {"stream": "clicks", "table": "lake.clicks", "partition": lake.key(0), "rows": rows, "rejects": rejects,
              "duplicates_removed": 0, "audit": audit, "snapshot_id": str(current),
              "closed_at": closed.recorded_at.isoformat(), "reclose": False,
              "snapshot_range": {"from": None, "to": str(current)}}  # its first close: every row of the hour
    assert event == {**record, "partition_key": airflow_key(lake.hours[0])}
    # the same record through every done-marker: the marker file, the POST, the callable
    assert env.marker(0) == record
    assert env.endpoint.posts == [record] and lines(env.sink) == [record]
    assert run_note(run) == f"hour {label(lake.hours[0])}: closed, complete, {rows:,} rows"


def test_tampered_hour_fails_verification_with_the_counts(env: Env) -> None:
    from pyiceberg.expressions import EqualTo

    lake, dag = env.lake, env.dag
    table = load_catalog(lake.config.catalog).load_table("lake.clicks")
    start, end = lake.hours[2], lake.hours[3]
    ids = table.scan(row_filter=f"event_time >= '{start.isoformat()}' and event_time < '{end.isoformat()}'",
                     selected_fields=("event_id",), limit=1).to_arrow()["event_id"].to_pylist()
    audit, rows, rejects = lake_rows(lake)[lake.key(2)]
    table.delete(delete_filter=EqualTo("event_id", ids[0]))

    run = close_run(dag, lake.hours[2])
    assert run.state == "failed"
    assert task_states(run)["verify"] == "failed" and task_states(run)["close"] != "success"
    assert states(lake, 2) == [State.COMPLETE, State.FAILED]
    failed = history(lake.config, "clicks", lake.hours[2])[-1]
    assert (failed.audit, failed.rows, failed.rejects) == (audit, rows - 1, rejects)
    assert f"audit {audit}" in (failed.reason or "") and f"lake {rows - 1}" in (failed.reason or "")
    # nothing announced; the note says why
    assert asset_events(env, lake.key(2)) == [] and len(env.endpoint.posts) == 1
    assert not env.marker_path(2).exists()
    note = run_note(run)
    assert note is not None and note.startswith(
        f"hour {label(lake.hours[2])}: not closed: verification failed (audit {audit} != lake {rows - 1} + rejects "
        f"{rejects} (missing 1); expect_table_row_count_to_equal"), note
    assert "done-markers failed" not in note  # they did not run: nothing was closed


def test_late_rows_after_close_reopen_and_reclose(env: Env) -> None:
    lake, dag = env.lake, env.dag
    before = lake_rows(lake)[lake.key(0)]
    land_late(lake, lake.hours[0], events=40, seed=99)
    ingest(env.spark, lake.config_path)
    audit, rows, rejects = lake_rows(lake)[lake.key(0)]
    assert rows == before[1] + 40 and audit == before[0] + 40

    # a run that closes the hour itself (a close range over it) is not handed it again to re-close
    from laketide.close.closing import find_reopened

    assert find_reopened(lake.config, lake.stream, "probe", closing=[lake.key(0)]) == []
    # the next scheduled close (the quiet hour) also finds the reopened hour and closes it again
    run = keyed_run(dag, lake.hours[1])
    assert run.state == "success", task_states(run)
    assert states(lake, 1) == [State.EMPTY, State.VERIFIED, State.CLOSED]
    assert states(lake, 0) == [State.COMPLETE, State.VERIFIED, State.CLOSED,
                               State.REOPENED, State.VERIFIED, State.CLOSED]
    reclosed = history(lake.config, "clicks", lake.hours[0])[-1]
    assert (reclosed.audit, reclosed.rows, reclosed.rejects) == (audit, rows, rejects)
    events = asset_events(env, lake.key(0))
    assert [(e["rows"], e["reclose"], e["partition_key"]) for e in events] == [
        (before[1], False, airflow_key(lake.hours[0])), (rows, True, airflow_key(lake.hours[0]))]
    (quiet,) = asset_events(env, lake.key(1))
    assert quiet["rows"] == 0 and not quiet["reclose"] and quiet["partition_key"] == airflow_key(lake.hours[1])

    # the re-close overwrote the hour's marker file and was posted and called again, as was the quiet hour's close
    assert env.marker(0) == {k: v for k, v in events[-1].items() if k != "partition_key"}
    assert env.marker(1)["rows"] == 0
    posted = {(p["partition"], p["reclose"]): p["rows"] for p in env.endpoint.posts[1:]}
    assert posted == {(lake.key(0), True): rows, (lake.key(1), False): 0}
    assert {(s["partition"], s["reclose"]): s["rows"] for s in lines(env.sink)[1:]} == posted
    assert run_note(run) == (f"hour {label(lake.hours[1])}: closed, empty, 0 rows; "
                             f"re-closed: {label(lake.hours[0])} ({rows:,} rows)")


def test_a_failing_endpoint_is_retried_and_alerted_and_the_hour_stays_closed(env: Env) -> None:
    lake, dag = env.lake, env.dag
    alerts_before = len(lines(env.alerts))
    env.endpoint.mode = "fail-then-down"  # one HTTP 500, then nothing listens on its port
    closes = states(lake, 1).count(State.CLOSED)
    # the quiet hour, closed again (a re-close: consumers read it again), by a manual run in the next hour
    run = close_run(dag, lake.hours[1], later=timedelta(minutes=30))

    assert run.state == "failed", task_states(run)
    done = next(ti for ti in run.get_task_instances() if ti.task_id == "close_hour.done_markers")
    assert done.state == "failed" and done.try_number == 2  # retried once, as configured
    assert task_states(run)["close"] == "success"
    # the hour stays closed: its close is recorded and announced; the marker file (the action that worked) too
    assert states(lake, 1)[-1] == State.CLOSED and states(lake, 1).count(State.CLOSED) == closes + 1
    assert [e["reclose"] for e in asset_events(env, lake.key(1))] == [False, True]
    assert env.marker(1)["reclose"] is True
    # the endpoint answered 500 once and was unreachable afterwards; the failure reached the alert callback
    assert env.endpoint.answers.count(500) == 1
    (alert,) = lines(env.alerts)[alerts_before:]
    assert alert["task_id"] == "close_hour.done_markers" and alert["run_id"] == run.run_id
    assert "failed 2 time(s); last: unreachable" in alert["error"] and "The hour stays closed" in alert["error"]
    note = run_note(run)
    assert note == (f"hour {label(lake.hours[1])}: closed, empty, 0 rows; done-markers failed for "
                    f"{label(lake.hours[1])} (alerted; the hours stay closed)"), note


def test_a_note_the_api_refuses_names_the_reason(env: Env) -> None:
    """What the note task logs when the REST API refuses (the run itself is not affected): a wrong password, a run
    that does not exist."""
    from laketide.airflow.notes import ApiAccess, set_run_note
    from laketide.errors import RunNoteError

    with pytest.raises(RunNoteError, match=r"POST .*/auth/token: HTTP 401"):
        set_run_note(ApiAccess(env.api.url, "admin", "wrong"), DAG_ID, "nope", "x", attempts=1)
    with pytest.raises(RunNoteError, match=r"PATCH .*/dagRuns/no%20such%20run\?update_mask=note: HTTP 404"):
        set_run_note(ApiAccess(env.api.url, env.api.login, env.api.password), DAG_ID, "no such run", "x", attempts=1)
