"""The exactly-once Structured Streaming writer: landing zone -> events table + rejects table.

``extract`` reads the landing zone's data files as lines, ``parse_lines`` is a pure DataFrame ->
DataFrame transform (parse + validate, one reason per bad line), and :class:`BatchWriter` is the
``foreachBatch`` sink that commits each micro-batch to both tables idempotently (see ``laketide.commits``).
"""

from __future__ import annotations

import functools
import json
import logging
import operator
import signal
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from laketide import commits, failures, faults, sink
from laketide.catalog import load_catalog
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import WriterFencedError
from laketide.internals import SqlitePool
from laketide.landing import DATA_SUFFIX, EPOCH, data_dir, from_epoch_hours, partition_key
from laketide.lease import WriterLease, engine_for
from laketide.maintain.plan import COMMIT_RETRY_PROPERTIES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("laketide.writer")

Mode = Literal["continuous", "incremental"]
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
    "raw string, reason string, source_file string, event_hour timestamp, "
    "batch_id bigint, writer_id string, rejected_at timestamp"
)
CORRUPT = "_corrupt_record"
LANDED_AT = "_landed_at"
# Iceberg's write option for writes whose files are committed by the caller (its compaction uses it): the
# data files are written, then handed to FileRewriteCoordinator under this id instead of being committed
UNCOMMITTED_FILE_SET = "rewritten-file-scan-task-set-id"
FILE_SCAN_RDD = "org.apache.spark.sql.execution.datasources.FileScanRDD"
LOGICAL_RDD = "org.apache.spark.sql.execution.LogicalRDD"
STRICT_JSON = {"allowSingleQuotes": "false"}
#: characters of an over-long line kept in the rejects table's ``raw`` (the landing file keeps the whole line)
RAW_PREFIX_CHARS = 1024
#: the time of day of a timestamp value: minutes, optional seconds, optional fraction (1 to 9 digits)
CLOCK = "HH:mm[:ss[.SSSSSSSSS]]"
TIMESTAMP_EXAMPLE = "2026-11-22T03:15:07.123Z"


def spark_type(kind: str) -> DataType:
    """The Spark type of a field type of the configuration (``FieldSpec.type``)."""
    from pyspark.sql import types as T

    return {
        "string": T.StringType(), "long": T.LongType(), "int": T.IntegerType(), "double": T.DoubleType(),
        "boolean": T.BooleanType(), "timestamp": T.TimestampType(),
    }[kind]


