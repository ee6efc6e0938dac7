"""Validation of the params of a manual operation on a stream, before anything changes.

Reusable checks (a redo, a backfill or a repair takes the same kinds of params): :func:`check_identifier`,
:func:`check_stream`, :func:`check_hour`, :func:`check_range`, :func:`check_run_id`, :func:`check_flag`;
and the redo's own: :func:`resolve_snapshot` (a snapshot id, or a time resolved to the last snapshot at or
before it) and :func:`validate` (everything at once, against the table's metadata). Each raises
:class:`laketide.errors.RequestError` naming the param, what is wrong and what is accepted.

Nothing here writes; reads go to the catalog through pyiceberg (no Spark).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import RequestError
from laketide.lake.hours import HOUR, from_epoch_hours, hour_start, partition_key

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: a plain SQL identifier: nothing else may reach SQL, a path or a shell
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a stream name or writer id (the configuration's rule): letters, digits, '_', '.', '-'
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
#: what a run id may keep in a file name; other characters become '_'
_RUN_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_identifier(value: Any, param: str) -> str:
    """``value`` if it is a plain identifier (letters, digits, '_', not starting with a digit).

    :raises RequestError: anything else (quotes, spaces, dots, semicolons: nothing reaches SQL unchecked)
    """
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise RequestError(f"{param}: {_shown(value)} is not a plain identifier (letters, digits and '_', not "
                           "starting with a digit)")
    return value


def check_stream(config: LaketideConfig, value: Any, param: str = "stream") -> StreamConfig:
    """The configured stream named ``value``.

    :raises RequestError: not a name (e.g. SQL in it), or no such stream (the message lists them)
    """
    known = [s.name for s in config.streams]
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise RequestError(f"{param}: {_shown(value)} is not a stream name (letters, digits, '_', '.', '-'); "
                           f"configured streams: {known}")
    for stream in config.streams:
        if stream.name == value:
            return stream
    raise RequestError(f"{param}: unknown stream {value!r}; configured streams: {known}")


def check_time(value: Any, param: str) -> datetime:
    """An ISO timestamp with a UTC offset (a datetime must be timezone-aware), in UTC."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise RequestError(f"{param}: {_shown(value)} is not an ISO timestamp like "
                               "2026-11-22T03:00:00+00:00") from None
    else:
        raise RequestError(f"{param}: {_shown(value)} is not a timestamp (an ISO string like "
                           "2026-11-22T03:00:00+00:00)")
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise RequestError(f"{param}: {_shown(value)} has no UTC offset: write e.g. 2026-11-22T03:00:00+00:00")
    return parsed.astimezone(UTC)


def check_hour(value: Any, param: str) -> datetime:
    """A UTC hour start (``check_time`` at minute 0)."""
    when = check_time(value, param)
    try:
        return hour_start(when)
    except ValueError:
        raise RequestError(f"{param}: {when.isoformat()} is not the start of an hour (e.g. "
                           f"{partition_key(when)})") from None


@dataclass(frozen=True)
class HourRange:
    """Whole UTC hours ``[start, end)``; a bound left open is None."""

    start: datetime | None = None
    end: datetime | None = None

    def __contains__(self, hour: object) -> bool:
        if not isinstance(hour, datetime):
            return False
        return (self.start is None or hour >= self.start) and (self.end is None or hour < self.end)

    def describe(self) -> str:
        if self.start is None and self.end is None:
            return "every hour"
        return (f"[{self.start.isoformat() if self.start else '...'}, "
                f"{self.end.isoformat() if self.end else '...'})")


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def check_range(start: Any, end: Any, hours: list[datetime] | None = None) -> HourRange:
    """The hour range ``[start, end)``; either bound may be left empty (open).

    :param hours: the hours the table holds (oldest first); when given the range must lie inside
        ``[first, last + 1h]`` and hold at least one of them
    :raises RequestError: a bound that is not a UTC hour start; ``start`` not before ``end``; a range outside
        the table
    """
    first = None if _blank(start) else check_hour(start, "start")
    stop = None if _blank(end) else check_hour(end, "end")
    if first is not None and stop is not None and first >= stop:
        raise RequestError(f"start {first.isoformat()} must be before end {stop.isoformat()} (the range is "
                           "[start, end): end is the first hour left out)")
    chosen = HourRange(first, stop)
    if hours is not None and (first is not None or stop is not None):
        if not hours:
            raise RequestError(f"the range {chosen.describe()} is outside the table: it holds no hour yet")
        low, high = hours[0], hours[-1] + HOUR
        span = f"[{low.isoformat()}, {high.isoformat()})"
        if (first is not None and not low <= first < high) or (stop is not None and not low < stop <= high):
            raise RequestError(f"the range {chosen.describe()} is outside the table, which holds the hours {span}")
        if not any(h in chosen for h in hours):
            raise RequestError(f"the range {chosen.describe()} holds none of the table's hours ({span})")
    return chosen


def check_run_id(value: Any) -> str:
    """A run id fit for a file name and a record (characters other than letters, digits, '_', '.', '-' become
    '_'); ``value`` itself must be a non-empty string of at most 250 characters."""
    if not isinstance(value, str) or not value.strip() or len(value) > 250:
        raise RequestError(f"run_id: {_shown(value)} is not a run id (a non-empty string of at most 250 characters)")
    return _RUN_ID_UNSAFE.sub("_", value.strip())


