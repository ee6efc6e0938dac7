"""Parse and validate landing lines: pure DataFrame -> DataFrame transforms, one reason per bad line.

``parse_lines`` and :class:`Validator` turn the lines ``runner.extract`` reads into typed rows and reasons;
``rejected_rows`` (``laketide.ingest.rejects``) shapes the rejects table's rows; the column expressions both use
are in ``laketide.ingest.columns``. Nothing here touches a table.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from laketide.config import EXTRA_COLUMN, StreamConfig
from laketide.config.upsert import DELETE_OPERATIONS, delete_fields
from laketide.ingest.columns import (
    BOM,
    CORRUPT,
    EXTRA_SQL_TYPE,
    LANDED_AT,
    LONE_SURROGATE_REASON,
    PACK_SEPARATOR,
    STRICT_JSON,
    batch_parameter,
    fits,
    human,
    json_options,
    lone_surrogate,
    not_utf8,
    object_opens,
    one_object,
    pack_reject,
    record_schema,
    timestamp_formats,
    timestamp_rule,
    too_long_reason,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


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


class Validator:
    """The parse and the checks of one stream's lines as Spark expressions, built once (the staged rows' on
    the first batch, the reasons' on the first batch with rejects): building them takes hundreds of py4j
    calls, too many to repeat for every micro-batch."""

    def __init__(self, stream: StreamConfig) -> None:
        from pyspark.sql import functions as F

        self.stream = stream
        raw = F.col("value")
        self._read = [raw.alias("_raw"), F.col("_source_file"), F.col(LANDED_AT), self._parse(raw).alias("_p")]
        self._parsed = Parsed(stream, F.col("_p"), F.col("_raw"), F.col(LANDED_AT))
        self._staged: tuple[str | None, list[Column]] | None = None
        #: reuse the columns while the batches' input columns are the same (read from Spark's resolved plan,
        #: a non-public API: off on the public commit path, which then rebuilds them per batch)
        self.plan_keys = True
        #: the events table has the catch-all column ``_extra`` (``unknown_fields: keep``, now or before): the rows
        #: carry it (null unless the stream keeps unknown fields). The writer sets it from the table
        self.with_extra = stream.unknown_fields == "keep"

    def _extra(self, parsed: Parsed) -> Column:
        from pyspark.sql import functions as F

        if self.stream.unknown_fields == "keep":
            return parsed.extra().alias(EXTRA_COLUMN)
        return F.lit(None).cast(EXTRA_SQL_TYPE).alias(EXTRA_COLUMN)

    def _parse(self, raw: Column) -> Column:
        """The line parsed with the stream's schema, unless it is longer than ``max_line_bytes`` (then null).

        An option must be given: without one, Spark's optimizer gives each field read from the result its
        own parse of the line. The length test guards the parse's input, not its result: the reader gets
        null for a line too long (and returns null without reading anything). Guarding the result, a CASE
        WHEN around the parse, would not do: Spark 3.5's optimizer pushes each field access and null test
        into the CASE, then no two of them share the parse and each reparses the line. As written, common
        subexpression elimination still evaluates the parse once per line (checked in the generated code)."""
        from pyspark.sql import functions as F

        stream = self.stream
        return F.from_json(F.when(fits(raw, stream), raw), record_schema(stream), json_options(stream))

    def _staged_columns(self, lines: DataFrame) -> list[Column]:
        """The columns of ``staged_rows``, built on the columns of ``lines`` itself.

        Columns named by text (``F.col``) are looked up again each time a DataFrame is built from them;
        with many references to the parse, that costs Spark about 20 ms per micro-batch. Columns taken
        from the DataFrame are already resolved. The micro-batches of one streaming query share their
        input columns, so the expressions are rebuilt only when those differ (their ids are compared).
        Spark evaluates the parse once per line however often the expressions refer to it (common
        subexpression elimination).
        """
        from pyspark.sql import functions as F

        from laketide.lake.internals import output_key

        key = output_key(lines) if self.plan_keys else None  # names with ids: value#0, ...
        if key is not None:
            key += f" extra={self.with_extra}"
        if self._staged is None or key is None or self._staged[0] != key:
            raw = lines["value"]
            record = self._parse(raw)
            parsed = Parsed(self.stream, record, raw, lines[LANDED_AT])
            valid = parsed.valid()
            time_field = self.stream.event_time_field
            source = lines["_source_file"]
            columns = [
                *[(F.when(valid, parsed.field(n)) if n == time_field else parsed.field(n)).alias(n)
                  for n in self.stream.fields],
                # blank lines are not records: their rows (in the null hour partition) carry no source file; a
                # rejected line's carries what its rejects row needs (see pack_reject). A valid line is present:
                # the validity test comes first, where Spark evaluates it for every line, so that it and the event
                # time's test are one common subexpression, computed once per line (a test inside a branch is not
                # shared: it would run twice)
                F.when(valid, source).when(parsed.present(), pack_reject(source, raw, parsed.why(), self.stream))
                .alias("_source_file"),
            ]
            if self.with_extra:
                columns.append(self._extra(parsed))
            self._staged = (key, columns)
        return self._staged[1]

    def with_marks(self, lines: DataFrame, files: Iterable[str] | None = None) -> DataFrame:
        """``lines`` with the byte order mark that Spark's text source dropped put back in front of the first line
        of each landing file that starts with one, so that the line is rejected as the contract says (see
        ``laketide.ingest.bom``). ``files``: the names of the batch's files when the caller has them (else they
        are read from the batch's plan). Lines not read from files (a DataFrame built by hand) are left as they
        are."""
        from laketide.ingest.bom import marked_files, restore_marks
        from laketide.ingest.landing import data_dir
        from laketide.lake.internals import batch_files

        if files is None:
            try:
                files = batch_files(lines)
            except Exception:
                if self.plan_keys:  # no file scan in the plan: lines built by hand, no file that could start with one
                    return lines
                # the public commit path does not rely on Spark's plans: the names from the lines (one small job)
                files = [str(r[0]) for r in lines.select("_source_file").distinct().collect() if r[0] is not None]
        stream = self.stream
        return restore_marks(lines, marked_files(data_dir(stream.landing_path), files, stream.max_line_bytes))

    def read(self, lines: DataFrame) -> DataFrame:
        """Each line that is not blank, parsed: ``_raw``, ``_source_file``, ``_landed_at`` and ``_p`` (the
        record, see ``Parsed``; null for a line over ``max_line_bytes``, which is kept: it is no blank line).

        Nothing in it depends on when the batch runs: a replayed batch splits valid and rejected lines
        exactly as its first attempt did."""
        return self.with_marks(lines).select(*self._read).where(self._parsed.present())

    @functools.cached_property
    def _checked(self) -> list[Column]:
        # built on first use: only batches with rejects need the reasons
        from pyspark.sql import functions as F

        parsed = self._parsed
        return [
            *[parsed.field(name).alias(name) for name in self.stream.fields], parsed.raw, F.col("_source_file"),
            parsed.reason().alias("_error"), *([self._extra(parsed)] if self.with_extra else []),
        ]

    def check(self, read: DataFrame) -> DataFrame:
        """The output of ``read`` as the stream's fields, ``_raw``, ``_source_file`` and the checks' result,
        ``_error`` (null when the line is valid)."""
        return read.select(*self._checked)

    def parse_lines(self, lines: DataFrame) -> DataFrame:
        """``check(read(lines))``: see the module function ``parse_lines``."""
        return self.check(self.read(lines))

    def rejects_of(self, staged: DataFrame) -> DataFrame:
        """The rejected lines among rows of ``staged_rows`` (or of the data files they were written to): ``_raw``,
        ``_source_file`` and ``_error``, the reason, as ``check`` gives them, and ``_truncated`` (``_raw`` holds an
        over-long line already cut): the input of ``rejected_rows``.

        Reads only what ``staged_rows`` packed into a rejected line's ``_source_file`` (see :func:`pack_reject`),
        the reason included: nothing is parsed or checked again, the batch is not read again."""
        from pyspark.sql import functions as F

        stream = self.stream
        rejected = staged.where(F.col(f"`{stream.event_time_field}`").isNull() & F.col("_source_file").isNotNull())
        if "_batch_id" in staged.columns:  # a null batch id marks a duplicate dropped by dedupe_on_write
            rejected = rejected.where(F.col("_batch_id").isNotNull())
        parts = F.split(F.col("_source_file"), PACK_SEPARATOR, 4)
        return rejected.select(
            F.unbase64(parts[2]).cast("string").alias("_raw"), parts[0].alias("_source_file"),
            parts[3].alias("_error"), (parts[1].cast("bigint") > stream.max_line_bytes).alias("_truncated"),
        )

    def staged_rows(self, lines: DataFrame, batch_id: int, extra: Sequence[Column] = (),
                    files: Iterable[str] | None = None) -> DataFrame:
        """Rows of the events table's pre-commit write, one per line (blank ones too): the stream's fields
        plus the lineage columns (and ``_extra`` when the table has it). A rejected line keeps a null event
        time, so its row falls in the null hour partition: the writer counts the rejects in those files (the rows
        with a source file; blank lines have none), reads the rejected lines and their reasons from them
        (``rejects_of``; a rejected line's row carries both in ``_source_file``, see ``pack_reject``), then
        deletes them.

        One plan step (each costs Spark an analysis of the plan, per micro-batch), no filter and, for a
        valid line, no JSON function besides the parse: the split costs one compiled test per line.
        ``extra`` columns of ``lines`` are passed through (the public commit path's lineage columns); ``files``: the
        names of the batch's landing files, when the caller has them (:meth:`with_marks`)."""
        lines = self.with_marks(lines, files)
        return lines.select(*self._staged_columns(lines), batch_parameter(batch_id).alias("_batch_id"), *extra)


def parse_lines(lines: DataFrame, stream: StreamConfig) -> DataFrame:
    """Parse and validate landing lines.

    :param lines: columns ``value`` (one line), ``_source_file`` (landing file name) and ``_landed_at`` (when
        the file landed: the reference for rejecting event times from the future); blank lines are not
        records and are dropped. A line longer than the stream's ``max_line_bytes`` is rejected without
        being parsed (its fields are null).
    :return: the stream's fields, plus ``_raw``, ``_source_file`` and ``_error`` (null when valid).
    """
    return Validator(stream).parse_lines(lines)
