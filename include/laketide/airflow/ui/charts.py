"""The lakehouse view's charts: what each one draws, read from Iceberg metadata with pyiceberg (no JVM, no data file).

* rows and rejects per hour of a range: the events and rejects tables' current manifests (record counts by hour
  partition; each manifest read once per process, ``maintain.health.live_files``);
* lag and landed -> committed latency of the writer's batches of the last hours: their snapshot summaries (the
  newest snapshots only, ``lake.snapshots.lineage``): lag = commit time - the watermark it committed, latency = commit
  time - the landing time of the batch's oldest file;
* files per closed hour before and after compaction: the hour's data files now, and how many there were before the
  compactions (``replace`` snapshots still kept: the files each one removed and added in the hour, from the
  manifests it wrote);
* snapshots and metadata size per day: the newest metadata file of each day still kept (the metadata log, at most
  ``write.metadata.previous-versions-max`` files) or, for a day none is kept of, the snapshots the day's last
  maintenance record counted.

Snapshot ids are strings (a browser's JSON numbers round them past 2^53).
"""

from __future__ import annotations

import gzip
import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import BaseModel

from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import TableNotFoundError
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import BATCH_ID, WATERMARK, WRITER_ID, source_position
from laketide.lake.hours import HOUR, from_epoch_hours, partition_key
from laketide.lake.snapshots import Snap, lineage
from laketide.maintain.health import live_files, load_current

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: how far back the batches chart goes, and how many batches it shows at most
BATCH_HOURS = 6
MAX_BATCHES = 500
#: closed hours the files chart shows at most (the newest of the range)
MAX_CLOSED_HOURS = 48
#: days the snapshots chart shows
DAYS = 14


class HourRows(BaseModel):
    hour: str
    rows: int
    rejects: int


class BatchPoint(BaseModel):
    batch_id: int
    snapshot_id: str
    committed_at: str
    #: commit time - the watermark the batch committed (seconds)
    lag_s: float | None = None
    #: commit time - the landing time of the batch's oldest file (seconds)
    latency_s: float | None = None


class HourFiles(BaseModel):
    hour: str
    #: data files of the hour now
    files: int
    #: data files of the hour before the compactions still kept in the table's history (= files: none)
    written: int


class DayPoint(BaseModel):
    day: str
    snapshots: int | None = None
    metadata_bytes: int | None = None
    #: where the figures come from: "metadata file" or "maintenance record"
    source: str


class Charts(BaseModel):
    stream: str
    table: str
    start: str
    end: str
    hours: list[HourRows]
    batches: list[BatchPoint]
    files: list[HourFiles]
    days: list[DayPoint]


