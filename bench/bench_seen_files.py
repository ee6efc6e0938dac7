"""Benchmark: what remembering landed files costs the writer over a long run, and the late-file rescue at scale.

A stream that runs for months lands hundreds of thousands of files. Spark's file source remembers the files it
has read, in the writer's memory (its "seen files" map) for ``max_file_age`` behind the newest one, and in its
checkpoint log for ever. This lands ``--files`` small files (default 300,000, one event each) whose modification
times are spread over ``--days`` (default 90: one file every 26 s, a long-running producer), then runs the real
writer (``laketide.ingest.runner.start`` in continuous mode, its own SparkSession) over them once per
``max_file_age`` (default ``7d`` and ``36500d``, i.e. "remember everything") and per session settings (``writer``:
the writer application's, ``laketide.ingest.group.WRITER_SETTINGS``; ``spark``: Spark's defaults), each in a
fresh process, and prints side by side:

* the entries of Spark's seen-files map once everything is committed (read through py4j from the running
  query's file source), the JVM heap in use after a full GC, and the JVM's peak resident memory;
* the checkpoint's file-source log on disk;
* the late-file rescue at that scale: a file of 30 days ago, landed after all the others with its old time
  (``cp -p``), must be ingested, and the time of one look (``LateFiles.rescue``: a listing with a ``stat`` per
  file) is printed.

Run from the repository root (it takes a while: Spark reads every file)::

    .venv/bin/python bench/bench_seen_files.py                         # 300,000 files over 90 days
    .venv/bin/python bench/bench_seen_files.py --files 30000 --days 30  # a quick look
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=300_000)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--ages", default="7d,36500d", help="max_file_age values, comma-separated")
    parser.add_argument("--settings", default="writer,spark",
                        help="the session's settings, comma-separated: writer (laketide's writer application, "
                             "laketide.ingest.group.WRITER_SETTINGS) and/or spark (Spark's defaults)")
    parser.add_argument("--retentions", default="60d",
                        help="source_log_retention values, comma-separated (in days; never below max_file_age)")
    parser.add_argument("--files-per-trigger", type=int, default=5000)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one writer, print JSON
    return parser.parse_args(argv)


def land(landing: Path, files: int, days: int) -> None:
    """``files`` one-event files with their audit records (the contract's names and records; written directly,
    without the contract's fsyncs, to land them fast), modification times spread evenly over ``days``."""
    from laketide.ingest.landing import audit_dir, data_dir

    data, audits = data_dir(landing), audit_dir(landing)
    data.mkdir(parents=True)
    audits.mkdir(parents=True)
    end = datetime.now(UTC) - timedelta(hours=1)
    step = timedelta(days=days) / files
    for i in range(files):
        one_event_file(data, audits, end - (files - i) * step, i, "long")


def one_event_file(data: Path, audits: Path, at: datetime, i: int, producer: str) -> None:
    """Event ``i`` of time ``at`` in a landing file of its own, with its audit record (the contract's name and
    record, written directly without the contract's fsyncs, to land many fast), modified at ``at``."""
    from laketide.ingest.landing import AUDIT_VERSION, audit_name
    from laketide.lake.hours import partition_key

    name = f"{at:%Y%m%dT%H}-{producer}-{i:08d}-{i % 0xFFFFFFFF:08x}.jsonl"
    (audits / audit_name(name)).write_text(json.dumps({
        "version": AUDIT_VERSION, "stream": "clicks", "file": name, "producer": producer, "records": 1,
        "partitions": {partition_key(at): 1}, "produced_at": at.isoformat()}))
    path = data / name
    path.write_text(json.dumps({"event_id": f"e{i}", "event_time": at.isoformat(), "user_id": i, "page": "/p"})
                    + "\n")
    os.utime(path, (at.timestamp(), at.timestamp()))


def days(value: str) -> int:
    """``"7d"`` -> 7 (the durations this benchmark takes are whole days)."""
    if not value.endswith("d") or not value[:-1].isdigit():
        raise SystemExit(f"{value!r}: give a whole number of days, e.g. '7d'")
    return int(value[:-1])


def jvm_of(pid: int) -> int | None:
    """The JVM child of process ``pid`` (the py4j gateway's java)."""
    import psutil

    children = [c for c in psutil.Process(pid).children(recursive=True) if "java" in c.name()]
    return children[0].pid if children else None


def jvm_rss(pid: int) -> int:
    """Resident memory (bytes) of the JVM child of process ``pid``, 0 if none."""
    import psutil

    jvm = jvm_of(pid)
    return psutil.Process(jvm).memory_info().rss if jvm else 0


def live_heap(pid: int, top: int = 8) -> tuple[int, list[tuple[str, int]]]:
    """The bytes of live objects in the JVM of process ``pid`` and its ``top`` classes by bytes, from
    ``jcmd GC.class_histogram`` (which runs a full GC first)."""
    jvm = jvm_of(pid)
    if jvm is None:
        return 0, []
    out = subprocess.run(["jcmd", str(jvm), "GC.class_histogram"], capture_output=True, text=True, check=True).stdout
    rows, total = [], 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0].rstrip(":").isdigit():
            rows.append((parts[3], int(parts[2])))
        elif parts[:1] == ["Total"]:
            total = int(parts[2])
    return total, rows[:top]


