"""The writer panel: is the stream's writer running (its lease row), its recent batches (snapshot summaries), its
lag (now - watermark), its backlog (landed files no commit recorded) and landed -> committed freshness.

Metadata only: the lease table of the catalog database, the events table's snapshot summaries (the newest ones
only: ``lake.snapshots.lineage``) and the landing zone's listing (one ``stat`` per file).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from laketide.airflow.ui import models
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import TableNotFoundError
from laketide.ingest.backlog import latency, uncommitted
from laketide.ingest.inspection import landed_files
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import (
    BATCH_ID,
    MAX_EVENT_TIME,
    MIN_EVENT_TIME,
    OPERATIONS,
    PARTITION_ROWS,
    REJECTED_ROWS,
    VALID_ROWS,
    WATERMARK,
    WRITER_ID,
    source_position,
)
from laketide.lake.snapshots import Snap, lineage

#: how far back freshness is measured
FRESHNESS_WINDOW = timedelta(hours=1)


def _at(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def lease_state(config: LaketideConfig, stream: StreamConfig, now: float | None = None
                ) -> tuple[str, models.Holder | None]:
    """``running`` (a holder renewed its lease within ``writer_lease``), ``held by redo`` (a redo holds the lease
    while it runs: the writer resumes after it), ``stale`` (the holder did not renew it: dead, frozen or cut off),
    ``stopped`` (no holder: it released the lease) or ``never started`` (no lease table yet), with the holder."""
    from sqlalchemy.exc import SQLAlchemyError

    from laketide.lake.lease import WriterLease, engine_for
    from laketide.redo.job import REDO_MODE

    now = time.time() if now is None else now
    lease = WriterLease(engine_for(config.catalog), stream.writer_id, stream.writer_lease, "ui")
    try:
        holder = lease.holder()
    except SQLAlchemyError:  # the lease table does not exist: no writer ever started on this catalog
        return "never started", None
    finally:
        lease.engine.dispose()
    if holder is None:
        return "stopped", None
    seen = models.Holder(host=holder.host, pid=holder.pid, mode=holder.mode, acquired_at=_at(holder.acquired_at * 1000),
                         heartbeat_at=_at(holder.heartbeat_at * 1000),
                         heartbeat_age_s=round(now - holder.heartbeat_at, 1))
    fresh = now - holder.heartbeat_at <= stream.writer_lease.total_seconds()
    if fresh and holder.mode == REDO_MODE:
        return "held by redo", seen
    return ("running" if fresh else "stale"), seen


def _int(value: str | None) -> int | None:
    return None if value is None else int(value)


def batch(snap: Snap) -> models.Batch:
    """A writer commit as the panel lists it."""
    summary = snap.summary
    position = source_position(summary)
    landed = [s.mtime_ms for s in position.values() if s is not None]
    rows = _int(summary.get(VALID_ROWS))
    if rows is None and summary.get(PARTITION_ROWS):
        rows = sum(int(v) for v in json.loads(summary[PARTITION_ROWS]).values())
    return models.Batch(
        batch_id=int(summary[BATCH_ID]), snapshot_id=str(snap.snapshot_id), committed_at=_at(snap.timestamp_ms),
        rows=rows, rejects=_int(summary.get(REJECTED_ROWS)), min_event_time=summary.get(MIN_EVENT_TIME),
        max_event_time=summary.get(MAX_EVENT_TIME), watermark=summary.get(WATERMARK), files=len(position),
        freshness_s=round((snap.timestamp_ms - max(landed)) / 1000, 1) if landed else None)


def merged_operations(catalog: Any, stream: StreamConfig, oldest_batch: int) -> dict[int, dict[str, int]]:
    """An upsert stream's merged-table commits back to batch ``oldest_batch``: batch id -> the keys it changed by
    operation (``lake.commits.OPERATIONS``). Empty for an append stream or a merged table not created yet."""
    if stream.upsert is None:
        return {}

    def stop(snap: Snap) -> bool:
        return snap.summary.get(WRITER_ID) == stream.writer_id and int(snap.summary.get(BATCH_ID, -1)) < oldest_batch

    try:
        _, snaps = lineage(catalog, stream.upsert.table, stop)
    except TableNotFoundError:
        return {}
    out: dict[int, dict[str, int]] = {}
    for snap in snaps:
        summary = snap.summary
        if summary.get(WRITER_ID) == stream.writer_id and BATCH_ID in summary and OPERATIONS in summary:
            out.setdefault(int(summary[BATCH_ID]), json.loads(summary[OPERATIONS]))
    return out


def freshness(commits: list[Snap], since_ms: int) -> models.Freshness:
    """Landed -> committed of the writer commits at or after ``since_ms`` (``laketide.ingest.backlog.latency``)."""
    figures = latency(commits, since_ms)
    return models.Freshness(commits=figures.commits, files=figures.files, median_s=_round(figures.p50),
                            p95_s=_round(figures.p95), max_s=_round(figures.max))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def reported(config: LaketideConfig, stream: StreamConfig) -> models.Reported | None:
    """What the stream's writer application last reported (``laketide.lake.writer_status``), or None."""
    from sqlalchemy.exc import SQLAlchemyError

    from laketide.lake.lease import engine_for
    from laketide.lake.writer_status import read

    engine = engine_for(config.catalog)
    try:
        status = read(engine).get(stream.name)
    except SQLAlchemyError:
        return None
    finally:
        engine.dispose()
    if status is None:
        return None
    return models.Reported(group=status.group, state=status.state, reason=status.reason,
                           application=str(status.figures.get("application", "")),
                           updated_at=_at(status.updated_at * 1000))


