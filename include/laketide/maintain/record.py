"""The maintenance record: one row per action on one table, in an Iceberg table written with pyiceberg.

Table ``maintenance.record_table`` (default ``laketide.maintenance_log``), append-only, partitioned by table.
Columns: ``run_id``, ``table_name``, ``action``, ``outcome`` (:data:`OUTCOMES`), ``dry_run``, ``started_at``,
``duration_ms``, ``files_before``/``files_after``, ``bytes_before``/``bytes_after``,
``manifests_before``/``manifests_after``, ``snapshots_before``/``snapshots_after``, ``snapshots_expired``,
``orphans_found``/``orphans_removed``, ``partitions`` (JSON list of the hours compacted), ``detail``, ``error``.
:func:`history` reads it back; ``make status`` shows the age of each table's last maintenance.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from laketide.close.status import TABLE_PROPERTIES  # an append-only log table, like the status table
from laketide.config import LaketideConfig
from laketide.lake.catalog import append_rows, load_catalog, table_or_create

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

log = logging.getLogger("laketide.maintain")

#: ok: done; dry_run: only planned; skipped: nothing to do or the table is busy; gave_up: lost to concurrent
#: commits (the writer's) more often than the commit-retry properties allow, nothing changed; failed: an error
OUTCOMES = ("ok", "dry_run", "skipped", "gave_up", "failed")
#: the detail of a table skipped because another maintenance run holds it
BUSY = "another maintenance run holds the table"
_INTS = ("duration_ms", "files_before", "files_after", "bytes_before", "bytes_after", "manifests_before",
         "manifests_after", "snapshots_before", "snapshots_after", "snapshots_expired", "orphans_found",
         "orphans_removed")


@dataclass
class MaintenanceRecord:
    """What one action did to one table."""

    run_id: str
    table_name: str
    action: str
    outcome: str = "ok"
    dry_run: bool = False
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    duration_ms: int | None = None
    files_before: int | None = None
    files_after: int | None = None
    bytes_before: int | None = None
    bytes_after: int | None = None
    manifests_before: int | None = None
    manifests_after: int | None = None
    snapshots_before: int | None = None
    snapshots_after: int | None = None
    snapshots_expired: int | None = None
    orphans_found: int | None = None
    orphans_removed: int | None = None
    partitions: str | None = None
    detail: str | None = None
    error: str | None = None

    def line(self) -> str:
        """One human line: what changed."""
        parts = [f"{self.table_name} {self.action}: {self.outcome}"]
        for name, before, after in (("files", self.files_before, self.files_after),
                                    ("bytes", self.bytes_before, self.bytes_after),
                                    ("manifests", self.manifests_before, self.manifests_after),
                                    ("snapshots", self.snapshots_before, self.snapshots_after)):
            if before is not None and after is not None and (before != after or name == "files"):
                parts.append(f"{name} {before}->{after}")
        if self.snapshots_expired is not None:
            parts.append(f"expired {self.snapshots_expired}")
        if self.orphans_found is not None:
            parts.append(f"orphans {self.orphans_found} found, {self.orphans_removed or 0} removed")
        if self.duration_ms is not None:
            parts.append(f"{self.duration_ms / 1000:.1f}s")
        text = ", ".join(parts)
        if self.detail:
            text += f" ({self.detail})"
        if self.error:
            text += f" — {self.error}"
        return text


def table_schema() -> Schema:
    from pyiceberg.schema import Schema
    from pyiceberg.types import BooleanType, LongType, NestedField, StringType, TimestamptzType

    columns: list[NestedField] = [
        NestedField(1, "run_id", StringType(), required=True),
        NestedField(2, "table_name", StringType(), required=True),
        NestedField(3, "action", StringType(), required=True),
        NestedField(4, "outcome", StringType(), required=True),
        NestedField(5, "dry_run", BooleanType(), required=True),
        NestedField(6, "started_at", TimestamptzType(), required=True),
    ]
    for i, name in enumerate(_INTS, start=7):
        columns.append(NestedField(i, name, LongType(), required=False))
    n = 7 + len(_INTS)
    for i, name in enumerate(("partitions", "detail", "error"), start=n):
        columns.append(NestedField(i, name, StringType(), required=False))
    return Schema(*columns)


def record_table(config: LaketideConfig) -> Table:
    """The record table; namespace and table are created when missing."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="table_name"))
    return table_or_create(load_catalog(config.catalog), config.maintenance.record_table, table_schema(), spec,
                           TABLE_PROPERTIES)


def _retryable(exc: Exception) -> bool:
    from pyiceberg.exceptions import CommitFailedException

    return isinstance(exc, CommitFailedException) or (
        type(exc).__name__ == "OperationalError" and "locked" in str(exc))


def record(config: LaketideConfig, *records: MaintenanceRecord, attempts: int = 5) -> None:
    """Append ``records`` in one commit (retried on a conflicting commit or a locked SQLite catalog)."""
    import pyarrow as pa

    if not records:
        return
    names = [f.name for f in fields(MaintenanceRecord)]
    for attempt in range(1, attempts + 1):
        table = record_table(config)
        data = pa.Table.from_pylist([{n: getattr(r, n) for n in names} for r in records],
                                    schema=table.schema().as_arrow())
        try:
            append_rows(table, data)
            return
        except Exception as exc:
            if not _retryable(exc) or attempt == attempts:
                raise
            time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))


def history(config: LaketideConfig, table: str | None = None) -> list[MaintenanceRecord]:
    """Every recorded action (of ``table`` when given), oldest first; ``[]`` before the first run."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    from pyiceberg.expressions import AlwaysTrue, BooleanExpression, EqualTo, Reference
    from pyiceberg.expressions.literals import literal

    try:
        tbl = load_catalog(config.catalog).load_table(config.maintenance.record_table)
    except (NoSuchTableError, NoSuchNamespaceError):
        return []
    row_filter: BooleanExpression = AlwaysTrue()
    if table is not None:
        row_filter = EqualTo(term=Reference("table_name"), value=literal(table))
    rows: list[dict[str, Any]] = tbl.scan(row_filter=row_filter).to_arrow().to_pylist()
    out = [MaintenanceRecord(**row) for row in rows]
    return sorted(out, key=lambda r: r.started_at)


def last_maintenance(records: list[MaintenanceRecord]) -> dict[str, datetime]:
    """When each table was last maintained: an action that changed it, or found nothing to do (not a dry run, a
    failure, or a table another run held)."""
    last: dict[str, datetime] = {}
    for r in records:
        if r.outcome == "ok" or (r.outcome == "skipped" and not (r.detail or "").startswith(BUSY)):
            last[r.table_name] = max(last.get(r.table_name, r.started_at), r.started_at)
    return last
