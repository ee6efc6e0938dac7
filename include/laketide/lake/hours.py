"""Hours, the lake's unit of partitioning: partition keys, hour starts, Iceberg ``hours`` transform values, and
the Spark SQL filter selecting whole hours (compaction, redo, the writer's duplicate check)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta


def partition_key(dt: datetime) -> str:
    """The partition of an event time: its UTC hour start, e.g. ``2026-11-22T03:00:00+00:00``.

    A naive datetime is taken to be UTC already.
    """
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).replace(minute=0, second=0, microsecond=0).isoformat()


#: the period of a partition
HOUR = timedelta(hours=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def from_epoch_hours(hours: int) -> datetime:
    """The hour start of an Iceberg ``hours`` transform value (hours since the Unix epoch)."""
    return EPOCH + hours * HOUR


def hour_start(value: datetime) -> datetime:
    """``value`` as a partition start: a timezone-aware datetime at a UTC hour start, returned in UTC.

    :raises ValueError: naive, or not the start of an hour
    """
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"partition must be a timezone-aware datetime (a UTC hour start), got {value!r}")
    start = value.astimezone(UTC)
    if start != start.replace(minute=0, second=0, microsecond=0):
        raise ValueError(f"partition {start.isoformat()} is not the start of an hour (a UTC hour start)")
    return start


def parse_partition(partition: str) -> datetime:
    """Parse a partition key back into an aware UTC datetime; raise ValueError if it is not canonical."""
    try:
        dt = datetime.fromisoformat(partition)
    except (TypeError, ValueError):
        raise ValueError(
            f"not a partition key: {partition!r} (expected e.g. '2026-11-22T03:00:00+00:00')"
        ) from None
    if dt.tzinfo is None or partition_key(dt) != partition:
        raise ValueError(
            f"not a partition key: {partition!r} (must be a UTC hour start written exactly like "
            "'2026-11-22T03:00:00+00:00')"
        )
    return dt


def hour_ranges(hours: Iterable[datetime]) -> list[tuple[datetime, datetime]]:
    """Consecutive hours merged into ``[start, end)`` ranges."""
    ranges: list[tuple[datetime, datetime]] = []
    for hour in sorted({hour_start(h) for h in hours}):
        if ranges and ranges[-1][1] == hour:
            ranges[-1] = (ranges[-1][0], hour + HOUR)
        else:
            ranges.append((hour, hour + HOUR))
    return ranges


def _ts(value: datetime) -> str:
    return f"TIMESTAMP '{value.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]}'"


def hours_filter(column: str, hours: Iterable[datetime]) -> str:
    """The Spark SQL ``where`` selecting exactly ``hours`` of ``column`` (UTC, session time zone UTC): for
    rewrite_data_files, a redo's overwrite and the writer's duplicate check.

    Hour ranges align with the hourly partitions, so only the files of those partitions are planned."""
    ranges = hour_ranges(hours)
    if not ranges:
        raise ValueError("no hours to compact")
    return " OR ".join(f"(`{column}` >= {_ts(lo)} AND `{column}` < {_ts(hi)})" for lo, hi in ranges)


def timestamp_literal(ms: int) -> str:
    """A Spark SQL timestamp literal of epoch milliseconds (UTC)."""
    return _ts(datetime.fromtimestamp(ms / 1000, UTC))
