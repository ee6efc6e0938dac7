"""How fast the lakehouse view's partition board answers on a stream with months of history.

Builds a throwaway lake: a status table holding 6 months of hours of one stream, each hour recorded the way the
close DAG records it (complete, verified, closed; some hours empty, a few reopened and closed again), written with
pyiceberg in a few commits (one per month), and a small events table with writer commits (``laketide.dev.commits``)
so that the hours being written are checked too. Then it times the board:

* cold: the first request after a status commit (reads the stream's status records from the table);
* warm: the next requests (recorded states cached per status-table version: one catalog query);
* the whole 6 months on one board (4,380 cells).

Run: ``.venv/bin/python bench/bench_ui.py [--months 6] [--repeat 20]``.
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

from laketide.airflow.ui import board
from laketide.close.partitions import State
from laketide.close.status import StatusRecord, record
from laketide.dev.commits import commit_files, land
from tests.helpers import load, write_config


def history(stream: str, first: datetime, hours: int) -> list[StatusRecord]:
    """The status records of ``hours`` hours from ``first``, as the close DAG leaves them."""
    out = []
    for i in range(hours):
        hour = first + timedelta(hours=i)
        at = hour + timedelta(hours=1, minutes=15)
        if i % 97 == 13:  # a quiet hour
            out.append(StatusRecord(stream, hour, State.EMPTY, rows=0, recorded_at=at))
            continue
        rows = 20_000 + (i * 7919) % 5000
        out += [StatusRecord(stream, hour, State.COMPLETE, rows=rows, recorded_at=at),
                StatusRecord(stream, hour, State.VERIFIED, rows=rows, rejects=12, audit=rows + 12,
                             verification='{"success":true,"duplicates":0,"findings":[]}',
                             recorded_at=at + timedelta(seconds=30)),
                StatusRecord(stream, hour, State.CLOSED, rows=rows, rejects=12, audit=rows + 12, snapshot_id=i,
                             reason=f"verified: audit {rows + 12} == lake {rows} + rejects 12",
                             recorded_at=at + timedelta(seconds=31))]
        if i % 211 == 5:  # late rows: reopened and closed again
            out += [StatusRecord(stream, hour, State.REOPENED, rows=rows + 3, recorded_at=at + timedelta(hours=2)),
                    StatusRecord(stream, hour, State.CLOSED, rows=rows + 3, rejects=12, audit=rows + 15,
                                 recorded_at=at + timedelta(hours=2, minutes=5))]
    return out


def timed(fn: object, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append((time.perf_counter() - began) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--months", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    config = load(write_config(home, idle_window="30m"))
    stream = config.stream("clicks")
    now = datetime.now(UTC)
    current = now.replace(minute=0, second=0, microsecond=0)
    hours = args.months * 730
    first = current - timedelta(hours=hours)
    records = history("clicks", first, hours - 3)  # the last hours are being written
    began = time.perf_counter()
    size = len(records) // args.months + 1
    months = [records[i:i + size] for i in range(0, len(records), size)]
    for chunk in months:
        record(config, *chunk)
    written = time.perf_counter() - began
    for batch, offset in enumerate(range(-4, 0)):
        commit_files(config, stream, batch, [land(stream, current + timedelta(hours=offset), 50, batch + 1)])
    print(f"status table: {len(records):,} records of {hours:,} hours ({args.months} months) in {len(months)} commits "
          f"({written:.1f}s); events table: 4 writer commits")

    def week() -> object:
        return board.board(config, stream, *board.default_range(datetime.now(UTC)))

    board.clear_cache()
    first_call = timed(week, 1)[0]  # includes the process's first imports (pyiceberg expressions, pyarrow compute)
    warm = timed(week, args.repeat)
    record(config, StatusRecord("clicks", current - timedelta(hours=3), State.OPEN, reason="a new status commit"))
    cold = timed(week, 1)[0]
    whole = timed(lambda: board.board(config, stream, first, current + timedelta(hours=1)), max(3, args.repeat // 4))
    result = week()
    cells = len(result.cells)  # type: ignore[attr-defined]
    print(f"board of the last 7 days ({cells} cells): after a status commit {cold:.0f} ms (reads the stream's status "
          f"records), then median {statistics.median(warm):.0f} ms, max {max(warm):.0f} ms over {args.repeat} requests "
          f"(cached per status-table version); the process's very first request {first_call:.0f} ms")
    print(f"board of all {args.months} months ({hours + 1:,} cells): median {statistics.median(whole):.0f} ms, "
          f"max {max(whole):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
