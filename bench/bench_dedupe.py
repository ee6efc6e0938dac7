"""Benchmark: the cost of write-time dedupe (``dedupe_on_write``) on laketide's writer.

The same landed input (valid events, ``bench_writers.generate``) is ingested by the real writer
(``laketide.ingest.runner.start``, ``availableNow``) into fresh tables, in ONE process and ONE SparkSession
(``local[2]``), with ``dedupe_on_write`` off and on, in alternating order over the rounds after one warm-up
run of each. Wall time is from ``start()`` to the end of ``awaitTermination()``; rows/s is input rows /
seconds. The input holds no duplicate, so both runs must commit every row (checked): what is measured is the
price of looking, which every batch pays (collect the batch's hours, read the table's ids of those hours,
join and rank, count the drops). The last line prints the ratio of the medians, on / off.

Run from the repository root::

    .venv/bin/python bench/bench_dedupe.py                      # 400,000 events in 40 files, 2 rounds
    .venv/bin/python bench/bench_dedupe.py --events 100000 --files 20 --rounds 1
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_writers import generate, landed_lines

from laketide.config import StreamConfig
from laketide.ingest import runner, tables
from tests.helpers import load, write_config

MODES = ("off", "on")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--files-per-trigger", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from laketide.lake.spark import build_session

    workdir = Path(tempfile.mkdtemp(prefix="laketide-bench-dedupe-"))
    spark = None
    try:
        config = load(write_config(workdir / "home", max_files_per_trigger=args.files_per_trigger))
        settings = config.spark.model_copy(update={"conf": {**config.spark.conf,
                                                            "spark.ui.showConsoleProgress": "false"}})
        config = config.model_copy(update={"spark": settings})
        base = config.streams[0]
        main_input, warm_input = workdir / "input" / "landing", workdir / "warmup" / "landing"
        generate(main_input, args.events, args.files, base.name)
        generate(warm_input, 20_000, 4, base.name, seed=11)
        rows, warm_rows = landed_lines(main_input), landed_lines(warm_input)
        spark = build_session(config, "laketide-bench-dedupe", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        print(f"Spark {spark.version}, {spark.sparkContext.master}; {rows:,} events in {args.files} files, "
              f"maxFilesPerTrigger {args.files_per_trigger}, {args.rounds} round(s)", flush=True)

        def run(mode: str, tag: str, landing_path: Path, lines: int) -> float:
            folder = workdir / "runs" / f"{tag}-{mode}"
            stream = StreamConfig.model_validate({
                **base.model_dump(), "landing_path": landing_path, "checkpoint_path": folder / "checkpoint",
                "table": f"bench.dedupe_{tag}_{mode}", "rejects_table": f"bench.dedupe_rejects_{tag}_{mode}",
                "writer_id": f"bench-{tag}-{mode}", "dedupe_on_write": mode == "on",
            })
            tables.ensure_tables(spark, config, stream)
            spark.catalog.clearCache()
            started = time.perf_counter()
            query = runner.start(spark, config, stream, "incremental")
            query.awaitTermination()
            seconds = time.perf_counter() - started
            if query.exception() is not None:
                raise RuntimeError(f"{tag} {mode} failed: {query.exception()}")
            committed = spark.table(f"{config.catalog.name}.{stream.table}").count()
            if committed != lines:
                raise AssertionError(f"{tag} {mode}: {committed:,} rows committed, {lines:,} landed")
            print(f"  {tag:>7} dedupe {mode:<3} {seconds:7.1f}s {lines / seconds:>11,.0f} rows/s", flush=True)
            return lines / seconds

        for mode in MODES:
            run(mode, "warmup", warm_input, warm_rows)
        rates: dict[str, list[float]] = {m: [] for m in MODES}
        for i in range(args.rounds):
            for mode in (MODES if i % 2 == 0 else MODES[::-1]):
                rates[mode].append(run(mode, f"r{i + 1}", main_input, rows))
        off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
        print(f"\n{datetime.now(UTC):%Y-%m-%d %H:%M}Z  dedupe_on_write off {off:,.0f} rows/s, on {on:,.0f} rows/s: "
              f"on/off = {on / off:.2f}x", flush=True)
        return 0
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
