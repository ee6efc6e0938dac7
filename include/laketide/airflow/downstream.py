"""What the example downstream DAG does with a closed hour: a small summary read with pyiceberg."""

from __future__ import annotations

from collections import Counter
from typing import Any

from laketide.close.closing import parse_hour
from laketide.close.verify import partition_filter
from laketide.config import LaketideConfig
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import partition_key


def hourly_summary(config: LaketideConfig, stream_name: str, partition: str) -> dict[str, Any]:
    """Rows of one closed hour and its top countries (if the stream has a ``country`` field)."""
    stream = config.stream(stream_name)
    start = parse_hour(partition)
    fields = [stream.event_id_field, *(["country"] if "country" in stream.fields else [])]
    table = load_catalog(config.catalog).load_table(stream.table)
    rows = table.scan(
        row_filter=partition_filter(stream, start),
        selected_fields=tuple(fields),
    ).to_arrow()
    countries = Counter(rows["country"].to_pylist()) if "country" in fields else Counter()
    return {"stream": stream.name, "partition": partition_key(start), "rows": rows.num_rows,
            "top_countries": countries.most_common(3)}
