"""The redo itself (Spark): hold the stream, roll both tables back, rebuild the checkpoint, re-ingest, record.

1. **plan** (``laketide.redo.plan``) and check it against the hour range: a redo that would change hours outside
   the range is refused before anything changes. A dry run ends here, with the report;
2. **hold** the stream: the stop file asks the live writer to stop between batches; the redo then takes the
   stream's writer lease (mode ``redo``), so a writer restarted meanwhile (the ingest DAG's retries) is refused
   (exit 4) until the redo ends, and a second redo of the stream is refused at once. Maintenance is kept off
   both tables through their maintenance leases;
3. **rollback**: the events table's current snapshot becomes S, the rejects table's the plan's snapshot (or the
   rejects table is emptied with a marker of ``B_S``), both through Iceberg's ``ManageSnapshots`` (no SQL);
4. **checkpoint** at S's position (``laketide.redo.checkpoint``, the old one kept);
5. **re-ingest**: the writer's own stream runs once (``availableNow``) on that checkpoint under the redo's
   lease: every file landed since S's position, from batch ``B_S + 1``, with the live writer's parsing, rejects,
   fenced commits and summaries, plus ``laketide.redo-id``. The checkpoint it leaves is the one the live writer
   resumes from;
6. **record**: each hour whose data changed (between the table before the redo and after it) is recorded
   ``reopened`` in the status table: who, when, from which snapshot, rows and rejects before and after. The
   redo DAG then re-verifies and re-closes them (so does the close DAG for hours closed before).

Killed anywhere, running it again with the same params finishes correctly: the rollback to S is idempotent, the
checkpoint swap is rename-based, and what an interrupted re-ingest committed is rolled back again and redone.
The first attempt's "before" numbers are kept in ``<home>/redo/<stream>/<run id>.json``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laketide.close.archive import redo_holds, restore
from laketide.close.partitions import State
from laketide.close.status import StatusRecord, record
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import RedoBusyError, RequestError, WriterBusyError
from laketide.ingest.landing import data_dir
from laketide.lake.commits import BATCH_ID, REDO_ID, WRITER_ID
from laketide.lake.hours import parse_partition
from laketide.lake.lease import REDO_MODE
from laketide.redo import checkpoint
from laketide.redo.params import RedoRequest
from laketide.redo.plan import EMPTY, RedoPlan, make_plan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from laketide.lake.lease import WriterLease

log = logging.getLogger("laketide.redo")


@dataclass
class RedoResult:
    """What a redo did (or, dry run, would do)."""

    request: dict[str, Any]
    plan: dict[str, Any]
    report: list[str]
    #: per changed hour: rows and rejects before and after (after: None in a dry run)
    hours: dict[str, dict[str, Any]] = field(default_factory=dict)
    head_after: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"request": self.request, "plan": self.plan, "report": self.report, "hours": self.hours,
                "head_after": self.head_after}


def check_scope(plan: RedoPlan, request: RedoRequest) -> None:
    """Refuse a redo whose rollback changes hours outside the requested range (before anything changes)."""
    outside = [h for h in plan.hours if h != "unknown" and parse_partition(h) not in request.hours]
    if outside:
        raise RequestError(
            f"the redo of {plan.stream} back to snapshot {plan.snapshot_id} changes hours outside the range "
            f"{request.hours.describe()}: {outside}. Widen the range (or leave it empty), or choose a later snapshot")


def check_new_run(config: LaketideConfig, request: RedoRequest) -> None:
    """Refuse a run id a finished redo of the stream used (a run id is reused only to finish an interrupted one)."""
    stream = config.stream(request.stream)
    done = state_file(config, stream, request.run_id).with_name(f"{request.run_id}.done.json")
    if done.exists():
        raise RequestError(f"run id {request.run_id!r}: a redo of {stream.name} with this id has finished ({done}); "
                           "give a new run id (a run id is reused only to finish an interrupted redo)")


def state_file(config: LaketideConfig, stream: StreamConfig, run_id: str) -> Path:
    return config.home / "redo" / stream.name / f"{run_id}.json"


def lease_of(config: LaketideConfig, stream: StreamConfig) -> WriterLease:
    from laketide.ingest.runner import stop_file
    from laketide.lake.lease import WriterLease, engine_for

    hint = (f"A redo of stream {stream.name} holds it while it runs; the writer resumes after it "
            f"(the stop file {stop_file(stream)} asked it to stop).")
    return WriterLease(engine_for(config.catalog), stream.writer_id, stream.writer_lease, REDO_MODE, hint)


def running_redo(config: LaketideConfig, stream: StreamConfig) -> str | None:
    """A description of a live redo of ``stream`` (from the writer lease), or None."""
    return redo_holds(config, stream)


def hold(config: LaketideConfig, stream: StreamConfig, wait: timedelta) -> WriterLease:
    """Stop the stream's writer (stop file) and take its lease for the redo; raise :class:`RedoBusyError` when
    another redo of the stream runs or the writer did not stop within ``wait``."""
    from laketide.ingest.runner import stop_file

    lease = lease_of(config, stream)
    flag = stop_file(stream)
    deadline = time.monotonic() + wait.total_seconds()
    said = False
    created = not flag.exists()
    while True:
        other = running_redo(config, stream)
        if other is not None:
            raise RedoBusyError(f"another redo of stream {stream.name!r} is running ({other}); nothing was changed")
        if not flag.exists():  # a writer deletes it when it stops on it: ask again until the lease is ours
            flag.parent.mkdir(parents=True, exist_ok=True)
            flag.touch()
        try:
            lease.acquire()
            flag.unlink(missing_ok=True)  # the writer stopped and the lease keeps it out: the request is answered
            log.info("redo holds stream %s (writer lease of %s)", stream.name, stream.writer_id)
            return lease
        except WriterBusyError as exc:
            if time.monotonic() > deadline:
                if created:  # the redo is refused: the writer goes on
                    flag.unlink(missing_ok=True)
                raise RedoBusyError(f"the writer of stream {stream.name!r} did not stop within {wait} (stop file "
                                    f"{flag}): {exc}; nothing was changed") from exc
            if not said:
                log.info("waiting for the writer of %s to stop between batches: %s", stream.name, exc)
                said = True
            time.sleep(1.0)


def _maintenance_leases(config: LaketideConfig, stream: StreamConfig, wait: timedelta) -> list[WriterLease]:
    """The maintenance leases of both tables (maintenance skips a table while they are held)."""
    from laketide.lake.lease import MAINTENANCE_PREFIX, WriterLease, engine_for

    engine = engine_for(config.catalog)
    taken: list[WriterLease] = []
    deadline = time.monotonic() + wait.total_seconds()
    for table in (stream.table, stream.rejects_table):
        lease = WriterLease(engine, MAINTENANCE_PREFIX + table, config.maintenance.lease, REDO_MODE)
        while True:
            try:
                lease.acquire()
                taken.append(lease)
                break
            except WriterBusyError as exc:
                if time.monotonic() > deadline:
                    for held in taken:
                        held.release()
                    raise RedoBusyError(f"maintenance of {table} did not finish within {wait}: {exc}") from exc
                time.sleep(2.0)
    return taken


class Rollback:
    """Sets the current snapshot of the stream's tables through Iceberg's Java API (fresh SQLite connections
    before each attempt; a busy catalog is waited out)."""

    def __init__(self, config: LaketideConfig, spark: SparkSession) -> None:
        from laketide.lake.internals import IcebergJvm

        self.config = config
        self.prefix = config.catalog.name
        self.iceberg = IcebergJvm(spark, self.prefix)
        self.jvm: Any = spark._jvm

    def _attempt(self, what: str, action: Any) -> None:
        from laketide.ingest.sink import retrying

        def once() -> None:
            self.iceberg.sqlite.reopen()
            action()

        retrying(what, once, self.config.catalog.retry_timeout)

    def set_current(self, table: str, snapshot_id: int) -> bool:
        """Make ``snapshot_id`` the current snapshot of ``table``; False when it already was."""
        jtable = self.iceberg.table(f"{self.prefix}.{table}")
        current = jtable.currentSnapshot()
        if current is not None and int(current.snapshotId()) == snapshot_id:
            return False

        def move() -> None:
            jtable.refresh()
            head = jtable.currentSnapshot()
            if head is None or int(head.snapshotId()) != snapshot_id:
                jtable.manageSnapshots().setCurrentSnapshot(snapshot_id).commit()

        self._attempt(f"rollback of {table} to snapshot {snapshot_id}", move)
        log.info("%s: current snapshot is now %d (was %s)", table, snapshot_id,
                 None if current is None else int(current.snapshotId()))
        return True

    def empty(self, table: str, writer_id: str, batch_id: int | None, run_id: str) -> None:
        """Delete every row of ``table`` in one commit marked as the writer's batch ``batch_id`` (-1: none yet),
        so that the writer's dedupe finds that batch as the table's last."""
        jtable = self.iceberg.table(f"{self.prefix}.{table}")
        expressions = self.jvm.org.apache.iceberg.expressions.Expressions

        def clear() -> None:
            jtable.refresh()
            (jtable.newDelete().deleteFromRowFilter(expressions.alwaysTrue())
             .set(WRITER_ID, writer_id).set(BATCH_ID, str(-1 if batch_id is None else batch_id))
             .set(REDO_ID, run_id).commit())

        self._attempt(f"emptying {table}", clear)
        log.info("%s: emptied (no commit of batch %s or older to return to)", table, batch_id)


def _hours(before: dict[str, int], after: dict[str, int], rejects_before: dict[str, int],
           rejects_after: dict[str, int], changed: set[str]) -> dict[str, dict[str, Any]]:
    return {h: {"rows_before": before.get(h, 0), "rows_after": after.get(h, 0),
                "rejects_before": rejects_before.get(h, 0), "rejects_after": rejects_after.get(h, 0)}
            for h in sorted(changed)}


def run(config: LaketideConfig, spark: SparkSession | None, request: RedoRequest,
        wait: timedelta = timedelta(minutes=15)) -> RedoResult:
    """Carry out (or, dry run, report) ``request``; see the module docstring for the steps.

    :param spark: the session the re-ingest runs in (None only for a dry run)
    :raises RequestError: the plan changes hours outside the requested range (nothing changed)
    :raises RedoBusyError: another redo runs, or the writer did not stop (nothing changed)
    """
    stream = config.stream(request.stream)
    plan = make_plan(config, stream, request.snapshot_id)
    check_scope(plan, request)
    req = {"stream": request.stream, "snapshot_id": request.snapshot_id, "start": _iso(request.hours.start),
           "end": _iso(request.hours.end), "dry_run": request.dry_run, "run_id": request.run_id,
           "user": request.user}
    lines = plan.lines(request.hours)
    for line in lines:  # the plan first: what a reader of the task's log sees before anything else
        log.info("%s%s", "dry run: " if request.dry_run else "plan: ", line)
    if request.dry_run:
        from laketide.redo import actions

        actions.record(config, actions.from_redo_plan(plan, request, lines))
        return RedoResult(req, plan.to_dict(), lines,
                          {h: {"rows_before": plan.rows_now.get(h, 0), "rows_after": None,
                               "rejects_before": plan.rejects_now.get(h, 0), "rejects_after": None}
                           for h in plan.hours}, plan.head_id)
    assert spark is not None, "a redo needs a SparkSession"
    check_new_run(config, request)
    log.info("redo %s of stream %s by %s: back to snapshot %d", request.run_id, stream.name, request.user,
             request.snapshot_id)
    other = running_redo(config, stream)
    if other is not None:
        raise RedoBusyError(f"another redo of stream {stream.name!r} is running ({other}); nothing was changed")
    lease = hold(config, stream, wait)
    try:
        maintenance = _maintenance_leases(config, stream, wait)
        try:
            return _redo(config, spark, stream, request, req, lease)
        finally:
            for held in maintenance:
                held.release()
    finally:
        lease.release()


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _redo(config: LaketideConfig, spark: SparkSession, stream: StreamConfig, request: RedoRequest,
          req: dict[str, Any], lease: WriterLease) -> RedoResult:
    from laketide.ingest.group import run_held
    from laketide.redo.plan import both_files, changed_hours, load_table, rows_by_hour

    saved = state_file(config, stream, request.run_id)
    if saved.is_file():  # a re-run: the first attempt saw the table before the redo
        first = json.loads(saved.read_text())
        log.info("redo %s was interrupted before; the table before it is read from %s", request.run_id, saved)
    else:
        first = {"plan": make_plan(config, stream, request.snapshot_id).to_dict(),
                 "started_at": datetime.now(UTC).isoformat(timespec="seconds")}
        saved.parent.mkdir(parents=True, exist_ok=True)
        tmp = saved.with_suffix(".tmp")
        tmp.write_text(json.dumps(first, sort_keys=True))
        tmp.replace(saved)
    before = RedoPlan.from_dict(first["plan"])
    plan = make_plan(config, stream, request.snapshot_id)  # from the table as it is now (maybe half redone)
    rollback = Rollback(config, spark)
    rollback.set_current(stream.table, request.snapshot_id)
    if plan.rejects_snapshot == EMPTY:
        rollback.empty(stream.rejects_table, stream.writer_id, plan.batch_id, request.run_id)
    elif plan.rejects_snapshot is not None:
        rollback.set_current(stream.rejects_table, plan.rejects_snapshot)
    restored = restore(stream.landing_path, plan.reingest)  # archived files of closed hours: read again from data/
    if restored:
        log.info("%d archived landing file(s) to re-ingest moved back into %s", restored, data_dir(stream.landing_path))
    kept = checkpoint.replace(stream.checkpoint_path, request.run_id, plan.batch_id, plan.position_stats,
                              data_dir(stream.landing_path))
    log.info("re-ingesting %d landed file(s) of %s from batch %s", len(plan.reingest), stream.name,
             0 if plan.batch_id is None else plan.batch_id + 1)
    run_held(config, stream, "incremental", lease, spark, {REDO_ID: request.run_id})
    if stream.upsert is not None:  # re-ingested nothing: the merged table still follows the change log rolled back
        from laketide.ingest.merge_sink import MergeSink

        MergeSink(config, stream).catch_up(spark, -1)

    events, rejects = load_table(config, stream.table), load_table(config, stream.rejects_table)
    assert events is not None
    head = events.metadata.current_snapshot_id
    rejects_head = None if rejects is None else rejects.metadata.current_snapshot_id
    changed = changed_hours(both_files(events, before.head_id, rejects, before.rejects_head),
                            both_files(events, head, rejects, rejects_head))
    rows_after, rejects_after = rows_by_hour(events, head), rows_by_hour(rejects, rejects_head)
    hours = _hours(before.rows_now, rows_after, before.rejects_now, rejects_after, changed)
    records = []
    for hour, counts in hours.items():
        if hour == "unknown":
            continue
        records.append(StatusRecord(
            stream.name, parse_partition(hour), State.REOPENED, rows=counts["rows_after"],
            rejects=counts["rejects_after"], snapshot_id=head, run_id=request.run_id,
            reason=(f"redo {request.run_id} by {request.user} (started {first['started_at']}): {stream.table} back to "
                    f"snapshot {request.snapshot_id} (batch {plan.batch_id}) from {before.head_id}, then "
                    f"{len(plan.reingest)} landed file(s) re-ingested; rows {counts['rows_before']} -> "
                    f"{counts['rows_after']}, rejects {counts['rejects_before']} -> {counts['rejects_after']}: "
                    "re-verify and re-close"),
        ))
    if records:
        record(config, *records)
    changes = [f"  hour {h}: rows {c['rows_before']} -> {c['rows_after']}, rejects {c['rejects_before']} -> "
               f"{c['rejects_after']}" for h, c in hours.items()]
    report = [f"done: redo {request.run_id} of {stream.name} by {request.user}: {stream.table} back to snapshot "
              f"{request.snapshot_id}, now at snapshot {head}; checkpoint rebuilt (the old one is kept as "
              f"{kept.name}); {len(records)} hour(s) recorded reopened", *changes, *before.lines(request.hours)]
    for line in report:
        log.info("%s", line)
    result = RedoResult(req, before.to_dict(), report, hours, head)
    from laketide.redo import actions

    actions.record(config, actions.from_redo_result(request, before.head_id, head, hours, report))
    saved.with_name(f"{request.run_id}.done.json").write_text(json.dumps(result.to_dict(), sort_keys=True))
    saved.unlink(missing_ok=True)
    return result
