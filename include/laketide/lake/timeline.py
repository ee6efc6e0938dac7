"""A table's snapshot timeline: what each recent commit was (a writer batch, a backfill, a repair, a redo's
re-ingest, maintenance), newest first, from the snapshot summaries alone (``laketide.lake.snapshots.lineage``).

What the redo form asks for (a snapshot id) is listed here: ``laketide snapshots`` and the UI's "redo from here".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from laketide.lake.commits import (
    ACTION,
    ACTION_ID,
    BATCH_ID,
    PARTITION_ROWS,
    REDO_ID,
    REJECTED_ROWS,
    WATERMARK,
    WRITER_ID,
)
from laketide.lake.snapshots import lineage


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot of the current lineage, as a person reads it."""

    snapshot_id: int
    parent_id: int | None
    committed_at: datetime
    operation: str
    #: "writer batch 41", "backfill 3fa2...", "repair ...", "redo ... batch 7", "maintenance: replace", ...
    what: str
    #: rows the commit added per hour (a writer batch), else empty
    rows: dict[str, int]
    rejects: int | None
    watermark: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"snapshot_id": str(self.snapshot_id),  # 64-bit: a string for JSON readers (browsers round numbers)
                "parent_id": None if self.parent_id is None else str(self.parent_id),
                "committed_at": self.committed_at.isoformat(timespec="seconds"), "operation": self.operation,
                "what": self.what, "rows": self.rows, "rejects": self.rejects, "watermark": self.watermark}


def describe(summary: dict[str, str], operation: str) -> str:
    """What a commit was, from its summary."""
    if ACTION in summary:
        return f"{summary[ACTION]} {summary.get(ACTION_ID, '')}".strip()
    if BATCH_ID in summary:
        batch = f"writer {summary.get(WRITER_ID, '?')} batch {summary[BATCH_ID]}"
        return f"redo {summary[REDO_ID]}: {batch}" if REDO_ID in summary else batch
    return f"maintenance or other: {operation}"


def timeline(catalog: Any, table: str, limit: int = 50) -> list[SnapshotInfo]:
    """The newest ``limit`` snapshots of ``table``'s current lineage, newest first (reads only those)."""
    count = 0

    def stop(_snap: Any) -> bool:
        nonlocal count
        count += 1
        return count >= limit

    _, snaps = lineage(catalog, table, stop)
    out = []
    for snap in snaps[:limit]:
        summary = dict(snap.summary)
        operation = summary.get("operation", "")
        rejected = summary.get(REJECTED_ROWS)
        rows = {k: int(v) for k, v in json.loads(summary.get(PARTITION_ROWS) or "{}").items()}
        out.append(SnapshotInfo(
            snap.snapshot_id, snap.parent_id, datetime.fromtimestamp(snap.timestamp_ms / 1000, UTC), operation,
            describe(summary, operation), rows, int(rejected) if rejected is not None else None,
            summary.get(WATERMARK),
        ))
    return out


def format_timeline(items: list[SnapshotInfo]) -> list[str]:
    """A fixed-width table of a timeline."""
    lines = [f"  {'snapshot id':<20} {'committed at':<25} {'rows':>7} {'rejects':>7}  what"]
    for s in items:
        rows = sum(s.rows.values()) if s.rows else None
        lines.append(f"  {s.snapshot_id:<20} {s.committed_at.isoformat(timespec='seconds'):<25} "
                     f"{'-' if rows is None else rows:>7} {'-' if s.rejects is None else s.rejects:>7}  {s.what}")
    return lines
