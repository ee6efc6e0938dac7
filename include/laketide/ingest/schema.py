"""Schema evolution of a stream's events table: its columns follow the stream's ``fields`` at writer start.

Iceberg changes a schema in metadata only: an added column reads null in the rows already written, a widened
column (int -> long, float -> double) reads the old files at the new type; no data file is rewritten.
:func:`plan_change` compares the table with the configuration and returns those changes, or refuses, naming every
field at fault and what to do, anything else: a field removed or renamed (its column would linger or lose its
rows), a type narrowed or changed, a field made required (rows already written may lack it), a new field declared
required, another event-time field (the table is partitioned by the old one). :func:`evolve` applies a plan;
``tables.ensure_tables`` (called by the writer, a redo's re-ingest and a backfill before anything is written)
plans first and changes nothing when it refuses.

Whether a field is required is a rule of the configuration, not of the table (every column is optional in
Iceberg): the table property ``laketide.required-fields`` records the required fields it was last written under.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from laketide.config import EXTRA_COLUMN, StreamConfig
from laketide.errors import SchemaChangeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: the table property recording the stream's required fields (comma-separated, sorted)
REQUIRED_PROPERTY = "laketide.required-fields"
#: the writer's own columns of the events table (``ingest.tables.create_events_table``)
LINEAGE = ("_source_file", "_batch_id")
#: Spark SQL's name of each field type of the configuration (``FieldSpec.type``)
SQL_TYPES = {"string": "string", "long": "bigint", "int": "int", "float": "float", "double": "double",
             "boolean": "boolean", "timestamp": "timestamp"}
#: the type changes Iceberg applies in place (Spark SQL names): the old files are read at the new type
WIDENINGS = {("int", "bigint"), ("float", "double")}
EXTRA_TYPE = "map<string,string>"


def required_property(stream: StreamConfig) -> str:
    return ",".join(sorted(n for n, spec in stream.fields.items() if spec.required))


@dataclass(frozen=True)
class SchemaChange:
    """What :func:`evolve` does to an events table: columns added (after a column, or first), types widened, the
    catch-all column added, the required fields recorded."""

    #: (field, Spark SQL type, the column it follows or None for the first position)
    added: tuple[tuple[str, str, str | None], ...] = ()
    #: (field, old type, new type), Spark SQL names
    widened: tuple[tuple[str, str, str], ...] = ()
    extra: bool = False
    #: the new value of ``laketide.required-fields`` (None: unchanged)
    required: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.added or self.widened or self.extra or self.required is not None)

    def lines(self) -> list[str]:
        """One line per change, for the writer's log."""
        out = [f"column {n} {t} added (rows already written read null)" for n, t, _ in self.added]
        out += [f"column {n} widened from {a} to {b}" for n, a, b in self.widened]
        if self.extra:
            out.append(f"column {EXTRA_COLUMN} {EXTRA_TYPE} added (unknown_fields: keep)")
        return out


