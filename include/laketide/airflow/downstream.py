"""What the example downstream DAGs do with what the close announces: a closed day's summary, a closed hour's
changes (read with pyiceberg)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any

from laketide.close.hourscan import hours_row_filter
from laketide.close.partitions import State
from laketide.close.status import history, latest
from laketide.config import LaketideConfig
from laketide.config.upsert import OPERATION_KINDS
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import AIRFLOW_KEY_FORMAT, partition_key


def day_of(partition_key: str | None) -> date:
    """The day of a daily rollup run's partition key (``2026-11-22``).

    :raises ValueError: no key (the run was not started by the rollup) or not a day
    """
    try:
        return datetime.strptime(partition_key or "", "%Y-%m-%d").date()
    except ValueError:
        raise ValueError(f"partition key {partition_key!r} is not a day like 2026-11-22: this DAG summarises the "
                         "day its rollup run names (trigger it with a partition key to summarise one by hand)"
                         ) from None


def daily_summary(config: LaketideConfig, stream_name: str, day: date) -> dict[str, Any]:
    """Rows of one UTC day (its closed hours), the number of closed hours, and its top countries (if the stream
    has a ``country`` field)."""
    stream = config.stream(stream_name)
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    end = start + timedelta(days=1)
    closed = [p for p, r in latest(config, stream.name).items() if start <= p < end and r.state == State.CLOSED]
    fields = [stream.event_id_field, *(["country"] if "country" in stream.fields else [])]
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan, Reference
    from pyiceberg.expressions.literals import literal

    column = Reference(stream.event_time_field)  # timestamptz literals need their explicit offset (+00:00)
    day_filter = And(GreaterThanOrEqual(term=column, value=literal(start.isoformat())),
                     LessThan(term=column, value=literal(end.isoformat())))
    table = load_catalog(config.catalog).load_table(stream.table)
    rows = table.scan(row_filter=day_filter, selected_fields=tuple(fields)).to_arrow()
    countries = Counter(rows["country"].to_pylist()) if "country" in fields else Counter()
    return {"stream": stream.name, "day": day.isoformat(), "rows": rows.num_rows, "hours": len(closed),
            "top_countries": countries.most_common(3)}


def hour_of(partition_key_: str | None) -> datetime:
    """The hour of a per-hour run's partition key (``2026-11-22T03:00:00``, UTC).

    :raises ValueError: no key, or not an hour
    """
    try:
        return datetime.strptime(partition_key_ or "", AIRFLOW_KEY_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"partition key {partition_key_!r} is not an hour like 2026-11-22T03:00:00: this DAG reads "
                         "the hour its run names (trigger it with a partition key to read one by hand)") from None


def hour_changes(config: LaketideConfig, stream_name: str, hour: datetime) -> dict[str, Any]:
    """What changed in a closed hour since a consumer last read it: the hour's rows at its newest close's snapshot
    that were not there at its previous close (the close event's ``snapshot_range``; all of them at the first
    close). For an upsert stream (its table is the change log) the changes are counted by operation (inserts,
    updates, deletes) and by key.

    :raises ValueError: the hour is not closed (nothing a consumer may read yet)
    """
    import pyarrow.compute as pc

    stream = config.stream(stream_name)
    closes = [r for r in history(config, stream.name, hour) if r.state == State.CLOSED]
    if not closes or closes[-1].snapshot_id is None:
        raise ValueError(f"hour {partition_key(hour)} of stream {stream.name} is not closed: its changes are read "
                         "once the close DAG has closed it")
    to, since = closes[-1].snapshot_id, closes[-2].snapshot_id if len(closes) > 1 else None
    upsert = stream.upsert
    key = list(upsert.primary_key) if upsert is not None else []
    fields = tuple(dict.fromkeys([stream.event_id_field, *key, *([upsert.operation_field] if upsert else [])]))
    table = load_catalog(config.catalog).load_table(stream.table)
    in_hour = hours_row_filter(stream.event_time_field, [hour])
    rows = table.scan(row_filter=in_hour, selected_fields=fields, snapshot_id=to).to_arrow()
    if since is not None:
        seen = table.scan(row_filter=in_hour, selected_fields=(stream.event_id_field,), snapshot_id=since).to_arrow()
        rows = rows.filter(pc.invert(pc.is_in(rows[stream.event_id_field], seen[stream.event_id_field])))
    out: dict[str, Any] = {"stream": stream.name, "hour": partition_key(hour),
                           "snapshot_range": {"from": None if since is None else str(since), "to": str(to)},
                           "changes": rows.num_rows}
    if upsert is not None:
        kinds = Counter(OPERATION_KINDS.get(op, op) for op in rows[upsert.operation_field].to_pylist())
        out["operations"] = dict(sorted(kinds.items()))
        out["keys"] = len(rows.select(key).group_by(key).aggregate([]))
    return out
