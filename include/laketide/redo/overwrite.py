"""What a backfill and a repair share: the request and its checks, the table facts they are checked against,
the atomic overwrite of whole hour partitions, and the record of what was done.

Every check runs before anything changes, from the configuration and Iceberg metadata only (pyiceberg, no
JVM), so that the DAGs refuse a bad request before a Spark job is submitted. The Spark part
(:func:`overwrite_hours`) replaces exactly the partitions a condition on the hour column selects, in one
commit, validated against every commit made since the snapshot it read from (Iceberg's ``serializable``
isolation): a concurrent commit into those hours fails the action instead of being overwritten.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import ActionRequestError
from laketide.lake.commits import ACTION, ACTION_ID, REPLACED_HOURS
from laketide.lake.hours import HOUR, hours_filter, partition_key
from laketide.lake.snapshots import id_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Kind = Literal["backfill", "repair"]

#: snapshot summary keys of a backfill or repair commit (besides ``lake.commits.ACTION``, ...)
FROM_SNAPSHOT = "laketide.from-snapshot"
REQUESTED_BY = "laketide.requested-by"

#: a plain name: what a stream name, a namespace or a table name may be (they reach SQL)
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Request:
    """A validated backfill or repair request: the stream and the hours ``[start, end)``."""

    kind: Kind
    stream: StreamConfig
    hours: tuple[datetime, ...]
    dry_run: bool
    requested_by: str = "unknown"
    action_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def start(self) -> datetime:
        return self.hours[0]

    @property
    def end(self) -> datetime:
        return self.hours[-1] + HOUR

    def describe(self) -> str:
        return f"{self.kind} {self.action_id} of {self.stream.name} [{self.start.isoformat()}, {self.end.isoformat()})"


def _hour(name: str, value: object) -> datetime:
    """A param as an aware UTC hour start: a datetime, or an ISO string with a UTC offset (what the form sends)."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str) and value.strip():
        try:
            dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ActionRequestError(
                f"{name}: {value!r} is not an ISO time like 2026-11-22T03:00:00+00:00") from None
    else:
        raise ActionRequestError(f"{name}: give a UTC hour start like 2026-11-22T03:00:00+00:00, not {value!r}")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ActionRequestError(f"{name}: {dt.isoformat()} has no UTC offset: write e.g. "
                                 f"{dt.isoformat()}+00:00")
    dt = dt.astimezone(UTC)
    if dt != dt.replace(minute=0, second=0, microsecond=0):
        raise ActionRequestError(f"{name}: {dt.isoformat()} is not the start of an hour (minutes, seconds = 0)")
    return dt


def check_name(what: str, value: object) -> str:
    """``value`` when it is a plain name (letters, digits, ``_ . -``).

    :raises ActionRequestError: anything else, e.g. quotes, spaces or semicolons (names reach SQL)
    """
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ActionRequestError(f"{what}: {value!r} is not a plain name (letters, digits, '_', '.', '-' only)")
    return value


def quoted_table(catalog: str, table: str) -> str:
    """``catalog.namespace.table`` quoted for Spark SQL, each part checked to be a plain identifier.

    :raises ActionRequestError: a part that is not a plain identifier
    """
    parts = [catalog, *table.split(".")]
    if len(parts) != 3 or not all(_IDENT.fullmatch(p) for p in parts):
        raise ActionRequestError(f"table {catalog}.{table} is not catalog.namespace.table with plain identifiers")
    return ".".join(f"`{p}`" for p in parts)


def validate_request(config: LaketideConfig, kind: Kind, stream: object, start: object, end: object,
                     dry_run: object = True, requested_by: object = None) -> Request:
    """Check a request's params against the configuration, before anything runs.

    :param stream: a configured stream's name
    :param start: the first hour, an aware UTC hour start (datetime or ISO string with offset)
    :param end: the first hour after the range (exclusive)
    :raises ActionRequestError: naming the param, what is wrong and what is accepted
    """
    name = check_name("stream", stream)
    streams = [s.name for s in config.streams]
    if name not in streams:
        raise ActionRequestError(f"stream: unknown stream {name!r}; configured streams are {streams}")
    upsert = config.stream(name).upsert
    if upsert is not None:
        raise ActionRequestError(
            f"stream: {name!r} is an upsert stream: a {kind} would rewrite hours of its change log under the merged "
            f"table {upsert.table}, which is the fold of every change, so the two would no longer agree. Use a "
            "redo from a snapshot instead (the laketide_redo DAG, or ./laketide redo): it rolls the change log back, "
            "re-ingests what landed since and rebuilds the merged table from the change log.")
    first, stop = _hour("start", start), _hour("end", end)
    if first >= stop:
        raise ActionRequestError(f"start {first.isoformat()} must be before end {stop.isoformat()} (the range is "
                                 "[start, end): end is the first hour left alone)")
    count = int((stop - first) / HOUR)
    if count > config.close.max_range_hours:
        raise ActionRequestError(f"the range holds {count} hours, more than close.max_range_hours "
                                 f"({config.close.max_range_hours}): split it into several runs")
    if not isinstance(dry_run, bool):
        raise ActionRequestError(f"dry_run: must be true or false, not {dry_run!r}")
    who = "unknown" if requested_by in (None, "") else str(requested_by)
    if len(who) > 200 or any(ord(c) < 32 for c in who):
        raise ActionRequestError(f"requested_by: {who[:40]!r}... is not a user name")
    return Request(kind, config.stream(name), tuple(first + i * HOUR for i in range(count)), dry_run, who)


