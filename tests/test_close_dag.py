"""``dag.test()`` of the close DAG over a real lake: a complete hour closes (status recorded, Asset event
emitted), a tampered hour fails verification with its counts, and late rows after a close reopen the hour,
which is verified and closed again with the new counts.

The tests of this module share one lake and run in order (each builds on the previous state)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.partitions import State
from laketide.close.reconcile import reconcile
from laketide.close.status import history
from laketide.lake.catalog import load_catalog
from tests.helpers import run_writer, writer_log
from tests.lake import Lake, build_lake, land_late

pytestmark = pytest.mark.slow
DAG_ID = "laketide_close_clicks"


@pytest.fixture(scope="module")
def env(airflow_db: Path, jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lake, Any]]:
    lake = build_lake(tmp_path_factory.mktemp("close-lake"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAKETIDE_CONFIG", str(lake.config_path))
        mp.setenv("LAKETIDE__CLOSE__POKE_INTERVAL", "1s")
        mp.setenv("LAKETIDE__CLOSE__SENSOR_TIMEOUT", "90s")
        from airflow.dag_processing.dagbag import DagBag

        from laketide.config import REPO_ROOT

        bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
        assert bag.import_errors == {}
        yield lake, bag.dags[DAG_ID]


def states(lake: Lake, hour: int) -> list[State]:
    return [r.state for r in history(lake.config, "clicks", lake.hours[hour])]


def asset_events(partition: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(AssetEvent).filter(AssetEvent.source_dag_id == DAG_ID).all()
        return [dict(e.extra) for e in rows if e.extra.get("partition") == partition]


def lake_rows(lake: Lake) -> dict[str, tuple[int, int, int]]:
    return {p.partition: (p.audit, p.lake, p.rejects) for p in reconcile(lake.config, lake.stream).partitions}


def close_run(dag: Any, hour: datetime) -> Any:
    """``dag.test()`` of the run that closes ``hour``: a manual run at the hour's end gets it as data interval."""
    run = dag.test(logical_date=hour + timedelta(hours=1))
    assert run.data_interval_start == hour and run.data_interval_end == hour + timedelta(hours=1)
    return run


def task_states(run: Any) -> dict[str, str]:
    """State per task (the close of the run's one hour is the mapped group's only instance: ``close_hour.*``)."""
    return {ti.task_id.removeprefix("close_hour."): ti.state for ti in run.get_task_instances()}


def test_complete_hour_closes_with_status_and_asset_event(env: tuple[Lake, Any]) -> None:
    lake, dag = env
    run = close_run(dag, lake.hours[0])
    assert run.state == "success", task_states(run)
    assert states(lake, 0) == [State.COMPLETE, State.VERIFIED, State.CLOSED]
    closed = history(lake.config, "clicks", lake.hours[0])[-1]
    audit, rows, rejects = lake_rows(lake)[lake.key(0)]
    assert (closed.audit, closed.rows, closed.rejects) == (audit, rows, rejects)
    current = load_catalog(lake.config.catalog).load_table("lake.clicks").metadata.current_snapshot_id
    assert closed.snapshot_id == current
    (event,) = asset_events(lake.key(0))
    assert event["table"] == "lake.clicks" and event["partition"] == lake.key(0) and event["rows"] == rows


def test_tampered_hour_fails_verification_with_the_counts(env: tuple[Lake, Any]) -> None:
    from pyiceberg.expressions import EqualTo

    lake, dag = env
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
    assert asset_events(lake.key(2)) == []


def test_late_rows_after_close_reopen_and_reclose(env: tuple[Lake, Any]) -> None:
    lake, dag = env
    before = lake_rows(lake)[lake.key(0)]
    land_late(lake, lake.hours[0], events=40, seed=99)
    assert run_writer(lake.config_path) == 0, writer_log(lake.config_path)
    audit, rows, rejects = lake_rows(lake)[lake.key(0)]
    assert rows == before[1] + 40 and audit == before[0] + 40

    # a run that closes the hour itself (a close range over it) is not handed it again to re-close
    from laketide.close.closing import find_reopened

    assert find_reopened(lake.config, lake.stream, "probe", closing=[lake.key(0)]) == []
    # the next scheduled close (the quiet hour) also finds the reopened hour and closes it again
    run = close_run(dag, lake.hours[1])
    assert run.state == "success", task_states(run)
    assert states(lake, 1) == [State.EMPTY, State.VERIFIED, State.CLOSED]
    assert states(lake, 0) == [State.COMPLETE, State.VERIFIED, State.CLOSED,
                               State.REOPENED, State.VERIFIED, State.CLOSED]
    reclosed = history(lake.config, "clicks", lake.hours[0])[-1]
    assert (reclosed.audit, reclosed.rows, reclosed.rejects) == (audit, rows, rejects)
    events = asset_events(lake.key(0))
    assert [e["rows"] for e in events] == [before[1], rows]
