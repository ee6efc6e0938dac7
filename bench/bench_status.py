"""Benchmark: the cost of one partition status check against 100 and against 10,000 snapshots, in one run.

1. The real producer lands three hours and the real writer ingests them in ~10 micro-batches (local Spark):
   a real events table whose metadata Iceberg's Java library wrote.
2. Two copies of that table are registered in the same catalog, each with the writer's real commits on top of
   an older history of synthetic writer commits (copies of a real one, 30 s apart, with laketide summaries,
   written in Iceberg's compact JSON and key order): 100 and 10,000 snapshots in total. Only metadata is
   read by a status check, so these copies are for metadata reads only.
3. For each table, interleaved, many times:
   - warm check: ``partitions.check_partition`` with the cursor a trigger holds after its previous poll,
     ``--new`` commits ago (what every poll of the triggerer does);
   - cold check: no cursor (the sensor's first check); it reads back to the hour start - max_future;
   - for reference, pyiceberg ``load_table`` (what a check parsing the whole metadata would pay at least).

Prints medians and the 10,000 / 100 ratios. Target: warm ratio < 2.

    .venv/bin/python bench/bench_status.py [--repeat 200] [--new 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
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

from laketide.close.partitions import Cursor, State, advance, check_partition  # noqa: E402
from laketide.config import LaketideConfig, StreamConfig  # noqa: E402
from laketide.lake.catalog import load_catalog  # noqa: E402
from laketide.lake.commits import WRITER_ID  # noqa: E402
from laketide.lake.snapshots import lineage, metadata_location  # noqa: E402
from tests.helpers import config_env, load, run_writer, write_config, writer_log  # noqa: E402

SIZES = (100, 10_000)


def land_and_write(home: Path) -> tuple[LaketideConfig, list[datetime]]:
    """Three real hours (the middle one is the partition checked) written by the real writer."""
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = hour - timedelta(hours=3)
    path = write_config(home, max_files_per_trigger=1, idle_window="5m")
    subprocess.run(
        [sys.executable, "-m", "laketide.dev.producer", "--mode", "backfill", "--start", start.isoformat(),
         "--hours", "3", "--events-per-hour", "400", "--events-per-file", "120", "--seed", "1"],
        env=config_env(path), check=True, capture_output=True,
    )
    if run_writer(path) != 0:
        raise SystemExit(f"writer failed:\n{writer_log(path)[-3000:]}")
    return load(path), [start + timedelta(hours=i) for i in range(3)]


def with_history(config: LaketideConfig, source: str, target: str, total: int) -> str:
    """Register ``target``: ``source``'s current lineage on top of synthetic older writer commits."""
    catalog = load_catalog(config.catalog)
    location = metadata_location(catalog, source)
    metadata = json.loads(Path(location.removeprefix("file:").removeprefix("//")).read_bytes())
    by_id = {s["snapshot-id"]: s for s in metadata["snapshots"]}
    real: list[dict[str, Any]] = []
    node = by_id.get(metadata["current-snapshot-id"])
    while node is not None:
        real.append(node)
        node = by_id.get(node.get("parent-snapshot-id"))
    real.reverse()
    old = total - len(real)
    if old < 1:
        raise SystemExit(f"{total} snapshots requested but the writer made {len(real)}")
    base = real[0]
    first_ts = base["timestamp-ms"]
    ids = [9_000_000_000_000_000_000 + i for i in range(old)]
    snaps: list[dict[str, Any]] = []
    for i, sid in enumerate(ids):
        snap = dict(base, **{
            "sequence-number": i + 1, "snapshot-id": sid, "timestamp-ms": first_ts - 30_000 * (old - i),
            "summary": base["summary"] | {
                "laketide.batch-id": str(i - old), "laketide.partition-rows": '{"2000-01-01T00:00:00+00:00":400}',
                "laketide.source-files": json.dumps([f"20000101T00-sample-{i:08d}-0000abcd.jsonl"] * 3),
                "laketide.watermark": "2000-01-01T00:59:59+00:00",
            },
        })
        snap.pop("parent-snapshot-id", None)
        if i:
            snap["parent-snapshot-id"] = ids[i - 1]
        snaps.append(snap)
    for j, snap in enumerate(real):
        snap = dict(snap, **{"sequence-number": old + j + 1})
        if j == 0:
            snap["parent-snapshot-id"] = ids[-1]
        snaps.append(snap)
    current = snaps[-1]["snapshot-id"]
    metadata.update({
        "last-sequence-number": len(snaps), "current-snapshot-id": current, "snapshots": snaps,
        "refs": {"main": {"snapshot-id": current, "type": "branch"}},
        "snapshot-log": [{"timestamp-ms": s["timestamp-ms"], "snapshot-id": s["snapshot-id"]} for s in snaps],
    })
    folder = Path(metadata["location"].removeprefix("file:").removeprefix("//")) / "metadata"
    path = folder / f"99999-bench-{total}.metadata.json"
    path.write_bytes(json.dumps(metadata, separators=(",", ":")).encode())
    catalog.register_table(target, f"file:{path}")
    return target


