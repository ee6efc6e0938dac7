"""Benchmark: what a year of landing files costs each trigger, with and without the archive of closed hours.

A stream landing a file every 10 s holds 3 million files after a year; laketide never deletes one. What the writer
pays per trigger, and what its status round pays, grows with what ``data/`` holds: Spark's file source lists the
folder at every trigger, and the writer's late-file look (``LateFiles.rescue``, every poll), its figures (the
backlog) and the triggerer's status checks walk it with a ``stat`` per file (``inspection.landed_files``). The archive
(``laketide.close.archive``) moves closed hours' files into ``archive/<hour>/``, out of all three.

For each scale N (``--scales``, default 10,000, 100,000 and 1,000,000 files), this lands N one-event files with
their audit records, ``--per-hour`` to an hour (default 360: one every 10 s), the newest of the current hour, then:

1. **no archive** (every file in ``data/``, as without the archive): in a fresh process with the writer's session
   settings, the time of Spark's listing of ``data/`` (the same file index the stream's source lists with) and of
   one walk (``landed_files``: what the late-file look and the backlog each cost beyond it), medians of
   ``--repeats`` (one at 1,000,000), and the JVM's memory;
2. every hour but the current one recorded closed, and the sweep ``./laketide archive`` runs (``archive_closed``):
   its time and files per second (what migrating an existing landing zone costs);
3. **archive**: the same two looks, now that ``data/`` holds the current hour;
4. **the real writer** (``laketide.ingest.runner.start``, continuous, its own SparkSession, ``--triggers`` batches
   of one new file each after it caught up with the current hour): per trigger, Spark's time outside the batch's
   own write (``triggerExecution - addBatch``: listing, planning, the offset and commit logs) and the listing alone
   (``latestOffset``), medians and maximum; the JVM's and the driver's resident memory at the end.

Run from the repository root::

    .venv/bin/python bench/bench_landing_scale.py                          # 10k, 100k, 1M (about 20 minutes)
    .venv/bin/python bench/bench_landing_scale.py --scales 10000,100000    # a quicker look
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", default="10000,100000,1000000", help="landing files, comma-separated")
    parser.add_argument("--per-hour", type=int, default=360, help="files per hour (360: one every 10 s)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--triggers", type=int, default=12, help="the real writer's batches of one new file")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: the looks (and the writer) in a fresh process
    return parser.parse_args(argv)


def land(landing: Path, files: int, per_hour: int) -> datetime:
    """``files`` one-event files with their audit records (contract names and records; written directly, without
    the contract's fsyncs, to land them fast), ``per_hour`` an hour, the newest in the current hour; their
    modification times spread evenly. Returns the current hour."""
    from bench.bench_seen_files import one_event_file
    from laketide.ingest.landing import audit_dir, data_dir

    data, audits = data_dir(landing), audit_dir(landing)
    data.mkdir(parents=True)
    audits.mkdir(parents=True)
    now = datetime.now(UTC)
    current = now.replace(minute=0, second=0, microsecond=0)
    step = timedelta(hours=1) / per_hour
    newest = min(now - timedelta(seconds=30), current + (files % per_hour or per_hour) * step)
    for i in range(files):
        one_event_file(data, audits, newest - (files - 1 - i) * step, i, "year")
    return current


def timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_one(spec: str) -> None:
    """In a fresh process: the two looks over the landing zone as it is, then (``writer``) the real writer."""
    import psutil

    from bench.bench_seen_files import jvm_rss
    from laketide.ingest.group import WRITER_SETTINGS
    from laketide.ingest.inspection import landed_files
    from laketide.ingest.landing import data_dir, publish
    from laketide.ingest.late_files import LateFiles
    from laketide.lake.spark import build_session
    from tests.helpers import load

    options = json.loads(spec)
    config = load(Path(options["config"]))
    stream = config.stream("clicks")
    spark = build_session(config, "laketide-bench-landing", master="local[2]", extra=WRITER_SETTINGS)
    spark.sparkContext.setLogLevel("ERROR")
    folder = str(data_dir(stream.landing_path))
    repeats = options["repeats"]
    out: dict[str, Any] = {"listed": len(landed_files(stream.landing_path)),
                           "walk_s": timed(lambda: landed_files(stream.landing_path), repeats)}
    try:
        out["spark_list_s"] = timed(lambda: spark.read.format("text").load(folder).inputFiles(), repeats)
    except Exception as exc:
        found = re.search(r"java\.[\w.$]+(?:Error|Exception)[^\n]*", str(exc))
        out["spark_list_error"] = found.group(0) if found else str(exc).splitlines()[0]
    out["jvm_rss"] = jvm_rss(os.getpid())
    if "spark_list_error" in out:
        print(json.dumps(out))
        return
    if options["writer"]:
        from laketide.ingest import runner
        from laketide.ingest.tables import ensure_tables
        from laketide.lake.catalog import load_catalog
        from laketide.lake.commits import source_positions

        def committed() -> int:
            try:
                return len(source_positions(load_catalog(config.catalog).load_table(stream.table)))
            except Exception:
                return 0

        ensure_tables(spark, config, stream)
        query = runner.start(spark, config, stream, "continuous")
        late = LateFiles(stream)
        deadline = time.monotonic() + 600
        while committed() < out["listed"] and time.monotonic() < deadline:
            late.rescue()
            time.sleep(1)
        caught_up = len(query.recentProgress)
        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        for seq in range(options["triggers"]):
            line = json.dumps({"event_id": f"new{seq}", "event_time": datetime.now(UTC).isoformat(), "user_id": 1,
                               "page": "/new"})
            publish(stream.landing_path, [line], hour.isoformat(), "bench", seq, "clicks")
            late.rescue()
            time.sleep(3)
        deadline = time.monotonic() + 120
        while committed() < out["listed"] + options["triggers"] and time.monotonic() < deadline:
            time.sleep(1)
        batches = [p for p in query.recentProgress[caught_up:] if p["numInputRows"] > 0]
        query.stop()
        outside = [(p["durationMs"]["triggerExecution"] - p["durationMs"].get("addBatch", 0)) / 1000 for p in batches]
        listing = [p["durationMs"].get("latestOffset", 0) / 1000 for p in batches]
        out.update({"batches": len(batches), "committed": committed(), "expected": out["listed"] + options["triggers"],
                    "outside_median_s": statistics.median(outside) if outside else None,
                    "outside_max_s": max(outside, default=None),
                    "latest_offset_median_s": statistics.median(listing) if listing else None,
                    "writer_jvm_rss": jvm_rss(os.getpid()), "writer_driver_rss": psutil.Process().memory_info().rss})
    print(json.dumps(out))
    spark.stop()


def looks(config: Path, repeats: int, writer: bool, triggers: int) -> dict[str, Any]:
    from tests.helpers import config_env

    spec = json.dumps({"config": str(config), "repeats": repeats, "writer": writer, "triggers": triggers})
    done = subprocess.run([sys.executable, __file__, "--one", spec], env=config_env(config), capture_output=True,
                          text=True, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
        raise SystemExit(1)
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def close_and_sweep(config_path: Path, current: datetime) -> tuple[float, int]:
    """Every hour of the landing zone but ``current`` recorded closed, then the sweep; its seconds and files moved."""
    from laketide.close.archive import archive_closed
    from laketide.close.status import State, StatusRecord, record
    from laketide.ingest.landing import data_dir, name_hour
    from tests.helpers import load

    config = load(config_path)
    stream = config.stream("clicks")
    hours = {h for p in data_dir(stream.landing_path).iterdir() if (h := name_hour(p.name)) is not None}
    hours.discard(current.isoformat())
    record(config, *(StatusRecord("clicks", datetime.fromisoformat(h), State.CLOSED, rows=0, audit=0, rejects=0,
                                  snapshot_id=None, reason="closed by the benchmark") for h in sorted(hours)))
    t0 = time.perf_counter()
    result = archive_closed(config, stream)
    return time.perf_counter() - t0, sum(result.moved.values())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        run_one(args.one)
        return 0
    from tests.helpers import write_config

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="laketide-bench-landing-"))
    rows = []
    try:
        for n in [int(s) for s in args.scales.split(",")]:
            home = workdir / f"n{n}"
            data = home / "landing" / "data"
            if data.is_dir() and not (home / "landing" / "archive").exists() and \
                    sum(1 for _ in os.scandir(data)) == n:  # landed by an earlier run in this workdir, not swept
                from laketide.ingest.landing import name_hour

                current = datetime.fromisoformat(max(h for e in os.scandir(data) if (h := name_hour(e.name))))
                print(f"{n:,} files landed by an earlier run, reused", flush=True)
            else:
                shutil.rmtree(home, ignore_errors=True)
                t0 = time.perf_counter()
                current = land(home / "landing", n, args.per_hour)
                print(f"{n:,} files landed in {time.perf_counter() - t0:.0f}s", flush=True)
            config = write_config(home, landing_path=str(home / "landing"), trigger_interval="2s",
                                  max_files_per_trigger=400, idle_window="60s")
            repeats = 1 if n >= 1_000_000 else args.repeats
            before = looks(config, repeats, False, 0)
            print(f"  no archive: {before}", flush=True)
            sweep_s, moved = close_and_sweep(config, current)
            print(f"  sweep: {moved:,} files archived in {sweep_s:.1f}s", flush=True)
            after = looks(config, args.repeats, True, args.triggers)
            print(f"  archive: {after}", flush=True)
            ok = after["committed"] == after["expected"] and after["batches"] >= args.triggers // 2
            rows.append({"files": n, "before": before, "sweep_s": sweep_s, "moved": moved, "after": after, "ok": ok})
            shutil.rmtree(home, ignore_errors=True)
        mib = 1024 * 1024
        print(f"\nper-trigger costs by landing files ({args.per_hour} files an hour; median of {args.repeats}, one "
              "look at 1,000,000 without the archive)")
        print(f"{'files':>10} {'layout':>11} {'in data/':>9} {'Spark list s':>13} {'stat walk s':>12} "
              f"{'JVM MiB':>8} {'sweep s':>8} {'files/s':>8}")
        for r in rows:
            for layout, f in (("no archive", r["before"]), ("archive", r["after"])):
                rate = r["moved"] / max(r["sweep_s"], 1e-9)
                sweep = f"{r['sweep_s']:>8.1f} {rate:>8,.0f}" if layout == "archive" else ""
                listing = f"{f['spark_list_s']:>13.3f}" if "spark_list_s" in f else f"{'failed':>13}"
                print(f"{r['files']:>10,} {layout:>11} {f['listed']:>9,} {listing} "
                      f"{f['walk_s']:>12.3f} {f['jvm_rss'] / mib:>8.0f} {sweep}")
                if "spark_list_error" in f:
                    print(f"{'':>10} Spark's listing of data/ failed: {f['spark_list_error']}")
        print("\nthe real writer with the archive: batches of one new file after catching up with the current hour")
        print(f"{'files':>10} {'batches':>8} {'outside the write s (median, max)':>34} {'listing s':>10} "
              f"{'JVM RSS MiB':>12} {'driver RSS MiB':>15}  exact")
        for r in rows:
            a = r["after"]
            print(f"{r['files']:>10,} {a['batches']:>8} {a['outside_median_s']:>22.3f}, {a['outside_max_s']:<10.3f} "
                  f"{a['latest_offset_median_s']:>10.3f} {a['writer_jvm_rss'] / mib:>12.0f} "
                  f"{a['writer_driver_rss'] / mib:>15.0f}  {'yes' if r['ok'] else 'NO'}")
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        return 0 if all(r["ok"] for r in rows) else 1
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
