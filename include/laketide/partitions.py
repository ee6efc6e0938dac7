"""Partition status from Iceberg metadata only: open, complete, empty, lagging, gap (see docs/operations.md).

Plain functions over the snapshot summaries the writer leaves (``laketide.commits``), read incrementally
from the last snapshot a check has seen: no Spark, no data-file scans.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from laketide.catalog import load_catalog
from laketide.commits import PARTITION_ROWS, WATERMARK, WRITER_ID
from laketide.config import LaketideConfig, StreamConfig
from laketide.landing import HOUR, from_epoch_hours, hour_start, partition_key
from laketide.snapshots import Snap, TableNotFoundError, lineage


class State(StrEnum):
    """Every state a partition goes through (the status table's ``state`` column)."""

    OPEN = "open"  # the watermark has not passed partition end + lateness, or the writer has not started yet
    COMPLETE = "complete"  # watermark passed end + lateness, and no rows added for the idle window
    EMPTY = "empty"  # watermark passed end + lateness, and the partition has no rows (a real quiet hour)
    LAGGING = "lagging"  # the writer is more than two periods behind now: nothing is declared
    GAP = "gap"  # the stream stalled while the writer should be current: alert, do not close
    VERIFIED = "verified"  # counts verified by Great Expectations
    FAILED = "failed"  # verification failed: the partition stays unclosed
    CLOSED = "closed"  # verified and recorded; an Asset event names the partition
    REOPENED = "reopened"  # rows arrived after the close: re-verified and re-closed


#: the writer is lagging when its watermark is more than this many periods behind now
LAG_PERIODS = 2


@dataclass(frozen=True)
class Cursor:
    """What a check of one partition has seen: enough to continue from the next snapshot.

    Small and JSON-serializable (it travels in a trigger's kwargs), so a trigger keeps no state between
    runs: a restarted triggerer resumes from the cursor it was deferred with.
    """

    partition: str
    snapshot_id: int | None = None
    #: newest commit of the writer (ms since the epoch)
    last_commit_ms: int | None = None
    #: the writer's watermark at its newest commit (ISO UTC), and when it reached that value
    watermark: str | None = None
    watermark_since_ms: int | None = None
    #: rows the writer added to the partition, and the newest commit that added some
    rows: int = 0
    last_added_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cursor:
        return cls(**data)


@dataclass(frozen=True)
class PartitionStatus:
    """The outcome of one check."""

    stream: str
    partition: datetime
    state: State
    reason: str
    rows: int
    watermark: str | None
    snapshot_id: int | None
    checked_at: datetime

    @property
    def decided(self) -> bool:
        """True for the outcomes a sensor stops on: complete, empty (close) or gap (alert)."""
        return self.state in (State.COMPLETE, State.EMPTY, State.GAP)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly (XCom, trigger events)."""
        return {
            "stream": self.stream, "partition": partition_key(self.partition), "state": self.state.value,
            "reason": self.reason, "rows": self.rows, "watermark": self.watermark,
            "snapshot_id": self.snapshot_id, "checked_at": self.checked_at.isoformat(),
        }


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def _at(ms: int | None) -> str:
    return "never" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _ago(now: datetime, ms: int) -> timedelta:
    return now - datetime.fromtimestamp(ms / 1000, UTC)


def advance(cursor: Cursor, commits: list[Snap], writer_id: str) -> Cursor:
    """Fold new snapshots (oldest first) into the cursor; only the stream's writer commits count."""
    state = cursor
    for snap in commits:
        summary = snap.summary
        if summary.get(WRITER_ID) != writer_id:
            state = replace(state, snapshot_id=snap.snapshot_id)
            continue
        added = int(json.loads(summary.get(PARTITION_ROWS) or "{}").get(cursor.partition, 0))
        watermark = summary.get(WATERMARK)
        state = replace(
            state,
            snapshot_id=snap.snapshot_id,
            last_commit_ms=snap.timestamp_ms,
            watermark=watermark,
            watermark_since_ms=(state.watermark_since_ms if watermark == state.watermark and state.last_commit_ms
                                is not None else snap.timestamp_ms),
            rows=state.rows + added,
            last_added_ms=snap.timestamp_ms if added else state.last_added_ms,
        )
    return state


def enough_history(stream: StreamConfig, partition: datetime, now: datetime) -> Callable[[Snap], bool]:
    """Where a first check (no cursor) may stop walking back: at a commit of the writer that is both

    * older than the idle window (the watermark's age is then known: unchanged since before it = stalled), and
    * whose watermark is before the partition's start. The watermark is the newest event time committed so
      far and never goes down along a lineage, so neither that commit nor any older one holds a row of the
      partition.

    The walk follows the commits of the last few periods, whatever the table's history.
    """
    idle_limit = _ms(now - stream.idle_window)

    def stop(snap: Snap) -> bool:
        if snap.summary.get(WRITER_ID) != stream.writer_id or snap.timestamp_ms >= idle_limit:
            return False
        watermark = snap.summary.get(WATERMARK)
        return watermark is None or datetime.fromisoformat(watermark) < partition

    return stop


def read(catalog: Any, stream: StreamConfig, partition: datetime, now: datetime,
         cursor: Cursor | None = None) -> Cursor:
    """Bring ``cursor`` up to the table's current snapshot, reading only the snapshots it has not seen.

    Without a cursor (or when the one given is no longer in the table's lineage: a rollback, an expiry),
    the walk goes back as far as :func:`enough_history` says, never further: the cost follows the commits
    since the last check, or of the last few periods, not the table's history.
    """
    key = partition_key(partition)
    if cursor is not None and cursor.partition != key:
        raise ValueError(f"cursor is for partition {cursor.partition}, not {key}")
    if cursor is not None and cursor.snapshot_id is not None:
        seen = cursor.snapshot_id
        _, snaps = lineage(catalog, stream.table, lambda s: s.snapshot_id == seen)
        if snaps and snaps[-1].snapshot_id == seen:
            return advance(cursor, list(reversed(snaps[:-1])), stream.writer_id)
        # the cursor's snapshot left the lineage: start over
    _, snaps = lineage(catalog, stream.table, enough_history(stream, partition, now))
    return advance(Cursor(key), list(reversed(snaps)), stream.writer_id)


def classify(stream: StreamConfig, partition: datetime, seen: Cursor, now: datetime) -> tuple[State, str]:
    """The state of a partition from what the cursor has seen (the rules of docs/operations.md).

    ``now`` is a parameter so that tests and backfills control the clock.
    """
    due = partition + HOUR + stream.allowed_lateness
    idle = stream.idle_window
    if seen.last_commit_ms is None:
        # the writer has not started (no table yet, or no commit of this writer id): nothing can be decided and
        # nothing is wrong with the hour yet; the sensor waits (its timeout alerts if the writer never comes)
        return State.OPEN, (f"waiting for the writer: {stream.writer_id!r} has not committed to {stream.table} yet "
                            f"(is laketide_ingest_{stream.name} running?); the hour is decided once it has")
    if seen.watermark is None:  # the writer commits, but no valid event yet (only rejects)
        if now < due:
            return State.OPEN, "the writer has committed no valid event yet"
        assert seen.watermark_since_ms is not None
        if _ago(now, seen.last_commit_ms) >= idle or _ago(now, seen.watermark_since_ms) >= idle:
            return State.GAP, (f"stream {stream.name} stalled: writer {stream.writer_id!r} has committed no valid "
                               f"event since {_at(seen.watermark_since_ms)} (last commit {_at(seen.last_commit_ms)}, "
                               f"idle window {idle}); the partition was due at {due.isoformat()}. Check the producers.")
        return State.OPEN, "the writer has committed no valid event yet"
    watermark = datetime.fromisoformat(seen.watermark)
    behind = now - watermark
    if behind > LAG_PERIODS * HOUR:
        return State.LAGGING, (f"the writer is behind: its watermark {seen.watermark} is {behind} behind now; "
                               "nothing is declared until it catches up")
    if watermark >= due:
        if seen.rows == 0:
            return State.EMPTY, f"watermark {seen.watermark} passed {due.isoformat()} and the partition has no rows"
        assert seen.last_added_ms is not None
        quiet = _ago(now, seen.last_added_ms)
        if quiet >= idle:
            return State.COMPLETE, (f"watermark {seen.watermark} passed {due.isoformat()}; {seen.rows} rows, none "
                                    f"added since {_at(seen.last_added_ms)} (idle window {idle})")
        return State.OPEN, f"rows still arriving: last added {_at(seen.last_added_ms)}, idle window {idle}"
    if now < due:
        return State.OPEN, f"waiting for the watermark ({seen.watermark}) to pass {due.isoformat()}"
    assert seen.last_commit_ms is not None and seen.watermark_since_ms is not None
    if _ago(now, seen.last_commit_ms) >= idle:
        return State.GAP, (f"stream {stream.name} stalled: no commit from writer {stream.writer_id!r} since "
                           f"{_at(seen.last_commit_ms)} (idle window {idle}); the watermark {seen.watermark} has not "
                           f"passed {due.isoformat()}. Check the producers and the ingest DAG.")
    if _ago(now, seen.watermark_since_ms) >= idle:
        return State.GAP, (f"stream {stream.name} stalled: the writer commits but no new events since "
                           f"{_at(seen.watermark_since_ms)} (watermark stuck at {seen.watermark}, idle window {idle}). "
                           "Check the producers.")
    return State.OPEN, f"waiting for the watermark ({seen.watermark}) to pass {due.isoformat()}"


def check_partition(config: LaketideConfig, stream: StreamConfig, partition: datetime,
                    now: datetime | None = None, cursor: Cursor | None = None) -> tuple[PartitionStatus, Cursor]:
    """One status check of one partition: read the new snapshots, classify. Metadata only, no JVM."""
    partition = hour_start(partition)
    now = now or datetime.now(UTC)
    try:
        seen = read(load_catalog(config.catalog), stream, partition, now, cursor)
        missing = ""
    except TableNotFoundError as exc:  # the writer has not created it yet: nothing committed
        seen, missing = Cursor(partition_key(partition)), f"{exc}. "
    state, reason = classify(stream, partition, seen, now)
    reason = missing + reason
    status = PartitionStatus(stream.name, partition, state, reason, seen.rows, seen.watermark,
                             seen.snapshot_id, now)
    return status, seen


def partition_rows(config: LaketideConfig, stream: StreamConfig) -> dict[datetime, int]:
    """Rows per partition of the events table at its current snapshot, from the partitions metadata table.

    Reads manifests (metadata), never data files; used by the close DAG's worker tasks to notice rows that
    arrived after a close, not in the triggerer.
    """
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = load_catalog(config.catalog).load_table(stream.table)
    except NoSuchTableError:
        return {}
    if table.metadata.current_snapshot_id is None:
        return {}
    rows: dict[datetime, int] = {}
    for record in table.inspect.partitions().to_pylist():
        hour = next(iter(record["partition"].values()))
        if hour is not None:
            rows[from_epoch_hours(hour)] = int(record["record_count"])
    return rows