def warm_cursor(config: LaketideConfig, stream: StreamConfig, partition: datetime, new: int) -> Cursor:
    """The cursor a trigger would hold after polling ``new`` writer commits ago."""
    _, snaps = lineage(load_catalog(config.catalog), stream.table)
    oldest_first = list(reversed(snaps))
    writer = [i for i, s in enumerate(oldest_first) if s.summary.get(WRITER_ID) == stream.writer_id]
    cut = writer[-new]
    return advance(Cursor(partition.isoformat()), oldest_first[:cut], stream.writer_id)


def median_ms(fn: Callable[[], object], repeat: int, out: list[float]) -> None:
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=200, help="checks per table and kind (interleaved)")
    parser.add_argument("--new", type=int, default=5, help="writer commits since the warm cursor")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="laketide-bench-status-") as tmp:
        print("landing 3 hours and running the real writer ...", flush=True)
        config, hours = land_and_write(Path(tmp))
        stream0 = config.stream("clicks")
        partition = hours[1]
        now = datetime.now(UTC) + timedelta(minutes=30)  # the writer's commits are then idle: a decided hour
        streams = {n: stream0.model_copy(update={"table": with_history(config, stream0.table, f"lake.h{n}", n)})
                   for n in SIZES}
        catalog = load_catalog(config.catalog)
        cursors = {n: warm_cursor(config, streams[n], partition, args.new) for n in SIZES}
        results: dict[tuple[str, int], list[float]] = {}
        answers: dict[tuple[str, int], tuple[State, int]] = {}
        for n in SIZES:  # answers must not depend on the history
            for kind, cursor in (("warm", cursors[n]), ("cold", None)):
                status, _ = check_partition(config, streams[n], partition, now, cursor)
                answers[(kind, n)] = (status.state, status.rows)
        if len(set(answers.values())) != 1:
            raise SystemExit(f"checks disagree: {answers}")
        for _ in range(max(1, args.repeat // 20)):
            for n in SIZES:
                s, c = streams[n], cursors[n]
                median_ms(lambda s=s, c=c: check_partition(config, s, partition, now, c), 20,
                          results.setdefault(("warm check", n), []))
                median_ms(lambda s=s: check_partition(config, s, partition, now, None), 20,
                          results.setdefault(("cold check", n), []))
                median_ms(lambda s=s: catalog.load_table(s.table), 2,
                          results.setdefault(("pyiceberg load_table", n), []))

    state, rows = next(iter(answers.values()))
    print(f"\npartition {partition.isoformat()}: {state} with {rows} rows in every case; "
          f"warm cursor {args.new} writer commits behind")
    print(f"{'':<22}{'100 snapshots':>15}{'10,000 snapshots':>18}{'ratio':>8}")
    ratios = {}
    for kind in ("warm check", "cold check", "pyiceberg load_table"):
        small, large = (statistics.median(results[(kind, n)]) for n in SIZES)
        ratios[kind] = large / small
        print(f"{kind:<22}{small:>12.2f} ms{large:>15.2f} ms{ratios[kind]:>7.2f}x")
    ok = ratios["warm check"] < 2
    print(f"\nwarm check ratio {ratios['warm check']:.2f} (target < 2): {'MET' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