def _iso(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _table(config: LaketideConfig, name: str) -> Table | None:
    try:
        return load_current(load_catalog(config.catalog), name)
    except TableNotFoundError:
        return None


def records_by_hour(table: Table | None) -> dict[datetime, int]:
    out: dict[datetime, int] = {}
    for f in live_files(table) if table is not None else []:
        if f.hour is not None:
            out[f.hour] = out.get(f.hour, 0) + f.records
    return out


def hours_chart(config: LaketideConfig, stream: StreamConfig, start: datetime, end: datetime) -> list[HourRows]:
    """Rows and rejects of each hour of ``[start, end)`` in the events and rejects tables now."""
    rows = records_by_hour(_table(config, stream.table))
    rejects = records_by_hour(_table(config, stream.rejects_table))
    hours = [start + i * HOUR for i in range(int((end - start) / HOUR))]
    return [HourRows(hour=partition_key(h), rows=rows.get(h, 0), rejects=rejects.get(h, 0)) for h in hours]


def batches_chart(config: LaketideConfig, stream: StreamConfig, now: datetime,
                  hours: int = BATCH_HOURS) -> list[BatchPoint]:
    """The writer's batches committed in the last ``hours`` hours (at most :data:`MAX_BATCHES`), oldest first."""
    since = (now - timedelta(hours=hours)).timestamp() * 1000
    seen = 0

    def stop(snap: Snap) -> bool:
        nonlocal seen
        seen += 1
        return snap.timestamp_ms < since or seen >= MAX_BATCHES

    try:
        _, snaps = lineage(load_catalog(config.catalog), stream.table, stop)
    except TableNotFoundError:
        return []
    out: list[BatchPoint] = []
    for snap in reversed(snaps):
        summary = snap.summary
        if snap.timestamp_ms < since or summary.get(WRITER_ID) != stream.writer_id or BATCH_ID not in summary:
            continue
        landed = [s.mtime_ms for s in source_position(summary).values() if s is not None]
        watermark = summary.get(WATERMARK)
        lag = None if not watermark else snap.timestamp_ms / 1000 - datetime.fromisoformat(watermark).timestamp()
        out.append(BatchPoint(
            batch_id=int(summary[BATCH_ID]), snapshot_id=str(snap.snapshot_id), committed_at=_iso(snap.timestamp_ms),
            lag_s=None if lag is None else round(lag, 1),
            latency_s=round((snap.timestamp_ms - min(landed)) / 1000, 1) if landed else None))
    return out


_compactions: dict[tuple[str, int], dict[datetime, int]] = {}
_lock = threading.Lock()


def removed_by(table: Table, snapshot_id: int, manifest_list: str) -> dict[datetime, int]:
    """Data files a ``replace`` snapshot removed less those it added, by hour: from the manifests it wrote (their
    entries of that snapshot: deleted and added). Kept per snapshot (a snapshot never changes)."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus, read_manifest_list

    key = (table.metadata.table_uuid.hex, snapshot_id)
    with _lock:
        kept = _compactions.get(key)
    if kept is not None:
        return kept
    out: dict[datetime, int] = {}
    for manifest in read_manifest_list(table.io.new_input(manifest_list)):
        if manifest.added_snapshot_id != snapshot_id or manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            hour = entry.data_file.partition[0] if len(entry.data_file.partition) else None
            if entry.snapshot_id != snapshot_id or not isinstance(hour, int):
                continue
            change = {ManifestEntryStatus.DELETED: 1, ManifestEntryStatus.ADDED: -1}.get(entry.status, 0)
            out[from_epoch_hours(hour)] = out.get(from_epoch_hours(hour), 0) + change
    with _lock:
        _compactions[key] = out
    return out


def files_chart(config: LaketideConfig, stream: StreamConfig, closed: list[datetime]) -> list[HourFiles]:
    """Data files of each of the ``closed`` hours now, and before the compactions the table still remembers."""
    table = _table(config, stream.table)
    if table is None or not closed:
        return []
    now: dict[datetime, int] = {}
    for f in live_files(table):
        if f.hour is not None:
            now[f.hour] = now.get(f.hour, 0) + 1
    written = dict(now)
    for snap in table.metadata.snapshots:
        if snap.summary is not None and snap.summary.operation.value == "replace":
            for hour, count in removed_by(table, snap.snapshot_id, snap.manifest_list).items():
                written[hour] = written.get(hour, 0) + count
    return [HourFiles(hour=partition_key(h), files=now.get(h, 0), written=max(written.get(h, 0), now.get(h, 0)))
            for h in sorted(closed)[-MAX_CLOSED_HOURS:]]


def _snapshots_in(table: Table, location: str) -> tuple[int, int] | None:
    """The snapshots a metadata file lists and its size; None when it is gone."""
    try:
        data = table.io.new_input(location).open().read()
    except (FileNotFoundError, OSError):
        return None
    size = len(data)
    if data.startswith(b"\x1f\x8b"):
        data = gzip.decompress(data)
    return data.count(b'"manifest-list"'), size


def days_chart(config: LaketideConfig, stream: StreamConfig, now: datetime, days: int = DAYS) -> list[DayPoint]:
    """Snapshots and metadata size at the end of each of the last ``days`` days (UTC): the day's newest metadata
    file still kept, else the snapshots its last maintenance record counted (size unknown), else nothing."""
    from laketide.airflow.ui.panels import maintenance_records

    table = _table(config, stream.table)
    if table is None:
        return []
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first = today - timedelta(days=days - 1)
    newest: dict[datetime, str] = {}
    for entry in table.metadata.metadata_log:  # oldest first
        day = datetime.fromtimestamp(entry.timestamp_ms / 1000, UTC).replace(hour=0, minute=0, second=0,
                                                                              microsecond=0)
        if day >= first:
            newest[day] = entry.metadata_file
    newest[today] = table.metadata_location
    recorded: dict[datetime, int] = {}
    for r in maintenance_records(config):  # oldest first
        if r.table_name == stream.table and r.snapshots_after is not None and r.outcome == "ok":
            recorded[r.started_at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)] = \
                r.snapshots_after
    out: list[DayPoint] = []
    for i in range(days):
        day = first + timedelta(days=i)
        found = _snapshots_in(table, newest[day]) if day in newest else None
        if day == today:
            found = (len(table.metadata.snapshots), found[1] if found else 0)
        if found is not None:
            out.append(DayPoint(day=day.date().isoformat(), snapshots=found[0], metadata_bytes=found[1],
                                source="metadata file"))
        elif day in recorded:
            out.append(DayPoint(day=day.date().isoformat(), snapshots=recorded[day], source="maintenance record"))
    return out


def charts(config: LaketideConfig, stream: StreamConfig, start: datetime, end: datetime,
           now: datetime | None = None) -> Charts:
    """Every chart of ``stream``: rows and rejects per hour of ``[start, end)``, the writer's recent batches, files of
    the closed hours of the range, snapshots and metadata size of the last days."""
    from laketide.airflow.ui.board import recorded
    from laketide.maintain.plan import closed_hours

    now = now or datetime.now(UTC)
    closed = [h for h in closed_hours(recorded(config, stream.name)[1]) if start <= h < end]
    return Charts(stream=stream.name, table=stream.table, start=partition_key(start), end=partition_key(end),
                  hours=hours_chart(config, stream, start, min(end, now.replace(minute=0, second=0, microsecond=0)
                                                               + HOUR)),
                  batches=batches_chart(config, stream, now), files=files_chart(config, stream, closed),
                  days=days_chart(config, stream, now))