@dataclass(frozen=True)
class TableFacts:
    """What the events table holds, from metadata: the hours with rows and the writer's watermark."""

    table: str
    snapshot_id: int | None
    #: rows per hour (the partitions metadata table)
    rows: dict[datetime, int]
    #: the newest event time the stream's writer committed (None: no commit of its writer id)
    watermark: datetime | None


def table_facts(config: LaketideConfig, stream: StreamConfig) -> TableFacts:
    """The events table's facts (pyiceberg: metadata and manifests, no data file, no JVM)."""
    from laketide.close.partitions import partition_rows
    from laketide.lake.catalog import load_catalog
    from laketide.lake.commits import table_marker
    from laketide.lake.snapshots import TableNotFoundError

    try:
        marker = table_marker(load_catalog(config.catalog), stream.table, stream.writer_id)
    except TableNotFoundError:
        return TableFacts(stream.table, None, {}, None)
    rows = partition_rows(config, stream)
    snapshot = load_catalog(config.catalog).load_table(stream.table).metadata.current_snapshot_id
    watermark = None
    if marker is not None and marker.watermark:
        watermark = datetime.fromisoformat(marker.watermark).astimezone(UTC)
    return TableFacts(stream.table, snapshot, rows, watermark)


def check_against_table(request: Request, facts: TableFacts) -> None:
    """Refuse a range outside the table, or one the live writer may still commit rows to.

    The range must start at or after the table's first hour with rows, and the writer's watermark must have
    passed its end + ``allowed_lateness``: such hours are closed or about to be, and the writer only appends
    rows to them when a file of the hour lands late (then the action's commit fails on the conflict and is run
    again).

    :raises ActionRequestError: naming the bound that is not met
    """
    stream = request.stream
    if facts.snapshot_id is None or not facts.rows:
        raise ActionRequestError(f"table {facts.table} of stream {stream.name!r} holds no rows yet: nothing to "
                                 f"{request.kind} (the writer, laketide_ingest_{stream.writer_group}, creates it)")
    first = min(facts.rows)
    if request.start < first:
        raise ActionRequestError(f"start {request.start.isoformat()} is before the first hour of {facts.table} "
                                 f"({first.isoformat()}): the range is outside the table")
    limit = None if facts.watermark is None else facts.watermark - stream.allowed_lateness
    if limit is None or request.end > limit:
        wm = "none" if facts.watermark is None else facts.watermark.isoformat()
        raise ActionRequestError(
            f"end {request.end.isoformat()} is past what the writer has finished: its watermark is {wm} and "
            f"allowed_lateness {stream.allowed_lateness}, so hours up to "
            f"{'nothing' if limit is None else partition_key(limit)} can be changed; the writer may still commit "
            "rows to later hours. Wait until they close, or choose an earlier end")


def hours_condition(column: str, hours: Iterable[datetime], *, with_null: bool = False) -> str:
    """A Spark SQL condition selecting exactly the hour partitions of ``hours`` on ``column`` (and the null
    partition with ``with_null``). The column name is checked to be a plain identifier."""
    if not _IDENT.fullmatch(column):
        raise ActionRequestError(f"column {column!r} is not a plain identifier")
    chosen = list(hours)
    parts = [hours_filter(column, chosen)] if chosen else []
    if with_null:
        parts.append(f"`{column}` IS NULL")
    if not parts:
        raise ValueError("no partition selected")
    return " OR ".join(f"({p})" for p in parts)


