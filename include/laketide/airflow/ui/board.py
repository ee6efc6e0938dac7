"""The partition board: one cell per hour of a stream, coloured by its state.

Recorded states come from the status table (``laketide.close.status``: the newest row of each hour); the hours
after the newest recorded one, up to the current hour, are checked now from metadata
(``close.status.being_written``: snapshot summaries and the landing zone's listing, no data file). The recorded
states of a stream are kept in memory per status-table version (the metadata file its catalog row points to,
one small SQL query to read), so a board of a stream with months of history is read from the table once per
status commit, not once per request. The open and lagging hours being written show their audit and rejects so
far (``ui.live``), every day of the range its hours by state, rows and rejects, and the cells may be filtered on
one state.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from laketide.airflow.ui import models
from laketide.close.partitions import PartitionStatus, State
from laketide.close.status import StatusRecord, being_written, latest
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import TableNotFoundError
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import HOUR, partition_key
from laketide.lake.snapshots import metadata_location

#: the legend, in the order a stream's hours go through the states
STATES = [s.value for s in (State.OPEN, State.LAGGING, State.GAP, State.COMPLETE, State.EMPTY, State.VERIFIED,
                            State.FAILED, State.CLOSED, State.REOPENED)] + ["none"]
#: the range a board shows when none is asked for
DEFAULT_DAYS = 7
#: the longest range one board answers (a cell per hour)
MAX_HOURS = 24 * 400

_cache: dict[tuple[str, str], tuple[str, dict[datetime, StatusRecord]]] = {}
_lock = threading.Lock()


def status_version(config: LaketideConfig) -> str | None:
    """The status table's current metadata file (changes with every commit), or None when it does not exist."""
    try:
        return metadata_location(load_catalog(config.catalog), config.close.status_table)
    except TableNotFoundError:
        return None


def recorded(config: LaketideConfig, stream: str) -> tuple[str | None, dict[datetime, StatusRecord]]:
    """The newest status record of every hour of ``stream`` and the status table version it was read at (cached
    per version: a new status commit is read on the next call, an unchanged table is not read again)."""
    version = status_version(config)
    if version is None:
        return None, {}
    key = (config.close.status_table, stream)
    with _lock:
        cached = _cache.get(key)
    if cached is not None and cached[0] == version:
        return version, cached[1]
    newest = latest(config, stream)
    with _lock:
        _cache[key] = (version, newest)
    return version, newest


def clear_cache() -> None:
    with _lock:
        _cache.clear()


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds")


def _duplicates(verification: str | None) -> int | None:
    """Duplicates removed, from a status record's verification JSON (a verification's or an action's)."""
    if not verification:
        return None
    try:
        data = json.loads(verification)
    except ValueError:
        return None
    if isinstance(data, dict) and isinstance(data.get("duplicates"), int):
        return int(data["duplicates"])
    if isinstance(data, dict) and isinstance(data.get("action"), dict):
        hours = data["action"].get("hours") or {}
        return sum(int(h.get("duplicates_removed") or 0) for h in hours.values() if isinstance(h, dict)) or None
    return None


def recorded_cell(record: StatusRecord) -> models.Cell:
    return models.Cell(
        hour=partition_key(record.partition), state=record.state.value, rows=record.rows, rejects=record.rejects,
        audit=record.audit, duplicates_removed=_duplicates(record.verification), reason=record.reason,
        recorded_at=_iso(record.recorded_at),
        snapshot_id=None if record.snapshot_id is None else str(record.snapshot_id), run_id=record.run_id)


def checked_cell(status: PartitionStatus, counts: tuple[int, int] | None = None) -> models.Cell:
    """An hour being written, checked now; ``counts``: its audit and rejects so far (``ui.live.hour_counts``)."""
    audit, rejects = counts if counts is not None else (None, None)
    return models.Cell(
        hour=partition_key(status.partition), state=status.state.value, checked_now=True, rows=status.rows,
        audit=audit, rejects=rejects, reason=status.reason, recorded_at=_iso(status.checked_at),
        snapshot_id=None if status.snapshot_id is None else str(status.snapshot_id))


#: the hours being written whose audit and rejects are counted now (the hour being written and the lagging ones)
COUNTED = {State.OPEN, State.LAGGING}


def live_counts(config: LaketideConfig, stream: StreamConfig, live: Iterable[PartitionStatus],
                now: datetime) -> dict[datetime, tuple[int, int]]:
    """Audit and rejects so far of the open and lagging hours of the last day among ``live``."""
    from laketide.airflow.ui.live import hour_counts

    since = now - timedelta(days=1)
    return hour_counts(config, stream, [s.partition for s in live if s.state in COUNTED and s.partition >= since])