def plan_change(stream: StreamConfig, columns: Mapping[str, str], required_before: str | None,
                partition_source: str | None) -> SchemaChange:
    """The changes that bring an events table in line with ``stream``'s fields, or a refusal.

    :param columns: the table's columns in order, name -> Spark SQL type (``DataType.simpleString()``)
    :param required_before: the table's ``laketide.required-fields`` (None: a table older than it, taken as is)
    :param partition_source: the column the table's hour partition is computed from
    :raises SchemaChangeError: one message naming every field at fault and what to do; nothing is planned
    """
    problems: list[str] = []
    table = stream.table
    data_columns = [c for c in columns if c not in LINEAGE and c != EXTRA_COLUMN]
    gone = [c for c in data_columns if c not in stream.fields]
    new = [n for n in stream.fields if n not in columns]
    for name in gone:
        hint = (f" (renamed to {' or '.join(repr(n) for n in new)}? a rename is refused too)" if new else "")
        problems.append(
            f"field {name!r} is a column of {table} but no longer in fields{hint}: Iceberg keeps a column's rows, and "
            f"dropping or renaming it would hide them; declare {name!r} again (required: false if producers stopped "
            "sending it)")
    required = {n for n, spec in stream.fields.items() if spec.required}
    before = None if required_before is None else {n for n in required_before.split(",") if n}
    for name in new:
        if name in required:
            problems.append(
                f"new field {name!r} is declared required, but the rows already in {table} have no value for it: "
                "add it with required: false")
    widened: list[tuple[str, str, str]] = []
    for name, spec in stream.fields.items():
        if name not in columns:
            continue
        have, want = columns[name], SQL_TYPES[spec.type]
        if have == want:
            pass
        elif (have, want) in WIDENINGS:
            widened.append((name, have, want))
        else:
            kind = "narrows" if (want, have) in WIDENINGS else "changes"
            problems.append(
                f"field {name!r} is {have} in {table} and {spec.type} in fields: that {kind} its type, which Iceberg "
                "cannot do without rewriting the table (only int -> long and float -> double widen in place); "
                f"declare it {_config_type(have)} again, or add the new values as a new field")
        if before is not None and name in required and name not in before:
            problems.append(
                f"field {name!r} is now required but was optional: rows already in {table} may lack it, and a redo "
                "of their hours would reject their lines; keep it required: false")
    if partition_source is not None and partition_source != stream.event_time_field:
        problems.append(
            f"event_time_field is {stream.event_time_field!r} but {table} is partitioned by the hour of "
            f"{partition_source!r}: set event_time_field back to {partition_source!r}")
    if problems:
        raise SchemaChangeError(
            f"stream {stream.name}: the fields of the configuration and table {table} differ in a way the table "
            f"cannot follow; nothing was changed (the writer does not start): " + "; ".join(problems))
    added: list[tuple[str, str, str | None]] = []
    previous: str | None = None
    for name, spec in stream.fields.items():
        if name in new:
            added.append((name, SQL_TYPES[spec.type], previous))
        previous = name
    want_required = required_property(stream)
    return SchemaChange(
        added=tuple(added), widened=tuple(widened),
        extra=stream.unknown_fields == "keep" and EXTRA_COLUMN not in columns,
        required=None if required_before == want_required else want_required,
    )


def _config_type(sql_type: str) -> str:
    return {v: k for k, v in SQL_TYPES.items()}.get(sql_type, sql_type)


def _quote(name: str) -> str:
    return f"`{name}`"


def table_shape(spark: SparkSession, name: str) -> tuple[dict[str, str], str | None, str | None]:
    """An events table's columns (name -> Spark SQL type, in order), its ``laketide.required-fields`` property and
    the column its partition is computed from (``hours(col)``): from one load of the table through Iceberg's Spark
    API (what ``spark.table``, ``SHOW TBLPROPERTIES`` and ``DESCRIBE TABLE`` would each load and plan again)."""
    from laketide.lake.internals import iceberg_table

    table = iceberg_table(spark, name)
    source = None
    for field in table.spec().fields():
        if str(field.transform()) == "hour":
            source = str(table.schema().findColumnName(field.sourceId()))
    return table_columns(spark, name, table), table.properties().get(REQUIRED_PROPERTY), source


def table_columns(spark: SparkSession, name: str, table: Any = None) -> dict[str, str]:
    """The columns of the Iceberg table ``name`` (``catalog.namespace.table``), name -> Spark SQL type, in order, as
    Spark reads them (Iceberg's schema converted by Iceberg's own Spark conversion); ``table``: the Java table, if
    the caller has loaded it."""
    from pyspark.sql.types import StructType

    from laketide.lake.internals import gateway, iceberg_table

    jvm, _ = gateway(spark)
    loaded = table if table is not None else iceberg_table(spark, name)
    schema = jvm.org.apache.iceberg.spark.SparkSchemaUtil.convert(loaded.schema())
    struct = StructType.fromJson(json.loads(schema.json()))
    return {f.name: f.dataType.simpleString() for f in struct.fields}


def evolve(spark: SparkSession, name: str, change: SchemaChange) -> None:
    """Apply ``change`` to the events table ``name`` (``catalog.namespace.table``): metadata commits only."""
    for column, kind, after in change.added:
        position = f"AFTER {_quote(after)}" if after is not None else "FIRST"
        spark.sql(f"ALTER TABLE {name} ADD COLUMN {_quote(column)} {kind} {position}")
    for column, _, kind in change.widened:
        spark.sql(f"ALTER TABLE {name} ALTER COLUMN {_quote(column)} TYPE {kind}")
    if change.extra:
        spark.sql(f"ALTER TABLE {name} ADD COLUMN {EXTRA_COLUMN} {EXTRA_TYPE}")
    if change.required is not None:
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('{REQUIRED_PROPERTY}'='{change.required}')")
