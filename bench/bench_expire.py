"""Benchmark: snapshot expiry with Iceberg's Spark action against its core API, side by side, in one run.

Two events tables in two catalogs of one Spark session receive the same history (``--commits`` small writer
commits, ``laketide.dev.history``). Then, with the same ``older_than`` (the newest commit minus nothing: every
snapshot but the ``--retain`` newest is past it) and ``retain_last``:

* table A: the ``expire_snapshots`` procedure (Iceberg's Spark action: it reads every manifest list and manifest
  before and after the commit in Spark tasks to find the files to delete);
* table B: what the maintenance job runs (``Maintainer._expire``: ``Table.expireSnapshots`` with
  ``cleanExpiredFiles``, Iceberg's core API in the driver).

Prints each one's time, the ratio, the snapshots left, and what is left under each table's location: the same
data files (compared by path) and as many manifests and manifest lists (counted). Run one after the other on a
quiet machine, twice, alternating which goes first (``--repeat``).

    .venv/bin/python bench/bench_expire.py [--commits 1000] [--retain 50] [--repeat 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from laketide.lake.catalog import load_catalog  # noqa: E402
from laketide.lake.hours import timestamp_literal  # noqa: E402
from laketide.maintain.job import Maintainer  # noqa: E402
from tests.helpers import load, write_config  # noqa: E402


def build(spark: Any, home: Path, name: str, commits: int) -> Any:
    from laketide.dev.history import build_history
    from laketide.ingest.tables import ensure_tables
    from laketide.lake.spark import use_catalog

    home.mkdir(parents=True)
    config = load(write_config(home, catalog_name=name))
    use_catalog(spark, config)
    stream = config.stream("clicks")
    ensure_tables(spark, config, stream)
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=6)
    build_history(config, spark, stream, commits, [start + timedelta(hours=h) for h in range(4)])
    return config


def files(config: Any) -> tuple[frozenset[str], int]:
    """The table's data files (relative paths: the same in both histories) and how many Avro metadata files
    (manifests, manifest lists: named by random ids, so counted) lie under its location."""
    location = Path(load_catalog(config.catalog).load_table(config.stream("clicks").table).metadata.location
                    .removeprefix("file:"))
    data = frozenset(str(p.relative_to(location)) for p in (location / "data").rglob("*.parquet"))
    return data, sum(1 for _ in (location / "metadata").glob("*.avro"))


def expire(spark: Any, config: Any, how: str, retain: int) -> tuple[float, int]:
    table = config.stream("clicks").table
    snapshots = load_catalog(config.catalog).load_table(table).metadata.snapshots
    older_than = max(s.timestamp_ms for s in snapshots) + 1
    t0 = time.perf_counter()
    if how == "action":
        spark.sql(f"CALL {config.catalog.name}.system.expire_snapshots(table => '{config.catalog.name}.{table}', "
                  f"older_than => {timestamp_literal(older_than)}, retain_last => {retain})").collect()
    else:
        Maintainer(config, spark, "bench")._expire(table, older_than, retain)
    took = time.perf_counter() - t0
    return took, len(load_catalog(config.catalog).load_table(table).metadata.snapshots)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--retain", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    from laketide.lake.spark import build_session

    home = Path(tempfile.mkdtemp(prefix="laketide-bench-expire-"))
    spark = build_session(load(write_config(home)), "laketide-bench-expire", master="local[2]",
                          extra={"spark.driver.memory": "4g", "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    for round_ in range(args.repeat):
        order = ["action", "core"] if round_ % 2 == 0 else ["core", "action"]
        configs = {how: build(spark, home / f"r{round_}-{how}", f"exp{round_}{how}", args.commits) for how in order}
        before = {how: files(c) for how, c in configs.items()}
        assert before["action"] == before["core"], "the two histories differ"
        took = {}
        for how in order:
            took[how], left = expire(spark, configs[how], how, args.retain)
            print(f"round {round_ + 1}: {how:<6} {took[how]:7.1f} s, {args.commits} -> {left} snapshots", flush=True)
        after = {how: files(c) for how, c in configs.items()}
        same = after["action"] == after["core"]
        print(f"round {round_ + 1}: action / core = {took['action'] / took['core']:.1f}x; data files "
              f"{len(before['core'][0])} -> action {len(after['action'][0])}, core {len(after['core'][0])}; Avro "
              f"metadata files {before['core'][1]} -> action {after['action'][1]}, core {after['core'][1]}; "
              f"{'the same left' if same else 'DIFFERENT'}", flush=True)
        if not same:
            print("  data only after action:", sorted(after["action"][0] - after["core"][0])[:10])
            print("  data only after core:", sorted(after["core"][0] - after["action"][0])[:10])
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