def summary_properties(request: Request, from_snapshot: int, hours: Iterable[datetime],
                       extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The snapshot summary of an action's commit: what it was, who asked, from which snapshot, which hours."""
    return {
        ACTION: request.kind, ACTION_ID: request.action_id, REQUESTED_BY: request.requested_by,
        FROM_SNAPSHOT: str(from_snapshot), REPLACED_HOURS: json.dumps(sorted(partition_key(h) for h in hours)),
        **(extra or {}),
    }


def overwrite_hours(df: DataFrame, table: str, condition: str, from_snapshot: int,
                    properties: Mapping[str, str], config: LaketideConfig) -> None:
    """Replace the rows of ``table`` that ``condition`` selects (whole partitions) by ``df``, in one commit.

    The commit is validated against every commit since ``from_snapshot`` (the snapshot ``df`` was read from):
    a concurrent commit that added or removed rows in those partitions makes it fail (Iceberg's
    ``ValidationException``), so nothing committed meanwhile is lost. Commits elsewhere (other hours,
    compaction) are built upon. A busy catalog is retried like the writer's commits (``sink.retrying``): an
    attempt that did commit makes the next one fail the same validation, never commit twice.
    """
    from pyspark.sql import functions as F

    from laketide.ingest.sink import retrying
    from laketide.lake.internals import reopen_sqlite_connections

    def attempt() -> None:
        # Iceberg's JDBC catalog on SQLite leaves a read transaction open on a pooled connection: a commit
        # through it fails with SQLITE_BUSY_SNAPSHOT once anyone else wrote (see laketide.lake.internals)
        reopen_sqlite_connections(df.sparkSession, config.catalog.name)
        writer = (df.writeTo(table).option("isolation-level", "serializable")
                  .option("validate-from-snapshot-id", str(from_snapshot)))
        for key, value in properties.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.overwrite(F.expr(condition))

    retrying(f"overwrite of {table}", attempt, config.catalog.retry_timeout)


def current_snapshot(config: LaketideConfig, table: str) -> int | None:
    """The current snapshot id of ``table`` in the catalog (pyiceberg: the catalog row and the metadata file)."""
    from laketide.lake.catalog import load_catalog

    return load_catalog(config.catalog).load_table(table).metadata.current_snapshot_id


@dataclass
class HourChange:
    """Rows of one hour before and after an action (events and rejects; duplicates removed by a repair)."""

    rows_before: int = 0
    rows_after: int = 0
    rejects_before: int = 0
    rejects_after: int = 0
    duplicates_removed: int = 0

    @property
    def changed(self) -> bool:
        """Rows, rejects or duplicates of the hour differ after the action (an unchanged hour stays as it was)."""
        return (self.rows_before != self.rows_after or self.rejects_before != self.rejects_after
                or self.duplicates_removed > 0)

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class Outcome:
    """What an action did (or, in a dry run, would do)."""

    request: Request
    from_snapshot: int | None
    to_snapshot: int | None
    hours: dict[str, HourChange]
    committed: bool
    notes: list[str] = field(default_factory=list)
    at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def as_dict(self) -> dict[str, Any]:
        r = self.request
        return {
            "action": r.kind, "action_id": r.action_id, "stream": r.stream.name, "requested_by": r.requested_by,
            "at": self.at.isoformat(), "start": r.start.isoformat(), "end": r.end.isoformat(), "dry_run": r.dry_run,
            "committed": self.committed, "from_snapshot": id_text(self.from_snapshot),
            "to_snapshot": id_text(self.to_snapshot),
            "hours": {h: c.as_dict() for h, c in sorted(self.hours.items())}, "notes": self.notes,
        }

    def lines(self) -> list[str]:
        """A human report: one line per hour, then the notes."""
        head = "DRY RUN: nothing changed; " if self.request.dry_run else ""
        state = ("committed snapshot " + str(self.to_snapshot)) if self.committed else "nothing committed"
        out = [f"{head}{self.request.describe()} by {self.request.requested_by} from snapshot "
               f"{self.from_snapshot}: {state}"]
        for hour, c in sorted(self.hours.items()):
            out.append(f"  {hour}: rows {c.rows_before} -> {c.rows_after}, rejects {c.rejects_before} -> "
                       f"{c.rejects_after}, duplicates removed {c.duplicates_removed}"
                       + ("" if c.changed else " (unchanged: its state is kept)"))
        out += [f"  note: {n}" for n in self.notes]
        return out


def record_outcome(config: LaketideConfig, outcome: Outcome, run_id: str | None) -> None:
    """Record a committed action in the status table: each hour it changed ``reopened`` (it is verified and
    closed again by the close DAG), with the rows after, the new snapshot, and the whole action as JSON in
    ``verification`` (who, when, from which snapshot, rows before/after per hour). An hour whose rows, rejects
    and duplicates are the same after the action keeps its state (a closed hour stays closed)."""
    from laketide.close.partitions import State
    from laketide.close.status import StatusRecord, record
    from laketide.lake.hours import parse_partition

    if not outcome.committed:
        return
    detail = json.dumps({"action": outcome.as_dict()}, separators=(",", ":"))
    r = outcome.request
    records = [
        StatusRecord(
            r.stream.name, parse_partition(hour), State.REOPENED, rows=c.rows_after, rejects=c.rejects_after,
            verification=detail, snapshot_id=outcome.to_snapshot, run_id=run_id,
            reason=(f"{r.kind} {r.action_id} by {r.requested_by} from snapshot {outcome.from_snapshot}: rows "
                    f"{c.rows_before} -> {c.rows_after}, rejects {c.rejects_before} -> {c.rejects_after}, "
                    f"duplicates removed {c.duplicates_removed}: re-verify and re-close"),
            recorded_at=outcome.at,
        )
        for hour, c in sorted(outcome.hours.items()) if c.changed
    ]
    if records:
        record(config, *records)