def check_flag(value: Any, param: str) -> bool:
    """A boolean param (``true``/``false`` strings too, as a command line passes them)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise RequestError(f"{param}: {_shown(value)} is not true or false")


# ---------------------------------------------------------------- the redo's snapshot


def _ancestry(table: Table) -> list[Any]:
    """The current lineage of a pyiceberg table, newest first (a parent no longer in the metadata ends it)."""
    meta = table.metadata
    by_id = {s.snapshot_id: s for s in meta.snapshots}
    out: list[Any] = []
    sid = meta.current_snapshot_id
    while sid is not None and sid in by_id and sid != -1:
        out.append(by_id[sid])
        sid = by_id[sid].parent_snapshot_id
    return out


def resolve_snapshot(table: Table, snapshot_id: Any, at: Any) -> int:
    """The snapshot a redo returns to: ``snapshot_id``, or the table's current snapshot at time ``at`` (the last
    entry of its history at or before it). Exactly one of them must be given, and the snapshot must be in the
    table's current lineage (not expired, not on a branch rolled back already).

    :raises RequestError: naming the param
    """
    name = ".".join(table.name())
    have_id, have_at = not _blank(snapshot_id), not _blank(at)
    if have_id == have_at:
        raise RequestError("give exactly one of snapshot_id (a snapshot of the table) and at (a time: the "
                           f"snapshot current then), not {'both' if have_id else 'neither'}")
    ancestors = _ancestry(table)
    in_lineage = {s.snapshot_id for s in ancestors}
    if have_id:
        if isinstance(snapshot_id, bool) or not isinstance(snapshot_id, int | str):
            raise RequestError(f"snapshot_id: {_shown(snapshot_id)} is not a snapshot id (an integer)")
        try:
            sid = int(snapshot_id)
        except ValueError:
            raise RequestError(f"snapshot_id: {_shown(snapshot_id)} is not a snapshot id (an integer)") from None
        if sid not in in_lineage:
            other = table.metadata.snapshot_by_id(sid) is not None
            raise RequestError(
                f"snapshot_id: {sid} is not in the history of {name}"
                + (" (it is a snapshot of a rolled-back branch, not an ancestor of the current one)" if other
                   else " (unknown, or expired)")
                + f"; its newest snapshots: {[s.snapshot_id for s in ancestors[:5]]} (see the table's "
                "snapshots or history metadata table)")
        return sid
    when = check_time(at, "at")
    ms = int(when.timestamp() * 1000)
    entries = [e for e in table.metadata.snapshot_log if e.timestamp_ms <= ms]
    if not entries:
        first = table.metadata.snapshot_log[0].timestamp_ms if table.metadata.snapshot_log else None
        raise RequestError(f"at: {when.isoformat()} is before the first snapshot of {name}"
                           + (f" ({datetime.fromtimestamp(first / 1000, UTC).isoformat()})" if first else
                              " (it has none)"))
    sid = entries[-1].snapshot_id
    if sid not in in_lineage:
        raise RequestError(f"at: the snapshot current at {when.isoformat()} ({sid}) is no longer in the history "
                           f"of {name} (rolled back or expired); choose a later time or a snapshot_id")
    return sid


def table_hours(table: Table) -> list[datetime]:
    """The hours (partitions) a table partitioned by hour holds rows in, oldest first (metadata only)."""
    if table.metadata.current_snapshot_id is None:
        return []
    hours = set()
    for rec in table.inspect.partitions().to_pylist():
        value = next(iter(rec["partition"].values()))
        if value is not None and int(rec["record_count"]) > 0:
            hours.add(from_epoch_hours(value))
    return sorted(hours)


@dataclass(frozen=True)
class RedoRequest:
    """A validated redo: the stream, the snapshot to return to, the hours to re-verify, dry run or not."""

    stream: str
    snapshot_id: int
    hours: HourRange
    dry_run: bool
    run_id: str
    user: str

    def args(self) -> list[str]:
        """The Spark job's arguments for this request."""
        out = ["--stream", self.stream, "--snapshot-id", str(self.snapshot_id), "--run-id", self.run_id,
               "--user", self.user, "--dry-run", "true" if self.dry_run else "false"]
        if self.hours.start is not None:
            out += ["--start", self.hours.start.isoformat()]
        if self.hours.end is not None:
            out += ["--end", self.hours.end.isoformat()]
        return out


def check_user(value: Any) -> str:
    """Who asked (an Airflow user name or an OS user): printable, at most 200 characters."""
    if not isinstance(value, str) or not value.strip() or len(value) > 200 or not value.isprintable():
        raise RequestError(f"user: {_shown(value)} is not a user name")
    return value.strip()


def validate(config: LaketideConfig, stream: Any, snapshot_id: Any = None, at: Any = None, start: Any = None,
             end: Any = None, dry_run: Any = True, run_id: Any = "manual", user: Any = "unknown") -> RedoRequest:
    """Check every param of a redo against the configuration and the events table; resolve the snapshot.

    :raises RequestError: the first param refused, with what is accepted
    """
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from laketide.lake.catalog import load_catalog

    chosen = check_stream(config, stream)
    flag = check_flag(dry_run, "dry_run")
    run = check_run_id(run_id)
    who = check_user(user)
    try:
        table = load_catalog(config.catalog).load_table(chosen.table)
    except (NoSuchTableError, NoSuchNamespaceError):
        raise RequestError(f"stream {chosen.name!r}: its table {chosen.table} does not exist yet (nothing to redo)"
                           ) from None
    sid = resolve_snapshot(table, snapshot_id, at)
    hours = check_range(start, end, table_hours(table))
    return RedoRequest(chosen.name, sid, hours, flag, run, who)
