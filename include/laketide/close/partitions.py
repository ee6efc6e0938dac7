"""Partition status from metadata only: open, complete, empty, lagging, gap (see docs/operations.md).

Plain functions over the snapshot summaries the writer leaves (``laketide.lake.commits``), read incrementally
from the last snapshot a check has seen, and over the landing zone's listing (names, sizes, times): no Spark,
no data file read, neither of the table nor of the landing zone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import TableNotFoundError
from laketide.ingest.backlog import uncommitted
from laketide.ingest.inspection import Landed, landed_files
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import AHEAD_OF_CLOCK, PARTITION_ROWS, WATERMARK, WRITER_ID
from laketide.lake.hours import HOUR, from_epoch_hours, hour_start, partition_key
from laketide.lake.snapshots import Snap, lineage


class State(StrEnum):
    """Every state a partition goes through (the status table's ``state`` column)."""

    OPEN = "open"  # the watermark has not passed end + lateness and the input is not idle, or no writer yet
    COMPLETE = "complete"  # rows, nothing of the hour or older waiting, and the watermark passed end + lateness
    EMPTY = "empty"  # as complete, with no rows (a real quiet hour)
    LAGGING = "lagging"  # landed files of the hour or older are not committed yet (backlog): nothing is declared
    GAP = "gap"  # a live stream's input went idle before the watermark passed the hour: alert, do not close
    VERIFIED = "verified"  # counts verified by Great Expectations
    FAILED = "failed"  # verification failed: the partition stays unclosed
    CLOSED = "closed"  # verified and recorded; an Asset event names the partition
    REOPENED = "reopened"  # rows arrived after the close: re-verified and re-closed


#: a live stream whose watermark was this far behind its last commit was replaying history (a hint in a gap)
REPLAY_HINT = timedelta(days=1)


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
    #: producers whose events ran ahead of the writer's clock by more than max_clock_skew (their files' names),
    #: with the latest such event time seen (``laketide.ahead-of-clock`` of the commits read)
    ahead: dict[str, str] = field(default_factory=dict)

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
        """JSON-friendly (XCom, trigger events); the snapshot id a string (JavaScript rounds integers above 2^53)."""
        return {
            "stream": self.stream, "partition": partition_key(self.partition), "state": self.state.value,
            "reason": self.reason, "rows": self.rows, "watermark": self.watermark,
            "snapshot_id": None if self.snapshot_id is None else str(self.snapshot_id),
            "checked_at": self.checked_at.isoformat(),
        }


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def _at(ms: int | None) -> str:
    return "never" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _ago(now: datetime, ms: int) -> timedelta:
    return now - datetime.fromtimestamp(ms / 1000, UTC)


def advance(cursor: Cursor, commits: list[Snap], writer_id: str) -> Cursor:
    """Fold new snapshots (oldest first) into the cursor; only the stream's writer commits count."""
    return advance_all([cursor], commits, writer_id)[0]


def advance_all(cursors: Sequence[Cursor], commits: list[Snap], writer_id: str) -> list[Cursor]:
    """:func:`advance` of cursors of several partitions that have seen the same snapshots, in one pass."""
    if not cursors:
        return []
    shared = cursors[0]
    rows = {c.partition: c.rows for c in cursors}
    added_ms = {c.partition: c.last_added_ms for c in cursors}
    for snap in commits:
        summary = snap.summary
        if summary.get(WRITER_ID) != writer_id:
            shared = replace(shared, snapshot_id=snap.snapshot_id)
            continue
        for key, count in json.loads(summary.get(PARTITION_ROWS) or "{}").items():
            if key in rows and int(count):
                rows[key] += int(count)
                added_ms[key] = snap.timestamp_ms
        watermark = summary.get(WATERMARK)
        ahead = dict(shared.ahead)
        for producer, latest in json.loads(summary.get(AHEAD_OF_CLOCK) or "{}").items():
            ahead[producer] = max(ahead.get(producer, latest), latest)
        shared = replace(
            shared,
            snapshot_id=snap.snapshot_id,
            last_commit_ms=snap.timestamp_ms,
            watermark=watermark,
            watermark_since_ms=(shared.watermark_since_ms if watermark == shared.watermark and shared.last_commit_ms
                                is not None else snap.timestamp_ms),
            ahead=ahead,
        )
    return [replace(c, snapshot_id=shared.snapshot_id, last_commit_ms=shared.last_commit_ms,
                    watermark=shared.watermark, watermark_since_ms=shared.watermark_since_ms,
                    rows=rows[c.partition], last_added_ms=added_ms[c.partition], ahead=shared.ahead) for c in cursors]


def enough_history(stream: StreamConfig, partition: datetime, now: datetime) -> Callable[[Snap], bool]:
    """Where a first check (no cursor) may stop walking back: at a commit of the writer that is

    * older than the idle window (the watermark's age is then known: unchanged since before it = stalled), and
    * either has no watermark (no valid row committed so far, by it or any older commit), or has a watermark
      before the partition's start and was made more than ``max_future`` before it.

    The watermark is the newest event time committed so far and never goes down along a lineage, but it is
    capped at the writer's clock + ``max_clock_skew``: a commit of a producer whose clock runs ahead holds rows of
    hours after its watermark (its summary's ``laketide.partition-rows`` counts them). Such rows are at most
    ``max_future`` after their file landed (later event times are rejected), and a file lands before the commit
    that reads it: so a commit made more than ``max_future`` before the partition, whose watermark is before it,
    holds no row of the partition, and no older commit does either. The walk follows the commits of the hour,
    of the idle window and of ``max_future`` before the hour (the table's expiry keeps about as many), whatever
    the table's history.
    """
    idle_limit = _ms(now - stream.idle_window)
    ahead_limit = _ms(partition - stream.max_future)

    def stop(snap: Snap) -> bool:
        if snap.summary.get(WRITER_ID) != stream.writer_id or snap.timestamp_ms >= idle_limit:
            return False
        watermark = snap.summary.get(WATERMARK)
        if watermark is None:
            return True
        return datetime.fromisoformat(watermark) < partition and snap.timestamp_ms < ahead_limit

    return stop


def read(catalog: Any, stream: StreamConfig, partition: datetime, now: datetime,
         cursor: Cursor | None = None) -> Cursor:
    """Bring ``cursor`` up to the table's current snapshot, reading only the snapshots it has not seen.

    Without a cursor (or when the one given is no longer in the table's lineage: a rollback, an expiry),
    the walk goes back as far as :func:`enough_history` says, never further: the cost follows the commits
    since the last check, or of the last few periods and ``max_future``, not the table's history.
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


@dataclass(frozen=True)
class Backlog:
    """The writer's input as the landing zone shows it, for one partition (metadata only: :func:`backlog`)."""

    #: landed files not committed yet whose hour is the partition's or earlier (or unknown), oldest first
    pending: tuple[str, ...] = ()
    #: landed files not committed yet of later hours
    later: int = 0
    #: the newest landing time (ms since the epoch) of a file the writer reads; None when nothing landed
    last_landed_ms: int | None = None


def backlog(files: Sequence[Landed], pending: Sequence[Landed], partition: datetime) -> Backlog:
    """Split the uncommitted files into those of ``partition`` or earlier (or of no known hour) and later ones."""
    key = partition_key(partition)
    upto = tuple(f.name for f in pending if f.hour is None or f.hour <= key)
    last = max((f.landed_ms for f in files), default=None)
    return Backlog(upto, len(pending) - len(upto), last)



def _closed(seen: Cursor, why: str) -> tuple[State, str]:
    if seen.rows == 0:
        return State.EMPTY, f"{why}; the partition has no rows"
    return State.COMPLETE, f"{why}; {seen.rows} rows"


def classify(stream: StreamConfig, partition: datetime, seen: Cursor, now: datetime,
             landing: Backlog | None = None) -> tuple[State, str]:
    """The state of a partition (the rules of docs/operations.md) from the writer's commits (``seen``) and the
    landing zone (``landing``; None: nothing landed that is not committed).

    Completeness is an event-time question: the watermark passed the hour's end + lateness and nothing of the
    hour or older waits in the landing zone. For a live stream the wall clock must have passed the hour's end +
    lateness too, whatever the event times say (the watermark itself never runs further ahead of the writer's
    clock than ``max_clock_skew``: see ``laketide.ingest.summary.watermark_after``). Lagging and gap are
    processing-time questions, asked of ``now``: files waiting to be committed are a backlog (lagging); an input
    with no file landed and no commit for the idle window, once the hour is due, is a gap for a live stream, and
    for a stream that replays history (``live: false``) the end of its input, which closes the hours its
    watermark reached. Producers whose events ran ahead of the writer's clock are named in the reason.
    ``now`` is a parameter so that tests control the clock.
    """
    state, reason = _classify(stream, partition, seen, now, landing or Backlog())
    if seen.ahead:
        named = ", ".join(f"{p} (events up to {t})" for p, t in sorted(seen.ahead.items()))
        reason += (f". Note: producer clock ahead: {named} ran more than max_clock_skew "
                   f"({stream.max_clock_skew}) ahead of the writer's clock; their rows are kept, they do not move "
                   "the watermark past the clock: fix those producers' clocks")
    return state, reason


def _classify(stream: StreamConfig, partition: datetime, seen: Cursor, now: datetime,
              landing: Backlog) -> tuple[State, str]:
    due = partition + HOUR + stream.allowed_lateness
    idle = stream.idle_window
    if seen.last_commit_ms is None:
        # the writer has not started (no table yet, or no commit of this writer id): nothing can be decided and
        # nothing is wrong with the hour yet; the sensor waits (its timeout alerts if the writer never comes)
        return State.OPEN, (f"waiting for the writer: {stream.writer_id!r} has not committed to {stream.table} yet "
                            f"(is laketide_ingest_{stream.writer_group} running?); the hour is decided once it has")
    if landing.pending:
        more = f" and {len(landing.pending) - 1} more" if len(landing.pending) > 1 else ""
        return State.LAGGING, (f"backlog: {len(landing.pending)} landed file(s) of this hour or earlier not committed "
                               f"yet ({landing.pending[0]}{more}); nothing is declared until the writer has "
                               f"committed them (last commit {_at(seen.last_commit_ms)})")
    watermark = datetime.fromisoformat(seen.watermark) if seen.watermark is not None else None
    waiting = (f"waiting for the watermark ({seen.watermark}) to pass {due.isoformat()}" if watermark is not None
               else "the writer has committed no valid event yet")
    if watermark is not None and watermark >= due:
        if stream.live and now < due:
            return State.OPEN, (f"the watermark {seen.watermark} passed {due.isoformat()}, but a live stream's hour "
                                "is declared only once the wall clock has passed its end + allowed_lateness too, "
                                "whatever the event times say")
        return _closed(seen, f"watermark {seen.watermark} passed {due.isoformat()} and nothing of the hour or "
                             "earlier waits in the landing zone")
    if now < due:
        return State.OPEN, waiting
    # the hour is due by the wall clock, its watermark has not passed: is the input idle?
    no_commit = _ago(now, seen.last_commit_ms) >= idle
    if landing.later:
        if no_commit:
            return State.LAGGING, (f"backlog: {landing.later} landed file(s) of later hours not committed yet and no "
                                   f"commit since {_at(seen.last_commit_ms)} (idle window {idle}): the writer is "
                                   f"not keeping up (is laketide_ingest_{stream.writer_group} running?)")
        return State.OPEN, f"{waiting}; the writer is ingesting {landing.later} landed file(s) of later hours"
    no_landing = landing.last_landed_ms is None or _ago(now, landing.last_landed_ms) >= idle
    quiet = (f"no file landed since {_at(landing.last_landed_ms)} and no commit since {_at(seen.last_commit_ms)} "
             f"(idle window {idle})")
    if no_commit and no_landing:
        if stream.live:
            return State.GAP, (f"stream {stream.name} stalled: {quiet}, and the watermark {seen.watermark} has not "
                               f"passed {due.isoformat()}. Check the producers and the ingest DAG."
                               + _replay_hint(stream, seen, watermark))
        if watermark is not None and watermark >= partition:
            return _closed(seen, f"the input ended ({quiet}, all of it committed) and the watermark "
                                 f"{seen.watermark} reached the hour")
        return State.OPEN, (f"the input ended ({quiet}) before this hour (watermark {seen.watermark}): "
                            "waiting for its data")
    if stream.live and not no_commit:
        assert seen.watermark_since_ms is not None
        if _ago(now, seen.watermark_since_ms) >= idle:
            what = ("no valid event since its first commit" if watermark is None
                    else f"no new events since {_at(seen.watermark_since_ms)} (watermark stuck at {seen.watermark})")
            return State.GAP, (f"stream {stream.name} stalled: the writer commits (last {_at(seen.last_commit_ms)}) "
                               f"but {what}, idle window {idle}; the hour was due at {due.isoformat()}. "
                               "Check the producers.")
    return State.OPEN, waiting


def _replay_hint(stream: StreamConfig, seen: Cursor, watermark: datetime | None) -> str:
    """A gap of a live stream whose input was far older than its commits: perhaps a replay of history."""
    if watermark is None or seen.last_commit_ms is None:
        return ""
    behind = datetime.fromtimestamp(seen.last_commit_ms / 1000, UTC) - watermark
    if behind < REPLAY_HINT:
        return ""
    return (f" Its watermark was {behind} behind its last commit: if this stream replays history, set "
            f"streams[{stream.name}].live: false so that an idle, committed input closes its last hours.")


def check_partition(config: LaketideConfig, stream: StreamConfig, partition: datetime,
                    now: datetime | None = None, cursor: Cursor | None = None) -> tuple[PartitionStatus, Cursor]:
    """One status check of one partition: read the new snapshots and the landing zone's metadata, classify.

    Metadata only: snapshot summaries, a listing of the landing zone with one ``stat`` per file; no data file of
    the table or of the landing zone is read, no JVM.
    """
    partition = hour_start(partition)
    now = now or datetime.now(UTC)
    catalog = load_catalog(config.catalog)
    files = landed_files(stream.landing_path)
    try:
        seen = read(catalog, stream, partition, now, cursor)
        missing = ""
    except TableNotFoundError as exc:  # the writer has not created it yet: nothing committed
        seen, missing = Cursor(partition_key(partition)), f"{exc}. "
    pending = uncommitted(catalog, stream, files) if seen.last_commit_ms is not None else list(files)
    state, reason = classify(stream, partition, seen, now, backlog(files, pending, partition))
    reason = missing + reason
    status = PartitionStatus(stream.name, partition, state, reason, seen.rows, seen.watermark,
                             seen.snapshot_id, now)
    return status, seen


def check_partitions(config: LaketideConfig, stream: StreamConfig, partitions: Sequence[datetime],
                     now: datetime | None = None) -> list[PartitionStatus]:
    """The status of several hours at once (a close range), as :func:`check_partition` finds each: one walk of the
    lineage back as far as the earliest hour needs, one listing of the landing zone and one backlog walk."""
    hours = [hour_start(p) for p in partitions]
    if not hours:
        return []
    now = now or datetime.now(UTC)
    catalog = load_catalog(config.catalog)
    files = landed_files(stream.landing_path)
    try:
        _, snaps = lineage(catalog, stream.table, enough_history(stream, min(hours), now))
        missing = ""
    except TableNotFoundError as exc:
        snaps, missing = [], f"{exc}. "
    cursors = advance_all([Cursor(partition_key(h)) for h in hours], list(reversed(snaps)), stream.writer_id)
    pending = uncommitted(catalog, stream, files) if cursors[0].last_commit_ms is not None else list(files)
    out = []
    for hour, seen in zip(hours, cursors, strict=True):
        state, reason = classify(stream, hour, seen, now, backlog(files, pending, hour))
        out.append(PartitionStatus(stream.name, hour, state, missing + reason, seen.rows, seen.watermark,
                                   seen.snapshot_id, now))
    return out


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
