"""Reconciliation of one stream, per partition: lake rows + rejected rows == rows the producers reported.

Reads the audit records of the landing zone and the two Iceberg tables through pyiceberg (no JVM).
A rejected line is attributed to a partition through its source file's audit record (a landing file
holds one partition); when an audit names several partitions, the reject's event hour decides.
The expected count of a partition is ``inspection.Inspection.expected`` (the close's verification uses the
same), and every landing file that is neither ingested nor pending is reported by name with its reason
(``inspection.inspect``, against the source positions in the events table's snapshot summaries).

Both tables are read at pinned snapshots and the landing zone after them (``close.view``): one consistent view, so a
file landed or committed meanwhile is pending, never a mismatch.

Run ``./laketide reconcile [--stream NAME]`` (or ``python -m laketide.close.reconcile``) for a per-partition report;
it exits 1 only for a problem (a mismatch that no pending file explains, duplicate ids, a blocking reported file, a
failed batch of the writer), 0 when every hour adds up or only waits for files the writer has not taken yet.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from laketide.close.hourscan import (
    UNATTRIBUTED,
    DuplicateIds,
    exact_rows,
    hours_row_filter,
    plan,
    record_batches,
    reject_counts,
)
from laketide.close.view import View, newest_batch, pin
from laketide.config import LaketideConfig, StreamConfig, get_config
from laketide.errors import LaketideError
from laketide.ingest import failures
from laketide.ingest.inspection import Finding, Inspection, event_time, inspect
from laketide.ingest.landing import read_audits
from laketide.lake.commits import duplicates_removed, source_positions
from laketide.lake.hours import HOUR, hour_start, parse_partition, partition_key
from laketide.lake.snapshots import lineage_summaries

if TYPE_CHECKING:
    pass



@dataclass(frozen=True)
class PartitionCounts:
    partition: str
    audit: int
    lake: int
    rejects: int
    #: landing files of the partition the writer has not ingested yet
    pending: int = 0
    #: reported landing files of the partition (``Report.findings``)
    reported: int = 0
    #: rows removed or dropped as duplicate event ids (repair, ``dedupe_on_write``): the audit still counts them
    duplicates: int = 0

    @property
    def ok(self) -> bool:
        return self.audit == self.lake + self.rejects + self.duplicates

    @property
    def status(self) -> str:
        if self.ok:
            return "ok"
        if self.pending:
            return f"pending ({self.pending} file(s) not ingested yet)"
        return "MISMATCH" + (f" (see {self.reported} reported file(s))" if self.reported else "")


@dataclass
class Report:
    partitions: list[PartitionCounts] = field(default_factory=list)
    duplicate_ids: dict[str, int] = field(default_factory=dict)
    unattributed_rejects: int = 0
    #: published landing files the writer has not ingested yet (counted in ``partitions[].audit``)
    pending_files: list[str] = field(default_factory=list)
    #: landing files reported by name with a reason (hidden, empty, no audit, ...: ``inspection.Finding``)
    findings: list[Finding] = field(default_factory=list)
    #: the writer's batch that failed and has not committed since (``ingest.failures``: batch id, attempts,
    #: files, error, failed_at), None when there is none
    failed_batch: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return (all(p.ok for p in self.partitions) and not self.duplicate_ids and not self.unattributed_rejects
                and not any(f.blocking for f in self.findings) and self.failed_batch is None)

    def problems(self) -> list[str]:
        """What is wrong, one line each: a mismatch no pending file explains, duplicate ids, rejects of no hour, a
        blocking reported file. Files still waiting for the writer are no problem (the writer is behind)."""
        out = [f"{p.partition}: {p.status}" for p in self.partitions if not p.ok and not p.pending]
        if self.duplicate_ids:
            out.append(f"{len(self.duplicate_ids)} event id(s) held more than once")
        if self.unattributed_rejects:
            out.append(f"{self.unattributed_rejects} rejected line(s) attributed to no hour")
        out += [f"landing file {f.line()}" for f in self.findings if f.blocking]
        if self.failed_batch is not None:
            out.append(failed_line(self.failed_batch))
        return out


def failed_line(failed: dict[str, Any]) -> str:
    """One line naming the writer's failed batch, its error and its files (``ingest.failures``)."""
    files = [str(f) for f in failed.get("files") or []]
    shown = ", ".join(files[:10]) + (f" and {len(files) - 10} more" if len(files) > 10 else "")
    return (f"batch {failed.get('batch_id')} of the writer failed ({failed.get('attempts', 1)} attempt(s), last at "
            f"{failed.get('failed_at')}): {failed.get('error')}; its landing files are not ingested until it "
            f"commits: {shown or '(files not known)'}; see the operations guide, 'A batch that keeps failing'")


