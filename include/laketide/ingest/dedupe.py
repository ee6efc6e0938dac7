"""Write-time dedupe (``dedupe_on_write``): the writer drops an event whose id its hour already holds.

Opt-in per stream, for producers known to re-send. A valid event is a duplicate when its event id is already in
the events table for the event's hour (at the snapshot the batch builds on), or when an earlier line of the same
batch holds it (the first by landing file name, then by content). Duplicates are not committed: their staged
rows are moved to the null hour partition, like rejected lines, with a null ``_batch_id`` that tells them apart
(the writer counts them from the files' null counts and deletes those files). Their number per hour goes into
the commit's summary (``laketide.duplicates-dropped``): the producers' audit records still count those lines,
so verification and reconciliation expect audit = lake + rejects + duplicates dropped.

Cost: the batch's hours are collected first (one pass over the batch), the table's ids of those hours are read
(partition-pruned), and the batch is joined with them and ranked within itself (a shuffle); the marked rows are
kept in memory for the write and the count of duplicates per hour. ``bench/bench_dedupe.py`` measures it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from laketide.config import StreamConfig

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

HOUR_KEY = "_hour_key"


def hour_key(column: Column) -> Column:
    """The partition key (``partition_key``) of a timestamp column, as a Spark column (session time zone
    UTC): ``2026-11-22T03:00:00+00:00``."""
    from pyspark.sql import functions as F

    return F.date_format(F.date_trunc("hour", column), "yyyy-MM-dd'T'HH:00:00+00:00")


def mark(staged: DataFrame, stream: StreamConfig, existing: DataFrame | None) -> DataFrame:
    """``staged`` (``Validator.staged_rows``) with each duplicate's event time and ``_batch_id`` set to null
    (it joins the null hour partition) and a column ``_hour_key`` holding the hour of every duplicate (null for
    the other rows).

    :param existing: the events table's rows of the batch's hours (at least the event id and event time), or
        None when the table holds none
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    id_field, time_field = stream.event_id_field, stream.event_time_field
    event_id, event_time = F.col(f"`{id_field}`"), F.col(f"`{time_field}`")
    rows = staged.withColumn("_h", hour_key(event_time))
    if existing is not None:
        seen = (existing.select(event_id.alias("_seen_id"), hour_key(event_time).alias("_seen_h")).distinct()
                .withColumn("_seen", F.lit(True)))
        rows = rows.join(seen, (event_id == F.col("_seen_id")) & (F.col("_h") == F.col("_seen_h")), "left")
    else:
        rows = rows.withColumn("_seen", F.lit(None).cast("boolean"))
    # the first by landing file name, then by the fields themselves (plain column comparisons: no per-row JSON)
    order = [F.col("_source_file").asc_nulls_last(), *[F.col(f"`{c}`").asc_nulls_last() for c in stream.fields]]
    first = Window.partitionBy(event_id, F.col("_h")).orderBy(*order)
    duplicate = (event_time.isNotNull() & event_id.isNotNull()
                 & (F.col("_seen").isNotNull() | (F.row_number().over(first) > 1)))
    rows = rows.withColumn("_dup", duplicate)
    return rows.select(
        *[(F.when(F.col("_dup"), F.lit(None)).otherwise(event_time) if n == time_field else F.col(f"`{n}`")).alias(n)
          for n in stream.fields],
        "_source_file",
        F.when(F.col("_dup"), F.lit(None).cast("bigint")).otherwise(F.col("_batch_id")).alias("_batch_id"),
        F.when(F.col("_dup"), F.col("_h")).alias(HOUR_KEY),
    )


def batch_hours(staged: DataFrame, stream: StreamConfig) -> list[Any]:
    """The hour starts (as Spark returns them) of the batch's valid rows: one pass over the batch."""
    from pyspark.sql import functions as F

    event_time = F.col(f"`{stream.event_time_field}`")
    return [r[0] for r in staged.where(event_time.isNotNull()).select(F.date_trunc("hour", event_time)).distinct()
            .collect()]


def dropped_per_hour(marked: DataFrame) -> dict[str, int]:
    """Duplicates per hour of :func:`mark`'s output."""
    from pyspark.sql import functions as F

    rows = marked.where(F.col(HOUR_KEY).isNotNull()).groupBy(HOUR_KEY).count().collect()
    return {r[0]: int(r[1]) for r in rows}
