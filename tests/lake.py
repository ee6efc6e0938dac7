"""A small real lake for the partition tests: four hours landed by the real producer, one of them quiet,
with late and malformed lines, ingested by the real writer. Hours are placed just before the real clock
(commit times are real: no event is ahead of the writer's clock), and the tests move a controllable clock from
there."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from laketide.config import LaketideConfig
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import partition_key
from tests.helpers import ingest, load, unique_catalog, write_config
from tests.test_writer import produce

IDLE = "3s"
LATENESS = "10m"


@dataclass(frozen=True)
class Lake:
    config_path: Path
    config: LaketideConfig
    #: the landed hours: H-4, H-3 (quiet), H-2, H-1 where H is the current real hour
    hours: list[datetime]
    #: when the writer's last commit happened (the table's current snapshot)
    written_at: datetime

    @property
    def stream(self):  # type: ignore[no-untyped-def]
        return self.config.stream("clicks")

    def key(self, i: int) -> str:
        return partition_key(self.hours[i])


def current_hour() -> datetime:
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


def last_commit_time(config: LaketideConfig, table: str) -> datetime:
    snapshot = load_catalog(config.catalog).load_table(table).current_snapshot()
    assert snapshot is not None
    return datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC)


def build_lake(home: Path, spark: Any) -> Lake:
    """The lake in ``home``; the writer runs on ``spark``, the test process's session (``tests.helpers.ingest``)."""
    now_hour = current_hour()
    start = now_hour - timedelta(hours=4)
    config_path = write_config(home, catalog_name=unique_catalog("lake"), idle_window=IDLE, allowed_lateness=LATENESS,
                               max_files_per_trigger=20)
    produce(config_path, "--start", start.isoformat(), "--hours", "4", "--events-per-hour", "600",
            "--events-per-file", "200", "--malformed-ratio", "0.02", "--late-ratio", "0.05", "--late-by", "8m",
            "--quiet-hours", "1", "--seed", "5")
    ingest(spark, config_path)
    config = load(config_path)
    written = last_commit_time(config, config.stream("clicks").table)
    # let the idle window (3 s) pass in real time since the last commit (trigger and DAG tests use the real clock)
    time.sleep(max(0.0, 3.5 - (datetime.now(UTC) - written).total_seconds()))
    return Lake(config_path, config, [start + timedelta(hours=i) for i in range(4)], written)


def land_late(lake: Lake, hour: datetime, events: int, seed: int) -> None:
    """More events for an hour that may already be closed, in new files (the landing contract)."""
    produce(lake.config_path, "--start", hour.isoformat(), "--hours", "1", "--events-per-hour", str(events),
            "--seed", str(seed))
