"""Benchmark: tables built by many small micro-batches, before and after maintenance, in one run.

For each history length in ``--batches`` (default 1000 and 3000), in one Spark session:

1. A fresh events table (the writer's DDL, ``tables.ensure_tables``) receives that many small writer commits
   (``laketide.dev.history``: real Iceberg fast appends made with the Java API, each one data file of
   ``--rows`` events in one hour, one new manifest, one snapshot carrying the writer's markers), spread over
   ``--hours`` hours.
2. Every hour but the last is recorded closed in the status table.
3. Before and after one maintenance run (``laketide.maintain``: rewrite_data_files of the closed hours,
   rewrite_manifests, expire_snapshots with the default policy, the clock two days ahead so that the history is
   past retention), measured: data files, files per closed hour, manifests, snapshots, metadata file size;
   the time of a full-table aggregate and of one closed hour's count (Spark SQL), of pyiceberg ``load_table`` +
   scan planning, and of a partition status check (``partitions.check_partition``, metadata only).

Prints the figures and the before/after ratios per history, then the metadata size of the longest history
over the shortest's, before and after maintenance. Targets: <= 2 data files per closed hour; the hour's count
and the planning >= 5x faster; metadata size after expiry independent of the table's age (the ratio ~1.0).

    .venv/bin/python bench/bench_maintain.py [--batches 1000,3000] [--hours 6] [--rows 40] [--repeat 5]
        [--driver-memory 4g]
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


def bench_one(spark: Any, home: Path, batches: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Build one history of ``batches`` commits in its own catalog, maintain it, measure before and after."""
    from laketide.dev.history import build_history
    from laketide.ingest.tables import ensure_tables
    from laketide.lake.spark import use_catalog

    home.mkdir(parents=True)
    config = load(write_config(home, catalog_name=f"bench{batches}"))
    use_catalog(spark, config)  # this history's catalog, in the one session
    stream = config.stream("clicks")
    ensure_tables(spark, config, stream)
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=args.hours + 2)
    hours = [start + timedelta(hours=h) for h in range(args.hours)]
    print(f"building {batches} micro-batches over {args.hours} hours in {home}", flush=True)
    t0 = time.perf_counter()
    build_history(config, spark, stream, batches, hours, rows=args.rows,
                  progress=lambda n: print(f"  {n} commits", flush=True) if n % 500 == 0 else None)
    print(f"  built in {time.perf_counter() - t0:.0f}s", flush=True)
    closed = hours[:-1]
    record(config, *(StatusRecord(stream.name, h, State.CLOSED, run_id="bench") for h in closed))

    before = measure(config, spark, stream, closed, args.repeat)
    request = plan.validate_request(config, stream.table, "rewrite_data_files,rewrite_manifests,expire_snapshots")
    t0 = time.perf_counter()
    done = Maintainer(config, spark, "bench", now=lambda: datetime.now(UTC) + timedelta(days=2)).run(request)
    took = time.perf_counter() - t0
    for rec in done:
        print(f"  {rec.line()}")
    after = measure(config, spark, stream, closed, args.repeat)

    print(f"\n{batches} micro-batches, maintenance run: {took:.1f}s")
    print(f"{'':<28} {'before':>12} {'after':>12} {'before/after':>13}")
    for key in before:
        b, a = before[key], after[key]
        print(f"{key:<28} {fmt(key, b)} {fmt(key, a)} {b / a if a else float('inf'):12.1f}x")
    print(flush=True)
    return {"before": before, "after": after}


def fmt(key: str, value: float) -> str:
    return f"{value:12.4f}" if key.endswith(" s") else f"{value:12.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1000,3000", help="history lengths, comma-separated")
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--driver-memory", default="4g",
                        help="the benchmark's Spark driver heap (Spark's default, 1g, ran out at 8,000 commits)")
    args = parser.parse_args()
    lengths = sorted(int(b) for b in args.batches.split(","))

    from laketide.lake.spark import build_session

    home = Path(tempfile.mkdtemp(prefix="laketide-bench-maintain-"))
    spark = build_session(load(write_config(home)), "laketide-bench-maintain", master="local[2]",
                          extra={"spark.driver.memory": args.driver_memory})
    spark.sparkContext.setLogLevel("ERROR")
    results = {n: bench_one(spark, home / f"h{n}", n, args) for n in lengths}
    spark.stop()
    if len(lengths) > 1:
        short, long = results[lengths[0]], results[lengths[-1]]
        print(f"history length {lengths[-1]} over {lengths[0]} micro-batches ({lengths[-1] / lengths[0]:.1f}x):")
        print(f"{'':<28} {'before':>12} {'after':>12}")
        for key in ("metadata bytes", "snapshots", "manifests", "load_table + plan s", "status check s"):
            ratios = [long[when][key] / short[when][key] if short[when][key] else float("inf")
                      for when in ("before", "after")]
            print(f"{key:<28} {ratios[0]:11.2f}x {ratios[1]:11.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
