"""The first close of a fresh installation: the close DAG's run for an hour starts before the writer has
created the tables. It waits (no gap, no alert) and, once the writer has started and committed, closes the
hour by the usual rules.

``dag.test()`` runs the sensor and its trigger in this process: the first status check is observed, and only
then is the real writer started, in the background, while the run waits."""

from __future__ import annotations

import subprocess
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.partitions import PartitionStatus, State
from laketide.close.status import history
from tests.helpers import kill_group, load, start_writer, write_config, writer_log
from tests.lake import current_hour
from tests.test_writer import produce

pytestmark = pytest.mark.slow
DAG_ID = "laketide_close_clicks"


def test_first_close_waits_for_the_writer_then_closes(
    airflow_db: Path, jars: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    from laketide.airflow import sensors, triggers
    from laketide.config import REPO_ROOT

    # four hours landed, none ingested yet: the hour to close is the oldest, long past its end + lateness
    hour = current_hour() - timedelta(hours=4)
    config_path = write_config(tmp_path, idle_window="3s", allowed_lateness="10m", max_files_per_trigger=20)
    produce(config_path, "--start", hour.isoformat(), "--hours", "4", "--events-per-hour", "60",
            "--events-per-file", "60", "--seed", "3")
    config = load(config_path)
    monkeypatch.setenv("LAKETIDE_CONFIG", str(config_path))
    monkeypatch.setenv("LAKETIDE__CLOSE__POKE_INTERVAL", "1s")
    monkeypatch.setenv("LAKETIDE__CLOSE__SENSOR_TIMEOUT", "240s")

    checks: list[PartitionStatus] = []
    first_check = threading.Event()
    real_check = triggers.check

    def observed(*args: Any, **kwargs: Any) -> Any:
        status, cursor = real_check(*args, **kwargs)
        checks.append(status)
        first_check.set()
        return status, cursor

    monkeypatch.setattr(triggers, "check", observed)
    monkeypatch.setattr(sensors, "check", observed)

    writer: list[subprocess.Popen[bytes]] = []

    def start_after_the_first_check() -> None:
        if first_check.wait(timeout=120):
            writer.append(start_writer(config_path))

    starter = threading.Thread(target=start_after_the_first_check, daemon=True)
    starter.start()
    bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
    assert bag.import_errors == {}
    try:
        run = bag.dags[DAG_ID].test(logical_date=hour + timedelta(hours=1))
        starter.join(timeout=5)
        assert writer, "the close run never checked the partition"
        assert writer[0].wait(timeout=300) == 0, writer_log(config_path)
    finally:
        for proc in writer:
            if proc.poll() is None:
                kill_group(proc)

    # a manual run at the hour's end closes that hour
    plan = next(ti for ti in run.get_task_instances() if ti.task_id == "plan")
    assert plan.xcom_pull(task_ids="plan") == [hour.isoformat()]
    # the first check found no table, hours after the hour was due: it waited instead of declaring a gap
    first = checks[0]
    assert first.state == State.OPEN and "does not exist" in first.reason, first.reason
    assert first.checked_at > hour + timedelta(hours=1, minutes=10) + timedelta(seconds=3)
    assert State.GAP not in [c.state for c in checks]
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "success", (states, [c.reason for c in checks])
    recorded = [r.state for r in history(config, "clicks", hour)]
    assert recorded == [State.COMPLETE, State.VERIFIED, State.CLOSED], recorded
    closed = history(config, "clicks", hour)[-1]
    assert closed.rows and closed.audit == closed.rows + (closed.rejects or 0)
