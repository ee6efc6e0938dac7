"""Parse and validate landing lines: pure DataFrame -> DataFrame transforms, one reason per bad line.

``parse_lines`` and :class:`Validator` turn the lines ``runner.extract`` reads into typed rows and reasons;
``rejected_rows`` (``laketide.ingest.rejects``) shapes the rejects table's rows; one line's validity test and reason
are ``laketide.ingest.parsed.Parsed``'s, the column expressions they use are in ``laketide.ingest.columns``. Nothing
here touches a table.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from laketide.config import EXTRA_COLUMN, StreamConfig
from laketide.ingest.columns import (
    EXTRA_SQL_TYPE,
    LANDED_AT,
    PACK_SEPARATOR,
    batch_parameter,
    fits,
    json_options,
    pack_reject,
    record_schema,
)
from laketide.ingest.parsed import Parsed

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


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
