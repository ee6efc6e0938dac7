"""Fault injection: SIGKILL the real writer process group at each point of a batch, restart, and prove
lake + rejects == audit per partition with no duplicate event id."""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from laketide.dev.producer import make_event
from laketide.ingest.landing import publish
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import read_checkpoint, table_marker
from tests.helpers import ingest, kill_group, load, start_writer, unique_catalog, wait_for, writer_log
from tests.test_writer import assert_exactly_once, landed

pytestmark = pytest.mark.slow


def marker_batch(config_path: Path, table_attr: str = "table") -> int | None:
    config = load(config_path)
    stream = config.stream("clicks")
    marker = table_marker(load_catalog(config.catalog), getattr(stream, table_attr), stream.writer_id)
    return None if marker is None else marker.batch_id


@pytest.mark.parametrize(
    ("point", "events_batch", "rejects_batch", "spark_committed"),
    [
        # killed after the pre-commit (data files written, in no snapshot), before any commit
        ("before_commit", 0, 0, 0),
        # killed after the rejects commit, before the events commit: half a batch in Iceberg
        ("between_tables", 0, 1, 0),
        # killed after both Iceberg commits, before Spark recorded the batch: replayed and skipped
        ("after_commit", 1, 1, 0),
        # killed between batches: batch 1 fully recorded, batch 2 just planned
        ("batch_start", 1, 1, 1),
    ],
)
@pytest.mark.parametrize("commit_path", ["internal", "public"])
def test_kill_and_restart(
    spark: Any, tmp_path: Path, point: str, events_batch: int, rejects_batch: int, spark_committed: int,
    commit_path: str
) -> None:
    """The writer process is SIGKILLed at the fault point; the writer that restarts from what it left (the
    checkpoint, the catalog, the written files) runs on this process's Spark session."""
    config_path = landed(tmp_path, catalog_name=unique_catalog("faults"), max_files_per_trigger=5,
                         commit_path=commit_path)
    faults = tmp_path / "faults"
    batch = 2 if point == "batch_start" else 1
    proc = start_writer(config_path, LAKETIDE_FAULT=f"{point}:{batch}", LAKETIDE_FAULT_DIR=str(faults))
    wait_for(faults / f"{point}-{batch}.reached", proc)
    kill_group(proc)
    assert proc.returncode == -9

    assert marker_batch(config_path) == events_batch
    assert marker_batch(config_path, "rejects_table") == rejects_batch
    state = read_checkpoint(load(config_path).stream("clicks").checkpoint_path)
    assert state.last_commit == spark_committed

    ingest(spark, config_path)
    if point == "after_commit":
        assert "batch 1 already committed to lake.clicks by clicks-writer: skipped" in writer_log(config_path)
    assert_exactly_once(config_path)
    if commit_path == "public":  # the staging branch of the killed attempt was removed by the next publish
        config = load(config_path)
        catalog = load_catalog(config.catalog)
        for table in (config.stream("clicks").table, config.stream("clicks").rejects_table):
            assert set(catalog.load_table(table).metadata.refs) == {"main"}


def test_continuous_writer_killed_while_producer_runs_then_stops_gracefully(tmp_path: Path) -> None:
    config_path = landed(tmp_path, max_files_per_trigger=5, trigger_interval="1s")
    stream = load(config_path).stream("clicks")
    faults = tmp_path / "faults"
    proc = start_writer(config_path, mode="continuous", LAKETIDE_FAULT="batch_start:3",
                        LAKETIDE_FAULT_DIR=str(faults))
    # more files land while the writer runs; batch 3 only exists because of them
    rng = random.Random(5)
    hour = datetime(2026, 11, 22, 1, tzinfo=UTC)
    for seq in range(4):
        lines = [make_event(stream, rng, hour.replace(minute=seq * 10 + i % 10)) for i in range(200)]
        publish(stream.landing_path, [json.dumps(e) for e in lines], hour.isoformat(), "live", 1000 + seq,
                "clicks")
        time.sleep(1)
    wait_for(faults / "batch_start-3.reached", proc)
    kill_group(proc)

    proc = start_writer(config_path, mode="continuous")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        state = read_checkpoint(stream.checkpoint_path)
        if state.last_commit is not None and state.last_commit >= 3 and state.last_offset == state.last_commit:
            break
        assert proc.poll() is None, writer_log(config_path)
        time.sleep(0.5)
    (stream.checkpoint_path.parent / "clicks.stop").touch()
    assert proc.wait(timeout=120) == 0, writer_log(config_path)
    assert "stops between batches (stop file" in writer_log(config_path)
    assert_exactly_once(config_path)
