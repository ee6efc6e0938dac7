"""Spark column expressions the parse and the rejects share: the stream's record schema and timestamp rule, a
line's size checks, and what a rejected line's staged row carries (``pack_reject``), a long line's cut.

Pure functions of a stream's configuration and of columns; ``transforms`` builds the parse on them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from laketide.config import StreamConfig

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType, StructType

CORRUPT = "_corrupt_record"
#: a byte order mark: JSON Lines is UTF-8 without one (a line starting with it is rejected, with this reason)
BOM = "\ufeff"
LANDED_AT = "_landed_at"
#: the landing file's size in bytes (``_metadata.file_size``): read by the public commit path only
SOURCE_SIZE = "_source_size"
#: what Spark's JSON reader allows by default and JSON does not: single-quoted strings, and NaN and Infinity as numbers
#: (Python's json.dumps writes them), which a long field read as null and a string field as text
STRICT_JSON = {"allowSingleQuotes": "false", "allowNonNumericNumbers": "false"}
#: characters of an over-long line kept in the rejects table's ``raw`` (the landing file keeps the whole line)
RAW_PREFIX_CHARS = 1024
#: the time of day of a timestamp value: minutes, optional seconds, optional fraction (1 to 9 digits)
CLOCK = "HH:mm[:ss[.SSSSSSSSS]]"
TIMESTAMP_EXAMPLE = "2026-11-22T03:15:07.123Z"
#: separates the parts of a rejected line's staged ``_source_file`` (see ``Validator.staged_rows``): no path holds it
PACK_SEPARATOR = "\u0000"
EXTRA_SQL_TYPE = "map<string,string>"


def spark_type(kind: str) -> DataType:
    """The Spark type of a field type of the configuration (``FieldSpec.type``)."""
    from pyspark.sql import types as T

    return {
        "string": T.StringType(), "long": T.LongType(), "int": T.IntegerType(), "float": T.FloatType(),
        "double": T.DoubleType(), "boolean": T.BooleanType(), "timestamp": T.TimestampType(),
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
    return _parameter(f"CAST({int(value)} AS BIGINT)")


def time_parameter(value: datetime) -> Column:
    """``value`` (an aware datetime) as a timestamp column kept out of the generated code, as :func:`batch_parameter`
    (the time a batch's rejects are recorded at changes with every batch)."""
    micros = (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return _parameter(f"timestamp_micros({micros})")


def _parameter(sql: str) -> Column:
    from pyspark.sql import functions as F

    return F.expr(f"array({sql})[spark_partition_id() * 0]")


def human(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0 and seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def object_opens(raw: Column) -> Column:
    """The line opens a JSON object, maybe after whitespace (only lines not starting with "{" pay the trim)."""
    from pyspark.sql import functions as F

    return raw.startswith("{") | F.ltrim(raw).startswith("{")


def one_object(raw: Column) -> Column:
    """The line holds one JSON value and nothing after it but whitespace (strict JSON Lines; Spark's JSON reader
    reads the first value of a line and ignores what follows it: ``{...} xyz``, ``{...}}``, ``{...}{...}``).

    Asked only of a line the reader parsed as an object. Cheap when the line's only ``}`` is its last byte (a
    flat record: the object closes there and nothing follows). Otherwise two wrappers decide: ``[`` line ``]``
    must be an array of exactly one value, and ``{"x":`` line ``}`` an object of exactly one key; a line that
    closes one wrapper early (``{...}]...`` or ``{...}}...``) breaks the other.

    The cheap test works on bytes: ``}`` is one byte in UTF-8 and never part of a longer sequence, so "no ``}``
    among the line's bytes but the last" is exact. It is the one test every valid line pays, so it is written
    with the functions whose loops cost least per line: a byte ``contains`` and copies of the line's bytes.
    Spark's ``instr`` and ``length`` count characters, one call per character, and made the writer's whole
    validation cost more than its parse."""
    from pyspark.sql import functions as F

    body = raw.cast("binary").substr(F.lit(1), F.octet_length(raw) - 1)  # every byte but the last
    flat = raw.endswith("}") & ~body.cast("string").contains("}")
    array = F.json_array_length(F.concat(F.lit("["), raw, F.lit("]"))) == 1
    keyed = F.size(F.json_object_keys(F.concat(F.lit('{"x":'), raw, F.lit("}")))) == 1
    return F.when(flat, F.lit(True)).otherwise(F.coalesce(array & keyed, F.lit(False)))


def not_utf8(raw: Column) -> Column:
    """The line is not valid UTF-8: re-encoding it through a Java string changes it.

    Spark's text source keeps a line's bytes as they are; decoding them replaces an invalid sequence with U+FFFD,
    and the JSON reader reads the line decoded, so a value it returns cannot tell. Every line is tested: the JVM
    decodes and encodes ASCII text with vectorised loops, and the test costs about 1 % of the validation. (Testing
    only lines with a string value holding U+FFFD let invalid bytes through in a key, or in a field the stream does
    not name, which ``unknown_fields: keep`` then stored repaired.)"""
    from pyspark.sql import functions as F

    return raw.cast("binary") != F.encode(raw, "UTF-8")


#: a JSON escape of one half of a surrogate pair without the other (``\\ud800`` alone, or ``\\udc00`` after no high
#: half), itself escaped by no backslash: the ``\\`` pairs before it are escaped backslashes
LONE_SURROGATE = (r"(?<!\\)(?:\\\\)*(?:\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                  r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2})")
LONE_SURROGATE_REASON = ("a string holds an unpaired surrogate escape (\\uD800-\\uDFFF), which is no character: "
                         "escape a character above U+FFFF as a pair, or write it as UTF-8")


def lone_surrogate(raw: Column) -> Column:
    """The line holds a JSON escape of half a surrogate pair alone (``"\\ud800x"``): valid JSON syntax, but no
    character. Spark reads the string into a Java string and stores it as UTF-8, where the lone half becomes ``?``:
    the value would be stored changed, so the line is rejected (I-JSON, RFC 7493, forbids it too). The pattern is
    matched only on a line holding ``\\u`` at all: a byte search every line pays (about 1 % of the validation)."""
    return raw.contains("\\u") & raw.rlike(LONE_SURROGATE)


def fits(raw: Column, stream: StreamConfig) -> Column:
    """The line is at most ``max_line_bytes`` long.

    Bytes, not characters: the text source keeps each line as UTF-8 bytes (Spark's UTF8String), whose byte
    length is a stored field (``octet_length``: one comparison per line) while its length in characters
    (``length``) takes a pass over the line. Bytes are also what a line costs in memory and on disk."""
    from pyspark.sql import functions as F

    return F.octet_length(raw) <= F.lit(stream.max_line_bytes)


def too_long_reason(raw: Column, stream: StreamConfig, length: Column | None = None) -> Column:
    """Why a line over ``max_line_bytes`` is rejected; ``length``: its length in bytes, when ``raw`` holds only its
    start (``long_lines``)."""
    from pyspark.sql import functions as F

    return F.concat(
        F.lit("line of "), (F.octet_length(raw) if length is None else length).cast("string"),
        F.lit(f" bytes exceeds max_line_bytes ({stream.max_line_bytes})"),
    )


def pack_reject(source: Column, raw: Column, reason: Column, stream: StreamConfig) -> Column:
    """What a rejected line's staged row carries in ``_source_file``: its landing file, its length in bytes, the line
    itself as base64 (exact bytes, valid UTF-8 or not; a line over ``max_line_bytes`` cut as the rejects table keeps
    it) and the reason it was rejected, joined by NUL, a character no path, number or base64 text holds (the reason,
    last, may: it quotes the line's field names).

    The rows of rejected lines are written to data files of the events table's null hour partition, never
    committed: the rejects pass reads them back (``Validator.rejects_of``) instead of reading the whole batch
    again, and takes everything from them, so its cost follows the number of rejects and it parses nothing.
    Evaluated for rejected lines only."""
    from pyspark.sql import functions as F

    kept = F.when(fits(raw, stream), raw).otherwise(truncated(raw))
    return F.concat_ws(PACK_SEPARATOR, source, F.octet_length(raw).cast("string"), F.base64(kept.cast("binary")),
                       reason)


def truncated(raw: Column, length: Column | None = None) -> Column:
    """A line over ``max_line_bytes`` as the rejects table keeps it: its start and a marker with its length
    (``length``, when ``raw`` holds only the line's start: ``long_lines``)."""
    from pyspark.sql import functions as F

    return F.concat(
        F.substring(raw, 1, RAW_PREFIX_CHARS),
        F.lit(" ... [truncated: "), (F.octet_length(raw) if length is None else length).cast("string"),
        F.lit(" bytes in the source file]"),
    )
