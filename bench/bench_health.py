"""How fast the lakehouse view's health panel (``GET /laketide/api/health``) and charts answer on a lake with history.

Builds a throwaway lake like a few days of the quickstart: three streams, each events table with ``--commits``
writer commits (``laketide.dev.commits``: real landing files, real markers) spread over the last ``--hours`` hours,
a rejects table with a commit every tenth batch, the status table with one commit per closed hour and stream (as the
close DAG records them) and the maintenance record with a row per table and hour. Then it times
``panels.health`` (what the route answers) and ``charts.charts`` of one stream, the first call and the next ones.

Run: ``.venv/bin/python bench/bench_health.py [--commits 300] [--hours 72] [--repeat 10]`` (``--home DIR``: time a
lake built before again).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_ui import timed
from laketide.close.partitions import State
from laketide.close.status import StatusRecord, record
from laketide.dev.commits import commit_files, land
from laketide.maintain.record import MaintenanceRecord
from laketide.maintain.record import record as record_maintenance
from tests.helpers import load, write_group_config

STREAMS = ["clicks", "orders", "views"]


def build(home: Path, commits: int, hours: int) -> object:
    config = load(write_group_config(home, STREAMS, idle_window="30m"))
    current = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    first = current - timedelta(hours=hours)
    for stream in config.streams:
        rejects = stream.model_copy(update={"table": stream.rejects_table})
        for batch in range(commits):
            hour = first + timedelta(hours=batch * hours // commits)
            files = [land(stream, hour, 10, batch + 1, producer="bench")]
            commit_files(config, stream, batch, files, rejects=1 if batch % 10 == 0 else 0)
            if batch % 10 == 0:
                commit_files(config, rejects, batch, files[:1])
        for i in range(hours - 2):
            hour = first + timedelta(hours=i)
            record(config, StatusRecord(stream.name, hour, State.CLOSED, rows=40, rejects=0, audit=40,
                                        reason="verified", recorded_at=hour + timedelta(hours=1, minutes=15)))
    for i in range(0, hours, 6):
        at = first + timedelta(hours=i, minutes=20)
        record_maintenance(config, *[MaintenanceRecord("bench", t, "rewrite_data_files", "skipped", started_at=at,
                                                       detail="no closed hour with 5 or more files")
                                     for s in config.streams for t in (s.table, s.rejects_table)])
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--hours", type=int, default=72)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--home", type=Path, help="a lake this script built before: timed again, not rebuilt")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    if args.home is not None:
        config = load(args.home / "laketide.yaml")
        home = args.home
    else:
        home = Path(tempfile.mkdtemp(prefix="bench-health-"))
        config = build(home, args.commits, args.hours)
    print(f"lake: {len(STREAMS)} streams, {args.commits} writer commits each over {args.hours} hours, status and "
          f"maintenance records; built in {time.perf_counter() - began:.0f}s ({home})")

    from laketide.airflow.ui import panels

    first = timed(lambda: panels.health(config), 1)[0]  # type: ignore[arg-type]
    warm = timed(lambda: panels.health(config), args.repeat)  # type: ignore[arg-type]
    print(f"health: first call {first:.0f} ms, then median {statistics.median(warm):.0f} ms, "
          f"max {max(warm):.0f} ms over {args.repeat}")
    after = []  # the steady state: a writer commit (of each stream) between two requests
    for i in range(args.repeat):
        for stream in config.streams:  # type: ignore[attr-defined]
            hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
            commit_files(config, stream, 100_000 + i, [land(stream, hour, 10, 100_000 + i, producer="next")])
        after += timed(lambda: panels.health(config), 1)  # type: ignore[arg-type]
    print(f"health after a new commit of each events table: median {statistics.median(after):.0f} ms, "
          f"max {max(after):.0f} ms over {args.repeat}")
    try:
        from laketide.airflow.ui import charts  # type: ignore[attr-defined]
    except ImportError:
        return 0
    stream = config.streams[0]  # type: ignore[attr-defined]
    now = datetime.now(UTC)
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(days=7)
    call = lambda: charts.charts(config, stream, start, now + timedelta(hours=1))
    first = timed(call, 1)[0]
    warm = timed(call, args.repeat)
    print(f"charts of {stream.name}: first call {first:.0f} ms, then median {statistics.median(warm):.0f} ms, "
          f"max {max(warm):.0f} ms over {args.repeat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
