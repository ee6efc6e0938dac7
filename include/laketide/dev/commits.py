"""A stand-in for the writer's commits, made with pyiceberg (no Spark): for the UI's tests and benchmarks.

:func:`land` publishes real landing files (the contract: data file + audit record) of generated events;
:func:`commit_files` appends their events to the stream's events table in one commit whose snapshot summary
carries the writer's markers (writer id, batch id, source files with their size and modification time, rows per
hour, event-time range, watermark), as the real writer's commit of that batch would. Lines are parsed leniently
(no rejects): a development tool, not the writer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from laketide.config import LaketideConfig, StreamConfig
from laketide.ingest.landing import publish
from laketide.lake.catalog import append_rows, load_catalog, table_or_create
from laketide.lake.commits import (
    MAX_EVENT_TIME,
    MIN_EVENT_TIME,
    REJECTED_ROWS,
    VALID_ROWS,
    WATERMARK,
    SourceFiles,
    summary_properties,
    table_marker,
)
from laketide.lake.file_stats import file_stat
from laketide.lake.hours import hour_start, partition_key

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table


def events_schema(stream: StreamConfig) -> Schema:
    """The events table's schema as the writer creates it: the stream's fields, ``_source_file``, ``_batch_id``."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BooleanType,
        DoubleType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    kinds = {"string": StringType(), "long": LongType(), "int": IntegerType(), "double": DoubleType(),
             "boolean": BooleanType(), "timestamp": TimestamptzType()}
    columns = [NestedField(i, name, kinds[spec.type], required=False)
               for i, (name, spec) in enumerate(stream.fields.items(), start=1)]
    n = len(columns)
    columns += [NestedField(n + 1, "_source_file", StringType(), required=False),
                NestedField(n + 2, "_batch_id", LongType(), required=False)]
    return Schema(*columns)


def events_table(config: LaketideConfig, stream: StreamConfig) -> Table:
    """The stream's events table (hidden partition: hour of the event time), created when missing."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import HourTransform

    schema = events_schema(stream)
    source = schema.find_field(stream.event_time_field).field_id
    spec = PartitionSpec(PartitionField(source_id=source, field_id=1000, transform=HourTransform(),
                                        name=f"{stream.event_time_field}_hour"))
    return table_or_create(load_catalog(config.catalog), stream.table, schema, spec, {"format-version": "2"})


def land(stream: StreamConfig, hour: datetime, events: int, seq: int, producer: str = "dev") -> Path:
    """Publish one landing file of ``events`` events spread over ``hour`` (with its audit record)."""
    start = hour_start(hour)
    step = 3600 / max(events, 1)
    lines = [json.dumps({stream.event_id_field: f"{producer}-{seq}-{i}",
                         stream.event_time_field: (start + timedelta(seconds=int(i * step))).isoformat(),
                         "user_id": i, "page": f"/p/{i % 7}"}) for i in range(events)]
    return publish(stream.landing_path, lines, partition_key(start), producer, seq, stream.name)


def commit_files(config: LaketideConfig, stream: StreamConfig, batch_id: int, files: Sequence[Path],
                 rejects: int = 0) -> int:
    """Append the events of the landing ``files`` to the events table in one commit carrying the writer's markers
    for batch ``batch_id``; the watermark is the newest event time committed so far. Returns the snapshot id."""
    import pyarrow as pa

    table = events_table(config, stream)
    rows: list[dict[str, object]] = []
    for path in files:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            row: dict[str, object] = {name: record.get(name) for name in stream.fields}
            row[stream.event_time_field] = datetime.fromisoformat(str(record[stream.event_time_field])).astimezone(UTC)
            row["_source_file"], row["_batch_id"] = path.name, batch_id
            rows.append(row)
    times = [t for r in rows if isinstance(t := r[stream.event_time_field], datetime)]
    per_hour: dict[str, int] = {}
    for t in times:
        key = partition_key(t)
        per_hour[key] = per_hour.get(key, 0) + 1
    marker = table_marker(load_catalog(config.catalog), stream.table, stream.writer_id)
    candidates = [*times, *([datetime.fromisoformat(marker.watermark)] if marker and marker.watermark else [])]
    watermark = max(candidates, default=None)
    extra = {VALID_ROWS: len(rows), REJECTED_ROWS: rejects,
             MIN_EVENT_TIME: min(times).isoformat() if times else None,
             MAX_EVENT_TIME: max(times).isoformat() if times else None,
             WATERMARK: watermark.isoformat() if watermark else None}
    source = SourceFiles({p.name: file_stat(p) for p in files})
    props = summary_properties(stream.writer_id, batch_id, source, per_hour, extra)
    append_rows(table, pa.Table.from_pylist(rows, schema=table.schema().as_arrow()), props)
    return int(table.refresh().metadata.current_snapshot_id or 0)