def record_schema(stream: StreamConfig) -> StructType:
    """The typed record schema of a stream."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(n, spark_type(spec.type), nullable=True) for n, spec in stream.fields.items()])


def timestamp_formats(stream: StreamConfig) -> tuple[str, str | None]:
    """The Spark datetime patterns a timestamp value of ``stream`` must match: the JSON reader's, and one tried
    on values the first refuses (None when there is none).

    By default a value needs a date, a time and a UTC offset. The reader takes one pattern, and no pattern
    takes both ``+05:30`` and ``+0530`` while requiring one of them (an optional offset lets a value without
    one through, read in the reader's time zone): the first pattern takes ``Z`` and ``+05:30``, the second
    ``Z``, ``+05`` and ``+0530``. With ``allow_timestamps_without_offset`` the offset is optional (the value
    is read as UTC); with ``allow_date_only_timestamps`` a date alone is read as midnight UTC.

    Every pattern holds an optional section ("["): a value the pattern refuses then reads as null. Spark
    raises instead (failing the batch) when its legacy parser, given the same pattern, accepts a value
    the new one refuses; to the legacy parser "[" is a literal that no accepted value holds.
    """
    if stream.allow_timestamps_without_offset:
        clocks: tuple[str, ...] = (f"{CLOCK}[XXX][X]",)
    else:
        clocks = (f"{CLOCK}XXX", f"{CLOCK}X")
    if stream.allow_date_only_timestamps:
        formats = [f"yyyy-MM-dd['T'{clock}]" for clock in clocks]
    else:
        formats = [f"yyyy-MM-dd'T'{clock}" for clock in clocks]
    return formats[0], (formats[1] if len(formats) > 1 else None)


def timestamp_rule(stream: StreamConfig) -> str:
    """What a timestamp value of ``stream`` needs, for the reasons of rejected lines."""
    date_only, no_offset = stream.allow_date_only_timestamps, stream.allow_timestamps_without_offset
    if date_only and no_offset:
        needs = "a date, or a date and a time"
    elif date_only:
        needs = "a date alone, or a date, a time and a UTC offset"
    elif no_offset:
        needs = "a date and a time"
    else:
        needs = "a date, a time and a UTC offset"
    return f"needs {needs} (ISO 8601, e.g. {TIMESTAMP_EXAMPLE})"


def json_options(stream: StreamConfig) -> dict[str, str]:
    """Options of the JSON reader that parses a stream's lines.

    Spark's JSON reader falls back to a lenient timestamp parse (a date alone, no offset, a space for the
    'T', a zone name) unless a ``timestampFormat`` is given; the fallback is also switched off explicitly,
    so that ``spark.sql.json.enableDateTimeParsingFallback`` cannot switch it back on. A value that does
    not match reads as null (then the line is rejected: the field is not a valid timestamp). The time
    zone applies only to the values the stream allows without an offset."""
    return {
        **STRICT_JSON, "timestampFormat": timestamp_formats(stream)[0], "timeZone": "UTC",
        "enableDateTimeParsingFallback": "false",
    }


def batch_parameter(value: int) -> Column:
    """``value`` as a bigint column that Spark keeps out of the code it generates.

    Spark compiles each stage of a query to Java and caches the class by its source text. A long literal
    is written into that text, so a value that changes with every micro-batch (the batch id) would cost a
    compilation of the whole stage per batch: about 0.1 s here, a few per cent of a batch. An array
    literal is handed to the class as a parameter instead, and reading its element at an index the
    optimizer cannot compute (the partition id times 0) keeps it from folding the value back into a long
    literal. Reading it costs a few nanoseconds per row. One SQL expression: a single call into the JVM.
    """
    from pyspark.sql import functions as F

    return F.expr(f"array(CAST({int(value)} AS BIGINT))[spark_partition_id() * 0]")


def _human(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0 and seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _opens_object(raw: Column) -> Column:
    """The line opens a JSON object, maybe after whitespace (only lines not starting with "{" pay the trim)."""
    from pyspark.sql import functions as F

    return raw.startswith("{") | F.ltrim(raw).startswith("{")


def fits(raw: Column, stream: StreamConfig) -> Column:
    """The line is at most ``max_line_bytes`` long.

    Bytes, not characters: the text source keeps each line as UTF-8 bytes (Spark's UTF8String), whose byte
    length is a stored field (``octet_length``: one comparison per line) while its length in characters
    (``length``) takes a pass over the line. Bytes are also what a line costs in memory and on disk."""
    from pyspark.sql import functions as F

    return F.octet_length(raw) <= F.lit(stream.max_line_bytes)


def too_long_reason(raw: Column, stream: StreamConfig) -> Column:
    from pyspark.sql import functions as F

    return F.concat(
        F.lit("line of "), F.octet_length(raw).cast("string"),
        F.lit(f" bytes exceeds max_line_bytes ({stream.max_line_bytes})"),
    )


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
        self._fields = {name: self._field(name, spec.type) for name, spec in stream.fields.items()}

    def _field(self, name: str, kind: str) -> Column:
        """Field ``name`` of the record. A timestamp the reader refused is read again with the second
        pattern of ``timestamp_formats`` (offsets without a colon), only then: a value the reader took
        costs one null test more, an optional timestamp absent from the line a search for its key."""
        from pyspark.sql import functions as F

        value = self.record[name]
        second = timestamp_formats(self.stream)[1] if kind == "timestamp" else None
        if second is None:
            return value
        present = self.fits & (F.instr(self.raw, f'"{name}"') > 0)
        text = F.get_json_object(self.raw, f"$.{name}")
        return F.coalesce(value, F.when(present, F.try_to_timestamp(text, F.lit(second))))

    def field(self, name: str) -> Column:
        return self._fields[name]

    def present(self) -> Column:
        """The line is a record: it is not blank (a line too long to parse is one)."""
        return self.record.isNotNull() | ~self.fits

    def holds_replacement(self) -> Column | None:
        """A parsed string value holds U+FFFD (None for a stream without string fields).

        The text source keeps raw bytes; the JSON reader decodes an invalid sequence inside a string value to
        U+FFFD. Only then is the exact test (``reencoding_changes``) worth running."""
        probes = [self.field(n).contains("\ufffd") for n, spec in self.stream.fields.items() if spec.type == "string"]
        return functools.reduce(operator.or_, probes) if probes else None

    def reencoding_changes(self) -> Column:
        """Re-encoding the line through a Java string changes it: the line is not valid UTF-8."""
        from pyspark.sql import functions as F

        return self.raw.cast("binary") != F.encode(self.raw, "UTF-8")

    def time_in_range(self) -> Column:
        """The event time lies in ``[min_event_time, latest]``."""
        from pyspark.sql import functions as F

        event_time = self.field(self.stream.event_time_field)
        return (event_time >= F.lit(datetime.fromisoformat(self.stream.min_event_time))) & (event_time <= self.latest)

    def unreadable(self, name: str) -> Column:
        """Field ``name`` was read as null, yet the line holds a non-null value for it: a value of the wrong
        type. The line is searched only when the field is null (the key's text first, then a JSON lookup)."""
        from pyspark.sql import functions as F

        return (
            self.field(name).isNull() & (F.instr(self.raw, f'"{name}"') > 0)
            & F.get_json_object(self.raw, f"$.{name}").isNotNull()
        )

    def valid(self) -> Column:
        """True when the line is a valid event, else false.

        A line is valid when it opens a JSON object, every required field is present and readable, every
        optional field is readable or absent, the event time is in range and, when a string value holds
        U+FFFD, the line is valid UTF-8. Spark's JSON reader leaves a field null when its value has the
        wrong type (every field, when the line is not JSON), so the test reads the fields; the line itself
        is searched only for an optional field read as null. For a valid line with every field present it
        costs a few compiled comparisons.
        """
        valid = _opens_object(self.raw)
        for name, spec in self.stream.fields.items():
            if spec.required:
                valid = valid & self.field(name).isNotNull()
        valid = valid & self.time_in_range()
        replaced = self.holds_replacement()
        if replaced is not None:
            valid = valid & ~(replaced & self.reencoding_changes())
        for name, spec in self.stream.fields.items():
            if not spec.required:
                valid = valid & ~self.unreadable(name)
        return valid

    def reason(self) -> Column:
        """First problem of a line that ``valid`` refuses, or null for a valid line.

        Computed for refused lines only. Every one gets a reason: the checks cover each condition of
        ``valid``, built from the same conditions, and the last one catches anything else.
        """
        from pyspark.sql import functions as F

        stream, raw = self.stream, self.raw
        opens_object = _opens_object(raw)
        # the strict parse tells lines that no JSON reader accepts from those only a lenient one does
        syntax = F.from_json(raw, f"struct<{CORRUPT}:string>", {
            "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, **STRICT_JSON,
        })[CORRUPT].isNotNull()
        checks: list[Column] = [
            # first: the other checks read the line, which a line too long must never cost
            F.when(~self.fits, too_long_reason(raw, stream)),
            F.when(self.reencoding_changes(), F.lit("invalid UTF-8 encoding")),
            F.when(F.get_json_object(raw, "$").isNull(), F.lit("malformed JSON")),
            F.when(opens_object & syntax, F.lit("malformed JSON")),
            F.when(~opens_object, F.lit("not a JSON object")),
        ]
        rule = timestamp_rule(stream)
        for name, spec in stream.fields.items():
            why = f"field {name!r} is not a valid {spec.type}" + (f": {rule}" if spec.type == "timestamp" else "")
            checks.append(F.when(self.unreadable(name), F.lit(why)))
        for name, spec in stream.fields.items():
            if spec.required:
                checks.append(F.when(self.field(name).isNull(), F.lit(f"missing required field {name!r}")))
        low = datetime.fromisoformat(stream.min_event_time)
        checks.append(
            F.when(
                ~self.time_in_range(),
                F.concat(
                    F.lit(f"event time out of range [{low.isoformat()}, landing time + {_human(stream.max_future)}]: "),
                    F.date_format(self.field(stream.event_time_field), "yyyy-MM-dd'T'HH:mm:ssXXX"),
                ),
            )
        )
        checks.append(F.lit("malformed record"))
        return F.when(~self.valid(), F.coalesce(*checks))


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
        self._staged: tuple[str, list[Column]] | None = None

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

        key = str(lines._jdf.queryExecution().analyzed().output().toString())  # names with ids: value#0, ...
        if self._staged is None or self._staged[0] != key:
            raw = lines["value"]
            record = self._parse(raw)
            parsed = Parsed(self.stream, record, raw, lines[LANDED_AT])
            valid = parsed.valid()
            time_field = self.stream.event_time_field
            columns = [
                *[(F.when(valid, parsed.field(n)) if n == time_field else parsed.field(n)).alias(n)
                  for n in self.stream.fields],
                # blank lines are not records: their rows (in the null hour partition) carry no source file
                F.when(parsed.present(), lines["_source_file"]).alias("_source_file"),
            ]
            self._staged = (key, columns)
        return self._staged[1]

    def read(self, lines: DataFrame) -> DataFrame:
        """Each line that is not blank, parsed: ``_raw``, ``_source_file``, ``_landed_at`` and ``_p`` (the
        record, see ``Parsed``; null for a line over ``max_line_bytes``, which is kept: it is no blank line).

        Nothing in it depends on when the batch runs: a replayed batch splits valid and rejected lines
        exactly as its first attempt did."""
        return lines.select(*self._read).where(self._parsed.present())

    @functools.cached_property
    def _checked(self) -> list[Column]:
        # built on first use: only batches with rejects need the reasons
        from pyspark.sql import functions as F

        parsed = self._parsed
        return [
            *[parsed.field(name).alias(name) for name in self.stream.fields], parsed.raw, F.col("_source_file"),
            parsed.reason().alias("_error"),
        ]

    def check(self, read: DataFrame) -> DataFrame:
        """The output of ``read`` as the stream's fields, ``_raw``, ``_source_file`` and the checks' result,
        ``_error`` (null when the line is valid)."""
        return read.select(*self._checked)

    def parse_lines(self, lines: DataFrame) -> DataFrame:
        """``check(read(lines))``: see the module function ``parse_lines``."""
        return self.check(self.read(lines))

    def staged_rows(self, lines: DataFrame, batch_id: int) -> DataFrame:
        """Rows of the events table's pre-commit write, one per line (blank ones too): the stream's fields
        plus the lineage columns. A rejected line keeps a null event time, so its row falls in the null hour
        partition: the writer counts the rejects in those files (the rows with a source file; blank lines
        have none), then deletes them.

        One plan step (each costs Spark an analysis of the plan, per micro-batch), no filter and, for a
        valid line, no JSON function besides the parse: the split costs one compiled test per line."""
        return lines.select(*self._staged_columns(lines), batch_parameter(batch_id).alias("_batch_id"))


def parse_lines(lines: DataFrame, stream: StreamConfig) -> DataFrame:
    """Parse and validate landing lines.

    :param lines: columns ``value`` (one line), ``_source_file`` (landing file name) and ``_landed_at`` (when
        the file landed: the reference for rejecting event times from the future); blank lines are not
        records and are dropped. A line longer than the stream's ``max_line_bytes`` is rejected without
        being parsed (its fields are null).
    :return: the stream's fields, plus ``_raw``, ``_source_file`` and ``_error`` (null when valid).
    """
    return Validator(stream).parse_lines(lines)


def rejected_rows(parsed: DataFrame, stream: StreamConfig, batch_id: int, now: datetime) -> DataFrame:
    """Rows for the rejects table: the raw line, the reason, where it came from, and the hour of its event
    time when one can be read (reconciliation attributes rejects through their source file).

    A line longer than ``max_line_bytes`` keeps only its first ``RAW_PREFIX_CHARS`` characters and a marker
    with its length in ``raw`` (no hour is read from it): the rows never hold more than that, so the
    rejects pass (it caches these rows) and the rejects table stay small whatever lands."""
    from pyspark.sql import functions as F

    time_field = stream.event_time_field
    raw, short = F.col("_raw"), fits(F.col("_raw"), stream)
    loose = F.when(short, F.to_timestamp(F.get_json_object(raw, f"$.{time_field}")))
    # a line over max_line_bytes keeps its start and a marker; the landing file keeps the whole line
    cut = F.concat(
        F.substring(raw, 1, RAW_PREFIX_CHARS),
        F.lit(" ... [truncated: "), F.octet_length(raw).cast("string"), F.lit(" bytes in the source file]"),
    )
    return parsed.where(F.col("_error").isNotNull()).select(
        F.when(short, raw).otherwise(cut).alias("raw"),
        F.col("_error").alias("reason"),
        F.col("_source_file").alias("source_file"),
        F.date_trunc("hour", F.coalesce(F.col(time_field), loose)).alias("event_hour"),
        F.lit(batch_id).cast("bigint").alias("batch_id"),
        F.lit(stream.writer_id).alias("writer_id"),
        F.lit(now).alias("rejected_at"),
    )


def _utc(value: datetime) -> datetime:
    """PySpark hands timestamps back as naive local times; Python reads naive as local too."""
    return value.astimezone(UTC)


def summary_key(hour: datetime | None) -> str:
    """Partition key of an hour in summaries (``landing.partition_key``), or 'unknown'."""
    return "unknown" if hour is None else partition_key(_utc(hour))


def _iso(value: datetime | None) -> str | None:
    return None if value is None else _utc(value).isoformat()


def _from_micros(value: Any) -> datetime | None:
    if value is None:
        return None
    return EPOCH + timedelta(microseconds=int(value))


def _later(*values: str | None) -> str | None:
    """The latest of ISO UTC timestamps written by ``_iso`` (same format, so text order is time order)."""
    present = [v for v in values if v]
    return max(present) if present else None


@dataclass
class Staged:
    """The data files written by a batch's pre-commit, not yet in any snapshot, and what they hold."""

    table: Any  # the Java Iceberg table, loaded after the write (py4j)
    data_files: list[Any]  # Java DataFile objects (py4j) of the valid rows, to publish
    rows: dict[str, int]  # valid rows per partition key
    rejected: int  # rows of the null hour partition with a source file: the rejected lines (never published)
    min_event_time: int | None  # epoch microseconds, from the files' column bounds
    max_event_time: int | None

    @property
    def valid(self) -> int:
        return sum(self.rows.values())


def batch_files(batch: DataFrame) -> commits.SourceFiles:
    """Names of the landing files a micro-batch reads (as ``_metadata.file_name``), from its plan, with the
    size and modification time Spark listed for each (the source position ``commits.summary_properties``
    records: a file changed after ingest is told by them).

    Spark lists them in the file scan it planned for the batch; reading them there costs no pass over the
    rows. Empty files are not in it (Spark's scan makes no split of them). Raises when the plan holds no
    file scan (a Spark whose plans differ from 3.5's)."""
    execution = batch._jdf.queryExecution()
    plan = execution.logical()
    # a foreachBatch micro-batch is an RDD Spark already planned: walk it rather than plan the batch again
    pending = [plan.rdd() if plan.getClass().getName() == LOGICAL_RDD else execution.toRdd()]
    stats: dict[str, tuple[int, int]] = {}  # name -> (size, modification ms)
    scans = 0
    while pending:
        rdd = pending.pop()
        if rdd.getClass().getName() == FILE_SCAN_RDD:
            scans += 1
            partitions = rdd.filePartitions()
            for i in range(partitions.size()):
                for f in partitions.apply(i).files():  # PartitionedFile: one split of a file
                    name = str(f.toPath().getName())
                    if name not in stats:
                        stats[name] = (int(f.fileSize()), int(f.modificationTime()))
        dependencies = rdd.dependencies().iterator()
        while dependencies.hasNext():
            pending.append(dependencies.next().rdd())
    if not scans:
        raise RuntimeError(
            f"no {FILE_SCAN_RDD} in the plan of the micro-batch: cannot name its landing files "
            "(laketide reads them from Spark 3.5's file scan; check the pyspark version in requirements.txt)"
        )
    return commits.SourceFiles(stats)


class IcebergJvm:
    """Iceberg's Java classes the writer calls per batch, looked up once: through py4j, each lookup of a
    class by its dotted name costs a call per name part."""

    def __init__(self, spark: SparkSession, catalog: str) -> None:
        jvm: Any = spark._jvm
        self.session = spark._jsparkSession
        self.spark3util = jvm.org.apache.iceberg.spark.Spark3Util
        self.coordinator = jvm.org.apache.iceberg.spark.FileRewriteCoordinator.get()
        self.conversions = jvm.org.apache.iceberg.types.Conversions
        self.metadata = jvm.org.apache.iceberg.TableMetadata
        self.sqlite = SqlitePool(spark, catalog)
        self.integer = jvm.java.lang.Class.forName("java.lang.Integer")

    def table(self, name: str) -> Any:
        """The Java Iceberg table ``name`` (``catalog.namespace.table``), freshly loaded."""
        return self.spark3util.loadIcebergTable(self.session, name)


class BatchWriter:
    """``foreachBatch`` sink: a two-phase commit of each micro-batch, once.

    1. pre-commit: every line is written in ONE pass over the batch as data files of the events table that
       no snapshot references yet (the Spark write hands them back instead of committing them), the
       rejected ones (and blank lines) with a null event time (``Validator.staged_rows``). The valid rows per
       partition, the number of rejects (the null partition's rows that have a source file) and the
       event-time range are read from the files' metadata (record counts, null counts, column bounds); the
       batch's landing files from its plan (``batch_files``);
    2. the rejects, if any, are written the same way to the rejects table and published (a second pass,
       only for batches with rejects);
    3. commit: one atomic catalog swap appends the data files of the valid rows to the events table with
       the full summary (writer id, batch id, source files, rows per partition, event-time range,
       watermark). The files of the null partition are deleted, never committed.

    Both publishes are fenced (``laketide.sink.publish``): they commit only on top of the writer's commit
    the batch started from, so a replaced writer that wakes up cannot commit a batch twice. A replayed batch
    already committed is skipped (``commits.should_write``, read from the Java table the commit goes to);
    the files of a batch killed before its commit are in no snapshot: orphans for the cleaner. A busy or
    unreachable catalog is waited out (``sink.retrying``, up to ``catalog.retry_timeout``).
    """

    def __init__(self, config: LaketideConfig, stream: StreamConfig) -> None:
        self.config = config
        self.stream = stream
        self.prefix = config.catalog.name
        self.validator = Validator(stream)
        self.timeout = config.catalog.retry_timeout
        self._iceberg: IcebergJvm | None = None

    def iceberg(self, spark: SparkSession) -> IcebergJvm:
        self._iceberg = self._iceberg or IcebergJvm(spark, self.prefix)
        return self._iceberg

    def _write_uncommitted(self, df: DataFrame, table: str, file_set: str) -> tuple[Any, Any]:
        """Write ``df`` as data files of ``table`` that no snapshot references; return the Java table and
        the written files."""
        name = f"{self.prefix}.{table}"
        df.writeTo(name).option(UNCOMMITTED_FILE_SET, file_set).append()
        iceberg = self.iceberg(df.sparkSession)
        jtable = iceberg.table(name)
        try:
            written = iceberg.coordinator.fetchNewFiles(jtable, file_set)  # raises when the write handed back nothing
        finally:
            iceberg.coordinator.clearRewrite(jtable, file_set)
        return jtable, written

    def _stage(self, df: DataFrame, file_set: str) -> Staged:
        """Write ``df`` as data files of the events table without committing them; return what they hold."""
        jtable, written = self._write_uncommitted(df, self.stream.table, file_set)
        return self._read_staged(self.iceberg(df.sparkSession), jtable, written)

    def _read_staged(self, iceberg: IcebergJvm, table: Any, written: Any) -> Staged:
        schema = table.schema()
        time_field = schema.findField(self.stream.event_time_field)
        field_id, field_type = time_field.fieldId(), time_field.type()
        source_id = schema.findField("_source_file").fieldId()
        conversions, integer = iceberg.conversions, iceberg.integer
        staged = Staged(table, [], {}, 0, None, None)
        it = written.iterator()
        while it.hasNext():
            data_file = it.next()
            count = int(data_file.recordCount())
            hour = data_file.partition().get(0, integer)  # hours since the epoch (hours transform)
            if hour is None:  # rejected and blank lines (see Validator.staged_rows): counted, then deleted
                nulls = data_file.nullValueCounts()
                blank = None if nulls is None else nulls.get(source_id)
                if blank is None:
                    raise RuntimeError(
                        f"data file {data_file.location()} of {self.stream.table} has no null count for "
                        "'_source_file': keep column metrics for it (table property "
                        "write.metadata.metrics.column._source_file=counts)"
                    )
                staged.rejected += count - int(blank)
                table.io().deleteFile(data_file.location())
                continue
            staged.data_files.append(data_file)
            key = summary_key(from_epoch_hours(hour))
            staged.rows[key] = staged.rows.get(key, 0) + count
            if count == 0:
                continue
            lower, upper = data_file.lowerBounds(), data_file.upperBounds()
            low = None if lower is None else lower.get(field_id)
            high = None if upper is None else upper.get(field_id)
            if low is None or high is None:
                raise RuntimeError(
                    f"data file {data_file.location()} of {self.stream.table} has no bounds for "
                    f"{self.stream.event_time_field!r}: keep column metrics for it (table property "
                    f"write.metadata.metrics.column.{self.stream.event_time_field}=full)"
                )
            lo, hi = int(conversions.fromByteBuffer(field_type, low)), int(conversions.fromByteBuffer(field_type, high))
            staged.min_event_time = lo if staged.min_event_time is None else min(staged.min_event_time, lo)
            staged.max_event_time = hi if staged.max_event_time is None else max(staged.max_event_time, hi)
        return staged

    def _publish(self, table: Any, data_files: list[Any], props: dict[str, str], batch_id: int,
                 expected: commits.Marker | None) -> int:
        """Append ``data_files`` to the Java ``table`` in one fenced commit carrying ``props``; return the new
        snapshot id (see ``sink.publish``)."""
        assert self._iceberg is not None
        return sink.publish(self._iceberg.metadata, table, data_files, props, self.stream.writer_id, batch_id,
                            expected, self.timeout, self._iceberg.sqlite.reopen)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Commit micro-batch ``batch_id`` once; a busy or unreachable catalog is waited out."""
        stream = self.stream

        def write() -> None:
            self._write(batch, batch_id)

        try:
            sink.retrying(f"batch {batch_id} of {stream.name}", write, self.timeout)
        except Exception as exc:
            failures.record(stream, batch_id, batch, exc)
            raise
        failures.clear(stream, batch_id)

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        faults.maybe_pause("batch_start", batch_id)
        started = time.monotonic()
        stream = self.stream
        iceberg = self.iceberg(batch.sparkSession)
        events_table = iceberg.table(f"{self.prefix}.{stream.table}")
        events_marker = sink.table_marker(events_table, stream.writer_id)
        if not commits.should_write(batch_id, events_marker):
            log.info("batch %d already committed to %s by %s: skipped", batch_id, stream.table, stream.writer_id)
            return
        now = datetime.now(UTC).replace(microsecond=0)
        files = batch_files(batch)
        file_set = f"laketide-{stream.writer_id}-{batch_id}-{uuid.uuid4().hex[:12]}"
        planned = time.monotonic()
        staged = self._stage(self.validator.staged_rows(batch, batch_id), file_set)
        staged_at = time.monotonic()
        valid, rejected = staged.valid, staged.rejected
        faults.maybe_pause("before_commit", batch_id)

        batch_max = _iso(_from_micros(staged.max_event_time))
        watermark = _later(events_marker.watermark if events_marker else None, batch_max)
        extra: dict[str, Any] = {
            commits.VALID_ROWS: valid,
            commits.REJECTED_ROWS: rejected,
            commits.MIN_EVENT_TIME: _iso(_from_micros(staged.min_event_time)),
            commits.MAX_EVENT_TIME: batch_max,
            commits.WATERMARK: watermark,
        }
        if rejected:  # the rejects table is read only for batches that have rejects (its publish is fenced)
            rejects_table = iceberg.table(f"{self.prefix}.{stream.rejects_table}")
            rejects_marker = sink.table_marker(rejects_table, stream.writer_id)
            if commits.should_write(batch_id, rejects_marker):
                self._reject(batch, batch_id, now, files, rejected, extra, rejects_marker)
        faults.maybe_pause("between_tables", batch_id)
        published = time.monotonic()
        props = commits.summary_properties(stream.writer_id, batch_id, files, staged.rows, extra)
        snapshot_id = self._publish(staged.table, staged.data_files, props, batch_id, events_marker)
        faults.maybe_pause("after_commit", batch_id)
        done = time.monotonic()
        log.info(
            "batch %d committed as snapshot %d: %d valid, %d rejected, %d files, watermark %s "
            "(plan %.2fs, pre-commit %.2fs, rejects %.2fs, commit %.2fs; %.2fs)",
            batch_id, snapshot_id, valid, rejected, len(files), watermark, planned - started, staged_at - planned,
            published - staged_at, done - published, done - started,
        )

    def _reject(self, batch: DataFrame, batch_id: int, now: datetime, files: list[str], expected: int,
                extra: dict[str, Any], marker: commits.Marker | None) -> None:
        """Commit the batch's rejected lines to the rejects table (a second pass over the batch), fenced like
        the events. The rows per hour come from the written files' metadata: no row reaches the driver."""
        stream = self.stream
        rejects = rejected_rows(self.validator.parse_lines(batch), stream, batch_id, now)
        file_set = f"laketide-{stream.writer_id}-{batch_id}-rejects-{uuid.uuid4().hex[:12]}"
        jtable, written = self._write_uncommitted(rejects, stream.rejects_table, file_set)
        integer = self.iceberg(batch.sparkSession).integer
        data_files: list[Any] = []
        by_hour: dict[str, int] = {}
        it = written.iterator()
        while it.hasNext():
            data_file = it.next()
            hour = data_file.partition().get(0, integer)
            key = summary_key(None if hour is None else from_epoch_hours(hour))
            by_hour[key] = by_hour.get(key, 0) + int(data_file.recordCount())
            data_files.append(data_file)
        if sum(by_hour.values()) != expected:
            raise RuntimeError(
                f"batch {batch_id}: {sum(by_hour.values())} rejected lines found, {expected} expected "
                "(rows staged in the null hour partition): the two passes over the batch disagree; "
                "nothing was committed"
            )
        props = commits.summary_properties(stream.writer_id, batch_id, files, by_hour, extra)
        self._publish(jtable, data_files, props, batch_id, marker)


def events_properties(stream: StreamConfig) -> dict[str, str]:
    """Table properties of a stream's events table (the rejects table has ``EVENTS_PROPERTIES``)."""
    # the writer reads each batch's event-time range from the data files' bounds of this column
    # and the number of rejects from the null counts of _source_file (see BatchWriter._read_staged)
    return {
        **EVENTS_PROPERTIES, f"write.metadata.metrics.column.{stream.event_time_field}": "full",
        "write.metadata.metrics.column._source_file": "counts",
    }


def create_events_table(spark: SparkSession, name: str, stream: StreamConfig) -> None:
    """Create ``name`` (``catalog.namespace.table``) as the events table of ``stream`` unless it exists:
    the stream's fields, ``_source_file``, ``_batch_id``, hidden partition by hour of event time."""
    columns = ", ".join(f"`{n}` {spark_type(s.type).simpleString()}" for n, s in stream.fields.items())
    props = ", ".join(f"'{k}'='{v}'" for k, v in events_properties(stream).items())
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {name} ({columns}, _source_file string, _batch_id bigint) "
        f"USING iceberg PARTITIONED BY (hours(`{stream.event_time_field}`)) TBLPROPERTIES ({props})"
    )


def ensure_tables(spark: SparkSession, config: LaketideConfig, stream: StreamConfig) -> None:
    """Create the namespace, events table (hidden partition: hour of event time) and rejects table."""
    cat = config.catalog.name
    for ns in sorted({stream.table.split(".")[0], stream.rejects_table.split(".")[0]}):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cat}.{ns}")
    create_events_table(spark, f"{cat}.{stream.table}", stream)
    props = ", ".join(f"'{k}'='{v}'" for k, v in EVENTS_PROPERTIES.items())
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {cat}.{stream.rejects_table} ({REJECTS_COLUMNS}) "
        f"USING iceberg PARTITIONED BY (hours(event_hour)) TBLPROPERTIES ({props})"
    )


