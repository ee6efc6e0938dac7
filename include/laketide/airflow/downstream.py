"""What the example downstream DAG does with a closed day: a small summary read with pyiceberg."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any

from laketide.close.partitions import State
from laketide.close.status import latest
from laketide.config import LaketideConfig
from laketide.lake.catalog import load_catalog


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
