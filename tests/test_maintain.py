"""Table maintenance against real tables: the real writer process ingests, maintenance runs Iceberg's Spark
procedures in this process (one Spark session for the module; each test has its own catalog name, so its
own throwaway SQLite catalog).

* compaction rewrites closed hours only and changes no count;
* expiry keeps the writer's newest marker: a writer killed after expiry restarts without duplicates;
* orphan removal removes the files of a killed batch attempt and no live file; a dry run changes nothing;
* the writer ingests continuously while compaction, manifest rewrite and expiry run again and again.
* a long history (thousands of small writer commits, built with Iceberg's Java API by ``laketide.dev.history``)
  is brought back to metadata of a bounded size, and the status check and pyiceberg's load_table do less work
  afterwards.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from laketide.close.partitions import State
from laketide.close.status import StatusRecord, record
from laketide.config import LaketideConfig
from laketide.dev.producer import make_event
from laketide.errors import ConfigError, UnsafeOrphanAgeError
from laketide.ingest.landing import publish
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import table_marker
from laketide.lake.hours import hour_ranges, hours_filter, parse_partition
from laketide.maintain import plan
from laketide.maintain.health import file_counts, format_health, health
from laketide.maintain.job import Maintainer
from laketide.maintain.record import MaintenanceRecord, history
from tests.helpers import ingest, kill_group, load, start_writer, wait_for, writer_log
from tests.test_writer import START, assert_exactly_once

pytestmark = pytest.mark.slow

EVENTS, REJECTS = "lake.clicks", "lake.clicks_rejects"


def with_catalog(config_path: Path, **maintenance: Any) -> Path:
    """Give the configuration a catalog name of its own (the module's Spark session serves every test) and a
    maintenance section."""
    raw = yaml.safe_load(config_path.read_text())
    raw["catalog"]["name"] = f"m{uuid.uuid4().hex[:8]}"
    if maintenance:
        raw["maintenance"] = maintenance
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return config_path


def close_hours(config: LaketideConfig, *hours: datetime) -> None:
    record(config, *(StatusRecord("clicks", h, State.CLOSED, run_id="test") for h in hours))


def maintain(config: LaketideConfig, spark: Any, tables: str, actions: str, dry_run: bool = False,
             now: datetime | None = None) -> list[MaintenanceRecord]:
    use_catalog(config, spark)  # this test's catalog, in the module's session
    request = plan.validate_request(config, tables, actions, dry_run)
    clock = (lambda: now) if now is not None else (lambda: datetime.now(UTC))
    return Maintainer(config, spark, f"test-{uuid.uuid4().hex[:6]}", now=clock).run(request)


def data_files_on_disk(config: LaketideConfig, table: str) -> set[str]:
    location = load_catalog(config.catalog).load_table(table).metadata.location
    return {str(p) for p in Path(urlparse(location).path, "data").rglob("*.parquet")}


def referenced(config: LaketideConfig, table: str) -> set[str]:
    """Data files any snapshot of ``table`` still references."""
    tbl = load_catalog(config.catalog).load_table(table)
    paths: set[str] = set()
    for snapshot in tbl.metadata.snapshots:
        for manifest in snapshot.manifests(tbl.io):
            for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
                paths.add(urlparse(entry.data_file.file_path).path)
    return paths


def test_compaction_expiry_restart_and_orphans(spark: Any, tmp_path: Path) -> None:
    from tests.helpers import write_config
    from tests.test_writer import produce

    config_path = with_catalog(write_config(tmp_path, max_files_per_trigger=2),
                               defaults={"min_snapshots": 1, "snapshot_retention": "8h", "orphan_age": "1d"})
    produce(config_path, "--start", START, "--hours", "3", "--events-per-hour", "500", "--events-per-file", "100",
            "--malformed-ratio", "0.03", "--late-ratio", "0.05", "--late-by", "40m", "--seed", "11")
    ingest(spark, config_path)
    config = load(config_path)
    catalog = load_catalog(config.catalog)
    lake = assert_exactly_once(config_path)
    start = parse_partition(START)
    closed = [start, start + timedelta(hours=1)]
    before = file_counts(catalog.load_table(EVENTS))
    assert all(before[h] >= 2 for h in closed), before
    # the after-close run's check, from metadata: nothing closed yet, nothing to compact (the run stops before Spark)
    from laketide.maintain.health import due_after_close

    assert due_after_close(config) == {}
    close_hours(config, *closed)
    assert due_after_close(config)[EVENTS] == 2

    # the daily run's check, from metadata: a young lake is due for nothing (a fresh quickstart starts no
    # maintenance beside its first batches); 9 hours later expiry is due, a day later orphan removal too
    from laketide.maintain.health import due_daily

    assert due_daily(config) == {}
    now = datetime.now(UTC)
    assert due_daily(config, now + timedelta(hours=9))[EVENTS] == ["expire_snapshots"]
    assert due_daily(config, now + timedelta(days=1, hours=1))[EVENTS] == ["expire_snapshots", "remove_orphan_files"]

    # dry run: planned, nothing changed
    location = catalog.load_table(EVENTS).metadata_location
    dry = maintain(config, spark, "all", "rewrite_data_files,rewrite_manifests,expire_snapshots", dry_run=True)
    assert {r.outcome for r in dry} <= {"dry_run", "skipped"}
    assert catalog.load_table(EVENTS).metadata_location == location

    # one maintenance run per table: a table another run holds is skipped, and said so
    from laketide.lake.lease import MAINTENANCE_PREFIX, WriterLease, engine_for
    from laketide.maintain.record import BUSY

    other = WriterLease(engine_for(config.catalog), MAINTENANCE_PREFIX + EVENTS, timedelta(hours=1), "maintenance")
    other.acquire()
    (busy,) = maintain(config, spark, EVENTS, "rewrite_data_files")
    other.release()
    assert busy.outcome == "skipped" and (busy.detail or "").startswith(BUSY), busy
    assert catalog.load_table(EVENTS).metadata_location == location

    # compaction of the closed hours only, then manifests: counts unchanged
    done = maintain(config, spark, f"{EVENTS},{REJECTS}", "rewrite_data_files,rewrite_manifests")
    by = {(r.table_name, r.action): r for r in done}
    assert by[(EVENTS, "rewrite_data_files")].outcome == "ok", by
    assert json.loads(by[(EVENTS, "rewrite_data_files")].partitions or "[]") == [h.isoformat() for h in closed]
    after = file_counts(catalog.load_table(EVENTS))
    assert all(after[h] <= 2 for h in closed), after
    assert {h: n for h, n in after.items() if h not in closed} == {h: n for h, n in before.items() if h not in closed}
    assert by[(EVENTS, "rewrite_manifests")].manifests_after < by[(EVENTS, "rewrite_manifests")].manifests_before
    assert assert_exactly_once(config_path) == lake
    # a second run finds nothing to compact, and the after-close check says so without Spark
    again = maintain(config, spark, EVENTS, "rewrite_data_files")
    assert [r.outcome for r in again] == ["skipped"]
    assert EVENTS not in due_after_close(config)

    # expiry with a clock a week ahead: everything is past retention, yet each writer's newest marker stays
    stream = config.stream("clicks")
    markers = {t: table_marker(catalog, t, stream.writer_id) for t in (EVENTS, REJECTS)}
    expired = maintain(config, spark, f"{EVENTS},{REJECTS}", "expire_snapshots",
                       now=datetime.now(UTC) + timedelta(days=7))
    for rec in expired:
        assert rec.outcome == "ok" and (rec.snapshots_expired or 0) > 0, rec
        assert (rec.snapshots_after or 0) < (rec.snapshots_before or 0)
    for table, marker in markers.items():
        assert marker is not None
        assert table_marker(catalog, table, stream.writer_id) == marker, table
    # plain Iceberg arguments (retain 1, everything older than now) would have removed it: the plan is needed
    events = catalog.load_table(EVENTS)
    assert events.metadata.current_snapshot_id != markers[EVENTS].snapshot_id  # type: ignore[union-attr]

    # more files land; the writer is killed after writing a batch's files, before its commit; it restarts
    produce(config_path, "--start", "2026-11-22T02:00:00+00:00", "--hours", "1", "--events-per-hour", "600",
            "--events-per-file", "200", "--seed", "12")
    on_disk = data_files_on_disk(config, EVENTS)
    batch = (markers[EVENTS].batch_id or 0) + 1  # type: ignore[union-attr]
    faults = tmp_path / "faults"
    proc = start_writer(config_path, LAKETIDE_FAULT=f"before_commit:{batch}", LAKETIDE_FAULT_DIR=str(faults))
    wait_for(faults / f"before_commit-{batch}.reached", proc)
    kill_group(proc)
    killed = data_files_on_disk(config, EVENTS) - on_disk
    assert killed, "the killed attempt left no data file"
    ingest(spark, config_path)
    lake = assert_exactly_once(config_path)  # the marker survived expiry: no duplicate, nothing lost
    assert "2026-11-22T02:00:00+00:00" in lake

    # orphans: an unsafe age is refused; a dry run finds the killed attempt's files and deletes nothing
    unsafe = tmp_path / "unsafe.yaml"
    unsafe.write_text(config_path.read_text())
    with pytest.raises(ConfigError, match=r"orphan_age: 1h is below the safe floor of 1 day"):
        load(with_catalog(unsafe, defaults={"orphan_age": "1h"}))
    live = referenced(config, EVENTS)
    assert not killed & live
    # every file of the table is made two days old: each one is old enough to be a candidate, so only the
    # metadata tells the killed attempt's files from live ones
    location = Path(urlparse(catalog.load_table(EVENTS).metadata.location).path)
    old = time.time() - 2 * 86400
    for path in location.rglob("*"):
        os.utime(path, (old, old))
    (dry_run,) = maintain(config, spark, EVENTS, "remove_orphan_files", dry_run=True)
    assert dry_run.outcome == "dry_run" and (dry_run.orphans_found or 0) >= len(killed), dry_run
    assert dry_run.orphans_removed == 0
    assert killed <= data_files_on_disk(config, EVENTS)
    (removed,) = maintain(config, spark, EVENTS, "remove_orphan_files")
    assert removed.outcome == "ok" and removed.orphans_removed == dry_run.orphans_found, removed
    remaining = data_files_on_disk(config, EVENTS)
    assert not killed & remaining
    assert live <= remaining  # never a live file
    assert assert_exactly_once(config_path) == lake

    # every action is recorded; the health summary reads the tables
    recorded = history(config)
    assert {r.action for r in recorded} >= set(plan.MAINTENANCE_ACTIONS) - {"expire_tombstones"}  # no upsert stream
    summary = {h.table: h for h in health(config)}
    assert summary[EVENTS].last_maintenance is not None and summary[EVENTS].max_files_per_closed_hour <= 2
    assert len(format_health(list(summary.values()))) == len(summary) + 1


#: maintenance rounds next to the live writer: the first compacts the closed hours' backlog while the writer still
#: commits into them, the second expires the first's snapshots and finds the hours compacted, the third runs with
#: the writer in its steady state (the open hours only); later rounds repeat the third
MAINTENANCE_ROUNDS = 3
#: how long the rounds may take to see every state the test checks before it fails
MAINTENANCE_TIMEOUT = 400


def test_writer_ingests_while_maintenance_runs_again_and_again(spark: Any, tmp_path: Path) -> None:
    """The real writer (trigger 1s) ingests files landing every second while compaction, manifest rewrite and
    expiry run again and again on both of its tables (``MAINTENANCE_ROUNDS`` rounds at least, and until a round has
    compacted a closed hour holding more than two files, an expiry has removed snapshots and the writer has
    committed while the rounds ran): every hour reconciles, no writer commit fails."""
    from laketide.close.reconcile import reconcile
    from laketide.ingest import failures
    from tests.helpers import write_config
    from tests.test_writer import produce

    config_path = with_catalog(write_config(tmp_path, trigger_interval="1s", max_files_per_trigger=2),
                               defaults={"min_snapshots": 1, "snapshot_retention": "8h"})
    config = load(config_path)
    stream = config.stream("clicks")
    catalog = load_catalog(config.catalog)
    start = parse_partition(START)
    closed = [start, start + timedelta(hours=1)]
    produce(config_path, "--start", START, "--hours", "2", "--events-per-hour", "600", "--events-per-file", "60",
            "--malformed-ratio", "0.03", "--seed", "21")
    proc = start_writer(config_path, mode="continuous")
    stop = threading.Event()

    def land() -> None:  # the open hours keep receiving files
        rng, seq = random.Random(7), 0
        while not stop.is_set():
            hour = start + timedelta(hours=2 + seq % 2)
            lines = [json.dumps(make_event(stream, rng, hour.replace(minute=i % 60))) for i in range(50)]
            publish(stream.landing_path, [*lines, "{not json"], hour.isoformat(), "live", 5000 + seq, "clicks")
            seq += 1
            time.sleep(1)

    while not _exists(config, EVENTS) or table_marker(catalog, EVENTS, stream.writer_id) is None:
        assert proc.poll() is None, writer_log(config_path)
        time.sleep(0.5)
    # files land from the first round on (files landed during the writer's start would only lengthen its catch-up)
    lander = threading.Thread(target=land, daemon=True)
    lander.start()
    rounds_done = False
    try:
        close_hours(config, *closed)
        records: list[MaintenanceRecord] = []
        most = 0
        first_batch = _marker_batch(catalog, stream.writer_id)

        def covered() -> bool:  # every state the assertions below look for has been through a round
            return (len(records) >= 6 * MAINTENANCE_ROUNDS  # 3 actions x 2 tables per round
                    and most > 2
                    and any(r.action == "rewrite_data_files" and r.outcome == "ok" for r in records)
                    and any(r.action == "expire_snapshots" and (r.snapshots_expired or 0) > 0 for r in records)
                    and _marker_batch(catalog, stream.writer_id) > first_batch)

        deadline = time.monotonic() + MAINTENANCE_TIMEOUT
        while not covered():
            assert time.monotonic() < deadline, (most, [r.line() for r in records])
            most = max(most, *(file_counts(catalog.load_table(EVENTS)).get(h, 0) for h in closed))
            records += maintain(config, spark, f"{EVENTS},{REJECTS}",
                                "rewrite_data_files,rewrite_manifests,expire_snapshots",
                                now=datetime.now(UTC) + timedelta(hours=9))
            assert proc.poll() is None, writer_log(config_path)
        last_batch = _marker_batch(catalog, stream.writer_id)
        rounds_done = True
    finally:
        stop.set()
        lander.join(timeout=10)
        if not rounds_done and proc.poll() is None:  # a failed round: the writer does not outlive the test
            kill_group(proc)
    deadline = time.monotonic() + 120
    while reconcile(config, stream).pending_files and time.monotonic() < deadline:
        assert proc.poll() is None, writer_log(config_path)
        time.sleep(2)
    (stream.checkpoint_path.parent / "clicks.stop").touch()
    assert proc.wait(timeout=120) == 0, writer_log(config_path)
    log = writer_log(config_path)
    assert "Traceback" not in log and "fenced" not in log.lower(), log[-3000:]
    assert failures.read(stream) is None
    assert_exactly_once(config_path)

    outcomes = [(r.table_name, r.action, r.outcome) for r in records]
    assert all(o in ("ok", "skipped", "gave_up") for _, _, o in outcomes), [r.line() for r in records]
    rounds = sum(1 for t, a, _ in outcomes if (t, a) == (EVENTS, "rewrite_data_files"))
    assert rounds >= MAINTENANCE_ROUNDS, outcomes
    assert last_batch > first_batch, (first_batch, last_batch)  # the writer committed while maintenance ran
    assert any(r.action == "rewrite_data_files" and r.outcome == "ok" for r in records)
    assert any(r.action == "expire_snapshots" and (r.snapshots_expired or 0) > 0 for r in records)
    final = maintain(config, spark, EVENTS, "rewrite_data_files")
    assert final[0].outcome in ("ok", "skipped"), final[0].line()
    now = file_counts(catalog.load_table(EVENTS))
    assert all(now.get(h, 0) <= 2 for h in closed) and most > 2, (most, now)
    assert table_marker(catalog, EVENTS, stream.writer_id) is not None
    print(f"{rounds} maintenance rounds; most files in a closed hour {most}, now {[now.get(h) for h in closed]}; "
          f"gave up {sum(1 for *_, o in outcomes if o == 'gave_up')} times")


def test_staging_branches_of_writers_not_running_are_dropped_at_expiry(spark: Any, tmp_path: Path) -> None:
    """A staging branch that a killed attempt left (its writer's next attempt would drop it, but the stream has not
    written since) pins its snapshots against expiry: the expiry drops it once no writer of its stream runs; a user's
    own branch is never touched, a dry run only names it."""
    from laketide.ingest.public_sink import stage_prefix
    from laketide.lake.internals import iceberg_table
    from laketide.lake.lease import WriterLease, engine_for
    from tests.helpers import write_config
    from tests.test_writer import produce

    config_path = with_catalog(write_config(tmp_path, max_files_per_trigger=2))
    produce(config_path, "--start", START, "--hours", "1", "--events-per-hour", "100", "--events-per-file", "50",
            "--seed", "5")
    ingest(spark, config_path)
    config = load(config_path)
    stream = config.stream("clicks")
    use_catalog(config, spark)
    table = iceberg_table(spark, f"{config.catalog.name}.{EVENTS}")
    head = table.currentSnapshot().snapshotId()
    killed, mine = f"{stage_prefix(stream.writer_id)}7_0123456789", "audit_before_release"
    for branch in (killed, mine):
        table.manageSnapshots().createBranch(branch, head).commit()

    def branches() -> set[str]:
        return set(load_catalog(config.catalog).load_table(EVENTS).metadata.refs) - {"main"}

    streams = config.streams
    merge = f"laketide_merge_{stream.name}_3_0a1b2c3d4e"
    assert plan.staging_branch_owner(streams, killed) == plan.staging_branch_owner(streams, merge) == stream
    assert plan.staging_branch_owner(streams, mine) is None
    assert plan.staging_branch_owner(streams, "laketide_merge_elsewhere_3_0a1b2c3d4e") is None
    # stream clicks's prefix is also the start of stream clicks_2's branches: the whole name decides
    assert plan.staging_branch_owner(streams, f"laketide_merge_{stream.name}_2_3_0a1b2c3d4e") is None
    # the merge at a writer's start (batch -1) is batch n1; a stream name's '-' and '.' are '_' in a branch name
    assert plan.staging_branch_owner(streams, f"laketide_merge_{stream.name}_n1_0a1b2c3d4e") == stream
    dotted = stream.model_copy(update={"name": "acct-changes.v2"})
    assert plan.staging_branch_owner([dotted], "laketide_merge_acct_changes_v2_n1_0a1b2c3d4e") == dotted

    (dry,) = maintain(config, spark, EVENTS, "expire_snapshots", dry_run=True)
    assert f"to drop: {killed}" in dry.detail and branches() == {killed, mine}
    lease = WriterLease(engine_for(config.catalog), stream.writer_id, stream.writer_lease, "writer")
    lease.acquire()  # the stream's writer runs: its branch may be an attempt under way
    try:
        (held,) = maintain(config, spark, EVENTS, "expire_snapshots")
        assert branches() == {killed, mine} and killed not in held.detail
    finally:
        lease.release()
    (run,) = maintain(config, spark, EVENTS, "expire_snapshots")
    assert run.outcome == "ok" and f"dropped: {killed}" in run.detail, run.line()
    assert branches() == {mine}
    assert_exactly_once(config_path)


def _marker_batch(catalog: Any, writer_id: str) -> int:
    """The batch of the writer's newest commit to the events table (-1: none yet)."""
    marker = table_marker(catalog, EVENTS, writer_id)
    return -1 if marker is None else marker.batch_id


def _exists(config: LaketideConfig, table: str) -> bool:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        load_catalog(config.catalog).load_table(table)
    except (NoSuchTableError, NoSuchNamespaceError):
        return False
    return True


def test_retention_shorter_than_a_close_is_refused(tmp_path: Path) -> None:
    from tests.helpers import write_config

    path = with_catalog(write_config(tmp_path), tables={EVENTS: {"snapshot_retention": "2h"}})
    with pytest.raises(ConfigError, match=r"tables\.snapshot_retention: 2h for lake\.clicks is shorter"):
        load(path)


def test_unsafe_orphan_age_is_refused_at_run_time() -> None:
    from laketide.config import TablePolicy

    with pytest.raises(UnsafeOrphanAgeError, match="below the safe floor"):
        plan.check_orphan_age(timedelta(hours=2))
    assert plan.check_orphan_age(timedelta(days=3)) == timedelta(days=3)
    with pytest.raises(ValueError, match="below the safe floor"):
        TablePolicy(orphan_age=timedelta(hours=23))


@pytest.fixture()
def dagbag(airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from tests.helpers import write_config

    config_path = write_config(tmp_path)
    monkeypatch.setenv("LAKETIDE_CONFIG", str(config_path))
    from airflow.dag_processing.dagbag import DagBag

    from laketide.config import REPO_ROOT

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
    assert bag.import_errors == {}
    bag.config_path = config_path
    return bag


def test_maintenance_dags_and_bad_params_change_nothing(dagbag: Any) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    manual = dagbag.dags["laketide_maintain"]
    assert manual.max_active_runs == 1
    assert manual.params["table"] == "all" and manual.params["dry_run"] is True
    after_close = dagbag.dags["laketide_maintain_after_close"]
    assert "iceberg://laketide/lake/clicks" in str(after_close.timetable.asset_condition)
    # the close's events are partitioned by hour: every hour maps to one key (closes seen together, one run)
    from airflow.serialization.serialized_objects import DagSerialization

    timetable = DagSerialization.from_dict(DagSerialization.to_dict(after_close)).timetable
    mapper = timetable.get_partition_mapper(name="laketide.lake.clicks.closed_hours", uri="iceberg://laketide/lake/clicks")
    assert timetable.partitioned
    assert {mapper.to_downstream(k) for k in ("2026-11-22T03:00:00", "2012-03-05T18:00:00")} == {"closed-hours"}
    assert after_close.get_task("maintain").job_args[3] == "rewrite_data_files,rewrite_manifests"
    assert after_close.get_task("maintain").upstream_task_ids == {"due_after_close"}
    daily = dagbag.dags["laketide_maintain_daily"]
    assert daily.get_task("maintain").upstream_task_ids == {"due_daily"}

    config_path = dagbag.config_path
    # the schema refuses an unknown table or action before the run starts
    with pytest.raises(ParamValidationError, match=r"'lake\.nope' is not one of"):
        manual.test(run_conf={"table": "lake.nope"})
    with pytest.raises(ParamValidationError, match="'compact_everything' is not one of"):
        manual.test(run_conf={"actions": ["compact_everything"]})
    # what the schema cannot say, the validation task refuses: Spark is never started
    run = manual.test(run_conf={"actions": ["default", "expire_snapshots"]})
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"validate": "failed", "maintain": "upstream_failed"}
    assert not (config_path.parent / "catalog.db").exists()

    # nothing past a threshold: the threshold run stops before Spark
    run = dagbag.dags["laketide_maintain_thresholds"].test()
    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {"due": "success", "maintain": "skipped"}
    # a fresh installation is due for no daily action: its first run, which Airflow starts at once, stops there
    run = daily.test()
    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {"due_daily": "success",
                                                                         "maintain": "skipped"}


def test_manual_dag_submits_the_maintenance_job(dagbag: Any) -> None:
    """The whole wiring: validate -> spark-submit of spark_jobs/maintain.py -> records. A dry run on a lake whose
    stream has not written yet: only the record table exists (the job creates it), nothing else is touched. The
    catalog is named like the record table's namespace (``laketide``): the procedures get qualified names."""
    run = dagbag.dags["laketide_maintain"].test(
        run_conf={"table": "all", "actions": ["expire_snapshots", "remove_orphan_files"], "dry_run": True})
    assert run.state == "success"
    config = load(dagbag.config_path)
    recorded = history(config)
    assert recorded and {r.table_name for r in recorded} == {"laketide.maintenance_log"}
    assert {r.outcome for r in recorded} <= {"dry_run", "skipped"} and all(r.dry_run for r in recorded)
    assert [r.orphans_found for r in recorded if r.action == "remove_orphan_files"] == [0]
    assert {r.run_id for r in recorded} == {run.run_id}
    assert not _exists(config, EVENTS)


def test_validate_request(tmp_path: Path) -> None:
    from tests.helpers import write_config

    config = load(write_config(tmp_path))
    request = plan.validate_request(config, "all", "default", False)
    assert request.tables == (EVENTS, REJECTS, "laketide.partition_status", "laketide.maintenance_log")
    assert request.actions is None
    request = plan.validate_request(config, EVENTS, ["expire_snapshots", "rewrite_data_files"], True)
    assert request.actions == ("rewrite_data_files", "expire_snapshots") and request.dry_run
    for table, actions, message in [("lake.nope", "default", "not maintained"),
                                    ("all,lake.clicks", "default", "cannot be combined"),
                                    ("all", "vacuum", "not known"), ("all", [], "not known")]:
        with pytest.raises(plan.MaintenanceRequestError, match=message):
            plan.validate_request(config, table, actions)


def _snap(sid: int, parent: int | None, minute: int, writer: str | None = None) -> Any:
    from laketide.lake.commits import BATCH_ID, WRITER_ID
    from laketide.lake.snapshots import Snap

    summary = {WRITER_ID: writer, BATCH_ID: str(sid)} if writer else {"operation": "replace"}
    return Snap(sid, parent, sid, int(datetime(2026, 11, 22, 0, minute, tzinfo=UTC).timestamp() * 1000), summary)


def test_expiry_plan_keeps_each_writers_newest_marker() -> None:
    # 1..5 writer commits, 6..9 compactions and manifest rewrites after the writer went idle; 10 a dangling one
    snaps = [_snap(i, i - 1 if i > 1 else None, i, "w") for i in range(1, 6)]
    snaps += [_snap(i, i - 1, i) for i in range(6, 10)] + [_snap(10, 3, 4)]
    now = datetime(2026, 11, 23, tzinfo=UTC)
    expiry = plan.plan_expiry(snaps, 9, now, timedelta(hours=1), min_snapshots=1)
    assert expiry.protected == {"w": 5}
    assert expiry.retain_last == 5  # 9, 8, 7, 6 and the marker 5
    assert expiry.older_than_ms == snaps[4].timestamp_ms
    assert expiry.expired == [1, 2, 3, 4, 10]
    # a recent table: the retention decides, nothing newer than it goes
    young = plan.plan_expiry(snaps, 9, datetime(2026, 11, 22, 0, 7, tzinfo=UTC), timedelta(minutes=4), 1)
    assert young.expired == [1, 2] and young.protected == {"w": 5}
    assert plan.plan_expiry([], None, now, timedelta(hours=1), 1).expired == []


def test_threshold_actions() -> None:
    from laketide.config import TablePolicy

    policy = TablePolicy(max_manifests=10, max_snapshots=100)
    assert plan.threshold_actions(10, 100, policy) == []
    assert plan.threshold_actions(11, 101, policy) == ["rewrite_manifests", "expire_snapshots"]
    only_expiry = TablePolicy(actions=["expire_snapshots"], max_manifests=10)
    assert plan.threshold_actions(50, 6000, only_expiry) == ["expire_snapshots"]
    # an upsert stream's merged table: due for compaction once it holds min_input_files delete files
    merged = TablePolicy(min_input_files=5)
    assert plan.threshold_actions(1, 1, merged, delete_files=4) == []
    assert plan.threshold_actions(1, 1, merged, delete_files=5) == ["rewrite_data_files"]
    assert plan.threshold_actions(1, 1, only_expiry, delete_files=50) == []


def test_small_file_threshold_counts_closed_hours_only() -> None:
    from laketide.config import TablePolicy

    h = [datetime(2026, 11, 22, i, tzinfo=UTC) for i in range(3)]
    mb = 1024**2
    # target 4MB: small is below 3MB; hour 0 has 3 small files and a big one, hour 1 two small, hour 2 (open) 9
    sizes = {h[0]: [mb, mb, 2 * mb, 4 * mb], h[1]: [mb, 2 * mb], h[2]: [mb] * 9}
    per_hour = plan.small_files_per_hour(sizes, [h[0], h[1]], 4 * mb)
    assert per_hour == {h[0]: 3, h[1]: 2}
    policy = TablePolicy(target_file_size=4 * mb, max_small_files=2)
    assert plan.threshold_actions(1, 1, policy, max(per_hour.values())) == ["rewrite_data_files"]
    assert plan.threshold_actions(1, 1, policy, 2) == []
    no_compaction = TablePolicy(actions=["expire_snapshots"], max_small_files=2)
    assert plan.threshold_actions(1, 1, no_compaction, 30) == []


def test_compaction_plan() -> None:
    h = [datetime(2026, 11, 22, i, tzinfo=UTC) for i in range(6)]
    assert plan.hours_to_compact([h[0], h[1], h[3]], {h[0]: 5, h[1]: 1, h[2]: 9, h[3]: 2}, 2) == [h[0], h[3]]
    assert hour_ranges([h[3], h[0], h[1]]) == [(h[0], h[2]), (h[3], h[4])]
    assert hours_filter("event_time", [h[0], h[1]]) == (
        "(`event_time` >= TIMESTAMP '2026-11-22 00:00:00.000' AND `event_time` < TIMESTAMP '2026-11-22 02:00:00.000')")
    statuses = {h[0]: StatusRecord("clicks", h[0], State.CLOSED), h[1]: StatusRecord("clicks", h[1], State.REOPENED)}
    assert plan.closed_hours(statuses) == [h[0]]


class _JavaError(Exception):
    """An exception carrying a (fake) Java cause chain, as py4j hands them over."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        outer = self

        class _Class:
            def getName(self) -> str:
                return name

        class _Throwable:
            def getClass(self) -> _Class:
                return _Class()

            def getMessage(self) -> str:
                return str(outer)

            def getCause(self) -> None:
                return None

        self.java_exception = _Throwable()


def test_a_compaction_that_keeps_losing_gives_up_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from laketide.maintain import job
    from tests.helpers import write_config

    config = load(write_config(tmp_path))
    kept: list[MaintenanceRecord] = []
    monkeypatch.setattr(job, "reopen_sqlite_connections", lambda spark, catalog: 0)
    monkeypatch.setattr(job, "record", lambda config, *records: kept.extend(records))
    maintainer = Maintainer.__new__(Maintainer)
    maintainer.config, maintainer.spark, maintainer.run_id, maintainer.cat = config, None, "r", "laketide"
    maintainer.now = lambda: datetime.now(UTC)

    def lost(*_: Any) -> None:
        raise _JavaError("org.apache.iceberg.exceptions.CommitFailedException",
                         "Cannot commit lake.clicks: metadata location has changed")

    def broken(*_: Any) -> None:
        raise ValueError("something else")

    target = plan.targets(config)[0]
    policy = config.maintenance.policy(target.table)
    monkeypatch.setattr(maintainer, "rewrite_data_files", lost, raising=False)
    rec = maintainer.action(target, "rewrite_data_files", policy, dry_run=False)
    assert rec.outcome == "gave_up" and "lost to concurrent commits (the writer's commits win)" in (rec.error or "")
    assert "CommitFailedException: Cannot commit lake.clicks" in (rec.error or "")
    monkeypatch.setattr(maintainer, "rewrite_manifests", broken, raising=False)
    rec = maintainer.action(target, "rewrite_manifests", policy, dry_run=False)
    assert rec.outcome == "failed" and rec.error == "ValueError: something else"
    assert [r.outcome for r in kept] == ["gave_up", "failed"]


# -- a long history ---------------------------------------------------------------------------------------


def use_catalog(config: LaketideConfig, spark: Any) -> None:
    """Point the module's Spark session at this test's catalog."""
    from laketide.lake.spark import use_catalog as point

    point(spark, config)


def metadata_figures(config: LaketideConfig) -> dict[str, int]:
    """What a reader of the table's metadata pays for: the metadata file, snapshots, manifests."""
    from laketide.maintain.health import table_stats

    stats = table_stats(load_catalog(config.catalog).load_table(EVENTS))
    return {"metadata_bytes": stats.metadata_bytes, "snapshots": stats.snapshots, "manifests": stats.manifests}


def check_cost(config: LaketideConfig, hour: datetime) -> tuple[int, float, float]:
    """Snapshots a first status check of ``hour`` walks, and the best of three timings of ``check_partitions``
    and of pyiceberg ``load_table``."""
    from laketide.close.partitions import check_partitions, enough_history
    from laketide.lake.snapshots import lineage

    stream = config.stream("clicks")
    catalog = load_catalog(config.catalog)
    now = datetime.now(UTC)
    walked = len(lineage(catalog, EVENTS, enough_history(stream, hour, now))[1])

    def best(fn: Any) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    return walked, best(lambda: check_partitions(config, stream, [hour])), best(lambda: catalog.load_table(EVENTS))


#: what one maintenance run leaves of any history, however long: the metadata file (50 snapshots with the writer's
#: summaries, a short metadata log) stays far below this
METADATA_BOUND = 256 * 1024


def test_a_long_history_is_brought_back_to_a_bounded_metadata_size(spark: Any, tmp_path: Path) -> None:
    """Five hundred small writer commits: after one maintenance run (compaction of the closed hours, manifest
    rewrite, expiry two days later) the metadata is back under fixed bounds that do not depend on the history's
    length (snapshots: ``min_snapshots``; manifests: a few; the metadata file: ``METADATA_BOUND``); the writer's
    newest marker survives; a first status check walks and pyiceberg ``load_table`` parses a fraction of what
    they did before, and both take less time."""
    from laketide.dev.history import build_history
    from laketide.ingest.tables import ensure_tables
    from laketide.maintain.health import due_by_threshold
    from tests.helpers import write_config

    commits = 500
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=6)
    hours = [start + timedelta(hours=i) for i in range(4)]
    closed = hours[:3]
    # an idle window longer than building the history takes on a slow machine: every commit stays "recent", so a
    # first check cannot stop early at an old commit of the writer
    config = load(with_catalog(write_config(tmp_path, idle_window="1h")))
    policy = config.maintenance.policy(EVENTS)
    use_catalog(config, spark)
    ensure_tables(spark, config, config.stream("clicks"))
    build_history(config, spark, config.stream("clicks"), commits, hours)
    close_hours(config, *closed)
    before = metadata_figures(config)
    assert before["snapshots"] == commits
    assert before["metadata_bytes"] > METADATA_BOUND  # the history is long enough to matter
    walked_before, check_before, load_before = check_cost(config, hours[-1])
    assert walked_before == commits  # every commit is recent: a first check walks them all
    # the threshold run sees it from metadata: 125 small files in each closed hour, more than max_small_files;
    # one manifest per commit, more than max_manifests
    assert due_by_threshold(config).get(EVENTS) == ["rewrite_data_files", "rewrite_manifests"]

    done = maintain(config, spark, EVENTS, "rewrite_data_files,rewrite_manifests,expire_snapshots",
                    now=datetime.now(UTC) + timedelta(days=2))
    assert {r.action: r.outcome for r in done} == {
        "rewrite_data_files": "ok", "rewrite_manifests": "ok", "expire_snapshots": "ok"}, [r.line() for r in done]
    table = load_catalog(config.catalog).load_table(EVENTS)
    counts = file_counts(table)
    assert all(counts[h] == 1 for h in closed), counts  # each closed hour compacted to one file
    assert counts[hours[-1]] == commits // len(hours)  # the open hour is left alone
    marker = table_marker(load_catalog(config.catalog), EVENTS, "clicks-writer")
    assert marker is not None and marker.batch_id == commits - 1  # the dedupe key survives expiry
    after = metadata_figures(config)
    assert after["snapshots"] <= policy.min_snapshots + 1, after
    assert after["manifests"] <= 4, after
    assert after["metadata_bytes"] < METADATA_BOUND, after
    assert EVENTS not in due_by_threshold(config)

    walked_after, check_after, load_after = check_cost(config, hours[-1])
    assert walked_after <= policy.min_snapshots + 1
    assert check_after < check_before and load_after < load_before, (
        (check_before, check_after), (load_before, load_after))
