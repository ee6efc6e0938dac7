"""Benchmark: many streams in one writer application vs an application per stream.

The same total input (``--events`` valid events in ``--files`` files, default 2,000,000 in 200: what
``bench_writers.py`` ingests) is split evenly over 1, 5 and 20 streams (each its own landing zone, tables,
checkpoint and writer id; each stream a whole number of the same files) and ingested to the end (``--mode
incremental``, ``--files-per-trigger`` 10, so the same number of batches of the same size in all) by the real
writer, two ways, each on a fresh home:

* **one application**: ``spark_jobs/ingest_stream.py --group g`` (``laketide.ingest.group``): one JVM;
* **an application per stream**: ``spark_jobs/ingest_stream.py --stream <s>`` for every stream at once.

Printed side by side: total rows/s (input rows / wall seconds from the start to the last process' end), the peak
resident memory of all the runs' JVMs together (sampled every 0.5 s), the time to the first commit of any stream
and of the last stream, and the ratio to one stream carrying the whole input. Targets: 20 streams in one
application within 1.5 GiB resident and at least 0.8x the rows/s of one stream carrying the same total input.

``--files-per-stream N`` gives every stream N files instead (20 streams then land 20 times the files of one, in 20
times the batches): what a group's many small batches cost.

Run from the repository root::

    .venv/bin/python bench/bench_groups.py                               # 1, 5, 20 streams; 2,000,000 events
    .venv/bin/python bench/bench_groups.py --streams 1,5 --events 100000 --files 20
    .venv/bin/python bench/bench_groups.py --one-application-only       # the one-application runs alone
    .venv/bin/python bench/bench_groups.py --files-per-stream 40 --events 400000   # 20x the files and batches
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


@dataclass
class Result:
    streams: int
    how: str
    rows: int
    seconds: float
    peak_rss: int
    first_commit: float
    last_first_commit: float
    #: why the run did not end well (a writer's non-zero exit codes), or empty
    failed: str = ""

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def java_rss(pids: list[int]) -> int:
    """Resident bytes of the JVMs under the processes ``pids``."""
    import psutil

    total = 0
    for pid in pids:
        try:
            for child in psutil.Process(pid).children(recursive=True):
                if "java" in child.name():
                    total += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def first_commits(config_path: Path, names: list[str]) -> list[float]:
    """The time (epoch seconds) of each stream's first commit."""
    from laketide.lake.catalog import load_catalog
    from tests.helpers import load

    config = load(config_path)
    catalog = load_catalog(config.catalog)
    out = []
    for name in names:
        table = catalog.load_table(config.stream(name).table)
        out.append(min(s.timestamp_ms for s in table.metadata.snapshots) / 1000)
    return out


def run(workdir: Path, streams: int, how: str, events: int, files_per_stream: int, files_per_trigger: int) -> Result:
    from bench_writers import generate

    from tests.helpers import WRITER, config_env, write_group_config

    names = [f"s{i:02d}" for i in range(streams)]
    home = workdir / f"{how}-{streams}"
    shutil.rmtree(home, ignore_errors=True)
    config_path = write_group_config(home, names, "g", max_files_per_trigger=files_per_trigger, java_options="")
    rows = 0
    for i, name in enumerate(names):
        rows += generate(home / "landing" / name, events // streams, files_per_stream, name, seed=100 + i)
    commands = ([["--group", "g"]] if how == "one application" else [["--stream", n] for n in names])
    started = time.time()
    procs = [subprocess.Popen([sys.executable, str(WRITER), *args, "--mode", "incremental"],
                              env=config_env(config_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for args in commands]
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            peak[0] = max(peak[0], java_rss([p.pid for p in procs]))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    codes = [p.wait(timeout=7200) for p in procs]
    seconds = time.time() - started
    done.set()
    sampler.join()
    if any(codes):  # reported in the table; the other configurations still run
        failed = f"writer exit codes {sorted(c for c in codes if c)} (docs/operations.md: exit codes)"
        print(f"{how}, {streams} streams: {failed}", flush=True)
        return Result(streams, how, rows, seconds, peak[0], 0.0, 0.0, failed)
    firsts = first_commits(config_path, names)
    return Result(streams, how, rows, seconds, peak[0], min(firsts) - started, max(firsts) - started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="1,5,20")
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=200, help="files in all, split evenly over the streams")
    parser.add_argument("--files-per-stream", type=int, default=None,
                        help="instead: this many files for every stream (more streams, more files and batches)")
    parser.add_argument("--files-per-trigger", type=int, default=10)
    parser.add_argument("--one-application-only", action="store_true",
                        help="skip the application-per-stream runs (20 JVMs at once take most of the run)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="laketide-bench-groups-"))
    results: list[Result] = []
    try:
        for n in (int(x) for x in args.streams.split(",")):
            hows = ["one application"]
            if n > 1 and not args.one_application_only:
                hows.append("application per stream")
            per_stream = args.files_per_stream or args.files // n
            if per_stream < 1 or (args.files_per_stream is None and args.files % n):
                raise SystemExit(f"--files {args.files} does not split into {n} streams of whole files")
            for how in hows:
                r = run(workdir, n, how, args.events, per_stream, args.files_per_trigger)
                results.append(r)
                print(f"{n} stream(s), {how}: {r.rows_per_s:,.0f} rows/s, peak {r.peak_rss / 2**20:,.0f} MiB, "
                      f"first commit {r.first_commit:.1f}s", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    base = next((r for r in results if r.streams == 1 and not r.failed), None)
    files = (f"{args.files_per_stream} files per stream" if args.files_per_stream else
             f"{args.files} files in all")
    print(f"\n{args.events:,} events in all, {files}, {args.files_per_trigger} files per trigger, 2 cores")
    print(f"{'streams':>7} {'how':<24} {'rows/s':>9} {'vs 1 stream':>11} {'peak RSS MiB':>13} "
          f"{'first commit s':>15} {'last stream s':>14}")
    for r in results:
        if r.failed:
            print(f"{r.streams:>7} {r.how:<24} failed after {r.seconds:.0f} s: {r.failed}; peak RSS "
                  f"{r.peak_rss / 2**20:,.0f} MiB")
            continue
        ratio = f"{r.rows_per_s / base.rows_per_s:.2f}x" if base else "-"
        print(f"{r.streams:>7} {r.how:<24} {r.rows_per_s:>9,.0f} {ratio:>11} {r.peak_rss / 2**20:>13,.0f} "
              f"{r.first_commit:>15.1f} {r.last_first_commit:>14.1f}")
    twenty = next((r for r in results if r.streams == 20 and r.how == "one application" and not r.failed), None)
    if twenty and base:
        ok = twenty.peak_rss <= 1.5 * 2**30 and twenty.rows_per_s >= 0.8 * base.rows_per_s
        print(f"20 streams in one application: {twenty.peak_rss / 2**30:.2f} GiB (target <= 1.5), "
              f"{twenty.rows_per_s / base.rows_per_s:.2f}x the rows/s of one stream (target >= 0.8): "
              f"{'ok' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
