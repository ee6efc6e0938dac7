"""A stream's ``upsert`` section: keyed, changing data merged into a table of its own.

The stream's ``table`` stays what it is for every stream: an append table, hour-partitioned by
``event_time_field`` (here the change time), that keeps every change (the change log: verified, closed and redone as
for append streams). With ``upsert``, each batch is also merged into ``upsert.table``, one row per key: the newest
change of each key by ``sequence_field`` (see ``laketide.ingest.merge_sink``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator

from laketide.config.values import _IDENT, _Strict, check_table_name, positive_duration

#: the operation values a change's ``operation_field`` may hold, each read as an upsert or a delete (Debezium's
#: ``c``/``u``/``d``/``r`` included: ``r`` is a snapshot read, loaded as an upsert)
UPSERT_OPERATIONS = ("insert", "update", "upsert", "c", "u", "r", "I", "U")
DELETE_OPERATIONS = ("delete", "d", "D")
MergeMode = Literal["merge-on-read", "copy-on-write"]
#: how a Debezium envelope's number in a timestamp field counts time since the epoch
TimeUnit = Literal["days", "millis", "micros", "nanos"]
#: a ``format: debezium`` stream's sequence field filled from a MySQL or MariaDB connector's binlog position (the
#: ``source`` block's file number, position and row, packed into one long: ``laketide.ingest.debezium``)
BINLOG_POSITION = "binlog_position"
#: what each operation value says of its key, as the lakehouse view and the example consumer count changes
OPERATION_KINDS = {"insert": "insert", "c": "insert", "r": "insert", "I": "insert", "update": "update", "u": "update",
                   "U": "update", "upsert": "upsert", **dict.fromkeys(DELETE_OPERATIONS, "delete")}


class UpsertConfig(_Strict):
    """How a stream's changes are merged into a keyed table."""

    #: the merged table: one row per key, the newest change of each (``namespace.table``)
    table: str
    #: the key: one or more required fields of the stream (the merged table's identifier fields)
    primary_key: list[str] = Field(min_length=1)
    #: orders the changes of one key: the change with the greater value wins (a version, an LSN, a change
    #: timestamp). Ties: a delete wins over an insert or update, then the greater ``event_id_field`` (see
    #: docs/configuration.md, upsert streams)
    sequence_field: str
    #: the field naming the change's operation (insert/update/delete, or c/u/d/r); its value is not stored in the
    #: merged table
    operation_field: str
    #: how long a deleted key's tombstone is kept: within it, a change older than the delete that arrives late is
    #: dropped; after it, such a change would bring the key back
    tombstone_retention: timedelta = timedelta(days=7)
    #: how changes are written: flat lines of the stream's fields ("rows"), or Debezium's change-event envelope
    #: ("debezium": the record in after/before, op, ts_ms, source; see laketide.ingest.debezium)
    format: Literal["rows", "debezium"] = "rows"
    #: ``format: debezium``: the unit of a timestamp field's number when the envelope carries no schema naming its
    #: Debezium type (JSON converter with ``schemas.enable=false``), per field; a field not named is in micros
    timestamp_units: dict[str, TimeUnit] = Field(default_factory=dict)
    #: how a change to an existing row is written: position delete files plus new rows (merge-on-read: cheap
    #: writes, compacted by maintenance), or the data files holding them rewritten (copy-on-write)
    merge_mode: MergeMode = "merge-on-read"
    #: a merged table of at least this many rows is merged on a staging branch, the batch's changes broadcast to a
    #: scan of the table (a batch's cost grows slowly with the table); a smaller one by one MERGE, a join that
    #: shuffles the table (cheaper while the table is small). Chosen by measurement (operations guide)
    staged_merge_rows: int = Field(default=2_000_000, ge=0)

    @field_validator("tombstone_retention", mode="before")
    @classmethod
    def _retention(cls, value: Any) -> timedelta:
        return positive_duration(value)

    @field_validator("table")
    @classmethod
    def _table(cls, value: str) -> str:
        return check_table_name(value)

    @field_validator("primary_key")
    @classmethod
    def _key(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _IDENT.fullmatch(name):
                raise ValueError(f"primary_key: {name!r} is not a plain identifier")
        if len(set(value)) != len(value):
            raise ValueError(f"primary_key: {value} names a field twice")
        return value


def check_upsert(upsert: UpsertConfig, fields: dict[str, Any], table: str, rejects_table: str,
                 event_id_field: str, event_time_field: str) -> None:
    """The ``upsert`` section against its stream's fields and tables (raises ``ValueError`` naming what to fix)."""
    known = sorted(fields)
    for name in upsert.primary_key:
        if name not in fields:
            raise ValueError(f"upsert.primary_key: {name!r} is not one of fields {known}")
        if not fields[name].required:
            raise ValueError(f"upsert.primary_key: field {name!r} must be declared required: true (a change "
                             "without its key cannot be merged)")
        if fields[name].type in ("float", "double"):
            raise ValueError(f"upsert.primary_key: field {name!r} is a {fields[name].type}: use a string, long or "
                             "int key (floating-point values do not compare reliably)")
    for key in ("sequence_field", "operation_field"):
        name = getattr(upsert, key)
        if name not in fields:
            raise ValueError(f"upsert.{key}: {name!r} is not one of fields {known}")
        if not fields[name].required:
            raise ValueError(f"upsert.{key}: field {name!r} must be declared required: true")
        if name in upsert.primary_key:
            raise ValueError(f"upsert.{key}: {name!r} is part of primary_key; name another field")
    if fields[upsert.operation_field].type != "string":
        raise ValueError(f"upsert.operation_field: field {upsert.operation_field!r} must have type string")
    unknown = sorted(set(fields[upsert.operation_field].values or ()) - set(UPSERT_OPERATIONS + DELETE_OPERATIONS))
    if unknown:
        raise ValueError(f"upsert.operation_field: values {unknown} of field {upsert.operation_field!r} are no "
                         f"operation laketide knows: upserts {list(UPSERT_OPERATIONS)}, deletes "
                         f"{list(DELETE_OPERATIONS)}")
    if upsert.sequence_field == upsert.operation_field:
        raise ValueError("upsert.operation_field: must be another field than sequence_field")
    if fields[upsert.sequence_field].type in ("boolean", "string"):
        raise ValueError(f"upsert.sequence_field: field {upsert.sequence_field!r} is a "
                         f"{fields[upsert.sequence_field].type}: use a long, int or timestamp (a version, an LSN, "
                         "a change time)")
    if upsert.operation_field == event_id_field:
        raise ValueError("upsert.operation_field: must be another field than event_id_field")
    if (upsert.format == "debezium" and upsert.sequence_field == BINLOG_POSITION
            and fields[BINLOG_POSITION].type != "long"):
        raise ValueError(f"upsert.sequence_field: {BINLOG_POSITION!r} (a MySQL or MariaDB binlog position, packed into "
                         f"one number) must be a field of type long, not {fields[BINLOG_POSITION].type}")
    for name in upsert.timestamp_units:
        if upsert.format != "debezium":
            raise ValueError(f"upsert.timestamp_units: only a format: debezium stream reads timestamps as numbers "
                             f"(this one is format: {upsert.format}); remove {name!r}")
        if name not in fields or fields[name].type != "timestamp":
            raise ValueError(f"upsert.timestamp_units: {name!r} is not a timestamp field of the stream")
        if name == event_time_field:
            raise ValueError(f"upsert.timestamp_units: {name!r} is the change time, which laketide reads from the "
                             "envelope's ts_ms (milliseconds); remove it")
    if upsert.table in (table, rejects_table):
        raise ValueError(f"upsert.table: {upsert.table!r} is also the stream's change log or rejects table; name "
                         "another table")


def delete_fields(upsert: UpsertConfig, event_time_field: str, event_id_field: str) -> tuple[str, ...]:
    """The fields a delete needs: its key, sequence, operation, change time and id. Its other fields, required ones
    too, may be absent: a delete removes the key's row (Debezium's delete of a PostgreSQL row under replica identity
    DEFAULT holds the key alone)."""
    return (*upsert.primary_key, upsert.sequence_field, upsert.operation_field, event_time_field, event_id_field)


def tombstones_table(upsert: UpsertConfig) -> str:
    """The table of the deleted keys' tombstones, beside the merged table."""
    return f"{upsert.table}__tombstones"