def extract(spark: SparkSession, stream: StreamConfig) -> DataFrame:
    """Landing data files as a stream of lines with their file's name and modification (landing) time."""
    from pyspark.sql import functions as F

    folder = data_dir(stream.landing_path)
    folder.mkdir(parents=True, exist_ok=True)
    return (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", stream.max_files_per_trigger)
        .option("pathGlobFilter", f"*{DATA_SUFFIX}")
        .load(str(folder))
        .select("value", F.col("_metadata.file_name").alias("_source_file"),
                F.col("_metadata.file_modification_time").alias(LANDED_AT))
    )


def preflight(config: LaketideConfig, stream: StreamConfig) -> None:
    """Refuse to start when checkpoint and table disagree (see ``commits.check_checkpoint``)."""
    marker = commits.table_marker(load_catalog(config.catalog), stream.table, stream.writer_id)
    state = commits.read_checkpoint(stream.checkpoint_path)
    commits.check_checkpoint(stream.table, stream.writer_id, stream.checkpoint_path, state, marker)


def stop_file(stream: StreamConfig) -> Path:
    """Create this file to ask a running writer to stop between batches."""
    return stream.checkpoint_path.parent / f"{stream.name}.stop"


def start(spark: SparkSession, config: LaketideConfig, stream: StreamConfig, mode: Mode) -> StreamingQuery:
    writer = (
        extract(spark, stream).writeStream.foreachBatch(BatchWriter(config, stream))
        .option("checkpointLocation", str(stream.checkpoint_path))
        .queryName(f"laketide-{stream.name}")
    )
    if mode == "incremental":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(stream.trigger_interval.total_seconds())} seconds")
    return writer.start()