def lake_counts(config: LaketideConfig, stream: StreamConfig, hours: Collection[datetime] | None = None,
                view: View | None = None) -> tuple[Counter[str], dict[str, int], set[str]]:
    """Rows per partition of the events table at the ``view``'s snapshot (default: the current one), event ids
    seen more than once, and the source files: of the partitions of ``hours`` only (default: the whole table).

    Reads the files of those partitions alone, one at a time (``close.hourscan``): a file's rows are counted from
    its manifest entry when exact, the ids are grouped on disk; memory does not grow with the hours or the table.
    """
    import pyarrow.compute as pc
    from pyiceberg.expressions import AlwaysTrue

    view = view or pin(config, stream)
    table = view.events
    counts: Counter[str] = Counter()
    files: set[str] = set()
    if view.events_snapshot is None:
        return counts, {}, files
    wanted = {hour_start(h) for h in hours} if hours is not None else None
    row_filter = hours_row_filter(stream.event_time_field, wanted) if wanted is not None else AlwaysTrue()
    fields = (stream.event_id_field, stream.event_time_field, "_source_file")
    scan, tasks = plan(table, row_filter, fields, view.events_snapshot)
    with DuplicateIds(config.close.scan_memory) as ids:
        for part, task in enumerate(tasks):
            exact = exact_rows(table, stream.event_time_field, task, wanted)
            if exact is not None:
                counts[partition_key(exact[0])] += exact[1]
            for batch in record_batches(scan, task):
                ids.add(batch.column(stream.event_id_field), part)
                files.update(v for v in pc.unique(batch.column("_source_file")).to_pylist() if v)
                if exact is None:
                    floored = pc.floor_temporal(batch.column(stream.event_time_field), unit="hour")
                    for entry in pc.value_counts(floored).to_pylist():
                        if entry["values"] is not None:
                            counts[partition_key(entry["values"])] += entry["counts"]
        duplicates = ids.result(keep=1_000_000)
    return counts, duplicates.counts, files


def reconcile(config: LaketideConfig, stream: StreamConfig, hours: Collection[datetime] | None = None) -> Report:
    """Compare, per partition, the expected counts (``inspection.Inspection.expected``) with both tables, and
    report every landing file that is neither ingested nor pending, by name with its reason.

    :param hours: the partitions to reconcile (default: all); with them, only those partitions of both tables are
        read, so the cost follows the hours, not the table's size.

    One consistent view (``close.view``): both tables are pinned first, each read at its pinned snapshot, and the
    landing zone is listed after them, so a file landed or committed meanwhile is pending, never a mismatch."""
    view = pin(config, stream)
    lake, duplicates, lake_files = lake_counts(config, stream, hours, view)
    ingested = source_positions(view.events, view.events_snapshot) if view.events_snapshot is not None else {}
    keys = {partition_key(hour_start(h)) for h in hours} if hours is not None else None
    rejects, reject_files = reject_counts(view.rejects, view.rejects_snapshot,
                                          read_audits(stream.landing_path, hidden=True, archived=keys), hours)
    for name in (lake_files | reject_files) - {None}:
        ingested.setdefault(name, None)
    landed = inspect(stream.landing_path, ingested, event_time=event_time(stream), hours=keys,
                     retention=stream.source_log_retention)
    removed = (duplicates_removed(lineage_summaries(view.events, view.events_snapshot))
               if view.events_snapshot is not None else {})
    report = report_of(landed, lake, rejects, duplicates, removed)
    failed = failures.read(stream)
    committed = newest_batch(view, stream.writer_id)
    if failed is not None and failed.get("batch_id", -1) > (-1 if committed is None else committed):
        report.failed_batch = failed  # else a record left behind: that batch committed since
    if keys is not None:
        report.partitions = [p for p in report.partitions if p.partition in keys]
    return report


