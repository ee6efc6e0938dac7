"""Tombstone expiry of an upsert stream (``upsert.tombstone_retention``), decided from metadata.

A delete leaves a tombstone, so that an older change of its key arriving later is dropped instead of bringing the key
back; kept for ever, the tombstones table would grow with every key ever deleted. What makes expiry safe is a rule
of the writer: a change whose change time lies more than the retention R before its landing file's time is refused
(``ingest.parsed.Parsed.earliest``, a reject naming the rule). So every change merged from now on has a change
time at or after L - R, where L is the time of the oldest landing file not committed yet (now, when none waits: a
file landing later has a later time). A tombstone whose delete's change time lies before L - R stops no change still
to come: each of those is newer, given that a key's sequence grows with its change time (a version, an LSN or a
change time do). A delete's change time is at most its tombstone's ``recorded_at`` + ``max_future`` (a change time
may lie up to ``max_future`` after its landing, and the merge records the tombstone after that), so the tombstones
recorded before ``L - R - max_future - CLOCK_SKEW`` expire.

Changes already in the change log but not merged yet were checked against their own, older landing times: while the
merged table has not applied its change log's newest snapshot, nothing expires.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from laketide.close.merged_check import applied_snapshot
from laketide.config import StreamConfig
from laketide.config.upsert import tombstones_table
from laketide.ingest.backlog import CLOCK_SKEW, uncommitted
from laketide.ingest.inspection import landed_files


@dataclass(frozen=True)
class Cutoff:
    """Tombstones recorded before ``at`` may expire (None: none may now); ``why`` says how ``at`` was found."""

    at: datetime | None
    why: str


def cutoff(catalog: Any, stream: StreamConfig, now: datetime) -> Cutoff:
    """The expiry cutoff of upsert stream ``stream``'s tombstones (see the module)."""
    upsert = stream.upsert
    assert upsert is not None
    head = catalog.load_table(stream.table).current_snapshot()
    applied = applied_snapshot(catalog.load_table(upsert.table))
    if head is not None and applied != head.snapshot_id:
        return Cutoff(None, f"{upsert.table} has not merged change-log snapshot {head.snapshot_id} of {stream.table} "
                            "yet: tombstones expire once the writer has caught up")
    waiting = uncommitted(catalog, stream, landed_files(stream.landing_path))
    oldest = min((f.mtime_ms for f in waiting), default=None)
    base = now if oldest is None else min(now, datetime.fromtimestamp(oldest / 1000, UTC))
    at = base - upsert.tombstone_retention - stream.max_future - CLOCK_SKEW
    since = "now" if base == now else f"the oldest landing file not committed yet ({len(waiting)} wait)"
    return Cutoff(at, f"recorded before {at.isoformat(timespec='seconds')}: {since} - tombstone_retention - "
                      "max_future - clock skew")


def expirable_files(table: Any, at: datetime) -> int:
    """Data files of tombstones table ``table`` that may hold a tombstone recorded before ``at`` (from the files'
    column bounds: no data file is read)."""
    from pyiceberg.expressions import LessThan, Reference
    from pyiceberg.expressions.literals import literal

    return len(list(table.scan(row_filter=LessThan(term=Reference("recorded_at"),
                                                   value=literal(at.isoformat()))).plan_files()))


def due(catalog: Any, stream: StreamConfig, now: datetime | None = None) -> bool:
    """``stream``'s tombstones table may hold tombstones to expire now."""
    assert stream.upsert is not None
    found = cutoff(catalog, stream, now or datetime.now(UTC))
    return found.at is not None and expirable_files(catalog.load_table(tombstones_table(stream.upsert)), found.at) > 0