def _await(query: StreamingQuery) -> bool:
    """``query.awaitTermination(1)``; a failure raised by the batch function comes back as the laketide error
    it was (Spark hands it over as text), so the caller sees one clear message, not a Java stack."""
    from laketide.errors import CatalogUnavailableError

    try:
        return bool(query.awaitTermination(1))
    except Exception as exc:
        text = str(exc)
        for error in (WriterFencedError, CatalogUnavailableError):
            marker = f"{error.__module__}.{error.__name__}: "
            if marker in text:
                raise error(text.split(marker, 1)[1].splitlines()[0]) from exc
        raise


def lease_for(config: LaketideConfig, stream: StreamConfig, mode: Mode) -> WriterLease:
    """The lease of ``stream``'s writer id (see ``laketide.lease``), with what to do when it is held."""
    hint = (f"If it is the continuous writer of the laketide_ingest_{stream.name} DAG, it already ingests "
            f"everything that lands; to run a one-off ingestion instead, pause that DAG or create the stop file "
            f"{stop_file(stream)}, then try again. If that process is dead, its lease expires "
            f"{int(stream.writer_lease.total_seconds())}s after its last heartbeat (writer_lease).")
    return WriterLease(engine_for(config.catalog), stream.writer_id, stream.writer_lease, mode, hint)


