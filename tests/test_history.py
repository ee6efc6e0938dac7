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
from tests.airflow_api import sync_dags
from tests.helpers import ingest, kill_group, load, start_writer, unique_catalog, wait_for, write_config
from tests.test_writer import produce

DAG_ID = "laketide_close_clicks"
ROLLUP = "laketide_example_downstream"
AFTER_CLOSE = "laketide_maintain_after_close"
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
def replay(airflow_db: Path, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """36 hours of 2012 landed and ingested for a stream that replays history (``live: false``); the writer process
    is killed between its two commits of batch 1 and the writer restarts (on this process's Spark session)."""
    home = tmp_path_factory.mktemp("history")
    config_path = write_config(home, catalog_name=unique_catalog("history"), live=False, idle_window="3s",
                               allowed_lateness="10m", max_files_per_trigger=25)
    produce(config_path, "--start", START.isoformat(), "--hours", str(HOURS), "--events-per-hour", "40",
            "--events-per-file", "40", "--malformed-ratio", "0.03", "--late-ratio", "0.1", "--late-by", "20m",
            "--quiet-hours", ",".join(map(str, QUIET)), "--seed", "12")
    faults = home / "faults"
    proc = start_writer(config_path, LAKETIDE_FAULT="between_tables:1", LAKETIDE_FAULT_DIR=str(faults))
    wait_for(faults / "between_tables-1.reached", proc)
    kill_group(proc)
    ingest(spark, config_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAKETIDE_CONFIG", str(config_path))
        mp.setenv("LAKETIDE__CLOSE__POKE_INTERVAL", "1s")
        mp.setenv("LAKETIDE__CLOSE__SENSOR_TIMEOUT", "60s")
        from airflow.dag_processing.dagbag import DagBag

        from laketide.config import REPO_ROOT

        bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
        assert bag.import_errors == {}
        # the daily rollup (the example downstream DAG) and the compaction after closes listen: the closes of the
        # replay queue their runs
        sync_dags(unpause=(ROLLUP, AFTER_CLOSE))
        yield config_path, bag.dags[DAG_ID]


def task_states(run: Any) -> dict[str, list[str]]:
    states: dict[str, list[str]] = {}
    for ti in sorted(run.get_task_instances(), key=lambda ti: (ti.task_id, ti.map_index)):
        states.setdefault(ti.task_id, []).append(ti.state)
    return states


def asset_events() -> list[dict[str, Any]]:
    """The close DAG's Asset events: their extra, and the event's own partition key."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        return [{**e.extra, "partition_key": e.partition_key}
                for e in session.query(AssetEvent).filter(AssetEvent.source_dag_id == DAG_ID).all()]


def note_of(run: Any) -> str:
    """What the run's note task composed (its return value; without an API server here, it is only logged)."""
    (ti,) = [ti for ti in run.get_task_instances() if ti.task_id == "note"]
    return str(ti.xcom_pull(task_ids="note"))


def scheduler_step() -> tuple[dict[str, dict[str, int]], dict[str, set[str]]]:
    """What the scheduler makes of the partitioned consumers' queues now (its partitioned-asset step, run in this
    process): per consumer DAG, the runs it starts (partition key -> the number of close events each consumes) and
    the partition keys still waiting."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.asset import AssetPartitionDagRun
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    consumers = (ROLLUP, AFTER_CLOSE)
    with create_session() as session:
        before = {r.id for r in session.query(DagRun).filter(DagRun.dag_id.in_(consumers))}
        SchedulerJobRunner(job=Job())._create_dagruns_for_partitioned_asset_dags(session)
    with create_session() as session:
        started: dict[str, dict[str, int]] = {dag_id: {} for dag_id in consumers}
        for r in session.query(DagRun).filter(DagRun.dag_id.in_(consumers)):
            if r.id not in before:
                started[r.dag_id][r.partition_key] = len(r.consumed_asset_events)
        waiting: dict[str, set[str]] = {dag_id: set() for dag_id in consumers}
        for a in session.query(AssetPartitionDagRun).filter(AssetPartitionDagRun.target_dag_id.in_(consumers),
                                                            AssetPartitionDagRun.created_dag_run_id.is_(None)):
            waiting[a.target_dag_id].add(a.partition_key)
        return started, waiting


@pytest.mark.slow
def test_bad_range_run_fails_before_anything_is_recorded(replay: tuple[Path, Any]) -> None:
    config_path, dag = replay
    run = dag.test(run_conf={"start": "2012-03-05T00:30:00+00:00", "end": "2012-03-05T03:00:00+00:00"})
    assert run.state == "failed"
    assert task_states(run)["plan"] == ["failed"]
    assert "wait_for_partition" not in task_states(run) or task_states(run)["wait_for_partition"] != ["success"]
    assert history(load(config_path), "clicks") == []
    # the note task still runs (last, whatever happened) and says why nothing closed
    assert note_of(run) == ("refused, nothing closed: start: partition 2012-03-05T00:30:00+00:00 is not the start of "
                            "an hour (a UTC hour start)")


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
        assert events[key]["partition_key"] == key[:19]  # partitioned by the hour: 2012-03-05T18:00:00
    # the last hour of the replay closed through the end of its input (nothing after it to pass the watermark)
    last = history(config, "clicks", end - timedelta(hours=1))[0]
    assert "the input ended" in (last.reason or ""), last.reason
    assert sum(c[0] for c in counts.values()) == 40 * (HOURS - len(QUIET))

    rows = sum(c[1] for c in counts.values())
    assert note_of(run) == (f"{HOURS} hours 2012-03-05 18:00 to 2012-03-07 05:00: {HOURS} closed "
                            f"({HOURS - len(QUIET)} complete, {len(QUIET)} empty), {rows:,} rows")

    # the daily rollup: 2012-03-06 has all 24 hours closed and starts its run; the 5th and the 7th (6 hours each in
    # the replay) wait for theirs
    started, waiting = scheduler_step()
    assert started[ROLLUP] == {"2012-03-06": 24} and {k for k in waiting[ROLLUP] if k.startswith("2012-")} == {
        "2012-03-05", "2012-03-07"}
    # the compaction after closes: every hour maps to one key, so the 36 closes make one run
    assert started[AFTER_CLOSE] == {"closed-hours": HOURS} and not waiting[AFTER_CLOSE]
    from laketide.airflow.downstream import daily_summary, day_of

    day = day_of("2012-03-06")
    summary = daily_summary(config, "clicks", day)
    day_rows = sum(c[1] for k, c in counts.items() if k.startswith("2012-03-06"))
    assert summary["day"] == "2012-03-06" and summary["hours"] == 24 and summary["rows"] == day_rows > 0
    with pytest.raises(ValueError, match="is not a day like 2026-11-22"):
        day_of(None)


@pytest.mark.parametrize("live", [True, False], ids=["live", "replay"])
def test_backfill_creates_one_run_per_old_hour(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               airflow_db: Path, live: bool) -> None:
    """``airflow backfill create`` plans its runs from the DAG's partitioned timetable: one per hour of the range
    (both ends included), each carrying its hour as partition key, years before the DAG's first scheduled run;
    the range param stays empty. The runs are created as the command creates them (then removed again).
    A live stream's close DAG is scheduled hourly; a replayed stream's (``live: false``) never is: the scheduler
    gets no next run from its timetable, while its backfill enumerates the same runs."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.backfill import Backfill, _create_backfill
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session

    from laketide.config import REPO_ROOT

    monkeypatch.setenv("LAKETIDE_CONFIG", str(write_config(tmp_path, live=live)))
    dag = DagBag(dag_folder=str(REPO_ROOT / "dags")).dags[DAG_ID]
    serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert serialized.timetable.can_be_scheduled is live
    assert type(serialized.timetable).__name__ == ("CronPartitionTimetable" if live else "ReplayHours")
    infos = list(serialized.iter_dagrun_infos_between(START, START + timedelta(hours=3)))  # both ends included
    hours = [START + timedelta(hours=h) for h in range(4)]
    assert [(i.partition_key, i.partition_date) for i in infos] == [(h.strftime("%Y-%m-%dT%H:%M:%S"), h)
                                                                    for h in hours]
    assert dag.start_date is not None and dag.start_date <= START and not dag.catchup
    assert dict(dag.params.dump()) == {"start": None, "end": None}

    sync_dags()
    with create_session() as session:  # what the scheduler reads: the next run it would create
        model = session.get(DagModel, DAG_ID)
        assert model is not None
        if live:
            assert model.next_dagrun_partition_key is not None and model.next_dagrun_create_after is not None
        else:
            assert model.next_dagrun_create_after is None and model.next_dagrun_partition_key is None
    backfill = _create_backfill(dag_id=DAG_ID, from_date=START, to_date=START + timedelta(hours=3),
                                max_active_runs=2, reverse=False, dag_run_conf=None, triggering_user_name="test")
    with create_session() as session:
        runs = session.query(DagRun).filter(DagRun.backfill_id == backfill.id).all()
        assert sorted((r.partition_key, r.run_type) for r in runs) == [
            (h.strftime("%Y-%m-%dT%H:%M:%S"), "backfill") for h in hours]
        for run in runs:  # no scheduler runs them here: remove them, and end the backfill
            session.delete(run)
        session.get(Backfill, backfill.id).completed_at = datetime.now(UTC)
