"""Stopping a writer: a stop file is honoured whenever it appears (also one found at the start, used up once), SIGTERM
to the writer's whole process group (the Python driver and the Spark JVM together) is a clean stop with exit 0, and a
failed stream's back-off starts again from the first wait once it recovered."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from laketide.ingest.group import FIRST_BACKOFF, MAX_BACKOFF, retry_wait
from laketide.ingest.runner import stop_file
from laketide.lake import writer_status
from laketide.lake.commits import read_checkpoint
from laketide.lake.lease import engine_for
from tests.helpers import exit_code, ingest, load, start_writer, unique_catalog, wait_for_log, write_config
from tests.test_writer import assert_exactly_once, produce


def test_the_back_off_resets_once_the_stream_recovered() -> None:
    waits = [retry_wait(0, False)]
    for _ in range(8):  # a batch that keeps failing at once: 1, 2, 4, ... minutes, up to 30
        waits.append(retry_wait(waits[-1], False))
    assert waits[:4] == [FIRST_BACKOFF, 2 * FIRST_BACKOFF, 4 * FIRST_BACKOFF, 8 * FIRST_BACKOFF]
    assert waits[-1] == MAX_BACKOFF
    assert retry_wait(MAX_BACKOFF, True) == FIRST_BACKOFF  # it committed since its last start: a new failure
    assert retry_wait(4 * FIRST_BACKOFF, True) == FIRST_BACKOFF


def _land(config_path: Path, hour: str, seed: int) -> None:
    produce(config_path, "--start", hour, "--hours", "1", "--events-per-hour", "60", "--events-per-file", "20",
            "--malformed-ratio", "0.05", "--seed", str(seed))


@pytest.mark.slow
def test_a_stop_file_found_at_the_start_is_honoured_once(spark: Any, tmp_path: Path) -> None:
    """The application runs on this process's Spark session (``tests.helpers.ingest``)."""
    path = write_config(tmp_path, catalog_name=unique_catalog("stops"))
    _land(path, "2026-11-22T03:00:00+00:00", seed=31)
    config = load(path)
    stream = config.stream("clicks")
    flag = stop_file(stream)
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()  # e.g. a redo asked the writer to stop while it was starting
    ingest(spark, path)
    assert not flag.exists()  # used up: it cannot keep the stream from starting for ever
    assert read_checkpoint(stream.checkpoint_path).last_commit is None  # nothing ingested: it did not start
    status = writer_status.read(engine_for(config.catalog))["clicks"]
    assert status.state == "stopped" and str(flag) in status.reason, status
    ingest(spark, path)  # the next start runs
    assert_exactly_once(path)
    status = writer_status.read(engine_for(config.catalog))["clicks"]
    assert status.state == "done" and status.figures["backlog"] == 0, status  # figured after its last commit


@pytest.mark.slow
def test_sigterm_to_the_process_group_is_a_clean_stop(spark: Any, tmp_path: Path) -> None:
    """``kill -- -PGID`` (a supervisor's Ctrl-C, ``systemctl stop``) reaches the driver and the JVM at once, here
    as batch 1 begins: whichever of the two sees the stop first, the batch is cut short, not failed (the race where
    the batch's thread sees the JVM go first: ``tests.test_failures``)."""
    import time

    from laketide.ingest import failures

    path = write_config(tmp_path, catalog_name=unique_catalog("sigterm"), trigger_interval="1s",
                        max_files_per_trigger=1)
    _land(path, "2026-11-22T04:00:00+00:00", seed=41)
    held = tmp_path / "faults"
    proc = start_writer(path, mode="continuous", LAKETIDE_FAULT="batch_start:1", LAKETIDE_FAULT_MODE="hold",
                        LAKETIDE_FAULT_DIR=str(held))
    log = tmp_path / "writer.log"
    wait_for_log(path, "batch 0 committed", proc)
    deadline = time.monotonic() + 120
    while not (held / "batch_start-1.reached").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    (held / "batch_start-1.release").touch()
    time.sleep(0.15)  # the batch goes on within 0.2 s, to its data files' write (a call into the JVM, 0.2 s or more)
    os.killpg(proc.pid, signal.SIGTERM)
    code = exit_code(proc, log)
    text = log.read_text(errors="replace")
    assert code == 0, text[-5000:]
    assert "stopped on SIGTERM" in text, text[-5000:]
    assert "Traceback" not in text and "ERROR laketide" not in text, text[-5000:]  # the JVM may say it was stopped
    stream = load(path).stream("clicks")
    assert not failures.in_flight_path(stream).exists()  # a clean stop is not a death of the JVM
    assert not failures.record_path(stream).exists()  # nor a failure of the batch it cut short
    ingest(spark, path)  # the rest of what landed, replayed from where it stopped (on this process's session)
    assert_exactly_once(path)