def run(config: LaketideConfig, stream: StreamConfig, mode: Mode, spark: SparkSession | None = None) -> None:
    """Run the writer of ``stream`` until it is done (incremental) or asked to stop (continuous).

    :raises WriterBusyError: another live writer holds the stream's lease
    :raises WriterFencedError: this writer lost the stream to another one (lease or commit fence)
    """
    lease = lease_for(config, stream, mode)
    lease.acquire()
    try:
        _run(config, stream, mode, lease, spark)
    finally:
        lease.release()


def _run(config: LaketideConfig, stream: StreamConfig, mode: Mode, lease: WriterLease,
         spark: SparkSession | None) -> None:
    from laketide.spark import build_session

    spark = spark or build_session(config, f"laketide-ingest-{stream.name}")
    pool = SqlitePool(spark, config.catalog.name)  # starts the catalog (which leaves a stale connection on SQLite)

    def create_tables() -> None:
        pool.reopen()
        ensure_tables(spark, config, stream)

    sink.retrying(f"creating the tables of stream {stream.name}", create_tables, config.catalog.retry_timeout)
    preflight(config, stream)
    flag = stop_file(stream)
    flag.unlink(missing_ok=True)
    stopping: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.append(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    query = start(spark, config, stream, mode)
    log.info("writer %s started in %s mode: %s -> %s", stream.writer_id, mode, stream.landing_path, stream.table)
    lost = False
    try:
        while not _await(query):
            if not lease.renew():
                lost = True
                log.error("writer %s: another writer took over the stream; stopping now", stream.writer_id)
                query.stop()
                break
            if flag.exists() and not stopping:
                stopping.append(f"stop file {flag}")
            if stopping and not query.status["isTriggerActive"]:
                log.info("stopping between batches (%s)", stopping[0])
                query.stop()
                flag.unlink(missing_ok=True)
                break
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if lost:
        raise WriterFencedError(
            f"writer {stream.writer_id!r} lost its lease to another writer of stream {stream.name!r} (this one "
            "was silent for longer than writer_lease: frozen, cut off or overloaded); it stopped so that only one "
            "writer commits. Nothing is lost: the other writer goes on from the shared checkpoint."
        )
    progress = query.lastProgress
    log.info("writer %s finished; last progress: %s", stream.writer_id, json.dumps(progress or {})[:500])
