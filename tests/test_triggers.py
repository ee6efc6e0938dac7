"""The partition-completion trigger and sensor, over the real lake (real clock)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.airflow.triggers import PartitionCompletionTrigger
from laketide.close.partitions import State
from laketide.lake.hours import partition_key
from tests.helpers import load
from tests.lake import Lake


def trigger(lake: Lake, hour: int, **kwargs: Any) -> PartitionCompletionTrigger:
    return PartitionCompletionTrigger(str(lake.config_path), "clicks", lake.key(hour), **kwargs)


def first_event(t: PartitionCompletionTrigger) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        event = await asyncio.wait_for(t.run().asend(None), timeout=60)
        return dict(event.payload)

    return asyncio.run(go())


def test_serialize_round_trip(lake: Lake) -> None:
    from airflow.sdk.module_loading import import_string

    t = trigger(lake, 0, cursor={"partition": lake.key(0), "rows": 3}, poke_interval=5.0,
                deadline="2026-11-22T09:00:00+00:00")
    classpath, kwargs = t.serialize()
    assert classpath == "laketide.airflow.triggers.PartitionCompletionTrigger"
    assert kwargs == {"config_path": str(lake.config_path), "stream": "clicks", "partition": lake.key(0),
                      "cursor": {"partition": lake.key(0), "rows": 3}, "poke_interval": 5.0,
                      "deadline": "2026-11-22T09:00:00+00:00", "catalog": None}
    rebuilt = import_string(classpath)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)


def test_the_trigger_reads_the_catalog_the_sensor_resolved(lake: Lake, tmp_path: Path) -> None:
    """The sensor hands the trigger the catalog of the laketide_catalog connection: the trigger reads that one."""
    from laketide.airflow.hooks import catalog_kwargs
    from laketide.airflow.triggers import check

    config = load(lake.config_path)
    same = catalog_kwargs(config.catalog)
    status, _ = check(str(lake.config_path), "clicks", lake.key(0), None, catalog=same)
    assert status.decided
    other = {**same, "uri": f"sqlite:///{tmp_path}/other.db"}
    status, _ = check(str(lake.config_path), "clicks", lake.key(0), None, catalog=other)
    assert not status.decided and "does not exist" in status.reason


def test_run_yields_complete(lake: Lake) -> None:
    event = first_event(trigger(lake, 0))
    assert event["state"] == "complete" and event["partition"] == lake.key(0)
    assert event["rows"] > 0 and event["snapshot_id"] is not None


def test_run_yields_empty_for_the_quiet_hour(lake: Lake) -> None:
    event = first_event(trigger(lake, 1))
    assert (event["state"], event["rows"]) == ("empty", 0)


def test_run_keeps_waiting_on_an_open_hour_then_times_out(lake: Lake) -> None:
    future = partition_key(datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1))
    deadline = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
    t = PartitionCompletionTrigger(str(lake.config_path), "clicks", future, poke_interval=0.5, deadline=deadline)
    event = first_event(t)
    assert event["state"] == "open" and event["timeout"] is True
    assert datetime.now(UTC) >= datetime.fromisoformat(deadline)


def test_run_checks_off_the_event_loop(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocking metadata reads run in a worker thread: the triggerer's event loop never waits on them."""
    import threading

    from laketide.airflow import triggers

    threads: list[threading.Thread] = []
    real = triggers.check

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(triggers, "check", spy)

    async def go() -> tuple[dict[str, Any], threading.Thread]:
        event = await trigger(lake, 0).run().asend(None)
        return dict(event.payload), threading.current_thread()

    payload, loop_thread = asyncio.run(go())
    assert payload["state"] == "complete"
    assert threads and all(t is not loop_thread for t in threads)


# -- the sensor -------------------------------------------------------------------------------------------

@pytest.fixture()
def sensor_env(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> Lake:
    monkeypatch.setenv("LAKETIDE_CONFIG", str(lake.config_path))
    return lake


def test_sensor_poke_mode(sensor_env: Lake) -> None:
    from laketide.airflow.sensors import PartitionCompletionSensor

    s = PartitionCompletionSensor(task_id="s", stream="clicks", partition=sensor_env.key(0), deferrable=False)
    result = s.poke({})
    assert result.is_done and result.xcom_value["state"] == "complete"


def test_sensor_defers_with_a_cursor_when_undecided(sensor_env: Lake) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    from laketide.airflow.sensors import PartitionCompletionSensor

    future = partition_key(datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1))
    s = PartitionCompletionSensor(task_id="s", stream="clicks", partition=future, timeout=600)
    with pytest.raises(TaskDeferred) as deferred:
        s.execute({})
    t = deferred.value.trigger
    assert isinstance(t, PartitionCompletionTrigger)
    assert t.cursor is not None and t.cursor["snapshot_id"] is not None and t.partition == future
    assert deferred.value.method_name == "execute_complete"


def test_sensor_gap_fails_records_and_names_the_reason(sensor_env: Lake) -> None:
    from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

    from laketide.airflow.sensors import PartitionCompletionSensor
    from laketide.close.status import history

    s = PartitionCompletionSensor(task_id="s", stream="clicks", partition=sensor_env.key(3))
    event = {"stream": "clicks", "partition": sensor_env.key(3), "state": "gap", "rows": 7, "snapshot_id": 1,
             "reason": "stream clicks stalled: no commit since ...", "watermark": None, "checked_at": "x"}
    with pytest.raises(AirflowFailException, match=r"GAP in partition .* stalled"):
        s.execute_complete({"run_id": "manual__gap"}, event)
    (gap,) = [r for r in history(sensor_env.config, "clicks", sensor_env.hours[3]) if r.run_id == "manual__gap"]
    assert gap.state == State.GAP and "stalled" in (gap.reason or "")
    with pytest.raises(AirflowSensorTimeout, match="still lagging"):
        s.execute_complete({"run_id": "r"}, {**event, "state": "lagging", "timeout": True, "reason": "behind"})


def test_run_waits_for_a_writer_that_has_not_created_its_table(tmp_path: Path) -> None:
    """A fresh installation: the table does not exist, the hour is long past. No gap: the trigger keeps
    waiting (until its deadline, with the reason) for the writer to start."""
    from tests.helpers import write_config

    config_path = write_config(tmp_path)
    deadline = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
    t = PartitionCompletionTrigger(str(config_path), "clicks", "2026-01-01T00:00:00+00:00", poke_interval=0.5,
                                   deadline=deadline)
    event = first_event(t)
    assert (event["state"], event["timeout"]) == ("open", True)
    assert "does not exist" in event["reason"] and "waiting for the writer" in event["reason"]