def day_summaries(cells: list[models.Cell]) -> list[models.DaySummary]:
    """Per UTC day of ``cells``: hours by state, rows and rejects (the hours that hold counts)."""
    days: dict[str, models.DaySummary] = {}
    for cell in cells:
        day = days.setdefault(cell.hour[:10], models.DaySummary(day=cell.hour[:10], counts={}))
        day.counts[cell.state] = day.counts.get(cell.state, 0) + 1
        day.rows += cell.rows or 0
        day.rejects += cell.rejects or 0
    return list(days.values())


def default_range(now: datetime, days: int = DEFAULT_DAYS) -> tuple[datetime, datetime]:
    """The last ``days`` days up to and including the current hour."""
    end = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + HOUR
    return end - timedelta(days=days), end


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    return [start + i * HOUR for i in range(int((end - start) / HOUR))]


def settled(stream: StreamConfig, records: dict[datetime, StatusRecord],
            now: datetime) -> dict[datetime, StatusRecord]:
    """The records shown as recorded: an hour a redo reopened while it is still being written (it has not ended, or
    late rows may still come) grows with every batch, so it is checked now (open, lagging, ...) like the hours
    after the newest record, not shown with the count the redo recorded."""
    return {h: r for h, r in records.items() if r.state != State.REOPENED or h + HOUR + stream.allowed_lateness <= now}


def board(config: LaketideConfig, stream: StreamConfig, start: datetime, end: datetime,
          now: datetime | None = None, state: str | None = None) -> models.Board:
    """The board of ``stream`` over the hours ``[start, end)`` (whole UTC hours, ``start < end``): recorded states,
    and the hours being written checked now. Hours after the current one are left out; with ``state``, only the
    cells in that state (the counts and the days still count every hour)."""
    began = time.perf_counter()
    now = now or datetime.now(UTC)
    version, records = recorded(config, stream.name)
    current = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    newest = settled(stream, records, now)
    shown = [h for h in hours_between(start, end) if h <= current]
    live: dict[datetime, PartitionStatus] = {}
    if shown and shown[-1] > max(newest, default=shown[0] - HOUR):  # hours after the newest record are in range
        live = {s.partition: s for s in being_written(config, stream, newest.keys(), now)}
    counted = live_counts(config, stream, (live[h] for h in shown if h in live), now)
    cells: list[models.Cell] = []
    for hour in shown:
        if hour in live:
            cells.append(checked_cell(live[hour], counted.get(hour)))
        elif hour in newest:
            cells.append(recorded_cell(newest[hour]))
        else:
            cells.append(models.Cell(hour=partition_key(hour), state="none"))
    counts = {s: 0 for s in STATES}
    for cell in cells:
        counts[cell.state] = counts.get(cell.state, 0) + 1
    return models.Board(
        stream=stream.name, table=stream.table, start=partition_key(start), end=partition_key(end),
        now=now.isoformat(timespec="seconds"), states=STATES, counts=counts,
        cells=[c for c in cells if state is None or c.state == state], status_version=version,
        elapsed_ms=round((time.perf_counter() - began) * 1000, 1), days=day_summaries(cells), state=state)


#: keys of a step's verification JSON that hold a snapshot id (records written before ids were strings hold numbers)
SNAPSHOT_KEYS = frozenset({"snapshot_id", "from_snapshot", "to_snapshot"})


def _verification(text: str | None) -> dict[str, object] | None:
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return _ids_as_text(data) if isinstance(data, dict) else None


def _ids_as_text(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every snapshot id a string, however old the record (JavaScript rounds 64-bit numbers)."""
    return {key: (str(value) if key in SNAPSHOT_KEYS and isinstance(value, int) and not isinstance(value, bool)
                  else _ids_as_text(value) if isinstance(value, dict) else value)
            for key, value in data.items()}


def steps(records: Iterable[StatusRecord]) -> list[models.HourStep]:
    return [models.HourStep(
        state=r.state.value, recorded_at=r.recorded_at.isoformat(timespec="seconds"), rows=r.rows,
        rejects=r.rejects, audit=r.audit, reason=r.reason,
        snapshot_id=None if r.snapshot_id is None else str(r.snapshot_id), run_id=r.run_id,
        verification=_verification(r.verification)) for r in records]


def hour_detail(config: LaketideConfig, stream: StreamConfig, hour: datetime,
                now: datetime | None = None) -> models.HourDetail:
    """One hour: every recorded step (oldest first) and its cell (checked now when it is being written)."""
    from laketide.close.status import history

    now = now or datetime.now(UTC)
    records = history(config, stream.name, hour)
    newest = settled(stream, recorded(config, stream.name)[1], now)
    cell: models.Cell
    if records and records[-1].partition in newest:
        cell = recorded_cell(records[-1])
    else:
        live = {s.partition: s for s in being_written(config, stream, newest.keys(), now) if s.partition == hour}
        counted = live_counts(config, stream, live.values(), now)
        cell = (checked_cell(live[hour], counted.get(hour)) if hour in live
                else models.Cell(hour=partition_key(hour), state="none"))
    return models.HourDetail(stream=stream.name, hour=partition_key(hour), cell=cell, steps=steps(records))