def report_of(landed: Inspection, lake: Counter[str], rejects: Counter[str], duplicates: dict[str, int],
              removed: dict[str, int] | None = None) -> Report:
    expected = landed.expected()
    report = Report(
        duplicate_ids=duplicates,
        unattributed_rejects=rejects.pop(UNATTRIBUTED, 0),
        pending_files=sorted(landed.pending),
        findings=landed.findings,
    )
    for part in sorted(set(expected) | set(lake) | set(rejects)):
        report.partitions.append(PartitionCounts(
            part, expected.get(part, 0), lake[part], rejects[part], len(landed.pending_for(part)),
            len(landed.findings_for(part)), (removed or {}).get(part, 0),
        ))
    return report


def requested_hours(start: str | None, end: str | None) -> list[datetime] | None:
    """The hours ``[start, end)`` asked on the command line (``end`` defaults to the hour after ``start``); None:
    every hour. Only those partitions of the tables are read, so one hour costs the same in a table of any age.

    :raises ValueError: not a partition key, ``end`` without ``start``, or ``end`` not after ``start``"""
    if not start:
        if end:
            raise ValueError("--end needs --start (the hours [start, end) to reconcile)")
        return None
    first = parse_partition(start)
    stop = parse_partition(end) if end else first + HOUR
    if stop <= first:
        raise ValueError(f"--end {stop.isoformat()} must be after --start {first.isoformat()} (the hours "
                         "[start, end): end is the first hour not reconciled)")
    return [first + i * HOUR for i in range(int((stop - first) / HOUR))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", help="stream name (default: every configured stream)")
    parser.add_argument("--start", help="first hour to reconcile, e.g. 2026-11-22T03:00:00+00:00 (default: all)")
    parser.add_argument("--end", help="first hour after them (exclusive; default: the hour after --start)")
    args = parser.parse_args(argv)
    try:
        hours = requested_hours(args.start, args.end)
        config = get_config()
        streams = [config.stream(args.stream)] if args.stream else config.streams
    except (LaketideError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ok = True
    for stream in streams:
        try:
            report = reconcile(config, stream, hours)
        except LaketideError as exc:
            print(f"error: stream {stream.name}: {exc}", file=sys.stderr)
            return 2
        print(f"stream {stream.name}: {stream.table} + {stream.rejects_table} vs audit records")
        print(f"  {'partition':<27} {'audit':>8} {'lake':>8} {'rejects':>8} {'dup.removed':>11} {'pending':>8} "
              f"{'reported':>8}  status")
        for p in report.partitions:
            print(f"  {p.partition:<27} {p.audit:>8} {p.lake:>8} {p.rejects:>8} {p.duplicates:>11} {p.pending:>8} "
                  f"{p.reported:>8}  {p.status}")
        print("  (audit = lake + rejects + dup.removed when an hour adds up; dup.removed: rows removed or dropped as "
              "duplicate event ids, which the audit records still count; pending, reported: landing files of the "
              "hour not ingested yet, reported by name below)")
        print(f"  duplicate event ids: {len(report.duplicate_ids)}; unattributed rejects: "
              f"{report.unattributed_rejects}; landed files not ingested yet: {len(report.pending_files)}; "
              f"reported files: {len(report.findings)}")
        for finding in report.findings:
            where = f" [hours {', '.join(finding.hours)}]" if finding.hours else ""
            print(f"  {'FILE' if finding.blocking else 'note'} {finding.line()}{where}")
        problems = report.problems()
        if problems:
            print(f"  PROBLEM: {len(problems)}: " + "; ".join(problems))
        elif report.pending_files:
            print(f"  ok so far: {len(report.pending_files)} landed file(s) not ingested yet, which the writer takes "
                  "in its next batches (normal while it runs); every other count adds up")
        else:
            print("  ok: every hour adds up")
        ok = ok and not problems
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