def writer(config: LaketideConfig, stream: StreamConfig, limit: int = 20, now: datetime | None = None
           ) -> models.Writer:
    """The writer panel of ``stream`` (``limit``: how many recent batches to list)."""
    now = now or datetime.now(UTC)
    now_ms = now.timestamp() * 1000
    state, holder = lease_state(config, stream, now.timestamp())
    since = int(now_ms - FRESHNESS_WINDOW.total_seconds() * 1000)
    catalog = load_catalog(config.catalog)
    seen = 0

    def stop(snap: Snap) -> bool:  # the newest `limit` writer commits, and every one of the last hour
        nonlocal seen
        if snap.summary.get(WRITER_ID) == stream.writer_id and BATCH_ID in snap.summary:
            seen += 1
        return seen >= limit and snap.timestamp_ms < since

    try:
        _, snaps = lineage(catalog, stream.table, stop)
    except TableNotFoundError:
        snaps = []
    commits = [s for s in snaps if s.summary.get(WRITER_ID) == stream.writer_id and BATCH_ID in s.summary]
    files = landed_files(stream.landing_path)
    pending = uncommitted(catalog, stream, files) if commits else list(files)
    newest = commits[0] if commits else None
    watermark = newest.summary.get(WATERMARK) if newest is not None else None
    lag = None if watermark is None else round((now - datetime.fromisoformat(watermark)).total_seconds(), 1)
    oldest = min(pending, key=lambda f: f.landed_ms, default=None)
    shown = [batch(s) for s in commits[:limit]]
    if shown and stream.upsert is not None:
        operations = merged_operations(catalog, stream, min(b.batch_id for b in shown))
        shown = [b.model_copy(update={"operations": operations.get(b.batch_id)}) for b in shown]
    return models.Writer(
        stream=stream.name, group=stream.writer_group, reported=reported(config, stream),
        writer_id=stream.writer_id, running=state == "running", state=state, holder=holder,
        writer_lease_s=stream.writer_lease.total_seconds(), batches=shown,
        last_commit=None if newest is None else _at(newest.timestamp_ms), watermark=watermark, lag_s=lag,
        backlog_files=len(pending), backlog_bytes=sum(f.size for f in pending),
        oldest_backlog=None if oldest is None else oldest.name,
        oldest_backlog_landed=None if oldest is None else _at(oldest.landed_ms),
        freshness=freshness(commits, since), now=now.isoformat(timespec="seconds"))
