"""Reconciliation and the close's verification read one consistent view of a live stream: the events table pinned,
the rejects table pinned to the same batches, the landing zone listed after them. A batch under way (its rejects
committed, its events not yet), a file committed between the reads, a redo between its two rollbacks: none is a
mismatch. Beside a real writer committing while a producer lands files, reconciliation in a loop raises no false
alarm. And what reconciliation reports: a file older than ``source_log_retention`` (named, exit 1), what the writer
really read of a file that grew, a failed batch named with its error, every column with its header."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from laketide.close import reconcile as reconcile_module
from laketide.close.partitions import State, check_partition
from laketide.close.reconcile import main as reconcile_main
from laketide.close.reconcile import reconcile
from laketide.close.verify import verify_partition
from laketide.close.view import View, matching_snapshot, newest_batch, pin
from laketide.dev import faults as dev_faults
from laketide.ingest import failures, faultpoints
from laketide.ingest.inspection import Reason, inspect
from laketide.ingest.landing import publish
from laketide.ingest.late_files import LateFiles, too_old_files
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import BATCH_ID, WRITER_ID, FileStat, source_positions
from laketide.lake.file_stats import content_hash, file_stat
from laketide.lake.hours import partition_key
from tests.helpers import config_env, ingest, kill_group, load, start_writer, unique_catalog, write_config, writer_log

H0 = datetime(2026, 11, 21, 20, tzinfo=UTC)

# -- the rejects table pinned to the batches of the events snapshot (pyiceberg, no Spark) --------------------------


@pytest.fixture
def tables(tmp_path: Path) -> Iterator[tuple[Table, Table]]:
    catalog = SqlCatalog("view", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("v")
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    yield catalog.create_table("v.events", schema), catalog.create_table("v.rejects", schema)
    catalog.engine.dispose()


def commit(table: Table, batch: int | None, writer: str = "w") -> int:
    """One append, marked as ``writer``'s batch ``batch`` (None: a commit without a marker, as compaction's)."""
    props = {} if batch is None else {WRITER_ID: writer, BATCH_ID: str(batch)}
    table.append(pa.table({"id": pa.array([batch or 0], pa.int64())}), snapshot_properties=props)
    current = table.current_snapshot()
    assert current is not None
    return current.snapshot_id


def test_the_rejects_table_is_pinned_to_the_batches_of_the_events_snapshot(tables: tuple[Table, Table]) -> None:
    events, rejects = tables
    assert matching_snapshot(events, None, rejects) is None  # nothing anywhere
    r0 = commit(rejects, 0)  # the first batch under way: its rejects committed, its events not yet
    assert matching_snapshot(events, None, rejects) is None
    e0 = commit(events, 0)
    assert matching_snapshot(events, e0, rejects) == r0
    e1 = commit(events, 1)  # a batch without rejects
    commit(rejects, 2)
    compacted = commit(rejects, None)  # maintenance on top of a batch under way
    assert matching_snapshot(events, e1, rejects) == r0  # batch 2 left out, and what came after it
    e2 = commit(events, 2)
    assert matching_snapshot(events, e2, rejects) == compacted
    commit(rejects, 0, writer="other")  # another writer's commit, absent from the events lineage
    assert matching_snapshot(events, e2, rejects) == compacted
    assert matching_snapshot(events, e0, rejects) == r0  # an older events snapshot (a verification at it)

    # a redo back to e0: the events table is rolled back first, the rejects table a moment later
    events.manage_snapshots().set_current_snapshot(e0).commit()
    assert matching_snapshot(events, e0, rejects) == r0
    rejects.manage_snapshots().set_current_snapshot(r0).commit()
    assert matching_snapshot(events, e0, rejects) == r0
    redone = commit(rejects, 1)  # the re-ingest's batch 1: rejects first
    assert matching_snapshot(events, e0, rejects) == r0
    redone_events = commit(events, 1)
    assert matching_snapshot(events, redone_events, rejects) == redone
    # a redo that empties the rejects table does it in one commit marked with the events' batch (-1: none)
    events.manage_snapshots().set_current_snapshot(e0).commit()
    empty = commit(rejects, 0)
    assert matching_snapshot(events, e0, rejects) == empty  # above the batch 1 it removes: held
    fresh = commit(rejects, -1, writer="fresh")
    assert matching_snapshot(events, e0, rejects) == fresh


# -- what inspection reports (files only) ----------------------------------------------------------------------


def audited(root: Path, name: str, lines: list[bytes], mtime_ms: int | None = None) -> Path:
    hour = f"{name[:4]}-{name[4:6]}-{name[6:8]}T{name[9:11]}:00:00+00:00"
    path = publish(root, lines, hour, "p", int(name.split("-")[2]), "clicks")
    if mtime_ms is not None:
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    return path


def line(n: int) -> bytes:
    return json.dumps({"event_id": f"e{n}", "event_time": (H0 + timedelta(minutes=n)).isoformat()}).encode()


def test_a_file_older_than_the_retention_is_reported_not_pending(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    read = audited(tmp_path, "20261121T20-p-00000001-00000000.jsonl", [line(1)], now - 60_000)
    old = audited(tmp_path, "20261121T20-p-00000002-00000000.jsonl", [line(2)], now - 61 * 86_400_000)
    late = audited(tmp_path, "20261121T20-p-00000003-00000000.jsonl", [line(3)], now - 59 * 86_400_000)
    report = inspect(tmp_path, {read.name: file_stat(read)}, retention=timedelta(days=60))
    assert report.pending == [late.name]  # the writer refreshes it (late_files) and takes it
    (finding,) = report.findings
    assert (finding.file, finding.reason, finding.blocking) == (old.name, Reason.TOO_OLD, True)
    assert "older than source_log_retention" in finding.line() and f"touch {old}" in finding.detail
    assert "60d (source_log_retention)" in finding.detail
    assert finding.hours == ("2026-11-21T20:00:00+00:00",)
    assert inspect(tmp_path, {read.name: file_stat(read)}).pending == [old.name, late.name]  # no retention given


def test_changed_after_ingest_says_what_the_line_reader_read(tmp_path: Path) -> None:
    """Spark's line reader reads every line starting at or before the listed end, so a writer that listed a file
    at one line and read it after a second was appended took both: the report says two records."""
    path = audited(tmp_path, "20261121T20-p-00000001-00000000.jsonl", [line(1)])
    listed = file_stat(path)
    with open(path, "ab") as handle:
        handle.write(line(2) + b"\n" + line(3) + b"\n")
    (finding,) = [f for f in inspect(tmp_path, {path.name: listed}).findings if f.reason == Reason.CHANGED]
    two = len(line(1)) + len(line(2)) + 2
    assert f"the writer read its first {two} bytes, 2 record(s) (listed at {listed.size} bytes" in finding.detail
    assert f"the lines after byte {two} are not in the lake" in finding.detail

    # listed in the middle of the second line (a producer writing in place): that line is read whole too
    mid = FileStat(len(line(1)) + 5, listed.mtime_ms)
    (finding,) = [f for f in inspect(tmp_path, {path.name: mid}).findings if f.reason == Reason.CHANGED]
    assert f"the writer read its first {two} bytes, 2 record(s)" in finding.detail


def test_a_file_rewritten_with_its_old_size_and_time_is_changed_after_ingest(tmp_path: Path) -> None:
    """``rsync -t`` or ``cp -p`` of an edited copy: same size, old modification time put back; the content hash the
    writer recorded tells it."""
    path = audited(tmp_path, "20261121T20-p-00000001-00000000.jsonl", [line(1), line(2)])
    st = path.stat()
    recorded = replace(file_stat(path), content=content_hash(path, st.st_size))
    assert recorded.content is not None
    assert [f for f in inspect(tmp_path, {path.name: recorded}).findings if f.reason == Reason.CHANGED] == []
    edited = path.read_bytes().replace(line(2), line(3))
    assert len(edited) == st.st_size and edited != path.read_bytes()
    path.write_bytes(edited)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert file_stat(path) == recorded  # size and time alone no longer tell it
    (finding,) = [f for f in inspect(tmp_path, {path.name: recorded}).findings if f.reason == Reason.CHANGED]
    assert finding.blocking and "same size" in finding.detail and "other content" in finding.detail, finding
    assert f"{recorded.content:016x} at ingest" in finding.detail
    # a commit recorded before hashes existed: nothing to compare, nothing reported
    assert [f for f in inspect(tmp_path, {path.name: file_stat(path)}).findings if f.reason == Reason.CHANGED] == []


def test_audit_records_are_read_after_the_data_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file published while the landing zone is read: its audit record is renamed in before it, so the records
    read after the listing hold it (read before, the file had none: 'no audit', a false alarm)."""
    from laketide.ingest import inspection

    real = inspection._load_audits
    published: list[Path] = []

    def publish_meanwhile(*args: Any, **kwargs: Any) -> Any:
        audits = real(*args, **kwargs)
        if not published:  # the producer publishes a file just after the audit records are read
            published.append(audited(tmp_path, "20261121T20-p-00000002-00000000.jsonl", [line(2)]))
        return audits

    first = audited(tmp_path, "20261121T20-p-00000001-00000000.jsonl", [line(1)])
    monkeypatch.setattr(inspection, "_load_audits", publish_meanwhile)
    report = inspect(tmp_path, {})
    assert report.findings == [] and report.pending == [first.name]  # the new file: not listed yet
    assert inspect(tmp_path, {}).pending == sorted([first.name, published[0].name])


