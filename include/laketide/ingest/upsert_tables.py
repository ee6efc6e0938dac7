"""An upsert stream's merged table and tombstones table: created with the key's identifier fields and the merge
mode's properties, and following the stream's fields (schema evolution as for its change log). The merge into them:
``laketide.ingest.merge_sink``."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from laketide.config import LaketideConfig, StreamConfig
from laketide.config.upsert import UpsertConfig, tombstones_table
from laketide.errors import SchemaChangeError
from laketide.ingest.columns import spark_type
from laketide.lake.internals import iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("laketide.ingest.upsert_tables")


#: the table property of a merged table (and its tombstones) naming the field its rows are ordered by
SEQUENCE_PROPERTY = "laketide.sequence-field"


def merged_columns(stream: StreamConfig) -> list[str]:
    """The merged table's columns: the stream's fields but the operation."""
    assert stream.upsert is not None
    return [name for name in stream.fields if name != stream.upsert.operation_field]


def quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier."""
    return f"`{name}`"


def merged_properties(upsert: UpsertConfig) -> dict[str, str]:
    return {
        "format-version": "2",
        "write.merge.mode": upsert.merge_mode, "write.update.mode": upsert.merge_mode,
        "write.delete.mode": upsert.merge_mode,
        # serializable (Iceberg's default, said here so that nobody relaxes it unaware): a merge that started before
        # another merge committed data files fails its commit instead of landing on top (a frozen writer woken up
        # after its replacement merged is stopped there); compactions (replace snapshots) do not conflict with it
        "write.merge.isolation-level": "serializable", "write.delete.isolation-level": "serializable",
        "write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "100",
        SEQUENCE_PROPERTY: upsert.sequence_field,
    }


def check_keyed_as_configured(spark: SparkSession, config: LaketideConfig, stream: StreamConfig) -> None:
    """Refuse (:class:`SchemaChangeError`, nothing changed) an upsert stream whose ``primary_key`` or
    ``sequence_field`` is not the one its existing merged or tombstones table was built on: the merge would match
    rows by another key (a key twice in the table) or compare sequences the rows do not hold."""
    upsert = stream.upsert
    assert upsert is not None
    problems = []
    for name in (upsert.table, tombstones_table(upsert)):
        if not spark.catalog.tableExists(f"{config.catalog.name}.{name}"):
            continue
        table = iceberg_table(spark, f"{config.catalog.name}.{name}")
        keys = sorted(table.schema().identifierFieldNames())
        if keys and keys != sorted(upsert.primary_key):
            problems.append(f"upsert.primary_key is {upsert.primary_key}, but {name} is keyed by {keys}")
        sequence = table.properties().get(SEQUENCE_PROPERTY)
        if sequence is not None and sequence != upsert.sequence_field:
            problems.append(f"upsert.sequence_field is {upsert.sequence_field!r}, but the rows of {name} are "
                            f"ordered by {sequence!r}")
        if problems:  # the tombstones were built with the merged table: the same problems
            break
    if problems:
        raise SchemaChangeError(
            f"stream {stream.name}: {'; '.join(problems)}. A keyed table is not re-keyed or re-ordered in place; "
            "nothing was changed (the writer does not start). Set the configuration back, or drop "
            f"{upsert.table} and {tombstones_table(upsert)}: the writer then builds them again from the change log "
            f"{stream.table}, by the new key and sequence")


def ensure_upsert_tables(spark: SparkSession, config: LaketideConfig, stream: StreamConfig) -> None:
    """Create the merged table (the key's columns NOT NULL and its identifier fields) and the tombstones table of an
    upsert stream unless they exist; existing ones follow fields added to the stream or widened. Refused, before
    anything changes, when the key or the sequence field is not the one the tables were built on
    (:func:`check_keyed_as_configured`)."""
    upsert = stream.upsert
    assert upsert is not None
    cat = config.catalog.name
    check_keyed_as_configured(spark, config, stream)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cat}.{upsert.table.split('.')[0]}")

    def columns(names: Iterable[str]) -> list[tuple[str, str]]:
        return [(n, spark_type(stream.fields[n].type).simpleString()) for n in names]

    keys = ", ".join(quoted(k) for k in upsert.primary_key)
    for name, wanted in (
        (upsert.table, columns(merged_columns(stream))),
        (tombstones_table(upsert), columns((*upsert.primary_key, upsert.sequence_field, stream.event_id_field))),
    ):
        ddl = [f"{quoted(c)} {kind}" + (" NOT NULL" if c in upsert.primary_key else "") for c, kind in wanted]
        if name != upsert.table:
            ddl.append("recorded_at timestamp")
        props = ", ".join(f"'{k}'='{v}'" for k, v in merged_properties(upsert).items())
        spark.sql(f"CREATE TABLE IF NOT EXISTS {cat}.{name} ({', '.join(ddl)}) USING iceberg "
                  f"TBLPROPERTIES ({props})")
        table = iceberg_table(spark, f"{cat}.{name}")
        if not list(table.schema().identifierFieldNames()):
            spark.sql(f"ALTER TABLE {cat}.{name} SET IDENTIFIER FIELDS {keys}")
        # a changed merge_mode (or any other of these properties) applies to a table that exists already
        stale = {k: v for k, v in merged_properties(upsert).items()
                 if k != "format-version" and table.properties().get(k) != v}
        if stale:
            changed = ", ".join(f"'{k}'='{v}'" for k, v in stale.items())
            spark.sql(f"ALTER TABLE {cat}.{name} SET TBLPROPERTIES ({changed})")
            log.info("table %s: properties set to %s", name, stale)
        follow_fields(spark, f"{cat}.{name}", wanted)


def follow_fields(spark: SparkSession, name: str, wanted: list[tuple[str, str]]) -> list[str]:
    """Schema evolution of a merged (or tombstones) table as of its change log: a field added to the stream becomes
    a column (after the column of the field before it; rows already merged read null), a widened one (int -> long,
    float -> double) is widened. Anything else was refused before, by the change log's own check
    (``schema.plan_change``, which the writer runs first). Returns what changed, for the log."""
    from laketide.ingest.schema import WIDENINGS, table_columns

    have = table_columns(spark, name)
    changed: list[str] = []
    previous: str | None = None
    for column, kind in wanted:
        if column not in have:
            position = f"AFTER {quoted(previous)}" if previous is not None else "FIRST"
            spark.sql(f"ALTER TABLE {name} ADD COLUMN {quoted(column)} {kind} {position}")
            changed.append(f"column {column} {kind} added")
        elif (have[column], kind) in WIDENINGS:
            spark.sql(f"ALTER TABLE {name} ALTER COLUMN {quoted(column)} TYPE {kind}")
            changed.append(f"column {column} widened from {have[column]} to {kind}")
        previous = column
    if changed:
        log.info("table %s follows its stream's fields: %s", name, "; ".join(changed))
    return changed
