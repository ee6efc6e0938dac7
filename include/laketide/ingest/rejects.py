"""The rejects table's rows: a rejected line as valid UTF-8 text (and its exact bytes), its reason, its landing file
and that file's hour. Pure DataFrame -> DataFrame functions on the output of ``transforms.Validator.check`` or
``Validator.rejects_of``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from laketide.config import StreamConfig
from laketide.ingest.columns import batch_parameter, fits, time_parameter, truncated

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


#: the hour of a landing file from its name (``landing.FILE_NAME``, a hidden name's prefix ignored), as Java regex
FILE_HOUR_PATTERN = r"^[_.]*(\d{8}T\d{2})-[A-Za-z0-9_.-]+-\d{8,}-[0-9a-f]{8}\.jsonl$"


def file_hour(source_file: Column, audit_hours: Mapping[str, str] | None = None) -> Column:
    """The hour of a landing file (the contract's file hour) as a timestamp column: from its name, else from
    ``audit_hours`` (file name -> partition key, read from the audit records of files named otherwise), else null.
    """
    from pyspark.sql import functions as F

    by_name = F.to_timestamp(F.regexp_extract(source_file, FILE_HOUR_PATTERN, 1), "yyyyMMdd'T'HH")
    known = {name: datetime.fromisoformat(hour) for name, hour in (audit_hours or {}).items()}
    if not known:
        return by_name
    by_audit = F.create_map(*[x for name, hour in sorted(known.items()) for x in (F.lit(name), F.lit(hour))])
    return F.coalesce(by_name, by_audit[source_file])


def valid_text(raw: Column) -> tuple[Column, Column]:
    """``raw`` as valid UTF-8 text (an invalid byte sequence replaced by U+FFFD), and its exact bytes when they are
    not valid UTF-8 (null when the text holds them exactly): what the rejects table keeps of a line, so that every
    reader can read it and nothing is lost."""
    from pyspark.sql import functions as F

    invalid = raw.cast("binary") != F.encode(raw, "UTF-8")
    return (F.when(invalid, F.decode(F.encode(raw, "UTF-8"), "UTF-8")).otherwise(raw),
            F.when(invalid, raw.cast("binary")))


def rejected_rows(parsed: DataFrame, stream: StreamConfig, batch_id: int, now: datetime,
                  audit_hours: Mapping[str, str] | None = None) -> DataFrame:
    """Rows for the rejects table: the raw line (as valid UTF-8 text in ``raw``, and its exact bytes in
    ``raw_bytes`` when it is not valid UTF-8), the reason, where it came from, and the hour of its landing file
    (``event_hour``: the contract's file hour, from the file's name or audit record; see :func:`file_hour`). A
    reject's bad value stays in its raw line: an absurd event time never gives it an absurd hour.

    A line longer than ``max_line_bytes`` keeps only its first ``RAW_PREFIX_CHARS`` characters and a marker
    with its length in ``raw`` (no hour is read from it): the rows never hold more than that, so the
    rejects pass (it caches these rows) and the rejects table stay small whatever lands."""
    from pyspark.sql import functions as F

    raw, short = F.col("_raw"), fits(F.col("_raw"), stream)
    if "_truncated" in parsed.columns:  # rows of ``Validator.rejects_of``: an over-long line is already cut
        short = short | F.col("_truncated")
    # a line over max_line_bytes keeps its start and a marker; the landing file keeps the whole line
    text, exact = valid_text(F.when(short, raw).otherwise(truncated(raw)))
    return parsed.where(F.col("_error").isNotNull()).select(
        text.alias("raw"),
        exact.alias("raw_bytes"),
        F.col("_error").alias("reason"),
        F.col("_source_file").alias("source_file"),
        file_hour(F.col("_source_file"), audit_hours).alias("event_hour"),
        batch_parameter(batch_id).alias("batch_id"),
        F.lit(stream.writer_id).alias("writer_id"),
        time_parameter(now).alias("rejected_at"),
    )
