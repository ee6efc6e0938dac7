"""Benchmark: a table built by many small micro-batches, before and after maintenance, in one run.

1. An events table (the writer's DDL, ``tables.ensure_tables``) receives ``--batches`` small appends through
   pyiceberg, each carrying the writer's markers (writer id, batch id) like a micro-batch: one data file per
   batch, one manifest per batch, one snapshot per batch, spread over ``--hours`` hours.
2. Every hour but the last is recorded closed in the status table.
3. Before and after one maintenance run (``laketide.maintain``: rewrite_data_files of the closed hours,
   rewrite_manifests, expire_snapshots with the default policy, the clock two days ahead so that the history is
   past retention), measured: data files, files per closed hour, manifests, snapshots, metadata file size;
   the time of a full-table aggregate and of one closed hour's count (Spark SQL), of pyiceberg ``load_table`` +
   scan planning, and of a partition status check (``partitions.check_partition``, metadata only).

Prints the figures and the before/after ratios. Targets: <= 2 data files per closed hour; the hour's count and
the planning >= 5x faster; metadata size after expiry independent of the table's age.

    .venv/bin/python bench/bench_maintain.py [--batches 1000] [--hours 6] [--rows 40] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from laketide.close.partitions import State, check_partition  # noqa: E402
from laketide.close.status import StatusRecord, record  # noqa: E402
from laketide.lake.catalog import load_catalog  # noqa: E402
from laketide.lake.commits import BATCH_ID, WATERMARK, WRITER_ID  # noqa: E402
from laketide.maintain import plan  # noqa: E402
from laketide.maintain.health import file_counts, table_stats  # noqa: E402
from laketide.maintain.job import Maintainer  # noqa: E402
from tests.helpers import load, write_config  # noqa: E402


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build(table: Any, stream: Any, start: datetime, batches: int, hours: int, rows: int) -> None:
    import pyarrow as pa

    schema = table.schema().as_arrow()
    for b in range(batches):
        hour = start + timedelta(hours=b * hours // batches)
        events = [{
            "event_id": f"e{b}-{i}", "event_time": hour + timedelta(seconds=(b * 7 + i) % 3600), "user_id": i,
            "page": "/p", "action": "view", "duration_ms": i, "country": "NL", "_source_file": f"f{b}",
            "_batch_id": b,
        } for i in range(rows)]
        props = {WRITER_ID: stream.writer_id, BATCH_ID: str(b), WATERMARK: events[-1]["event_time"].isoformat()}
        table.append(pa.Table.from_pylist(events, schema=schema), snapshot_properties=props)
        if (b + 1) % 250 == 0:
            print(f"  {b + 1} batches appended", flush=True)


def measure(config: Any, spark: Any, stream: Any, closed: list[datetime], repeat: int) -> dict[str, float]:
    catalog = load_catalog(config.catalog)
    name = f"{config.catalog.name}.{stream.table}"
    table = catalog.load_table(stream.table)
    stats = table_stats(table)
    counts = file_counts(table)
    hour = closed[len(closed) // 2]
    lo, hi = hour.strftime("%Y-%m-%d %H:%M:%S"), (hour + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")
    spark.sql(f"REFRESH TABLE {name}")
    return {
        "data files": stats.files,
        "max files per closed hour": max(counts.get(h, 0) for h in closed),
        "manifests": stats.manifests,
        "snapshots": stats.snapshots,
        "metadata bytes": stats.metadata_bytes,
        "full aggregate s": median_time(lambda: spark.sql(
            f"SELECT date_trunc('hour', event_time), count(*), sum(duration_ms) FROM {name} GROUP BY 1").collect(),
            repeat),
        "closed hour count s": median_time(lambda: spark.sql(
            f"SELECT count(*) FROM {name} WHERE event_time >= TIMESTAMP '{lo}' AND event_time < TIMESTAMP '{hi}'"
        ).collect(), repeat),
        "load_table + plan s": median_time(
            lambda: list(catalog.load_table(stream.table).scan().plan_files()), repeat),
        "status check s": median_time(lambda: check_partition(config, stream, closed[-1]), repeat),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from laketide.ingest.tables import ensure_tables
    from laketide.lake.spark import build_session

    home = Path(tempfile.mkdtemp(prefix="laketide-bench-maintain-"))
    config = load(write_config(home))
    stream = config.stream("clicks")
    spark = build_session(config, "laketide-bench-maintain", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    ensure_tables(spark, config, stream)
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=args.hours + 2)
    table = load_catalog(config.catalog).load_table(stream.table)
    print(f"building {args.batches} micro-batches over {args.hours} hours in {home}", flush=True)
    t0 = time.perf_counter()
    build(table, stream, start, args.batches, args.hours, args.rows)
    print(f"  built in {time.perf_counter() - t0:.0f}s", flush=True)
    closed = [start + timedelta(hours=h) for h in range(args.hours - 1)]
    record(config, *(StatusRecord(stream.name, h, State.CLOSED, run_id="bench") for h in closed))

    before = measure(config, spark, stream, closed, args.repeat)
    request = plan.validate_request(config, stream.table, "rewrite_data_files,rewrite_manifests,expire_snapshots")
    t0 = time.perf_counter()
    done = Maintainer(config, spark, "bench", now=lambda: datetime.now(UTC) + timedelta(days=2)).run(request)
    took = time.perf_counter() - t0
    for rec in done:
        print(f"  {rec.line()}")
    after = measure(config, spark, stream, closed, args.repeat)

    print(f"\nmaintenance run: {took:.1f}s")
    print(f"{'':<28} {'before':>12} {'after':>12} {'before/after':>13}")
    for key in before:
        b, a = before[key], after[key]
        fmt = (lambda v: f"{v:12.4f}") if key.endswith(" s") else (lambda v: f"{v:12.0f}")
        print(f"{key:<28} {fmt(b)} {fmt(a)} {b / a if a else float('inf'):12.1f}x")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