# -- a batch under way, a file committed between the reads (the real writer, in this process) ---------------------


def landed_events(root: str | Path, seq: int, hour: datetime, good: int, bad: int) -> Path:
    lines = [json.dumps({"event_id": f"s{seq}-{i}", "event_time": (hour + timedelta(minutes=1 + i)).isoformat(),
                         "user_id": i, "page": "/p"}) for i in range(good)]
    return publish(root, lines + [f'{{"broken {seq}-{i}' for i in range(bad)], partition_key(hour), "p", seq,
                   "clicks")


@pytest.mark.slow
def test_a_batch_under_way_and_a_commit_between_the_reads_are_no_mismatch(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_path = write_config(tmp_path, catalog_name=unique_catalog("view"))
    config = load(config_path)
    stream = config.stream("clicks")
    first = landed_events(stream.landing_path, 1, H0, 5, 1)
    ingest(spark, config_path)
    before = reconcile(config, stream)
    assert before.ok and before.pending_files == [] and [(p.audit, p.lake, p.rejects) for p in before.partitions] \
        == [(6, 5, 1)], first
    batch = newest_batch(pin(config, stream), stream.writer_id)
    assert batch is not None

    # the next batch holds between its two commits: its rejects are committed, its events not yet
    second = landed_events(stream.landing_path, 2, H0, 4, 2)
    faults = tmp_path / "faults"
    monkeypatch.setenv("LAKETIDE_FAULT", f"between_tables:{batch + 1}")
    monkeypatch.setenv("LAKETIDE_FAULT_DIR", str(faults))
    monkeypatch.setenv("LAKETIDE_FAULT_MODE", "hold")
    monkeypatch.setattr(faultpoints, "maybe_pause", dev_faults.maybe_pause)  # armed when this process started
    reached, release = faults / f"between_tables-{batch + 1}.reached", faults / f"between_tables-{batch + 1}.release"
    seen: dict[str, Any] = {}
    real_pin = reconcile_module.pin

    def commit_after_pinning(*args: Any, **kwargs: Any) -> View:
        view = real_pin(*args, **kwargs)
        release.touch()  # the batch's events commit now, after the tables were pinned, before anything is read
        deadline = time.monotonic() + 120
        while load_catalog(config.catalog).load_table(stream.table).metadata.current_snapshot_id == \
                view.events_snapshot:
            assert time.monotonic() < deadline, "the held batch did not commit"
            time.sleep(0.2)
        return view

    def reports() -> None:
        try:
            deadline = time.monotonic() + 180
            while not reached.exists():
                assert time.monotonic() < deadline, "the batch never reached its second commit"
                time.sleep(0.2)
            view = pin(config, stream)
            seen["rejects ahead"] = load_catalog(config.catalog).load_table(stream.rejects_table) \
                .metadata.current_snapshot_id != view.rejects_snapshot
            seen["held"] = reconcile(config, stream)
            seen["verified"] = verify_partition(config, stream, H0)
            monkeypatch.setattr(reconcile_module, "pin", commit_after_pinning)
            seen["between"] = reconcile(config, stream)
        except BaseException as exc:  # raised in the test's thread below
            seen["error"] = exc
            release.touch()

    thread = threading.Thread(target=reports)
    thread.start()
    ingest(spark, config_path)  # the batch holds until the thread releases it
    thread.join(timeout=300)
    monkeypatch.setattr(reconcile_module, "pin", real_pin)
    if "error" in seen:
        raise seen["error"]
    assert seen["rejects ahead"], "the batch's rejects were not committed while it was held"
    for name in ("held", "between"):
        report = seen[name]
        assert report.problems() == [] and report.pending_files == [second.name], (name, report)
        assert [(p.audit, p.lake, p.rejects) for p in report.partitions] == [(12, 5, 1)], (name, report)
    verified = seen["verified"]  # fails for the file not ingested at its snapshot, and only for it
    assert (verified.audit, verified.lake, verified.rejects, verified.pending_files) == (12, 5, 1, 1)
    after = reconcile(config, stream)
    assert after.ok and [(p.audit, p.lake, p.rejects) for p in after.partitions] == [(12, 9, 3)]

    # the writer recorded each file's content hash: a file rewritten in place with its size and time kept is named
    recorded = source_positions(load_catalog(config.catalog).load_table(stream.table))
    assert recorded[first.name] is not None and recorded[first.name].content == \
        content_hash(first, first.stat().st_size), recorded
    st, data = first.stat(), first.read_bytes()
    changed = data.replace(b'"/p"', b'"/q"', 1)
    assert changed != data and len(changed) == len(data)
    first.write_bytes(changed)
    os.utime(first, ns=(st.st_atime_ns, st.st_mtime_ns))
    rewritten = reconcile(config, stream)
    assert not rewritten.ok and any(first.name in p and "other content" in p for p in rewritten.problems()), \
        rewritten.problems()


# -- reconciliation in a loop beside a live writer ----------------------------------------------------------------


def reconcile_beside_live_writer(home: Path, seconds: float, last_hours: bool = False, runs_wanted: int | None = None,
                                 rate: int = 100, every: int = 1) -> tuple[int, int, list[str], Path]:
    """A real writer (continuous, 1 s trigger) and the real producer landing files for ``seconds``, reconciliation
    run in this process meanwhile, again and again: returns the runs, the runs that saw files not ingested yet,
    every problem reported (each one a false alarm) and the configuration. The writer is stopped and has caught
    up when it returns. ``last_hours``: reconcile the current and the previous hour only (``--start``), a cheaper
    run whose reads race the writer the same way. ``runs_wanted``: stop after that many runs (before ``seconds``).
    ``rate``: the producer's events per second; ``every``: seconds between the producer's files and the writer's
    triggers (1: a run reads many small files, and most runs straddle a commit)."""
    config_path = write_config(home, trigger_interval=f"{every}s", max_files_per_trigger=20)
    config = load(config_path)
    stream = config.stream("clicks")
    env = config_env(config_path)
    writer = start_writer(config_path, mode="continuous")
    producer = subprocess.Popen(
        [sys.executable, "-m", "laketide.dev.producer", "--mode", "live", "--rate", str(rate),
         "--flush-seconds", str(every), "--duration", f"{int(seconds) + 30}s", "--malformed-ratio", "0.05",
         "--seed", "5"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(home / "producer.log", "wb"),  # noqa: SIM115
        start_new_session=True)
    runs = pending = 0
    alarms: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while True:  # the writer has created its tables and committed
            try:
                if newest_batch(pin(config, stream), stream.writer_id) is not None:
                    break
            except Exception:  # no table yet
                pass
            assert writer.poll() is None and time.monotonic() < deadline, writer_log(config_path)[-5000:]
            time.sleep(0.5)
        end = time.monotonic() + seconds
        while time.monotonic() < end and (runs_wanted is None or runs < runs_wanted):
            hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
            report = reconcile(config, stream, [hour - timedelta(hours=1), hour] if last_hours else None)
            runs += 1
            pending += bool(report.pending_files)
            alarms += [f"run {runs}: {p}" for p in report.problems()]
            if runs_wanted and runs % 100 == 0:
                print(f"reconcile soak: {runs} runs, {pending} saw files not ingested, {len(alarms)} false alarm(s)",
                      file=sys.__stderr__, flush=True)  # past any capture: the soak's progress
        assert writer.poll() is None, writer_log(config_path)[-5000:]
    finally:
        kill_group(producer)
        if writer.poll() is None:
            deadline = time.monotonic() + 120
            while reconcile(config, stream).pending_files and time.monotonic() < deadline:
                time.sleep(1)
            (stream.checkpoint_path.parent / "clicks.stop").touch()
            try:
                writer.wait(timeout=120)
            except subprocess.TimeoutExpired:
                kill_group(writer)
    return runs, pending, alarms, config_path


@pytest.mark.slow
def test_reconcile_in_a_loop_beside_a_live_writer_raises_no_false_alarm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # LAKETIDE_RECONCILE_RUNS=1000: a soak of that many runs (of the current and previous hour, the cheaper run that
    # races the writer the same way; a file and a trigger every 15 s, so that a run stays near a second as the hours
    # fill with the writer's commits and manifests, no maintenance running) instead of one minute of full runs
    wanted = int(os.environ.get("LAKETIDE_RECONCILE_RUNS") or 0)
    runs, pending, alarms, config_path = (
        reconcile_beside_live_writer(tmp_path, 4 * 3600, last_hours=True, runs_wanted=wanted, rate=20, every=15)
        if wanted
        else reconcile_beside_live_writer(tmp_path, 60))
    assert alarms == [], alarms
    assert runs >= wanted, (runs, wanted)
    # about one run a second here when the machine is idle, one in five under a heavy load; most runs see files the
    # writer has not taken yet: the race the pinning is for
    assert runs >= 10 and pending >= 3, (runs, pending)
    batches = writer_log(config_path).count("committed as snapshot")
    assert batches >= 5, batches  # ~1 a second on an idle machine, 10 on a busy one
    print(f"reconcile beside a live writer: {runs} runs, {pending} with files not ingested yet, {batches} batches, "
          "0 false alarms")
    config = load(config_path)
    stream = config.stream("clicks")
    final = reconcile(config, stream)
    assert final.ok and final.pending_files == [], final

    # every column has its header
    monkeypatch.setenv("LAKETIDE_CONFIG", str(config_path))
    capsys.readouterr()
    assert reconcile_main(["--stream", "clicks"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.strip().startswith("partition"))
    assert header.split() == ["partition", "audit", "lake", "rejects", "dup.removed", "pending", "reported",
                              "status"]
    row = next(line for line in out.splitlines() if line.strip().startswith(final.partitions[-1].partition))
    assert len(row.split()) == len(header.split())

    # a file older than source_log_retention behind the newest ingested one: named, exit 1
    now = int(time.time() * 1000)
    old = landed_events(stream.landing_path, 900, H0, 3, 0)
    os.utime(old, ns=(now * 1_000_000 - 61 * 86_400_000_000_000,) * 2)
    assert reconcile_main(["--stream", "clicks"]) == 1
    out = capsys.readouterr().out
    assert f"FILE {old.name}: older than source_log_retention" in out and "PROBLEM" in out, out
    assert "ok so far" not in out
    verified = verify_partition(config, stream, H0)
    assert not verified.success and any(old.name in f and "source_log_retention" in f
                                        for f in verified.failures), verified.failures
    # the writer's look (as at its next trigger or start) names it and keeps it: the status does not call its hour
    # empty, the file is not committed
    assert LateFiles(stream).rescue() == [] and old.name in too_old_files(stream)
    status, _ = check_partition(config, stream, H0)
    assert status.state == State.LAGGING and old.name in status.reason, status
    old.unlink()

    # a failed batch, as the writer records it: named with its error, not "normal while it runs"
    left = landed_events(stream.landing_path, 901, datetime.now(UTC), 2, 0)
    committed = newest_batch(pin(config, stream), stream.writer_id)
    assert committed is not None
    record = {"batch_id": committed + 1, "attempts": 2, "files": [left.name],
              "error": "java.io.IOException: No space left on device", "failed_at": "2026-11-28T02:00:00+00:00"}
    failures.record_path(stream).write_text(json.dumps(record))
    assert reconcile_main(["--stream", "clicks"]) == 1
    out = capsys.readouterr().out
    assert f"batch {committed + 1} of the writer failed (2 attempt(s)" in out and "No space left" in out, out
    assert left.name in out and "normal while it runs" not in out
    record["batch_id"] = committed  # a record left behind by a batch that committed since: not reported
    failures.record_path(stream).write_text(json.dumps(record))
    assert reconcile(config, stream).failed_batch is None
