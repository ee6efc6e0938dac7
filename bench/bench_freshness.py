"""Benchmark: how fresh the lake is at the quickstart's configuration: landed -> queryable, per trigger interval.

For each trigger interval given (default ``30s,10s``; the quickstart's producer rate, 20 events/s, with a file every
7 s: 7 shares no factor with the trigger intervals, so files land at every phase of the trigger and the figures are
those of producers that are not in step with the writer),
the real sample producer (live mode) and the real writer (continuous) run side by side for ``--minutes``, on a
fresh home each. Two measures of every landed file, printed side by side:

* **committed**: the commit that names the file in its source position (``laketide.source-files``) against the
  file's landing time (its modification time, as the writer recorded it): when its events became visible;
* **queryable**: a poller picks the newest landed file every few seconds, takes one event id of it and reads the
  events table with pyiceberg (a row filter on that id) until it finds the event: landing -> a reader sees it.

Run from the repository root::

    .venv/bin/python bench/bench_freshness.py                       # 30s and 10s, 5 minutes each
    .venv/bin/python bench/bench_freshness.py --triggers 10s --minutes 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def quantiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return f"p50 {q(0.5):5.1f}s  p95 {q(0.95):5.1f}s  max {ordered[-1]:5.1f}s  (n={len(ordered)})"


def committed_latencies(config_path: Path) -> list[float]:
    """Commit time - landing time of every file a commit of the writer names."""
    from laketide.close.reconcile import lineage_summaries
    from laketide.lake.catalog import load_catalog
    from laketide.lake.commits import source_position
    from tests.helpers import load

    config = load(config_path)
    table = load_catalog(config.catalog).load_table(config.stream("clicks").table)
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    out = []
    for snap in by_id.values():
        summary = dict(snap.summary.additional_properties) if snap.summary else {}
        for stat in source_position(summary).values():
            if stat is not None:
                out.append((snap.timestamp_ms - stat.mtime_ms) / 1000)
    assert lineage_summaries(table)  # the writer committed
    return out


def poll_queryable(config_path: Path, stop: threading.Event, found: list[float]) -> None:
    """Every few seconds: the newest landed file's first event id, read back with pyiceberg until it is there."""
    from pyiceberg.expressions import EqualTo

    from laketide.ingest.landing import data_dir
    from laketide.lake.catalog import load_catalog
    from tests.helpers import load

    config = load(config_path)
    stream = config.stream("clicks")
    seen: set[str] = set()
    while not stop.is_set():
        files = sorted(data_dir(stream.landing_path).glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
        if not files or files[-1].name in seen:
            stop.wait(1.0)
            continue
        newest = files[-1]
        seen.add(newest.name)
        landed = newest.stat().st_mtime
        first = next((json.loads(line) for line in newest.read_text().splitlines() if line.startswith("{")), None)
        if first is None or "event_id" not in first:
            continue
        while not stop.is_set():
            try:
                table = load_catalog(config.catalog).load_table(stream.table)
                hit = table.scan(row_filter=EqualTo("event_id", first["event_id"]), selected_fields=("event_id",))
                if len(hit.to_arrow()):
                    found.append(time.time() - landed)
                    break
            except Exception:  # the table does not exist yet
                pass
            stop.wait(0.25)
        stop.wait(3.0)


def run(trigger: str, minutes: float, workdir: Path) -> tuple[list[float], list[float]]:
    from tests.helpers import config_env, kill_group, start_writer, write_config

    home = workdir / f"trigger-{trigger}"
    shutil.rmtree(home, ignore_errors=True)
    config_path = write_config(home, trigger_interval=trigger, idle_window="10m", max_files_per_trigger=100,
                               java_options="")  # the writer's own JVM settings, as in production
    writer = start_writer(config_path, mode="continuous")
    producer = subprocess.Popen(
        [sys.executable, "-m", "laketide.dev.producer", "--mode", "live", "--rate", "20", "--flush-seconds", "7"],
        env=config_env(config_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    stop, found = threading.Event(), []
    poller = threading.Thread(target=poll_queryable, args=(config_path, stop, found), daemon=True)
    poller.start()
    try:
        time.sleep(minutes * 60)
    finally:
        stop.set()
        poller.join(timeout=30)
        producer.terminate()
        producer.wait(timeout=30)
        time.sleep(float(trigger.rstrip("s")) * 2 + 5)  # the writer takes the producer's last file
        (home / "checkpoints" / "clicks.stop").touch()
        try:
            writer.wait(timeout=120)
        except subprocess.TimeoutExpired:
            kill_group(writer)
    return committed_latencies(config_path), found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--triggers", default="30s,10s")
    parser.add_argument("--minutes", type=float, default=5.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("TZ", "UTC")
    workdir = Path(tempfile.mkdtemp(prefix="laketide-bench-fresh-"))
    results = {}
    try:
        for trigger in args.triggers.split(","):
            started = datetime.now(UTC).isoformat(timespec="seconds")
            results[trigger] = run(trigger, args.minutes, workdir)
            print(f"{started} trigger {trigger}: done", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nlanded -> committed / queryable, the quickstart's producer (20 events/s, a file every 7 s), "
          f"{args.minutes:g} min each")
    for trigger, (committed, queryable) in results.items():
        print(f"  trigger {trigger:>4}  committed: {quantiles(committed)}")
        print(f"  {'':>12}  queryable: {quantiles(queryable)}  (a pyiceberg read finds the event)")
    for trigger, (committed, _) in results.items():
        if committed:
            print(f"  trigger {trigger}: mean {statistics.fmean(committed):.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
