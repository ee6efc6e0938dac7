"""One landing line's checks as Spark expressions: :class:`Parsed` holds the line, its record parsed with the
stream's schema and its landing time, and builds on them both the validity test and the first reason a refused line
gets, so that the two cannot drift apart. ``laketide.ingest.transforms`` builds one per stream, once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from laketide.config import StreamConfig
from laketide.config.upsert import BINLOG_POSITION, DELETE_OPERATIONS, delete_fields
from laketide.ingest.columns import (
    BOM,
    CORRUPT,
    EXTRA_SQL_TYPE,
    LONE_SURROGATE_REASON,
    STRICT_JSON,
    fits,
    human,
    lone_surrogate,
    not_utf8,
    object_opens,
    one_object,
    timestamp_formats,
    timestamp_rule,
    too_long_reason,
)
from laketide.ingest.debezium import (
    DELETE_WITHOUT_BEFORE,
    UNPACKED_POSITION,
    delete_without_before,
    unpacked_position,
)

if TYPE_CHECKING:
    from pyspark.sql import Column


class Parsed:
    """A line and its record as Spark expressions: ``record``, the line parsed with the stream's schema (null
    when the line holds no JSON token: a blank line, and when it is longer than ``max_line_bytes``: then it
    is never parsed), ``raw``, the line, and the latest event time accepted for it (its landing time +
    ``max_future``). The validity test and the reasons are built on these, so they cannot drift apart."""

    def __init__(self, stream: StreamConfig, record: Column, raw: Column, landed_at: Column) -> None:
        from pyspark.sql import functions as F

        self.stream = stream
        self.record = record
        self.raw = raw
        self.fits = fits(raw, stream)
        future = stream.max_future // timedelta(microseconds=1)
        self.latest = F.timestamp_micros(F.unix_micros(landed_at) + future)
        # an upsert stream's change older than its landing time - tombstone_retention: a delete of its key may have
        # expired (laketide.maintain.tombstones), so the change is refused rather than merged
        retention = stream.upsert.tombstone_retention if stream.upsert is not None else None
        self.earliest = None if retention is None else F.timestamp_micros(
            F.unix_micros(landed_at) - retention // timedelta(microseconds=1))
        self._fields = {name: self._field(name, spec.type) for name, spec in stream.fields.items()}
        # an upsert stream's delete needs only its key and change fields (config.upsert.delete_fields)
        upsert = stream.upsert
        self._optional_on_delete = set() if upsert is None else set(stream.fields) - set(
            delete_fields(upsert, stream.event_time_field, stream.event_id_field))

    def _field(self, name: str, kind: str) -> Column:
        """Field ``name`` of the record. A timestamp the reader refused is read again with the second
        pattern of ``timestamp_formats`` (offsets without a colon), only then: a value the reader took
        costs one null test more, an optional timestamp absent from the line (or written as null) a search for its
        key."""
        from pyspark.sql import functions as F

        value = self.record[name]
        second = timestamp_formats(self.stream)[1] if kind == "timestamp" else None
        if second is None:
            return value
        present = self.fits & self.mentions(name) & ~self.written_null(name)
        text = F.get_json_object(self.raw, f"$.{name}")
        return F.coalesce(value, F.when(present, F.try_to_timestamp(text, F.lit(second))))

    def field(self, name: str) -> Column:
        return self._fields[name]

    def missing(self, name: str) -> Column:
        """Required field ``name`` is absent (or null): of a delete, only a field every change needs."""
        absent = self.field(name).isNull()
        if name not in self._optional_on_delete:
            return absent
        assert self.stream.upsert is not None
        return absent & ~self.field(self.stream.upsert.operation_field).isin(*DELETE_OPERATIONS)

    def _known(self) -> Column:
        from pyspark.sql import functions as F

        return F.array(*[F.lit(n) for n in self.stream.fields])

    def unknown_keys(self) -> Column:
        """The line's top-level keys that the stream's fields do not name (an array; null for a line that is no
        JSON object). One more pass over the line: asked only with ``unknown_fields: reject``."""
        from pyspark.sql import functions as F

        return F.array_except(F.json_object_keys(self.raw), self._known())

    def has_unknown(self) -> Column:
        from pyspark.sql import functions as F

        return F.coalesce(F.size(self.unknown_keys()) > 0, F.lit(False))

    def extra(self) -> Column:
        """The line's fields that the stream's fields do not name, as a map from name to the value's text (a
        string's own text, the JSON of any other value), null when there is none: ``unknown_fields: keep``'s
        catch-all column. One more parse of the line."""
        from pyspark.sql import functions as F

        known = self._known()
        every = F.from_json(F.when(self.fits, self.raw), EXTRA_SQL_TYPE, STRICT_JSON)
        rest = F.map_filter(every, lambda k, _: ~F.array_contains(known, k))
        return F.when(F.size(rest) > 0, rest)

    def present(self) -> Column:
        """The line is a record: it is not blank (a line too long to parse is one)."""
        return self.record.isNotNull() | ~self.fits

    def reencoding_changes(self) -> Column:
        """The line is not valid UTF-8 (:func:`laketide.ingest.columns.not_utf8`)."""
        return not_utf8(self.raw)

    def time_in_range(self) -> Column:
        """The event time lies in ``[min_event_time, latest]`` (and, for an upsert stream, at or after ``earliest``)."""
        from pyspark.sql import functions as F

        event_time = self.field(self.stream.event_time_field)
        low = F.lit(datetime.fromisoformat(self.stream.min_event_time))
        in_range = (event_time >= low) & (event_time <= self.latest)
        return in_range if self.earliest is None else in_range & (event_time >= self.earliest)

    def mentions(self, name: str) -> Column:
        """The line holds the text ``"name"``, or a JSON escape of one of its characters: a key it may have (the JSON
        lookup that follows decides).

        A byte search (``contains``), not ``instr``: ``instr`` counts the characters before the match, one call
        per character over the whole line when the key is absent. An optional field absent from every line cost
        the validation about a sixth more with ``instr`` (bench/README.md, "Optional fields absent"). A field name is
        a plain identifier, so ``\\u`` and the character's code is the only other way to write it
        (``"duration\\u005fms"`` is the key ``duration_ms``, and a value of the wrong type under it would otherwise
        be taken as an absent field's null); the pattern is matched only on a line holding ``\\u`` at all."""
        codes = "|".join(sorted({f"{ord(c):04x}" for c in name}))
        escaped = self.raw.contains("\\u") & self.raw.rlike(f"(?i)\\\\u({codes})")
        return self.raw.contains(f'"{name}"') | escaped

    def written_null(self, name: str) -> Column:
        """The line's only mention of ``"name"`` is followed by ``:null`` or ``: null``: the key's value is a null
        written out (a producer that writes every key). Then the key is the line's key ``name``, or the key ``name``
        is absent: a JSON string cannot hold an unescaped quote, so text ``"name"`` followed by a colon ends a key.
        Byte searches only; the one-mention test (``substring_index`` of the second mention) copies nothing for a
        line with one."""
        from pyspark.sql import functions as F

        key = f'"{name}"'
        once = F.octet_length(F.substring_index(self.raw, key, 2)) == F.octet_length(self.raw)
        return (self.raw.contains(f"{key}: null") | self.raw.contains(f"{key}:null")) & once

    def unreadable(self, name: str) -> Column:
        """Field ``name`` was read as null, yet the line holds a non-null value for it: a value of the wrong
        type. The line is searched only when the field is null: the key's text first, then whether its value is a
        null written out (:meth:`written_null`), and only then a JSON lookup, which parses the line (for three
        optional fields written as null, the lookups made the staged rows' write 2.5-2.8 times the native read's;
        bench/README.md, "Optional fields written as null")."""
        from pyspark.sql import functions as F

        return (
            self.field(name).isNull() & self.mentions(name) & ~self.written_null(name)
            & F.get_json_object(self.raw, f"$.{name}").isNotNull()
        )

    def valid(self) -> Column:
        """True when the line is a valid event, else false.

        A line is valid when it opens a JSON object, every required field is present and readable, every
        optional field is readable or absent, the event time is in range, nothing follows the object (see
        :func:`one_object`) and the line is valid UTF-8, wherever its invalid bytes would be (a key, a value of a
        field the stream does not name). Never null: a line is valid or not. Spark's JSON reader
        leaves a field null when its value has the wrong type (every field, when the line is not JSON), so the
        test reads the fields; the line itself is searched only for an optional field read as null. For a valid
        flat line with every field present it costs a few compiled comparisons and scans of the line.
        """
        valid = object_opens(self.raw)
        for name, spec in self.stream.fields.items():
            if spec.required:
                valid = valid & ~self.missing(name)
        valid = valid & self.time_in_range() & ~self.reencoding_changes() & ~lone_surrogate(self.raw)
        for name, spec in self.stream.fields.items():
            if not spec.required:
                valid = valid & ~self.unreadable(name)
        if self.stream.unknown_fields == "reject":
            valid = valid & ~self.has_unknown()
        for name in self.stream.fields:
            if (outside := self.outside_values(name)) is not None:
                valid = valid & ~outside
        return valid & one_object(self.raw)

    def outside_values(self, name: str) -> Column | None:
        """Field ``name`` holds a value its allowed values (``StreamConfig.allowed_values``) do not name; None when
        it has none."""
        allowed = self.stream.allowed_values(name)
        if allowed is None:
            return None
        value = self.field(name)
        return value.isNotNull() & ~value.isin(*allowed)

    def reason(self) -> Column:
        """First problem of a line that ``valid`` refuses, or null for a valid line.

        Computed for refused lines only. Every one gets a reason: the checks cover each condition of
        ``valid``, built from the same conditions, and the last one catches anything else.
        """
        from pyspark.sql import functions as F

        return F.when(~self.valid(), self.why())

    def why(self) -> Column:
        """The first problem of a line that ``valid`` refuses (:meth:`reason` without the validity test)."""
        from pyspark.sql import functions as F

        stream, raw = self.stream, self.raw
        opens_object = object_opens(raw)
        # the strict parse tells lines that no JSON reader accepts from those only a lenient one does; its input is
        # guarded as the record's parse (a line too long has its reason already: it is never parsed)
        syntax = F.from_json(F.when(self.fits, raw), f"struct<{CORRUPT}:string>", {
            "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, **STRICT_JSON,
        })[CORRUPT].isNotNull()
        checks: list[Column] = [
            # first: the other checks read the line, which a line too long must never cost
            F.when(~self.fits, too_long_reason(raw, stream)),
            F.when(self.reencoding_changes(), F.lit("invalid UTF-8 encoding")),
            F.when(raw.startswith(BOM), F.lit("starts with a byte order mark (U+FEFF): write UTF-8 without a BOM")),
            F.when(F.get_json_object(raw, "$").isNull(), F.lit("malformed JSON")),
            F.when(opens_object & syntax, F.lit("malformed JSON")),
            F.when(~opens_object, F.lit("not a JSON object")),
            F.when(~one_object(raw), F.lit(
                "not one JSON object: something follows the object (one JSON object per line, nothing after it)")),
            F.when(lone_surrogate(raw), F.lit(LONE_SURROGATE_REASON)),
        ]
        if stream.upsert is not None and stream.upsert.format == "debezium":
            # an envelope the flattening passed on unread: named before the fields it lacks
            checks.append(F.when(delete_without_before(raw), F.lit(DELETE_WITHOUT_BEFORE)))
            if stream.upsert.sequence_field == BINLOG_POSITION:
                checks.append(F.when(unpacked_position(raw), F.lit(UNPACKED_POSITION)))
        rule = timestamp_rule(stream)
        for name, spec in stream.fields.items():
            why = f"field {name!r} is not a valid {spec.type}" + (f": {rule}" if spec.type == "timestamp" else "")
            checks.append(F.when(self.unreadable(name), F.lit(why)))
        for name, spec in stream.fields.items():
            if spec.required:
                checks.append(F.when(self.missing(name), F.lit(f"missing required field {name!r}")))
        for name in stream.fields:
            if (outside := self.outside_values(name)) is not None:
                allowed = ", ".join(stream.allowed_values(name) or ())
                checks.append(F.when(outside, F.concat(F.lit(f"field {name!r} is '"), self.field(name),
                                                       F.lit(f"': not one of {allowed}"))))
        if stream.unknown_fields == "reject":
            checks.append(F.when(self.has_unknown(), F.concat(
                F.lit("unknown field(s) "), F.array_join(F.transform(self.unknown_keys(), lambda k: F.concat(
                    F.lit("'"), k, F.lit("'"))), ", "),
                F.lit(": not in the stream's fields (add them to fields, or set unknown_fields to ignore or keep)"))))
        low = datetime.fromisoformat(stream.min_event_time)
        if self.earliest is not None and stream.upsert is not None:
            checks.append(F.when(self.field(stream.event_time_field) < self.earliest, F.concat(
                F.lit("change time "), F.date_format(self.field(stream.event_time_field), "yyyy-MM-dd'T'HH:mm:ssXXX"),
                F.lit(f" is more than upsert.tombstone_retention ({human(stream.upsert.tombstone_retention)}) before "
                      "its file landed: a delete of its key may have expired, so a change this late is refused (a "
                      "longer tombstone_retention takes it)"))))
        checks.append(
            F.when(
                ~self.time_in_range(),
                F.concat(
                    F.lit(f"event time out of range [{low.isoformat()}, landing time + {human(stream.max_future)}]: "),
                    F.date_format(self.field(stream.event_time_field), "yyyy-MM-dd'T'HH:mm:ssXXX"),
                ),
            )
        )
        checks.append(F.lit("malformed record"))
        return F.coalesce(*checks)