def run_one(spec: str) -> None:
    """In a fresh process: the real writer over the landed files with one max_file_age; print the figures."""
    from laketide.ingest import runner
    from laketide.ingest.group import WRITER_SETTINGS
    from laketide.ingest.late_files import LateFiles
    from laketide.lake.spark import build_session
    from tests.helpers import load

    options = json.loads(spec)
    config = load(Path(options["config"]))
    stream = config.stream("clicks")
    extra = WRITER_SETTINGS if options["settings"] == "writer" else {}
    spark = build_session(config, "laketide-bench-seen-files", master="local[2]", extra=extra)
    spark.sparkContext.setLogLevel("ERROR")
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            peak[0] = max(peak[0], jvm_rss(os.getpid()))

    threading.Thread(target=sample, daemon=True).start()
    from laketide.ingest.tables import ensure_tables

    ensure_tables(spark, config, stream)
    started = time.perf_counter()
    query = runner.start(spark, config, stream, "continuous")
    late = LateFiles(stream)  # as the writer application does: a look (and the log's pruning) every poll
    total = options["files"]

    def committed() -> int:
        from laketide.lake.catalog import load_catalog
        from laketide.lake.commits import source_positions

        try:
            return len(source_positions(load_catalog(config.catalog).load_table(stream.table)))
        except Exception:
            return 0

    def figures(files: int) -> dict[str, object]:
        """The seen map, the live heap (after a full GC, and the context cleaner's pass over what it freed: the
        batches' broadcasts), its largest classes, the JVM's and this driver's resident memory, now."""
        import psutil

        try:
            source = query._jsq.streamingQuery().sources().apply(0)  # the FileStreamSource (py4j, internal)
            seen = int(source.seenFiles().size())
        except Exception:  # no batch has run yet
            seen = 0
        spark._jvm.java.lang.System.gc()  # type: ignore[union-attr]
        time.sleep(2)
        heap, classes = live_heap(os.getpid())
        return {"files": files, "seen": seen, "heap": heap, "classes": classes, **source_log(stream.checkpoint_path),
                "jvm_rss": jvm_rss(os.getpid()), "driver_rss": psutil.Process().memory_info().rss}

    # the same figures every tenth of the input: what grows with the files read shows as a slope
    marks, series = [total * k // 10 for k in range(1, 10)], []
    while (done := committed()) < total:
        if marks and done >= marks[0]:
            while marks and done >= marks[0]:
                marks.pop(0)
            series.append(figures(done))
        late.rescue()
        time.sleep(2)
    ingest_s = time.perf_counter() - started
    last = figures(total)
    series.append(last)
    seen, heap = int(last["seen"]), int(last["heap"])  # type: ignore[call-overload]
    # the late file: 30 days old, landed after everything else was read
    late = LateFiles(stream)
    late.rescue()  # a restarted writer's first look
    import logging

    named: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: named.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("laketide.ingest.late_files").addHandler(handler)
    from laketide.ingest.landing import publish

    at = datetime.now(UTC) - timedelta(days=30)
    line = json.dumps({"event_id": "late", "event_time": at.isoformat(), "user_id": 1, "page": "/late"})
    path = publish(stream.landing_path, [line], at.replace(minute=0, second=0, microsecond=0).isoformat(),
                   "archive", 0, "clicks")
    os.utime(path, (at.timestamp(), at.timestamp()))
    look = time.perf_counter()
    rescued = late.rescue()
    look_s = time.perf_counter() - look
    beyond = stream.source_log_retention < timedelta(days=30)
    deadline = time.monotonic() + (30 if beyond else 300)
    while committed() < total + 1 and time.monotonic() < deadline:
        time.sleep(2)
    query.stop()
    stop.set()
    print(json.dumps({"seen": seen, "heap": heap, "peak_rss": peak[0], "ingest_s": ingest_s,
                      **source_log(stream.checkpoint_path), "rescued": rescued == [path.name],
                      "late_ingested": committed() == total + 1, "beyond_retention": beyond,
                      "named": any(path.name in m and "source_log_retention" in m for m in named),
                      "look_s": look_s, "series": series}))
    spark.stop()


def source_log(checkpoint: Path) -> dict[str, int]:
    """The file source's log on disk: its bytes (every file Spark keeps) and the entries a restart reads (the
    newest compacted file and the batches after it)."""
    files = [p for p in (checkpoint / "sources" / "0").iterdir() if not p.name.startswith(".")]
    compacts = [p for p in files if p.name.endswith(".compact")]
    base = max((int(p.name.split(".")[0]) for p in compacts), default=-1)
    read = [p for p in files if int(p.name.split(".")[0]) >= base]
    entries = sum(max(len(p.read_bytes().splitlines()) - 1, 0) for p in read)
    return {"log_bytes": sum(p.stat().st_size for p in files), "log_entries": entries}


def late_outcome(result: dict[str, object]) -> str:
    """What became of the 30-day-old file: within ``max_file_age`` Spark reads it itself, beyond it the writer's
    rescue must touch it, and beyond ``source_log_retention`` the writer must name it and leave it; not in the
    table after 5 minutes otherwise: lost."""
    if result["beyond_retention"]:
        if result["late_ingested"]:
            return "INGESTED, though beyond the retention"
        return "named and left (beyond source_log_retention)" if result["named"] else "NOT NAMED"
    if not result["late_ingested"]:
        return "LOST"
    return "rescued and ingested" if result["rescued"] else "ingested (within max_file_age: Spark read it)"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        run_one(args.one)
        return 0
    from tests.helpers import config_env, write_config

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="laketide-bench-seen-"))
    try:
        landing = workdir / "landing"
        if not (landing / "data").is_dir():
            t0 = time.perf_counter()
            land(landing, args.files, args.days)
            print(f"landed {args.files:,} files over {args.days} days in {time.perf_counter() - t0:.0f}s", flush=True)
        results = {}
        for age, settings, kept in [(a, s, k) for a in args.ages.split(",") for s in args.settings.split(",")
                                    for k in args.retentions.split(",")]:
            retention = f"{max(days(age), days(kept))}d"
            run = f"{age} {settings} {retention}"
            home = workdir / f"run-{age}-{settings}-{retention}"
            shutil.rmtree(home, ignore_errors=True)
            copy = home / "landing"
            shutil.copytree(landing, copy, copy_function=shutil.copy2)  # keeps the modification times
            config = write_config(home, landing_path=str(copy), max_file_age=age, source_log_retention=retention,
                                  trigger_interval="5s",
                                  max_files_per_trigger=args.files_per_trigger,
                                  idle_window="60s")
            spec = json.dumps({"config": str(config), "files": args.files, "settings": settings})
            done = subprocess.run([sys.executable, __file__, "--one", spec], env=config_env(config),
                                  capture_output=True, text=True, check=False)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if done.returncode != 0 or not lines:
                print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
                return 1
            results[run] = json.loads(lines[-1])
            shutil.rmtree(copy / "data", ignore_errors=True)
            print(f"max_file_age {age}, {settings} settings, retention {retention}: {results[run]}", flush=True)
        mib = 1024 * 1024
        print(f"\n{args.files:,} files over {args.days} days, {args.files_per_trigger} files per trigger")
        print(f"{'max_file_age settings retention':>32} {'seen map':>10} {'heap MiB':>9} {'peak RSS MiB':>13} "
              f"{'log MiB':>8} {'log entries':>12} {'ingest s':>9} {'one look s':>11}  late file")
        for run, r in results.items():
            print(f"{run:>32} {r['seen']:>10,} {r['heap'] / mib:>9.0f} {r['peak_rss'] / mib:>13.0f} "
                  f"{r['log_bytes'] / mib:>8.1f} {r['log_entries']:>12,} {r['ingest_s']:>9.0f} {r['look_s']:>11.2f}  "
                  f"{late_outcome(r)}")
        print("\nas the files are read (live heap: after a full GC; MiB):")
        print(f"{'max_file_age settings retention':>32} {'files read':>11} {'seen map':>9} {'heap':>6} {'JVM RSS':>8} "
              f"{'driver RSS':>11} {'log MiB':>8} {'log entries':>12}")
        for run, r in results.items():
            for point in r["series"]:
                print(f"{run:>32} {point['files']:>11,} {point['seen']:>9,} {point['heap'] / mib:>6.0f} "
                      f"{point['jvm_rss'] / mib:>8.0f} {point['driver_rss'] / mib:>11.0f} "
                      f"{point['log_bytes'] / mib:>8.1f} {point['log_entries']:>12,}")
        for run, r in results.items():  # what the live heap holds, first and last look
            for point in (r["series"][0], r["series"][-1]):
                top = ", ".join(f"{name} {size / mib:.0f}" for name, size in point["classes"][:6])
                print(f"{run}, {point['files']:,} files read, largest classes (MiB): {top}")
        runs = list(results)
        for a, b in itertools.pairwise(runs):
            print(f"{a} / {b}: seen map {results[a]['seen'] / max(results[b]['seen'], 1):.2f}x, "
                  f"heap {results[a]['heap'] / max(results[b]['heap'], 1):.2f}x")
        return 0 if all(late_outcome(r)[0].islower() for r in results.values()) else 1  # failures in capitals
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
