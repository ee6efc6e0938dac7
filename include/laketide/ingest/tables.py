"""The stream's two Iceberg tables: DDL and table properties (events: hidden hour partition; rejects).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from laketide.config import EXTRA_COLUMN, LaketideConfig, StreamConfig
from laketide.ingest.columns import spark_type
from laketide.ingest.schema import (
    EXTRA_TYPE,
    REQUIRED_PROPERTY,
    evolve,
    plan_change,
    required_property,
    table_columns,
    table_shape,
)
from laketide.lake.catalog import COMMIT_RETRY_PROPERTIES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("laketide.ingest.tables")

EVENTS_PROPERTIES = {
    "format-version": "2",
    # no shuffle before the write: a fanout writer keeps one file open per hour instead
    "write.distribution-mode": "none",
    "write.spark.fanout.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    # how maintenance commits (compaction, manifests, expiry) retry against this writer (see that constant)
    **COMMIT_RETRY_PROPERTIES,
}
REJECTS_COLUMNS = (
    "raw string, raw_bytes binary, reason string, source_file string, event_hour timestamp, "
    "batch_id bigint, writer_id string, rejected_at timestamp"
)
#: columns added to the rejects table since it was first created, each with the column it follows (a writer adds
#: them to an older table when it starts: Iceberg adds a column without rewriting a file; older rows read null)
REJECTS_ADDED = (("raw_bytes", "binary", "raw"),)


def events_properties(stream: StreamConfig) -> dict[str, str]:
    """Table properties of a stream's events table (the rejects table has ``EVENTS_PROPERTIES``)."""
    # the writer reads each batch's event-time range from the data files' bounds of this column
    # and the number of rejects from the null counts of _source_file (see BatchWriter._read_staged)
    return {
        **EVENTS_PROPERTIES, f"write.metadata.metrics.column.{stream.event_time_field}": "full",
        "write.metadata.metrics.column._source_file": "counts",
        REQUIRED_PROPERTY: required_property(stream),
    }


def create_events_table(spark: SparkSession, name: str, stream: StreamConfig) -> None:
    """Create ``name`` (``catalog.namespace.table``) as the events table of ``stream`` unless it exists:
    the stream's fields, ``_source_file``, ``_batch_id`` (and ``_extra`` with ``unknown_fields: keep``), hidden
    partition by hour of event time."""
    columns = ", ".join(f"`{n}` {spark_type(s.type).simpleString()}" for n, s in stream.fields.items())
    extra = f", {EXTRA_COLUMN} {EXTRA_TYPE}" if stream.unknown_fields == "keep" else ""
    props = ", ".join(f"'{k}'='{v}'" for k, v in events_properties(stream).items())
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {name} ({columns}, _source_file string, _batch_id bigint{extra}) "
        f"USING iceberg PARTITIONED BY (hours(`{stream.event_time_field}`)) TBLPROPERTIES ({props})"
    )


def ensure_tables(spark: SparkSession, config: LaketideConfig, stream: StreamConfig) -> None:
    """Create the namespace, events table (hidden partition: hour of event time) and rejects table; bring an
    existing events table's columns in line with the stream's fields (``laketide.ingest.schema``).

    :raises SchemaChangeError: the fields changed in a way the table cannot follow (nothing is changed)
    """
    cat = config.catalog.name
    for ns in sorted({stream.table.split(".")[0], stream.rejects_table.split(".")[0]}):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cat}.{ns}")
    events = f"{cat}.{stream.table}"
    create_events_table(spark, events, stream)
    change = plan_change(stream, *table_shape(spark, events))
    if not change.empty:
        evolve(spark, events, change)
        for line in change.lines():
            log.warning("stream %s: table %s: %s", stream.name, stream.table, line)
    props = ", ".join(f"'{k}'='{v}'" for k, v in EVENTS_PROPERTIES.items())
    rejects = f"{cat}.{stream.rejects_table}"
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {rejects} ({REJECTS_COLUMNS}) "
        f"USING iceberg PARTITIONED BY (hours(event_hour)) TBLPROPERTIES ({props})"
    )
    have = set(table_columns(spark, rejects))
    for column, kind, after in REJECTS_ADDED:
        if column not in have:
            spark.sql(f"ALTER TABLE {rejects} ADD COLUMN {column} {kind} AFTER {after}")


