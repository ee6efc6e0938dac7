"""A year of landing files: closed hours' files leave ``data/`` for ``archive/<hour>/`` (``laketide.close.archive``),
and everything that reads an hour's files still finds them.

One real lake, built step by step (the tests of this module run in order): the real writer application ingests on
the test process's SparkSession, hours are verified and closed by the close's own functions, a redo runs in
process. Adversarial schedules: a batch the writer committed to Iceberg but not to its checkpoint (a kill between
the two: Spark reads that batch's files again on restart, so they must stay), a file landing late after its hour
closed (not archived until ingested and re-closed), a sweep already under way, a redo holding the stream, a redo
that must re-ingest archived files, a sweep (a real process) while a backfill reads the files it would move."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from laketide.close.archive import LOCKED, archive_closed, archive_lock
from laketide.close.closing import close, find_reopened, verify
from laketide.close.reconcile import reconcile
from laketide.close.verify import verify_partition
from laketide.config import LaketideConfig, StreamConfig
from laketide.ingest.landing import (
    archive_dir,
    audit_dir,
    audit_name,
    data_dir,
    hour_archive,
    name_hour,
    stray_audits,
)
from laketide.lake.catalog import load_catalog
from laketide.lake.checkpoint_log import batch_ids, log_offset, source_entries
from laketide.lake.hours import parse_partition
from tests.helpers import config_env, ingest, load, unique_catalog, write_config
from tests.test_writer import assert_exactly_once, produce

pytestmark = pytest.mark.slow
HOURS = ["2026-11-20T08:00:00+00:00", "2026-11-20T09:00:00+00:00", "2026-11-20T10:00:00+00:00"]


@dataclass
class Lake:
    config_path: Path
    config: LaketideConfig
    good: int  # the events table's snapshot after the first two hours

    @property
    def stream(self) -> StreamConfig:
        return self.config.stream("clicks")


def live(stream: StreamConfig) -> set[str]:
    return {p.name for p in data_dir(stream.landing_path).glob("*.jsonl")}


def archived(stream: StreamConfig, hour: str) -> set[str]:
    folder = hour_archive(stream.landing_path, hour)
    return {p.name for p in folder.glob("*.jsonl")} if folder.is_dir() else set()


def archived_audits(stream: StreamConfig, hour: str) -> set[str]:
    folder = hour_archive(stream.landing_path, hour)
    return {p.name for p in folder.glob("*.json")} if folder.is_dir() else set()


def content(lake: Lake) -> Counter[str]:
    table = load_catalog(lake.config.catalog).load_table(lake.stream.table)
    return Counter(table.scan(selected_fields=("event_id",)).to_arrow().column("event_id").to_pylist())


def close_hours(lake: Lake, hours: list[str]) -> None:
    for hour in hours:
        close(lake.config, lake.stream, verify(lake.config, lake.stream, parse_partition(hour)))


def closed_in_data(spark: Any, lake: Lake, hour: str, *produce_args: str) -> set[str]:
    """A new hour of 150 events in 3 files, ingested, then closed while archiving is off: its files stay in data/."""
    stream = lake.stream
    produce(lake.config_path, "--start", hour, "--hours", "1", "--events-per-hour", "150", "--events-per-file", "50",
            *produce_args)
    ingest(spark, lake.config_path)
    names = live(stream)
    assert len(names) == 3
    off = lake.config.model_copy(update={"streams": [stream.model_copy(update={"archive_closed_hours": False})]})
    close(off, off.stream("clicks"), verify(off, off.stream("clicks"), parse_partition(hour)))
    assert live(stream) == names
    return names


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    home = tmp_path_factory.mktemp("archive-lake")
    config_path = write_config(home, catalog_name=unique_catalog("archive"), max_files_per_trigger=3, live=False)
    produce(config_path, "--start", HOURS[0], "--hours", "2", "--events-per-hour", "200", "--events-per-file", "50",
            "--malformed-ratio", "0.03", "--seed", "31")
    ingest(spark, config_path)
    config = load(config_path)
    good = load_catalog(config.catalog).load_table(config.stream("clicks").table).metadata.current_snapshot_id
    assert good is not None
    produce(config_path, "--start", HOURS[2], "--hours", "1", "--events-per-hour", "200", "--events-per-file", "50",
            "--malformed-ratio", "0.03", "--seed", "32")
    ingest(spark, config_path)
    assert_exactly_once(config_path)
    return Lake(config_path, config, good)


def test_a_close_archives_its_hour_except_a_batch_the_checkpoint_has_not_finished(spark: Any, lake: Lake) -> None:
    stream = lake.stream
    checkpoint = Path(stream.checkpoint_path)
    by_hour = {h: {n for n in live(stream) if name_hour(n) == h} for h in HOURS}
    assert all(len(names) == 4 for names in by_hour.values())
    # the writer committed its last batch to Iceberg, then died before its checkpoint's commit: Spark reads that
    # batch's files again on restart (and laketide skips its commit), so they must still be in data/
    last = batch_ids(checkpoint / "commits")[-1]
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    unfinished_log_batch = log_offset(checkpoint, last)
    unfinished = {Path(e["path"]).name for e in source_entries(checkpoint) if e["batchId"] == unfinished_log_batch}
    assert unfinished and unfinished <= by_hour[HOURS[2]]

    close_hours(lake, HOURS)

    assert live(stream) == unfinished
    for hour in HOURS:
        assert archived(stream, hour) == by_hour[hour] - unfinished
        assert archived_audits(stream, hour) == {audit_name(n) for n in by_hour[hour] - unfinished}
    assert {p.name for p in audit_dir(stream.landing_path).iterdir()} == {audit_name(n) for n in unfinished}

    # the restart reads the unfinished batch again from data/: nothing fails, nothing is added twice
    before = content(lake)
    ingest(spark, lake.config_path)
    assert content(lake) == before
    assert_exactly_once(lake.config_path)
    # and the next sweep (what ./laketide archive runs) takes them, now that the checkpoint has finished the batch
    from laketide.cli import main

    assert main(["archive", "--stream", "clicks", "--dry-run"]) == 0
    assert live(stream) == unfinished
    result = archive_closed(lake.config, stream)
    assert result.moved == {HOURS[2]: len(unfinished)} and not result.kept
    assert live(stream) == set()
    assert archived(stream, HOURS[2]) == by_hour[HOURS[2]]


def test_archived_hours_verify_reconcile_and_plan_a_backfill_as_before(lake: Lake) -> None:
    from laketide.redo.backfill import prepare
    from laketide.redo.overwrite import validate_request

    stream = lake.stream
    assert live(stream) == set()
    for hour in HOURS:
        result = verify_partition(lake.config, stream, parse_partition(hour))
        assert result.success, result.failures
        assert result.audit == 200 and result.lake + result.rejects == 200 and not result.findings
    report = reconcile(lake.config, stream)
    assert report.ok and not report.findings and not report.pending_files, report.problems()
    assert {p.partition for p in report.partitions} == set(HOURS)
    assert_exactly_once(lake.config_path)
    # a backfill of archived hours finds every ingested file (none "missing", which would refuse it)
    plan = prepare(lake.config, validate_request(lake.config, "backfill", "clicks", HOURS[0], HOURS[2]))
    assert not plan.missing and set(plan.files) == archived(stream, HOURS[0]) | archived(stream, HOURS[1])


def test_a_late_file_stays_until_ingested_and_its_hour_closes_again(spark: Any, lake: Lake) -> None:
    stream = lake.stream
    produce(lake.config_path, "--start", HOURS[0], "--hours", "1", "--events-per-hour", "30", "--events-per-file",
            "30", "--seed", "33", "--producer-id", "late")
    (late,) = live(stream)
    result = archive_closed(lake.config, stream)  # landed after the close, not ingested: stays
    assert result.kept == {HOURS[0]: 1} and not result.moved and live(stream) == {late}
    ingest(spark, lake.config_path)
    assert find_reopened(lake.config, stream) == [HOURS[0]]
    close_hours(lake, [HOURS[0]])
    assert live(stream) == set() and late in archived(stream, HOURS[0])
    assert_exactly_once(lake.config_path)


def test_no_sweep_beside_another_or_under_a_redo(lake: Lake) -> None:
    from laketide.redo.job import lease_of

    stream = lake.stream
    with archive_lock(stream.landing_path, wait=False) as mine:
        assert mine
        result = archive_closed(lake.config, stream)
        assert result.skipped == LOCKED
    held = lease_of(lake.config, stream)
    held.acquire()
    try:
        result = archive_closed(lake.config, stream)
        assert result.skipped is not None and result.skipped.startswith("a redo holds the stream")
    finally:
        held.release()
    off = lake.config.model_copy(update={"streams": [stream.model_copy(update={"archive_closed_hours": False})]})
    assert archive_closed(off, off.stream("clicks")).skipped == "streams[clicks].archive_closed_hours is false"


def test_a_redo_waits_for_the_archive_lock_and_says_why(lake: Lake, caplog: pytest.LogCaptureFixture) -> None:
    """A redo moving files back (``restore``) while a sweep or a backfill holds the zone's lock waits for it, and its
    log says what it waits for."""
    from laketide.close.archive import restore

    landing = lake.stream.landing_path
    with archive_lock(landing, wait=False) as mine, caplog.at_level("INFO", logger="laketide.close.archive"):
        assert mine
        waiting = threading.Thread(target=restore, args=(landing, []))
        waiting.start()
        time.sleep(1)
        assert waiting.is_alive()
        assert "waiting for the archive lock" in caplog.text and "a backfill of this landing zone" in caplog.text
    waiting.join(timeout=30)
    assert not waiting.is_alive()


def test_a_redo_reingests_archived_files_and_they_are_archived_again_at_the_reclose(spark: Any, lake: Lake) -> None:
    from laketide.redo import job
    from laketide.redo.params import validate

    stream = lake.stream
    expected = content(lake)
    third = archived(stream, HOURS[2])
    late = {n for n in archived(stream, HOURS[0]) if "-late-" in n}
    assert live(stream) == set() and third and late
    request = validate(lake.config, stream="clicks", snapshot_id=str(lake.good), dry_run="false", run_id="arch-1")
    job.run(lake.config, spark, request)
    # what was taken after the snapshot (the third hour, the late file) was moved back and re-ingested
    assert live(stream) == third | late
    assert content(lake) == expected
    assert_exactly_once(lake.config_path)
    reopened = sorted(find_reopened(lake.config, stream))
    assert HOURS[2] in reopened
    close_hours(lake, reopened)
    assert live(stream) == set()
    assert archived(stream, HOURS[2]) == third and late <= archived(stream, HOURS[0])
    assert sorted(p.name for p in archive_dir(stream.landing_path).iterdir()) == [
        ".lock", "20261120T08", "20261120T09", "20261120T10"]


def test_a_sweep_killed_between_its_renames_loses_nothing_and_the_next_one_finishes(spark: Any, lake: Lake,
                                                                                     tmp_path: Path) -> None:
    """A new hour, closed while archiving is off, then ``./laketide archive`` (a real process) SIGKILLed once every
    data file is in the archive and no audit record yet: verification and reconcile still add up, and the next
    sweep takes the audit records along."""
    stream = lake.stream
    hour = "2026-11-20T11:00:00+00:00"
    names = closed_in_data(spark, lake, hour, "--seed", "34")

    faults = tmp_path / "faults"
    sweep = subprocess.Popen([sys.executable, "-m", "laketide.cli", "archive", "--stream", "clicks"],
                             env=config_env(lake.config_path, LAKETIDE_FAULT="archive_audits:0",
                                            LAKETIDE_FAULT_DIR=str(faults)), start_new_session=True)
    deadline = time.monotonic() + 120
    while not (faults / "archive_audits-0.reached").exists():
        assert sweep.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait(timeout=30)
    assert live(stream) == set() and archived(stream, hour) == names
    assert archived_audits(stream, hour) == set()
    assert {p.name for p in audit_dir(stream.landing_path).iterdir()} == {audit_name(n) for n in names}
    assert stray_audits(stream.landing_path) == sorted(names)
    result = verify_partition(lake.config, stream, parse_partition(hour))
    assert result.success and result.audit == 150 and not result.findings, result.failures
    assert reconcile(lake.config, stream).ok
    assert_exactly_once(lake.config_path)

    archive_closed(lake.config, stream)  # the next sweep (or close) takes the records along
    assert archived_audits(stream, hour) == {audit_name(n) for n in names}
    assert list(audit_dir(stream.landing_path).iterdir()) == []
    assert_exactly_once(lake.config_path)


def test_a_sweep_leaves_the_files_a_backfill_is_reading(spark: Any, lake: Lake, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A new hour closed while archiving is off (its files stay in ``data/``), then a backfill of it held once it has
    fixed the paths of the files it re-reads: ``./laketide archive`` (a real process) skips the zone instead of moving
    them from under it; released, the backfill re-reads every file and changes no row; the next sweep moves them."""
    from laketide.dev import faults as dev_faults
    from laketide.redo import backfill as backfill_module
    from laketide.redo.backfill import backfill, prepare
    from laketide.redo.overwrite import validate_request

    stream = lake.stream
    hour = "2026-11-20T12:00:00+00:00"
    names = closed_in_data(spark, lake, hour, "--malformed-ratio", "0.03", "--seed", "35")
    before = content(lake)

    faults = tmp_path / "faults"
    faults.mkdir()
    for name, value in {"LAKETIDE_FAULT": "backfill_read:0", "LAKETIDE_FAULT_DIR": str(faults),
                        "LAKETIDE_FAULT_MODE": "hold"}.items():
        monkeypatch.setenv(name, value)
    # this process started without LAKETIDE_FAULT, so its pause points are off: armed here, in this module only
    monkeypatch.setattr(backfill_module, "maybe_pause", dev_faults.maybe_pause)
    request = validate_request(lake.config, "backfill", "clicks", hour, "2026-11-20T13:00:00+00:00", False)
    plan = prepare(lake.config, request)
    assert set(plan.files) == names
    outcome: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(backfill(spark, lake.config, request, plan))
        except BaseException as exc:  # handed to the test's thread
            failed.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        deadline = time.monotonic() + 120
        while not (faults / "backfill_read-0.reached").exists():
            assert worker.is_alive() and time.monotonic() < deadline, failed
            time.sleep(0.1)
        sweep = subprocess.run([sys.executable, "-m", "laketide.cli", "archive", "--stream", "clicks"],
                               env=config_env(lake.config_path), capture_output=True, text=True, timeout=120)
        assert sweep.returncode == 0, sweep.stderr
        assert f"archive skipped: {LOCKED}" in sweep.stdout, sweep.stdout
        assert live(stream) == names and archived(stream, hour) == set()
    finally:
        (faults / "backfill_read-0.release").touch()
        worker.join(timeout=300)
    assert not failed, failed
    (result,) = outcome
    assert result.committed
    assert result.hours[hour].rows_after == result.hours[hour].rows_before > 0
    assert content(lake) == before
    assert_exactly_once(lake.config_path)

    moved = archive_closed(lake.config, stream)  # the zone is free again: the hour's files go
    assert moved.moved == {hour: 3} and live(stream) == set() and archived(stream, hour) == names
