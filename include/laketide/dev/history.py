"""A long simulated history for tests and benchmarks: thousands of small writer commits, built fast.

Each commit is what one micro-batch of the writer leaves on a stream's events table: one small Parquet data
file in one hour, appended with a fast append (one new manifest per commit, as the writer's own commits), and
the writer's markers in the snapshot summary (writer id, batch id, watermark, event-time range, rows per hour,
source files). They are real Iceberg commits made with Iceberg's Java API, ``chunk`` of them per transaction:
the catalog swap and the metadata file are written once per chunk instead of once per commit, and no Spark job
runs. What this skips is only the writer's micro-batch work, not what the history leaves in the metadata.

Each commit's manifest is written with Iceberg's manifest writer straight to the local disk and appended as a
manifest (the snapshot id inherited at commit, as format 2 does for every fast append); its summary gets the
file size and changed-partition count an appended file would have given it, so the totals are the same. Through
the table's Hadoop file system each Avro file costs two ``chmod`` processes (Hadoop's local file system without
its native library), and each dotted py4j class name a failed class search of the whole class path per package:
2,000 commits 121 -> 96 s alone, most of what is left the manifest lists (each lists every earlier manifest).

Each chunk's Java objects are dropped and Python's garbage collector is run before the next chunk: py4j
proxies caught in reference cycles otherwise keep every transaction's table metadata (thousands of snapshots,
each with its cached manifest list) alive in the driver until the heap runs out.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from laketide.lake.catalog import load_catalog
from laketide.lake.commits import (
    BATCH_ID,
    MAX_EVENT_TIME,
    MIN_EVENT_TIME,
    PARTITION_ROWS,
    SOURCE_FILES,
    WATERMARK,
    WRITER_ID,
)
from laketide.lake.hours import partition_key
from laketide.lake.internals import direct_executor, gateway, iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from laketide.config import LaketideConfig, StreamConfig

#: commits per transaction: the metadata file is written once per chunk; a transaction's snapshots keep their
#: manifest lists in memory until it commits, so a chunk must stay small next to a history of thousands
CHUNK = 100


def build_history(config: LaketideConfig, spark: SparkSession, stream: StreamConfig, commits: int,
                  hours: list[datetime], rows: int = 1, chunk: int = CHUNK,
                  progress: Callable[[int], None] | None = None) -> None:
    """Append ``commits`` small writer commits to ``stream``'s events table (which must exist, empty of this
    history), spread evenly over ``hours`` (whole UTC hours, in order), ``rows`` events each; batch ids 0 to
    ``commits - 1``. The events have the sample stream's fields (``laketide.dev.events``); a field of another
    stream is left null. ``progress`` is called with the number of commits made after each transaction."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if commits < 1 or not hours or rows < 1 or chunk < 1:
        raise ValueError(f"build_history needs commits, hours, rows and chunk >= 1: got {commits}, {len(hours)}, "
                         f"{rows}, {chunk}")
    table = load_catalog(config.catalog).load_table(stream.table)
    schema = table.schema().as_arrow()  # carries the Iceberg field ids, so the files read back by id
    location = Path(urlparse(table.metadata.location).path)
    folder = location / "data" / "history"
    folder.mkdir(parents=True, exist_ok=True)
    jvm, _ = gateway(spark)
    # resolved once: py4j resolves each dotted name level by level, a failed class search of the whole class path
    # for each package ("org", "org.apache", ...), which was a fifth of the JVM's time here when done per commit
    iceberg = jvm.org.apache.iceberg
    data_files, manifest_files, local_files = iceberg.DataFiles, iceberg.ManifestFiles, iceberg.Files
    manifests = location / "metadata"
    executor = direct_executor(spark)
    name = f"{config.catalog.name}.{stream.table}"
    for first in range(0, commits, chunk):
        jtable = iceberg_table(spark, name)
        spec = jtable.spec()
        (field,) = [f.name() for f in spec.fields()]
        txn = jtable.newTransaction()
        for batch in range(first, min(commits, first + chunk)):
            hour = hours[batch * len(hours) // commits]
            times = [hour + timedelta(seconds=(batch * rows + i) % 3600) for i in range(rows)]
            path = folder / f"{batch:06d}.parquet"
            events = [{
                "event_id": f"h{batch}-{i}", "event_time": at, "user_id": i, "page": "/p", "action": "view",
                "duration_ms": i, "country": "NL", "_source_file": f"f{batch}", "_batch_id": batch,
            } for i, at in enumerate(times)]
            pq.write_table(pa.Table.from_pylist([{n: e.get(n) for n in schema.names} for e in events],
                                                schema=schema), path)
            size = path.stat().st_size
            data_file = (data_files.builder(spec).withPath(f"file:{path}")
                         .withFileSizeInBytes(size).withRecordCount(rows).withFormat("PARQUET")
                         .withPartitionPath(f"{field}={int(hour.timestamp()) // 3600}").build())
            # the commit's manifest, written as the writer's fast append writes it (its snapshot id inherited at
            # commit), but straight to the local disk: Hadoop's local file system would start two chmod processes
            manifest = manifest_files.write(table.metadata.format_version, spec,
                                            local_files.localOutput(str(manifests / f"history-{batch:06d}-m0.avro")),
                                            None)
            manifest.add(data_file)
            manifest.close()
            append = txn.newFastAppend().appendManifest(manifest.toManifestFile())
            if executor is not None:  # the manifest list is written in this thread, without the pool's 10 ms polls
                append.scanManifestsWith(executor)
            # what Iceberg's summary of an appended file holds, and an appended manifest's lacks: the totals follow
            summary = {"added-files-size": str(size), "changed-partition-count": "1",
                       **marker_summary(stream, batch, hour, min(times), max(times), rows)}
            for key, value in summary.items():
                append.set(key, value)
            append.commit()
        txn.commitTransaction()
        del jtable, spec, txn, append, data_file, manifest
        gc.collect()
        if progress is not None:
            progress(min(commits, first + chunk))


def marker_summary(stream: StreamConfig, batch: int, hour: datetime, low: datetime, high: datetime,
                   rows: int) -> dict[str, str]:
    """The summary properties the writer puts on a batch's snapshot, for a batch of ``rows`` events of one
    hour between ``low`` and ``high``."""
    return {
        WRITER_ID: stream.writer_id, BATCH_ID: str(batch), WATERMARK: high.isoformat(),
        MIN_EVENT_TIME: low.isoformat(), MAX_EVENT_TIME: high.isoformat(),
        PARTITION_ROWS: json.dumps({partition_key(hour): rows}), SOURCE_FILES: json.dumps([f"f{batch}"]),
    }
