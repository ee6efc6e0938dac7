"""The writer process: read the landing zone as a stream, hold the stream's lease, run until done or asked to
stop (signal or stop file), and turn failures into one clear error.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import WriterFencedError
from laketide.ingest import long_lines
from laketide.ingest.landing import DATA_SUFFIX, data_dir
from laketide.ingest.late_files import file_source_options
from laketide.lake import commits
from laketide.lake.catalog import load_catalog
from laketide.lake.lease import WriterLease, engine_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

from laketide.ingest.columns import LANDED_AT, SOURCE_SIZE
from laketide.ingest.merge_sink import UpsertWriter
from laketide.ingest.writer import BatchWriter

log = logging.getLogger("laketide.ingest.runner")

Mode = Literal["continuous", "incremental"]
#: how the operating system says a disk is full (ENOSPC), in a Java or Python error's text
DISK_FULL = "No space left on device"


def extract(spark: SparkSession, stream: StreamConfig, sizes: bool = False) -> DataFrame:
    """Landing data files as a stream of lines with their file's name and modification (landing) time, and
    with ``sizes`` its size (the public commit path records it from there). Hadoop's line reader skips a line
    much longer than ``max_line_bytes`` without holding it (``long_lines.reader_options``): the writer finds and
    rejects such lines itself (``laketide.ingest.long_lines``)."""
    from pyspark.sql import functions as F

    folder = data_dir(stream.landing_path)
    folder.mkdir(parents=True, exist_ok=True)
    columns = [F.col("value"), F.col("_metadata.file_name").alias("_source_file"),
               F.col("_metadata.file_modification_time").alias(LANDED_AT)]
    if sizes:
        columns.append(F.col("_metadata.file_size").alias(SOURCE_SIZE))
    lines = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", stream.max_files_per_trigger)
        .option("pathGlobFilter", f"*{DATA_SUFFIX}")
        .options(**file_source_options(stream))
        .options(**long_lines.reader_options(stream))
        .load(str(folder))
        .select(*columns)
    )
    if stream.upsert is not None and stream.upsert.format == "debezium":  # read as the flat change lines
        from laketide.ingest.debezium import flat_line

        lines = lines.withColumn("value", flat_line(F.col("value"), stream))
    return lines


def preflight(config: LaketideConfig, stream: StreamConfig) -> None:
    """Refuse to start when checkpoint and table disagree (see ``commits.check_checkpoint``)."""
    marker = commits.table_marker(load_catalog(config.catalog), stream.table, stream.writer_id)
    state = commits.read_checkpoint(stream.checkpoint_path)
    commits.check_checkpoint(stream.table, stream.writer_id, stream.checkpoint_path, state, marker, stream.name)


def stop_file(stream: StreamConfig) -> Path:
    """Create this file to ask a running writer to stop between batches."""
    return stream.checkpoint_path.parent / f"{stream.name}.stop"


def start(spark: SparkSession, config: LaketideConfig, stream: StreamConfig, mode: Mode,
          commit_path: str = "internal", summary: dict[str, str] | None = None) -> StreamingQuery:
    writer = (
        extract(spark, stream, sizes=commit_path == "public").writeStream
        .foreachBatch((UpsertWriter if stream.upsert else BatchWriter)(config, stream, commit_path, summary))
        .option("checkpointLocation", str(stream.checkpoint_path))
        .queryName(f"laketide-{stream.name}")
    )
    if mode == "incremental":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(stream.trigger_interval.total_seconds())} seconds")
    return writer.start()


def translate(exc: BaseException) -> Exception:
    """A failure Spark hands back from a stream's batch function (as text, in a ``StreamingQueryException``) as the
    laketide error it was, so the caller sees one clear message, not a Java stack; other errors as they are."""
    from laketide.errors import CatalogUnavailableError, CheckpointMismatchError, StorageFullError

    text = str(exc)
    for error in (WriterFencedError, CatalogUnavailableError, CheckpointMismatchError):
        marker = f"{error.__module__}.{error.__name__}: "
        if marker in text:
            return error(text.split(marker, 1)[1].splitlines()[0])
    if DISK_FULL in text:
        return StorageFullError(
            "a disk the writer writes to is full (No space left on device: the warehouse, the checkpoint or "
            "Spark's temporary folder). Nothing of the unfinished batch is committed; free space and start "
            "the writer again: it replays that batch.")
    return exc if isinstance(exc, Exception) else RuntimeError(text)


def _await(query: StreamingQuery) -> bool:
    """``query.awaitTermination(1)``, its failure as the laketide error it was (:func:`translate`)."""
    try:
        return bool(query.awaitTermination(1))
    except Exception as exc:
        error = translate(exc)
        if error is exc:
            raise
        raise error from exc


def lease_for(config: LaketideConfig, stream: StreamConfig, mode: Mode) -> WriterLease:
    """The lease of ``stream``'s writer id (see ``laketide.lake.lease``), with what to do when it is held."""
    hint = (f"If it is the continuous writer of the laketide_ingest_{stream.writer_group} DAG, it already ingests "
            f"everything that lands; to run a one-off ingestion instead, pause that DAG or create the stop file "
            f"{stop_file(stream)}, then try again. If that process is dead, its lease expires "
            f"{int(stream.writer_lease.total_seconds())}s after its last heartbeat (writer_lease).")
    return WriterLease(engine_for(config.catalog), stream.writer_id, stream.writer_lease, mode, hint)
