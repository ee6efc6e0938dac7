"""The maintenance Spark application: Iceberg's procedures on several tables in one Spark session.

For each table of the request, one at a time, under a per-table lease (at most one maintenance run per table,
whatever DAG started it), in this order, each action recorded (``laketide.maintain.record``):

0. ``expire_tombstones`` (an upsert stream's tombstones table only): the tombstones no change still to come can
   be older than (``laketide.maintain.tombstones``) deleted.
1. ``rewrite_data_files``: binpack to ``target_file_size``; for a stream's events and rejects tables only the
   **closed** hours (newest status ``closed``) that hold at least ``min_input_files`` files, so the writer's
   open hours are never rewritten. Its commit is a replace snapshot that the writer builds on.
2. ``rewrite_manifests``: one manifest per micro-batch becomes a few.
3. ``expire_snapshots``: older than ``snapshot_retention``, at least ``min_snapshots`` kept, and every writer's
   newest marker kept (``plan.plan_expiry``); checked again after the commit. Iceberg's core expiry in the
   driver, not the procedure's Spark action (:meth:`Maintainer._expire` says why).
4. ``remove_orphan_files``: files older than ``orphan_age`` (never below one day) that no snapshot references,
   e.g. the data files of a batch attempt killed before its commit.

A dry run plans and counts but changes nothing. A commit that keeps losing to the writer (more often than the
``commit.retry.*`` table properties allow) gives up, is recorded ``gave_up`` and the run goes on.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from laketide.config import LaketideConfig, TablePolicy
from laketide.errors import GaveUp, WriterBusyError
from laketide.ingest import sink
from laketide.lake.catalog import COMMIT_RETRY_PROPERTIES, load_catalog
from laketide.lake.hours import hours_filter, partition_key, timestamp_literal
from laketide.lake.internals import reopen_sqlite_connections
from laketide.lake.lease import MAINTENANCE_PREFIX, WriterLease, engine_for
from laketide.maintain import plan, tombstones
from laketide.maintain.health import TableStats, file_counts, snaps, table_stats
from laketide.maintain.record import BUSY, MaintenanceRecord, record

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

log = logging.getLogger("laketide.maintain")


class Maintainer:
    """Runs maintenance requests in one Spark session.

    :param now: the clock the plans are made with (tests move it); records carry the real time
    """

    def __init__(self, config: LaketideConfig, spark: SparkSession, run_id: str,
                 now: Any = lambda: datetime.now(UTC)) -> None:
        self.config = config
        self.spark = spark
        self.run_id = run_id
        self.now = now
        self.catalog = load_catalog(config.catalog)
        self.cat = config.catalog.name
        self._engine: Any = None

    # ---- the run ----

    def run(self, request: plan.Request) -> list[MaintenanceRecord]:
        """Serve every table of ``request`` in turn; return what each action did."""
        by_name = {t.table: t for t in plan.targets(self.config)}
        out: list[MaintenanceRecord] = []
        for name in request.tables:
            target = by_name[name]
            actions = [a for a in request.actions_for(self.config.maintenance.policy(name))
                       if a != "expire_tombstones" or target.kind == "tombstones"]
            if actions:
                out += self.table(target, actions, request.dry_run)
        return out

    def table(self, target: plan.Target, actions: list[str], dry_run: bool) -> list[MaintenanceRecord]:
        """Run ``actions`` on one table, serially, under the table's maintenance lease."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            self.catalog.load_table(target.table)
        except (NoSuchTableError, NoSuchNamespaceError):
            if target.kind == "record":  # created by the first record
                from laketide.maintain.record import record_table

                record_table(self.config)
            else:
                log.info("%s does not exist yet: nothing to maintain", target.table)
                return []
        self._engine = self._engine or engine_for(self.config.catalog)
        lease = WriterLease(self._engine, MAINTENANCE_PREFIX + target.table, self.config.maintenance.lease,
                            "maintenance")
        try:
            lease.acquire()
        except WriterBusyError:
            holder = lease.holder()
            busy = MaintenanceRecord(self.run_id, target.table, ",".join(actions), outcome="skipped", dry_run=dry_run,
                                     detail=BUSY + (f" ({holder.describe(time.time())})" if holder else ""))
            self._keep(busy)
            return [busy]
        out: list[MaintenanceRecord] = []
        try:
            if target.streaming and not dry_run:
                self.ensure_properties(target)
            policy = self.config.maintenance.policy(target.table)
            for action in actions:
                lease.renew()
                out.append(self.action(target, action, policy, dry_run))
        finally:
            lease.release()
        return out

    def action(self, target: plan.Target, action: str, policy: TablePolicy, dry_run: bool) -> MaintenanceRecord:
        """One action, timed and recorded whatever happens."""
        rec = MaintenanceRecord(self.run_id, target.table, action, dry_run=dry_run)  # the real time, always
        started = time.monotonic()
        try:
            reopen_sqlite_connections(self.spark, self.cat)
            getattr(self, action)(target, policy, rec)
            if dry_run and rec.outcome == "ok":
                rec.outcome = "dry_run"
        except GaveUp as exc:
            rec.outcome, rec.error = "gave_up", str(exc)
        except Exception as exc:
            if sink.is_transient(exc):
                rec.outcome = "gave_up"
                rec.error = (f"lost to concurrent commits (the writer's commits win) after the table's commit.retry.* "
                             f"attempts: {sink.first_line(exc)}; nothing was changed, the next run tries again")
            else:
                rec.outcome, rec.error = "failed", sink.first_line(exc)
                log.exception("%s %s failed", target.table, action)
        rec.duration_ms = int((time.monotonic() - started) * 1000)
        self._keep(rec)
        return rec

    def _keep(self, rec: MaintenanceRecord) -> None:
        (log.warning if rec.outcome in ("failed", "gave_up") else log.info)("%s", rec.line())
        try:
            record(self.config, rec)
        except Exception:  # the record is evidence, not a reason to stop maintaining the other tables
            log.exception("could not record: %s", rec.line())

    # ---- helpers ----

    def _qualified(self, name: str) -> str:
        """``catalog.namespace.table``: a namespace named like the catalog (``laketide.partition_status`` in the
        catalog ``laketide``) would otherwise be read as the catalog."""
        return f"{self.cat}.{name}"

    def _load(self, name: str) -> Table:
        return self.catalog.load_table(name)

    def _call(self, procedure: str, args: str) -> list[Any]:
        sql = f"CALL {self.cat}.system.{procedure}({args})"
        log.info("%s", sql)
        return self.spark.sql(sql).collect()

    def _expire(self, name: str, older_than_ms: int, retain_last: int) -> None:
        """Iceberg's own expiry (``Table.expireSnapshots``, the core API) in this driver, not the Spark action behind
        the ``expire_snapshots`` procedure: the action reads every manifest list and manifest of the table before
        and after in Spark tasks to find what to delete (89 s for 2,000 snapshots of one small table on two
        cores); the core API walks only what the expired snapshots reference (a few seconds), with the same commit
        and retries."""
        from laketide.lake.internals import iceberg_table

        log.info("%s: expire snapshots older than %s, retain last %d", name, timestamp_literal(older_than_ms),
                 retain_last)
        table = iceberg_table(self.spark, self._qualified(name))
        table.expireSnapshots().expireOlderThan(older_than_ms).retainLast(retain_last).cleanExpiredFiles(True) \
            .commit()

    def _before(self, rec: MaintenanceRecord, table: Table) -> TableStats:
        stats = table_stats(table)
        rec.files_before, rec.bytes_before = stats.files, stats.bytes
        rec.manifests_before, rec.snapshots_before = stats.manifests, stats.snapshots
        return stats

    def _after(self, rec: MaintenanceRecord, name: str) -> None:
        stats = table_stats(self._load(name))
        rec.files_after, rec.bytes_after = stats.files, stats.bytes
        rec.manifests_after, rec.snapshots_after = stats.manifests, stats.snapshots

    def ensure_properties(self, target: plan.Target) -> None:
        """Set the commit-retry properties of a streaming table when they differ (``COMMIT_RETRY_PROPERTIES``)."""
        current = self._load(target.table).properties
        missing = {k: v for k, v in COMMIT_RETRY_PROPERTIES.items() if current.get(k) != v}
        if missing:
            props = ", ".join(f"'{k}'='{v}'" for k, v in missing.items())
            self.spark.sql(f"ALTER TABLE {self.cat}.{target.table} SET TBLPROPERTIES ({props})")
            log.info("%s: commit-retry properties set: %s", target.table, missing)

    # ---- the actions ----

    def rewrite_data_files(self, target: plan.Target, policy: TablePolicy, rec: MaintenanceRecord) -> None:
        table = self._load(target.table)
        before = self._before(rec, table)
        where = ""
        column = target.hour_column
        if column is not None:
            from laketide.close.status import latest

            assert target.stream is not None
            closed = plan.closed_hours(latest(self.config, target.stream.name))
            counts = file_counts(table)
            hours = plan.hours_to_compact(closed, counts, policy.min_input_files)
            rec.partitions = json.dumps([partition_key(h) for h in hours])
            in_hours = sum(counts.get(h, 0) for h in hours)
            if not hours:
                rec.outcome = "skipped"
                rec.detail = (f"no closed hour with {policy.min_input_files} or more files "
                              f"({len(closed)} closed hours)")
                rec.files_after, rec.bytes_after = rec.files_before, rec.bytes_before
                return
            rec.detail = f"{len(hours)} closed hours, {in_hours} files in them"
            where = f', where => "{hours_filter(column, hours)}"'
        elif before.files < policy.min_input_files and not (target.kind == "merged" and before.delete_files):
            rec.outcome, rec.detail = "skipped", f"{rec.files_before} data files"
            return
        if rec.dry_run:
            return
        options = {
            "target-file-size-bytes": str(policy.target_file_size),
            "min-input-files": str(policy.min_input_files),
            # one commit per group of files (an hour, or part of one): a commit that loses to the writer retries a
            # small replace. One group at a time, each committed as soon as it is written: Iceberg's commit service
            # polls without sleeping while a group waits for the others of its commit or a commit is under way, so
            # groups that waited for each other (10 commits at most) or two groups committing at once (each
            # retrying on the other's "stale table metadata") kept a core busy doing nothing. The 2,000-commit
            # history's compaction (3 hours of 500 files): 29.0 s and 43 CPU-s with two groups at once and 10
            # commits at most; 21.1 s and 26 CPU-s so (bench/README.md, the test suite)
            "partial-progress.enabled": "true",
            "partial-progress.max-commits": "1000",
            "max-concurrent-file-group-rewrites": "1",
        }
        if target.kind == "merged":  # an upsert stream's keyed table: a file with deletes is rewritten without them
            options.update({"delete-file-threshold": "1", "min-input-files": "1", "remove-dangling-deletes": "true"})
        opts = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
        (row,) = self._call("rewrite_data_files",
                            f"table => '{self._qualified(target.table)}', strategy => 'binpack'{where}, "
                            f"options => map({opts})")
        result = row.asDict()
        if target.kind == "merged":  # the position deletes left pointing at rewritten files: dropped
            self._call("rewrite_position_delete_files", f"table => '{self._qualified(target.table)}', "
                       "options => map('rewrite-all', 'true')")
        self._after(rec, target.table)
        failed = int(result.get("failed_data_files_count") or 0)
        rewritten = int(result.get("rewritten_data_files_count") or 0)
        rec.detail = (f"{rec.detail + '; ' if rec.detail else ''}{rewritten} files rewritten into "
                      f"{result.get('added_data_files_count')}, {result.get('rewritten_bytes_count')} bytes")
        if target.hour_column is not None and rec.partitions:
            counts_after = file_counts(self._load(target.table))
            hours = file_counts_hours(rec.partitions)
            rec.detail += f"; files in those hours now {sum(counts_after.get(h, 0) for h in hours)}"
        if failed:
            message = (f"{failed} files could not be committed: their groups lost to concurrent commits more often "
                       "than commit.retry.num-retries; they are left as they were and compacted on the next run")
            if rewritten == 0:
                raise GaveUp(message)
            rec.error = message

    def rewrite_manifests(self, target: plan.Target, policy: TablePolicy, rec: MaintenanceRecord) -> None:
        table = self._load(target.table)
        self._before(rec, table)
        if (rec.manifests_before or 0) <= 1:
            rec.outcome, rec.detail = "skipped", f"{rec.manifests_before} manifest(s)"
            return
        if rec.dry_run:
            return
        (row,) = self._call("rewrite_manifests", f"table => '{self._qualified(target.table)}'")
        result = row.asDict()
        self._after(rec, target.table)
        rec.detail = (f"{result.get('rewritten_manifests_count')} manifests rewritten into "
                      f"{result.get('added_manifests_count')}")

    def expire_tombstones(self, target: plan.Target, policy: TablePolicy, rec: MaintenanceRecord) -> None:
        """An upsert stream's tombstones that can stop no change any more deleted (``maintain.tombstones``)."""
        assert target.stream is not None
        self._before(rec, self._load(target.table))
        found = tombstones.cutoff(self.catalog, target.stream, self.now())
        if found.at is None:
            rec.outcome, rec.detail = "skipped", found.why
            return
        name, micros = self._qualified(target.table), int(found.at.timestamp() * 1_000_000)
        where = f"recorded_at < timestamp_micros({micros})"
        expired = int(self.spark.sql(f"SELECT count(*) FROM {name} WHERE {where}").first()[0])  # type: ignore[index]
        rec.detail = f"{expired} tombstone(s) expired: {found.why}"
        if not expired:
            rec.outcome = "skipped"
        elif not rec.dry_run:
            self.spark.sql(f"DELETE FROM {name} WHERE {where}")
            self._after(rec, target.table)

    def expire_snapshots(self, target: plan.Target, policy: TablePolicy, rec: MaintenanceRecord) -> None:
        table = self._load(target.table)
        self._before(rec, table)
        stale = self._stale_branches(target.table, table)
        if stale and not rec.dry_run:
            self._drop_branches(target.table, stale)
            table = self._load(target.table)
        expiry = plan.plan_expiry(snaps(table), table.metadata.current_snapshot_id, self.now(),
                                  policy.snapshot_retention, policy.min_snapshots)
        kept = ", ".join(f"{w}: {s}" for w, s in sorted(expiry.protected.items()))
        rec.detail = (f"older than {timestamp_literal(expiry.older_than_ms)[11:-1]}, retain last "
                      f"{expiry.retain_last}; writer markers kept: {kept or 'none'}")
        if stale:
            rec.detail += (f"; {len(stale)} staging branch(es) of writers not running "
                           f"{'to drop' if rec.dry_run else 'dropped'}: {', '.join(stale)}")
        rec.snapshots_expired = len(expiry.expired)
        if not expiry.expired:
            rec.outcome = "ok" if stale else "skipped"
            rec.snapshots_after = rec.snapshots_before
            return
        if rec.dry_run:
            return
        before = table_stats(table).snapshot_ids
        self._expire(target.table, expiry.older_than_ms, expiry.retain_last)
        after = table_stats(self._load(target.table))
        self._after(rec, target.table)
        rec.snapshots_expired = len(before - after.snapshot_ids)
        rec.detail += (f"; {rec.snapshots_expired} manifest lists and the manifests and data files no kept snapshot "
                       "references deleted")
        lost = {w: s for w, s in expiry.protected.items() if s not in after.snapshot_ids}
        if lost:  # never expected: the arguments keep them; say it loudly if Iceberg ever disagrees
            raise RuntimeError(f"expire_snapshots removed the newest commit of writer(s) {lost} from {target.table}: "
                               "a restarted writer would not find its last batch; stop the writer and see "
                               "docs/operations.md (checkpoint and table disagree)")

    def _stale_branches(self, name: str, table: Table) -> list[str]:
        """laketide's staging branches of ``table`` (named ``name``) whose stream's writer is not running (no live
        holder of its lease): left by an attempt killed before it moved ``main``, in a stream that has not written
        since (a writer's next attempt drops its own). Each keeps its snapshots, and the files they reference, from
        expiry. A branch whose writer runs, or whose lease cannot be read, is kept."""
        stale = []
        for branch in sorted(table.metadata.refs):
            stream = plan.staging_branch_owner(self.config.streams, branch)
            if stream is None:
                continue
            self._engine = self._engine or engine_for(self.config.catalog)
            try:
                holder = WriterLease(self._engine, stream.writer_id, stream.writer_lease, "maintenance").live_holder()
            except Exception:
                log.warning("%s: staging branch %s kept: the lease of writer %s could not be read", name, branch,
                            stream.writer_id, exc_info=True)
                continue
            if holder is None:
                stale.append(branch)
        return stale

    def _drop_branches(self, name: str, branches: list[str]) -> None:
        """Remove ``branches`` of table ``name`` (one that a writer starting meanwhile removed already is gone)."""
        from laketide.ingest.public_sink import drop_branches
        from laketide.lake.internals import iceberg_table

        table = iceberg_table(self.spark, self._qualified(name))
        table.refresh()
        present = [branch for branch in branches if table.refs().containsKey(branch)]
        drop_branches(table, present)
        for branch in present:
            log.info("%s: staging branch %s of a writer not running dropped", name, branch)

    def remove_orphan_files(self, target: plan.Target, policy: TablePolicy, rec: MaintenanceRecord) -> None:
        age = plan.check_orphan_age(policy.orphan_age)
        table = self._load(target.table)
        keep = {}
        for stream in self.config.streams:
            keep[f"the checkpoint of stream {stream.name}"] = str(stream.checkpoint_path)
            keep[f"the landing zone of stream {stream.name}"] = str(stream.landing_path)
        keep["the verification results folder"] = str(self.config.close.results_dir)
        plan.check_orphan_location(target.table, table.metadata.location, keep)
        self._before(rec, table)
        older_than = int((self.now() - age).timestamp() * 1000)
        rows = self._call("remove_orphan_files", f"table => '{self._qualified(target.table)}', older_than => "
                          f"{timestamp_literal(older_than)}, dry_run => {'true' if rec.dry_run else 'false'}")
        found = [r["orphan_file_location"] for r in rows]
        rec.orphans_found = len(found)
        rec.orphans_removed = 0 if rec.dry_run else len(found)
        rec.detail = f"older than {_human(age)}" + (f"; e.g. {found[0]}" if found else "")
        self._after(rec, target.table)


def _human(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    if seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    return f"{seconds / 3600:g}h" if seconds % 3600 == 0 else f"{seconds}s"


def file_counts_hours(partitions_json: str) -> list[datetime]:
    """The hours of a record's ``partitions`` (JSON list of partition keys)."""
    from laketide.lake.hours import parse_partition

    return [parse_partition(k) for k in json.loads(partitions_json)]


def run(config: LaketideConfig, spark: SparkSession, request: plan.Request, run_id: str) -> list[MaintenanceRecord]:
    """Run ``request`` in ``spark``; return the records (also written to the record table)."""
    return Maintainer(config, spark, run_id).run(request)
