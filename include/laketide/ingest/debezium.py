"""Debezium's change-event envelope, read as a flat change line (an upsert stream with ``format: debezium``).

A Debezium change event (JSON converter, with or without its ``schema``/``payload`` wrapper) is::

    {"before": {...} | null, "after": {...} | null, "op": "c" | "u" | "d" | "r", "ts_ms": 1732770000123,
     "source": {"lsn": 24023128, "ts_ms": 1732770000100, ...}}

:func:`flat_line` turns each landing line into the flat change line an upsert stream of ``format: rows`` lands:
the record's fields from ``after`` (``before`` for a delete), and the fields laketide fills itself:

* ``operation_field``: the envelope's ``op``;
* ``event_time_field`` (the change time, which decides the change's hour): the envelope's ``ts_ms``;
* ``event_id_field``: a hash of the line (the same event landed twice has the same id);
* ``sequence_field``, when the record does not hold it: the ``source`` block's field of that name (``lsn`` for
  PostgreSQL), else the envelope's field of that name (``ts_ms``). Debezium's own times (``ts_ms``, ``ts_us``,
  ``ts_ns``) taken so as a timestamp field are read in the unit their name says. A sequence field named
  ``binlog_position`` (``config.upsert.BINLOG_POSITION``) is a MySQL or MariaDB connector's position of the change:
  the ``source`` block's binlog file number, position in that file and row in the event, packed into one long that
  orders as they do (:func:`binlog_position`). An envelope without such a position is passed on as it is, rejected
  with :data:`UNPACKED_POSITION`.

A timestamp field of the record written as a number counts time since the epoch in the unit of its Debezium type:
days (``io.debezium.time.Date``, a DATE column), milliseconds (``io.debezium.time.Timestamp``: MySQL's DATETIME,
Oracle's TIMESTAMP up to 3 digits), microseconds (``MicroTimestamp``: PostgreSQL's timestamp) or nanoseconds
(``NanoTimestamp``); Kafka Connect's ``Date`` and ``Timestamp`` too. The envelope's ``schema`` names the type of each
field when the converter writes it; without it, the stream's ``upsert.timestamp_units`` gives the unit (micros when
it names none). Text (``ZonedTimestamp``) is read as any timestamp is.

A record's field that the stream does not name follows ``unknown_fields`` as a flat line's key does: dropped
(``ignore``), kept in ``_extra`` as its text (``keep``), or the line rejected naming it (``reject``).

A line that is not such an envelope is passed on as it is: the validation then rejects it with its reason (its
key, operation, change time are missing). So is a delete whose ``before`` is null (the source table's replica
identity logs no key: PostgreSQL's ``REPLICA IDENTITY NOTHING``): nothing says which row it deletes, and the
validation names that (:data:`DELETE_WITHOUT_BEFORE`). The writer validates, rejects and commits the flat line;
the landing file keeps the original.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from laketide.config.upsert import BINLOG_POSITION
from laketide.ingest.columns import STRICT_JSON, lone_surrogate, not_utf8, spark_type

if TYPE_CHECKING:
    from pyspark.sql import Column

    from laketide.config import StreamConfig

#: how a change time is written into the flat line (the strict timestamp pattern of the landing contract)
ISO_MICROS = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"
#: the Debezium and Kafka Connect types of a number that is a point in time, and their unit
SCHEMA_UNITS = {
    "io.debezium.time.Date": "days", "org.apache.kafka.connect.data.Date": "days",
    "io.debezium.time.Timestamp": "millis", "org.apache.kafka.connect.data.Timestamp": "millis",
    "io.debezium.time.MicroTimestamp": "micros", "io.debezium.time.NanoTimestamp": "nanos",
}
#: Debezium's own times, in its ``source`` block and the envelope, and their unit (their name says it)
ENVELOPE_UNITS = {"ts_ms": "millis", "ts_us": "micros", "ts_ns": "nanos"}
#: the record of an envelope (wrapped or not), each value as its JSON text
_RECORD_TEXTS = ("struct<before: map<string, string>, after: map<string, string>, "
                 "payload: struct<before: map<string, string>, after: map<string, string>>>")
#: the part of the envelope's schema that names the types of the record's fields
_SCHEMA = "schema: struct<fields: array<struct<field: string, fields: array<struct<field: string, name: string>>>>>"


#: the bits of a packed binlog position (:func:`binlog_position`): file number, position in the file, row in the event
#: (19 + 32 + 12 = 63, a positive long). A position is 32 bits in MySQL's binlog event header
FILE_BITS, POS_BITS, ROW_BITS = 19, 32, 12
#: the reason an envelope without a binlog position that packs is rejected with (``sequence_field: binlog_position``)
UNPACKED_POSITION = (
    f"no binlog position to order the change by: {BINLOG_POSITION} is packed from the source block's file (a binlog "
    f"file name ending in its number, below {2 ** FILE_BITS:,}), pos (below {2 ** POS_BITS:,}) and row (below "
    f"{2 ** ROW_BITS:,}), as the MySQL and MariaDB connectors write them; for another source, or a position beyond "
    "these, name a version column the table keeps as upsert.sequence_field")


def binlog_position(source: Column) -> Column:
    """The change's binlog position from a MySQL or MariaDB envelope's ``source`` block (a map of its values' text):
    ``file`` (``mysql-bin.000003``: its number), ``pos`` and ``row`` packed into one long that orders as the triple
    does, so that a change later in the binlog (a later file, a later event, a later row of one event) is greater.
    Null when a part is missing, not a whole number or beyond its bits (:data:`FILE_BITS`...)."""
    from pyspark.sql import functions as F

    def part(text: Column, bits: int) -> Column:
        value = F.when(text.rlike(r"^[0-9]{1,10}$"), text.cast("long"))
        return F.when(value < 2 ** bits, value)

    number = part(F.regexp_extract(source["file"], r"\.([0-9]+)$", 1), FILE_BITS)
    pos, row = part(source["pos"], POS_BITS), part(source["row"], ROW_BITS)
    return F.shiftleft(number, POS_BITS + ROW_BITS) + F.shiftleft(pos, ROW_BITS) + row


def filled(stream: StreamConfig) -> tuple[str, str, str]:
    """The fields laketide fills from the envelope: operation, change time, change id."""
    upsert = stream.upsert
    assert upsert is not None
    return upsert.operation_field, stream.event_time_field, stream.event_id_field


def envelope_schema(stream: StreamConfig) -> str:
    """The Spark DDL of a Debezium envelope whose record holds the stream's fields (timestamps read as text: Debezium
    writes them as ISO text or as numbers since the epoch)."""
    row = ", ".join(
        f"`{name}`: {'string' if spec.type == 'timestamp' else spark_type(spec.type).simpleString()}"
        for name, spec in stream.fields.items() if name not in filled(stream))
    body = f"before: struct<{row}>, after: struct<{row}>, op: string, ts_ms: long, source: map<string, string>"
    return f"struct<{_SCHEMA}, payload: struct<{body}>, {body}>"


def _schema_unit(parsed: Column, name: str) -> Column:
    """The unit of field ``name``'s numbers as the envelope's schema names its type (null without a schema, or for a
    type that is not a point in time)."""
    from pyspark.sql import functions as F

    record = F.element_at(F.filter(parsed["schema"]["fields"], lambda f: f["field"].isin("after", "before")), 1)
    kind = F.element_at(F.filter(record["fields"], lambda f: f["field"] == name), 1)["name"]
    unit = F.lit(None).cast("string")
    for type_name, unit_name in SCHEMA_UNITS.items():
        unit = F.when(kind == type_name, F.lit(unit_name)).otherwise(unit)
    return unit


def _micros(number: Column, unit: Column) -> Column:
    """``number`` (a long) in ``unit`` since the epoch, as microseconds (nanoseconds rounded down, exactly)."""
    from pyspark.sql import functions as F

    nanos = F.call_function("div", number - F.pmod(number, F.lit(1000)), F.lit(1000))
    return (F.when(unit == "days", number * 86_400_000_000).when(unit == "millis", number * 1000)
            .when(unit == "nanos", nanos).otherwise(number))


def flat_line(value: Column, stream: StreamConfig) -> Column:
    """The flat change line of a Debezium envelope ``value`` (see the module), or ``value`` itself when it is none."""
    from pyspark.sql import functions as F

    upsert = stream.upsert
    assert upsert is not None
    # strict JSON (no NaN): an envelope the lenient reader would take without its NaN value is no envelope, and the
    # line is rejected as it landed
    parsed = F.from_json(value, envelope_schema(stream), {"mode": "PERMISSIVE", **STRICT_JSON})

    def event(part: str) -> Column:
        return _part(parsed, part)

    op = event("op")
    record = _record(parsed, op)
    # the record's values as their JSON text: a value the typed parse could not read (a decimal as Debezium's base64
    # bytes in a long field, a fraction in an int field) is passed on as text, so that the validation rejects the line
    # naming the field, instead of the typed parse's null dropping the value
    record_texts = _record(F.from_json(value, _RECORD_TEXTS, {"mode": "PERMISSIVE", **STRICT_JSON}), op)
    operation, change_time, change_id = filled(stream)
    columns, mistyped = [], []
    sequence = F.lit(True)  # the packed binlog position, when the stream orders by it
    for name, spec in stream.fields.items():
        if name in (operation, change_time, change_id):
            continue
        field = record[name]
        unread = F.lit(False)
        if spec.type not in ("string", "timestamp"):  # read as text: any value is read (see envelope_schema)
            unread = record_texts[name].isNotNull() & field.isNull()
            mistyped.append(F.when(unread, record_texts[name]).alias(name))
        own_unit = None  # the unit of Debezium's own time of this name (ts_ms...), when the record lacks the field
        if name == upsert.sequence_field == BINLOG_POSITION:  # a long (the configuration's check)
            field = sequence = F.coalesce(field, binlog_position(event("source")))
        elif name == upsert.sequence_field:
            kind = "string" if spec.type == "timestamp" else spark_type(spec.type)
            if name in ENVELOPE_UNITS:
                own_unit = F.when(field.isNull(), F.lit(ENVELOPE_UNITS[name]))
            field = F.coalesce(field, event("source")[name].cast(kind),
                               F.get_json_object(value, f"$.{name}").cast(kind),
                               F.get_json_object(value, f"$.payload.{name}").cast(kind))
        if spec.type == "timestamp":  # ISO text stays; a number counts in its type's unit (see the module)
            unit = F.coalesce(_schema_unit(parsed, name), *([own_unit] if own_unit is not None else []),
                              F.lit(upsert.timestamp_units.get(name, "micros")))
            micros = _micros(field.cast("long"), unit)
            field = F.when(field.rlike(r"^-?\d+$"), F.date_format(F.timestamp_micros(micros), ISO_MICROS)
                           ).otherwise(field)
        columns.append(F.when(~unread, field).alias(name))
    flat = F.struct(
        *columns, op.alias(operation),
        F.date_format(F.timestamp_millis(event("ts_ms")), ISO_MICROS).alias(change_time),
        F.lower(F.hex(F.xxhash64(value))).alias(change_id),
    )
    # a line that is not valid UTF-8, or escapes half a surrogate pair alone, stays as it is, so that it is rejected as
    # such: flattened, its invalid bytes would be repaired (the parse decodes them to U+FFFD), the lone half written "?"
    # so does an envelope without a binlog position to order it by, rejected naming that
    envelope = op.isNotNull() & record.isNotNull() & ~not_utf8(value) & ~lone_surrogate(value) & sequence.isNotNull()
    line = F.to_json(flat, {"ignoreNullFields": "true"})
    if mistyped:  # the values the typed parse could not read, as strings, after the others: {..., "balance": "AeJA"}
        texts_line = F.to_json(F.struct(*mistyped), {"ignoreNullFields": "true"})
        line = F.when(texts_line == "{}", line).otherwise(_joined(line, texts_line))
    if stream.unknown_fields != "ignore":
        # the record's fields the stream does not name stay in the line, each as its text, for the validation to keep
        # (in _extra) or reject as it does a flat line's: {..., "nickname": "bob", "limits": "{\"daily\":5}"}
        known = F.array(*[F.lit(name) for name in stream.fields])
        unknown = F.map_filter(record_texts, lambda k, _: ~F.array_contains(known, k))
        line = F.when(F.size(unknown) > 0, _joined(line, F.to_json(unknown))).otherwise(line)
    return F.when(envelope, line).otherwise(value)


#: the reason a delete envelope whose ``before`` is null is rejected with
DELETE_WITHOUT_BEFORE = (
    "a Debezium delete without its before record (op 'd', before null): nothing says which row it deletes. The "
    "source table's replica identity logs no key (PostgreSQL: REPLICA IDENTITY NOTHING); set it to DEFAULT or FULL")


def delete_without_before(value: Column) -> Column:
    """``value`` is a Debezium delete envelope (in its payload wrapper or not) whose ``before`` is written as null,
    beside its ``after``: the line :func:`flat_line` passes on as it is for want of a record. Never null."""
    from pyspark.sql import functions as F

    def delete(event: Column) -> Column:
        keys = F.json_object_keys(event)
        return ((F.get_json_object(event, "$.op") == "d") & F.array_contains(keys, "before")
                & F.array_contains(keys, "after") & F.get_json_object(event, "$.before").isNull())

    return F.coalesce(delete(value) | delete(F.get_json_object(value, "$.payload")), F.lit(False))


def unpacked_position(value: Column) -> Column:
    """``value`` is a Debezium envelope (in its payload wrapper or not) that :func:`flat_line` passed on as it is for
    want of a binlog position (``sequence_field: binlog_position``): its record holds none, and its ``source`` block
    none that packs. Never null; false for a flat line (it has no record)."""
    from pyspark.sql import functions as F

    body = "op: string, before: map<string, string>, after: map<string, string>, source: map<string, string>"
    parsed = F.from_json(value, f"struct<payload: struct<{body}>, {body}>", {"mode": "PERMISSIVE", **STRICT_JSON})
    op = _part(parsed, "op")
    record = _record(parsed, op)
    unpacked = record[BINLOG_POSITION].isNull() & binlog_position(_part(parsed, "source")).isNull()
    return F.coalesce(op.isNotNull() & record.isNotNull() & unpacked, F.lit(False))


def _part(parsed: Column, name: str) -> Column:
    """Part ``name`` of a parsed envelope, in its payload wrapper or not."""
    from pyspark.sql import functions as F

    return F.coalesce(parsed["payload"][name], parsed[name])


def _record(parsed: Column, op: Column) -> Column:
    """The record of a parsed envelope whose operation is ``op``: ``before`` for a delete, else ``after``."""
    from pyspark.sql import functions as F

    return F.when(op == "d", _part(parsed, "before")).otherwise(_part(parsed, "after"))


def _joined(line: Column, more: Column) -> Column:
    """The JSON object ``line`` with the members of the JSON object ``more`` (not empty) after its own."""
    from pyspark.sql import functions as F

    return F.concat(line.substr(F.lit(1), F.length(line) - 1), F.lit(","), more.substr(F.lit(2), F.length(more)))
