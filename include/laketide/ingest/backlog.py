"""The writer's backlog and freshness, from metadata only: the landing zone's listing (names, sizes, times) against
the source positions in the writer's snapshot summaries. No Spark, no data file read.

* :func:`uncommitted`: the landed files no commit of the writer recorded (the backlog), read back from the current
  snapshot only as far as the files need (the partition check and the writer's own figures use it);
* :func:`freshness`: landed -> committed latency over a recent window, the lag behind the watermark and the
  backlog: what the writer application reports and exposes as metrics.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from laketide.config import StreamConfig
from laketide.config.values import millis
from laketide.errors import TableNotFoundError
from laketide.ingest.inspection import Landed, landed_files
from laketide.ingest.late_files import too_old_files
from laketide.lake.commits import WATERMARK, WRITER_ID, source_position
from laketide.lake.snapshots import Snap, lineage

#: how far the landing zone's clock (file times) and the writer's (commit times) may disagree
CLOCK_SKEW = timedelta(minutes=1)


def uncommitted(catalog: Any, stream: StreamConfig, files: Sequence[Landed]) -> list[Landed]:
    """The landed ``files`` (oldest modification time first) that no commit of the writer in the table's
    current lineage recorded in its source position (``laketide.source-files``): the backlog.

    The walk goes back from the current snapshot only as far as the files need. Spark's file source takes the
    oldest files first (by modification time), so a file older than every file the walked commits took was taken
    before them and is not looked for, unless it landed in ``data/`` (its status-change time) after the newest
    commit: a copy that kept an old modification time (``cp -p``), which the writer refreshes and ingests
    (``laketide.ingest.late_files``), is pending until a commit names it. And a commit older than a file's landing
    cannot hold it, so the walk stops once every file still looked for landed after the commit reached (less
    :data:`CLOCK_SKEW`). A file the writer found older than ``source_log_retention`` (``late_files.too_old_files``:
    it never takes it) is uncommitted whatever the walk assumed.
    """
    if not files:
        return []
    times = [f.mtime_ms for f in files]
    found: set[str] = set()
    oldest_taken: int | None = None
    newest_commit: int | None = None
    left: list[Landed] = list(files)
    skew = millis(CLOCK_SKEW)

    def stop(snap: Snap) -> bool:
        nonlocal oldest_taken, newest_commit, left
        if snap.summary.get(WRITER_ID) == stream.writer_id:
            newest_commit = snap.timestamp_ms if newest_commit is None else newest_commit
            for name, stat in source_position(snap.summary).items():
                found.add(name)
                if stat is not None and (oldest_taken is None or stat.mtime_ms < oldest_taken):
                    oldest_taken = stat.mtime_ms
        first = 0 if oldest_taken is None else bisect_left(times, oldest_taken)
        landed_since = [] if newest_commit is None else [f for f in files[:first]
                                                          if f.landed_ms > newest_commit - skew]
        left = [f for f in (*landed_since, *files[first:]) if f.name not in found]
        return not left or snap.timestamp_ms < min(f.landed_ms for f in left) - skew

    try:
        lineage(catalog, stream.table, stop)
    except TableNotFoundError:
        return list(files)
    # files the writer found older than source_log_retention: never taken, so never committed (the walk above would
    # take them for files read before the commits it reached)
    too_old = too_old_files(stream)
    left += [f for f in files if too_old.get(f.name) == f.landed_ms and f not in left and f.name not in found]
    return sorted(left, key=lambda f: (f.mtime_ms, f.name))



@dataclass(frozen=True)
class Freshness:
    """How fresh a stream's table is, at ``at``."""

    at: datetime
    #: landed -> committed seconds over the files the writer committed in the window (None: no file committed)
    p50: float | None
    p95: float | None
    max: float | None
    #: files committed in the window
    files: int
    #: now - the watermark (None before the first valid event)
    lag: float | None
    #: landed files not committed yet
    backlog: int
    #: the newest commit of the writer (None: none yet)
    last_commit: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at.isoformat(timespec="seconds"), "p50": self.p50, "p95": self.p95, "max": self.max,
                "files": self.files, "lag": self.lag, "backlog": self.backlog,
                "last_commit": None if self.last_commit is None else self.last_commit.isoformat(timespec="seconds")}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass(frozen=True)
class Latency:
    """Landed -> committed over a window: per file, the time of the commit that named it less its landing time."""

    commits: int
    files: int
    p50: float | None
    p95: float | None
    max: float | None


def latency(commits: Sequence[Snap], since_ms: int) -> Latency:
    """:class:`Latency` of the writer ``commits`` (any order) at or after ``since_ms``."""
    counted = 0
    values: list[float] = []
    for snap in commits:
        if snap.timestamp_ms < since_ms:
            continue
        counted += 1
        values += [max(0.0, (snap.timestamp_ms - stat.mtime_ms) / 1000)
                   for stat in source_position(snap.summary).values() if stat is not None]
    if not values:
        return Latency(counted, 0, None, None, None)
    return Latency(counted, len(values), _quantile(values, 0.5), _quantile(values, 0.95), max(values))


def freshness(catalog: Any, stream: StreamConfig, now: datetime | None = None,
              window: timedelta = timedelta(hours=1)) -> Freshness:
    """Landed -> committed latency of the files the writer committed in the last ``window`` (:func:`latency`), the
    lag (now - watermark) and the backlog."""
    now = now or datetime.now(UTC)
    since = millis(now - window - datetime(1970, 1, 1, tzinfo=UTC))
    commits: list[Snap] = []

    def stop(snap: Snap) -> bool:
        if snap.summary.get(WRITER_ID) == stream.writer_id:
            commits.append(snap)
        return snap.timestamp_ms < since and bool(commits)

    with contextlib.suppress(TableNotFoundError):
        lineage(catalog, stream.table, stop)
    newest = commits[0] if commits else None
    files = landed_files(stream.landing_path)
    pending = uncommitted(catalog, stream, files) if newest is not None else list(files)
    watermark = None if newest is None else newest.summary.get(WATERMARK)
    lag = None if watermark is None else (now - datetime.fromisoformat(watermark)).total_seconds()
    last = None if newest is None else datetime.fromtimestamp(newest.timestamp_ms / 1000, UTC)
    figures = latency(commits, since)
    return Freshness(now, figures.p50, figures.p95, figures.max, figures.files, lag, len(pending), last)
