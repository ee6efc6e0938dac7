"""Reconciliation of one stream, per partition: lake rows + rejected rows == rows the producers reported.

Reads the audit records of the landing zone and the two Iceberg tables through pyiceberg (no JVM).
A rejected line is attributed to a partition through its source file's audit record (a landing file
holds one partition); when an audit names several partitions, the reject's event hour decides.

Run ``python -m laketide.reconcile [--stream NAME]`` for a per-partition report.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from laketide.catalog import load_catalog
from laketide.config import LaketideConfig, StreamConfig, get_config
from laketide.landing import partition_key, partition_totals, published_files, read_audits

if TYPE_CHECKING:
    from pyiceberg.table import Table

UNATTRIBUTED = "unattributed"


@dataclass(frozen=True)
class PartitionCounts:
    partition: str
    audit: int
    lake: int
    rejects: int

    @property
    def ok(self) -> bool:
        return self.audit == self.lake + self.rejects


@dataclass
class Report:
    partitions: list[PartitionCounts] = field(default_factory=list)
    duplicate_ids: dict[str, int] = field(default_factory=dict)
    unattributed_rejects: int = 0
    #: published landing files the writer has not ingested yet (not counted in ``partitions``)
    pending_files: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.partitions) and not self.duplicate_ids and not self.unattributed_rejects


def lake_counts(config: LaketideConfig, stream: StreamConfig) -> tuple[Counter[str], dict[str, int], set[str]]:
    """Rows per partition of the events table, event ids seen more than once, and the source files."""
    import pyarrow.compute as pc

    table = load_catalog(config.catalog).load_table(stream.table)
    fields = (stream.event_id_field, stream.event_time_field, "_source_file")
    data = table.scan(selected_fields=fields).to_arrow()
    hours = pc.floor_temporal(data[stream.event_time_field], unit="hour")
    counts: Counter[str] = Counter(partition_key(h) for h in hours.to_pylist() if h is not None)
    ids = Counter(data[stream.event_id_field].to_pylist())
    files = set(pc.unique(data["_source_file"]).to_pylist())
    return counts, {k: v for k, v in ids.items() if v > 1}, files


def reject_counts(table: Table, audits: dict[str, dict[str, Any]]) -> tuple[Counter[str], set[str]]:
    """Rejected rows per partition of a rejects ``table``, attributed through each row's source-file audit
    record, and the source files of the rejects."""
    data = table.scan(selected_fields=("source_file", "event_hour")).to_arrow().to_pylist()
    counts: Counter[str] = Counter()
    files = {row["source_file"] for row in data}
    for row in data:
        parts = list((audits.get(row["source_file"]) or {}).get("partitions", {}))
        hour = partition_key(row["event_hour"]) if row["event_hour"] is not None else None
        if len(parts) == 1:
            counts[parts[0]] += 1
        elif hour is not None and hour in parts:
            counts[hour] += 1
        else:
            counts[UNATTRIBUTED] += 1
    return counts, files


def reconcile(config: LaketideConfig, stream: StreamConfig) -> Report:
    """Compare, per partition, the audit records of the files the writer ingested with both tables."""
    audits = read_audits(stream.landing_path)
    lake, duplicates, lake_files = lake_counts(config, stream)
    rejects_table = load_catalog(config.catalog).load_table(stream.rejects_table)
    rejects, reject_files = reject_counts(rejects_table, audits)
    ingested = lake_files | reject_files
    published = published_files(stream.landing_path)
    expected = partition_totals(audits, ingested)
    report = Report(
        duplicate_ids=duplicates,
        unattributed_rejects=rejects.pop(UNATTRIBUTED, 0),
        pending_files=sorted(published - ingested),
    )
    for part in sorted(set(expected) | set(lake) | set(rejects)):
        report.partitions.append(PartitionCounts(part, expected.get(part, 0), lake[part], rejects[part]))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", help="stream name (default: every configured stream)")
    args = parser.parse_args(argv)
    config = get_config()
    streams = [config.stream(args.stream)] if args.stream else config.streams
    ok = True
    for stream in streams:
        report = reconcile(config, stream)
        print(f"stream {stream.name}: {stream.table} + {stream.rejects_table} vs audit records")
        print(f"  {'partition':<27} {'audit':>8} {'lake':>8} {'rejects':>8}  status")
        for p in report.partitions:
            print(f"  {p.partition:<27} {p.audit:>8} {p.lake:>8} {p.rejects:>8}  {'ok' if p.ok else 'MISMATCH'}")
        print(f"  duplicate event ids: {len(report.duplicate_ids)}; unattributed rejects: "
              f"{report.unattributed_rejects}; landed files not ingested yet: {len(report.pending_files)}")
        ok = ok and report.ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
