"""History closes: a day and a half of years-old events over three calendar days (night hours without any)
landed by the real producer and ingested by the real writer (SIGKILLed in the middle of a batch, restarted),
then closed by one "close range" run of the close DAG (``dag.test()``) with the real clock: every hour complete
or empty, verified and closed, with exact counts. Also the range param's rules, and the runs a backfill of the
close DAG creates for old hours."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.closing import close_range
from laketide.close.partitions import State
from laketide.close.reconcile import reconcile
from laketide.close.status import history
from laketide.errors import RangeError
from laketide.lake.hours import partition_key
from tests.helpers import kill_group, load, run_writer, start_writer, wait_for, write_config, writer_log
from tests.test_writer import produce

DAG_ID = "laketide_close_clicks"
START = datetime(2012, 3, 5, 18, tzinfo=UTC)  # a Monday evening, long ago
HOURS = 36  # until Wednesday 06:00
QUIET = [7, 8, 9, 10, 31, 32, 33]  # night hours (01:00-05:00, 01:00-04:00) with no event at all
NOW = datetime(2026, 11, 22, 18, 30, tzinfo=UTC)


# -- the range param ------------------------------------------------------------------------------------------

def test_range_is_whole_hours_oldest_first() -> None:
    hours = close_range("2012-03-05T18:00:00+00:00", "2012-03-05T21:00:00Z", NOW, 744)
    assert hours == [START, START + timedelta(hours=1), START + timedelta(hours=2)]
    assert close_range(None, None, NOW, 744) is None and close_range("", "", NOW, 744) is None
    # the last full hour before now is allowed; an offset other than UTC is converted
    assert close_range("2026-11-22T19:00:00+02:00", "2026-11-22T18:00:00+00:00", NOW, 744) == [
        datetime(2026, 11, 22, 17, tzinfo=UTC)]


@pytest.mark.parametrize(("start", "end", "message"), [
    ("2012-03-05T00:00:00+00:00", None, "give both start and end"),
    (None, "2012-03-05T00:00:00+00:00", "give both start and end"),
    ("2012-03-05T00:30:00+00:00", "2012-03-05T03:00:00+00:00", "start: partition 2012-03-05T00:30:00+00:00 is not "
                                                              "the start of an hour"),
    ("2012-03-05T00:00:00", "2012-03-05T03:00:00+00:00", "start: partition 2012-03-05T00:00:00 has no UTC offset"),
    ("yesterday", "2012-03-05T03:00:00+00:00", "start: partition 'yesterday' is not an ISO timestamp"),
    ("2012-03-05T03:00:00+00:00", "2012-03-05T03:00:00+00:00", "must be before end"),
    ("2012-03-05T04:00:00+00:00", "2012-03-05T03:00:00+00:00", "must be before end"),
    ("2026-11-22T18:00:00+00:00", "2026-11-22T19:00:00+00:00", "is in the future"),
    ("2012-03-05T00:00:00+00:00", "2012-04-05T01:00:00+00:00", "the range holds 745 hours, more than "
                                                              "close.max_range_hours (744)"),
])
def test_bad_range_is_refused(start: str | None, end: str | None, message: str) -> None:
    with pytest.raises(RangeError, match=re.escape(message)):
        close_range(start, end, NOW, 744)


# -- over a real replay ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def replay(airflow_db: Path, jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """36 hours of 2012 landed and ingested for a stream that replays history (``live: false``); the writer is
    killed between its two commits of batch 1 and restarted."""
    home = tmp_path_factory.mktemp("history")
    config_path = write_config(home, live=False, idle_window="3s", allowed_lateness="10m", max_files_per_trigger=25)
    produce(config_path, "--start", START.isoformat(), "--hours", str(HOURS), "--events-per-hour", "40",
            "--events-per-file", "40", "--malformed-ratio", "0.03", "--late-ratio", "0.1", "--late-by", "20m",
            "--quiet-hours", ",".join(map(str, QUIET)), "--seed", "12")
    faults = home / "faults"
    proc = start_writer(config_path, LAKETIDE_FAULT="between_tables:1", LAKETIDE_FAULT_DIR=str(faults))
    wait_for(faults / "between_tables-1.reached", proc)
    kill_group(proc)
    assert run_writer(config_path) == 0, writer_log(config_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAKETIDE_CONFIG", str(config_path))
        mp.setenv("LAKETIDE__CLOSE__POKE_INTERVAL", "1s")
        mp.setenv("LAKETIDE__CLOSE__SENSOR_TIMEOUT", "60s")
        from airflow.dag_processing.dagbag import DagBag

        from laketide.config import REPO_ROOT

        bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
        assert bag.import_errors == {}
        yield config_path, bag.dags[DAG_ID]


def task_states(run: Any) -> dict[str, list[str]]:
    states: dict[str, list[str]] = {}
    for ti in sorted(run.get_task_instances(), key=lambda ti: (ti.task_id, ti.map_index)):
        states.setdefault(ti.task_id, []).append(ti.state)
    return states


def asset_events() -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        return [dict(e.extra) for e in session.query(AssetEvent).filter(AssetEvent.source_dag_id == DAG_ID).all()]


@pytest.mark.slow
def test_bad_range_run_fails_before_anything_is_recorded(replay: tuple[Path, Any]) -> None:
    config_path, dag = replay
    run = dag.test(run_conf={"start": "2012-03-05T00:30:00+00:00", "end": "2012-03-05T03:00:00+00:00"})
    assert run.state == "failed"
    assert task_states(run)["plan"] == ["failed"]
    assert "wait_for_partition" not in task_states(run) or task_states(run)["wait_for_partition"] != ["success"]
    assert history(load(config_path), "clicks") == []


@pytest.mark.slow
def test_history_closes_in_one_range_run(replay: tuple[Path, Any]) -> None:
    config_path, dag = replay
    config = load(config_path)
    end = START + timedelta(hours=HOURS)
    run = dag.test(run_conf={"start": START.isoformat(), "end": end.isoformat()})
    assert run.state == "success", task_states(run)
    states = task_states(run)
    # the hours decided when the run started close at once (close_ready: no dependency on the sensor), the rest
    # after the sensor decided the last one; every hour closes once
    assert states["close_ready.close"] + states["close_hour.close"] == ["success"] * HOURS
    assert states["close_hour.close"] == ["success"]  # the replay's last hour: closed when its input ended
    ready = dag.get_task("close_ready.verify")
    assert "wait_for_partition" not in ready.get_flat_relative_ids(upstream=True)

    counts = {p.partition: (p.audit, p.lake, p.rejects) for p in reconcile(config, config.stream("clicks")).partitions}
    events = {e["partition"]: e for e in asset_events()}
    for i in range(HOURS):
        hour = START + timedelta(hours=i)
        key = partition_key(hour)
        steps = history(config, "clicks", hour)
        decided = State.EMPTY if i in QUIET else State.COMPLETE
        # verified once: the range's own close, not a second time by the run's re-close of reopened hours
        assert [r.state for r in steps] == [decided, State.VERIFIED, State.CLOSED], (key, [r.reason for r in steps])
        closed = steps[-1]
        audit, lake, rejects = counts.get(key, (0, 0, 0))
        assert (closed.audit, closed.rows, closed.rejects) == (audit, lake, rejects), key
        assert closed.audit == closed.rows + closed.rejects
        assert (lake > 0) == (i not in QUIET), key
        assert events[key]["rows"] == lake
    # the last hour of the replay closed through the end of its input (nothing after it to pass the watermark)
    last = history(config, "clicks", end - timedelta(hours=1))[0]
    assert "the input ended" in (last.reason or ""), last.reason
    assert sum(c[0] for c in counts.values()) == 40 * (HOURS - len(QUIET))


def test_backfill_creates_one_run_per_old_hour(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               airflow_db: Path) -> None:
    """``airflow backfill create`` plans its runs from the DAG's timetable: one per hour of the range, with that
    hour as the data interval, years before the DAG's first scheduled run; the range param stays empty."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    from laketide.config import REPO_ROOT

    monkeypatch.setenv("LAKETIDE_CONFIG", str(write_config(tmp_path)))
    dag = DagBag(dag_folder=str(REPO_ROOT / "dags")).dags[DAG_ID]
    serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    infos = list(serialized.iter_dagrun_infos_between(START, START + timedelta(hours=3)))  # both ends included
    assert [(i.data_interval.start, i.data_interval.end) for i in infos] == [
        (START + timedelta(hours=h), START + timedelta(hours=h + 1)) for h in range(4)]
    assert dag.start_date is not None and dag.start_date <= START and not dag.catchup
    assert dict(dag.params.dump()) == {"start": None, "end": None}
