"""Table metadata figures, read with pyiceberg (no Spark): before/after figures of each maintenance action and
the health summary ``make status`` shows per table (small-file ratio, files per closed hour, manifests,
snapshots, metadata size, age of the last maintenance)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple

from laketide.config import LaketideConfig
from laketide.errors import TableNotFoundError
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import from_epoch_hours
from laketide.lake.snapshots import Snap
from laketide.maintain.plan import SMALL_FILE_SHARE

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table import Table

    from laketide.maintain.record import MaintenanceRecord


@dataclass(frozen=True)
class TableStats:
    """A table's current figures from its metadata."""

    files: int
    bytes: int
    records: int
    manifests: int
    snapshots: int
    metadata_bytes: int
    snapshot_ids: frozenset[int]
    #: delete files (position or equality: an upsert stream's merged table under merge-on-read) and the rows they
    #: delete, from the current snapshot's totals
    delete_files: int = 0
    deleted_rows: int = 0


def _total(table: Table, key: str) -> int | None:
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    value = snapshot.summary.additional_properties.get(key)
    return None if value is None else int(value)


def table_stats(table: Table) -> TableStats:
    """Files, bytes and records (the current snapshot's totals), manifests of the current snapshot, snapshots
    kept and the metadata file's size."""
    manifests = len(current_manifests(table))
    files, size, records = (_total(table, k) for k in ("total-data-files", "total-files-size", "total-records"))
    if files is None or size is None or records is None:  # a writer that keeps no totals: count the manifests
        data = table.inspect.data_files().select(["file_size_in_bytes", "record_count"]).to_pylist()
        files, size = len(data), sum(d["file_size_in_bytes"] for d in data)
        records = sum(d["record_count"] for d in data)
    deleted = sum(_total(table, k) or 0 for k in ("total-position-deletes", "total-equality-deletes"))
    return TableStats(files, size, records, manifests, len(table.metadata.snapshots),
                      len(table.io.new_input(table.metadata_location)),
                      frozenset(s.snapshot_id for s in table.metadata.snapshots),
                      _total(table, "total-delete-files") or 0, deleted)


def snaps(table: Table) -> list[Snap]:
    """Every snapshot of ``table`` as a :class:`Snap` (summary properties included)."""
    out = []
    for s in table.metadata.snapshots:
        summary = dict(s.summary.additional_properties) if s.summary is not None else {}
        out.append(Snap(s.snapshot_id, s.parent_snapshot_id, s.sequence_number or 0, s.timestamp_ms, summary))
    return out


#: live data files (hour or None, size in bytes, records) of each manifest read, by manifest path: a manifest is never
#: rewritten in place, so a table's next read only opens the manifests committed since (one per writer commit)
_manifest_files: dict[str, list[LiveFile]] = {}
_MANIFESTS_KEPT = 50_000
#: the manifests of each manifest list read, by its path
_manifest_lists: dict[str, list[ManifestFile]] = {}
_LISTS_KEPT = 200
_lock = threading.Lock()


def _read_entries(table: Table, manifest: ManifestFile) -> list[LiveFile]:
    out: list[LiveFile] = []
    for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
        data = entry.data_file
        hour = data.partition[0] if len(data.partition) else None
        out.append(LiveFile(from_epoch_hours(hour) if isinstance(hour, int) else None, int(data.file_size_in_bytes),
                            int(data.record_count)))
    return out


def current_manifests(table: Table) -> list[ManifestFile]:
    """The current snapshot's manifests, its manifest list read once per process (kept by path: never rewritten)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    with _lock:
        kept = _manifest_lists.get(snapshot.manifest_list)
    if kept is None:
        kept = list(snapshot.manifests(table.io))
        with _lock:
            if len(_manifest_lists) >= _LISTS_KEPT:
                _manifest_lists.clear()
            _manifest_lists[snapshot.manifest_list] = kept
    return kept


class LiveFile(NamedTuple):
    """A data file of the current snapshot."""

    #: its hour, when the table's first partition field is the hour
    hour: datetime | None
    size: int
    records: int


def live_files(table: Table) -> list[LiveFile]:
    """The current snapshot's data files, read from the manifests, each manifest once per process (kept by
    path)."""
    from pyiceberg.manifest import ManifestContent
    from pyiceberg.utils.concurrent import ExecutorFactory

    manifests = [m for m in current_manifests(table) if m.content == ManifestContent.DATA]
    with _lock:
        kept = {m.manifest_path: _manifest_files.get(m.manifest_path) for m in manifests}
    missing = [m for m in manifests if kept[m.manifest_path] is None]
    if missing:  # read in parallel (pyiceberg's own executor, as its metadata tables read manifests)
        read = ExecutorFactory.get_or_create().map(lambda m: _read_entries(table, m), missing)
        fresh = dict(zip((m.manifest_path for m in missing), read, strict=True))
        kept.update(fresh)
        with _lock:
            if len(_manifest_files) + len(fresh) > _MANIFESTS_KEPT:
                _manifest_files.clear()
            _manifest_files.update(fresh)
    return [f for m in manifests for f in kept[m.manifest_path] or []]


def hourly_files(table: Table) -> dict[datetime, list[int]]:
    """Sizes of the data files of each hourly partition (the table's first partition field is the hour)."""
    out: dict[datetime, list[int]] = {}
    for hour, size, _ in live_files(table):
        if hour is not None:
            out.setdefault(hour, []).append(size)
    return out


def file_counts(table: Table) -> dict[datetime, int]:
    """Data files per hourly partition, from the partitions metadata table (manifests only)."""
    if table.current_snapshot() is None or not table.spec().fields:
        return {}
    counts: dict[datetime, int] = {}
    for row in table.inspect.partitions().to_pylist():
        hour = next(iter((row["partition"] or {}).values()), None)
        if isinstance(hour, int):
            counts[from_epoch_hours(hour)] = int(row["file_count"])
    return counts


@dataclass(frozen=True)
class Health:
    """The health summary of one table."""

    table: str
    files: int
    small_files: int
    manifests: int
    snapshots: int
    metadata_bytes: int
    closed_hours: int
    max_files_per_closed_hour: int
    last_maintenance: datetime | None
    #: delete files (an upsert stream's merged table): each one a read merges in until compaction applies it
    delete_files: int = 0
    #: rows those files delete
    deleted_rows: int = 0

    @property
    def small_file_ratio(self) -> float:
        return self.small_files / self.files if self.files else 0.0

    @property
    def delete_file_share(self) -> float:
        """Delete files among all the files a read opens."""
        return self.delete_files / (self.files + self.delete_files) if self.delete_files else 0.0


def table_health(table: Table, name: str, target_size: int, closed: list[datetime],
                 last: datetime | None) -> Health:
    """The health of one table from its metadata: the current snapshot's totals and manifests (each manifest read
    once per process: :func:`live_files`), no data file and no scan planning."""
    stats = table_stats(table)
    files = live_files(table)
    small = sum(1 for f in files if f.size < SMALL_FILE_SHARE * target_size)
    by_hour: dict[datetime, int] = {}
    for f in files:
        if f.hour is not None:
            by_hour[f.hour] = by_hour.get(f.hour, 0) + 1
    per_closed = [by_hour.get(h, 0) for h in closed]
    return Health(name, stats.files, small, stats.manifests, stats.snapshots, stats.metadata_bytes,
                  len(closed), max(per_closed, default=0), last, stats.delete_files, stats.deleted_rows)


#: loaded tables by name, with the metadata file they were loaded from (reused while it is current)
_tables: dict[str, tuple[str, Table]] = {}


def load_current(catalog: SqlCatalog, name: str) -> Table:
    """``catalog.load_table(name)``, parsed again only when the table's metadata file changed (one catalog query).

    :raises TableNotFoundError: no such table
    """
    from laketide.lake.snapshots import metadata_location

    location = metadata_location(catalog, name)
    with _lock:
        kept = _tables.get(name)
    if kept is not None and kept[0] == location:
        return kept[1]
    table = catalog.load_table(name)
    with _lock:
        _tables[name] = (table.metadata_location, table)
    return table


def health(config: LaketideConfig, closed: Callable[[str], list[datetime]] | None = None,
           records: list[MaintenanceRecord] | None = None) -> list[Health]:
    """The health of every maintained table that exists.

    :param closed: the closed hours of a stream (default: read from the status table)
    :param records: the maintenance record (default: read from its table)
    """
    from laketide.close.status import latest
    from laketide.maintain.plan import closed_hours, targets
    from laketide.maintain.record import history, last_maintenance

    catalog = load_catalog(config.catalog)
    last = last_maintenance(history(config) if records is None else records)
    closed_by_stream: dict[str, list[datetime]] = {}
    out: list[Health] = []
    for target in targets(config):
        try:
            table = load_current(catalog, target.table)
        except TableNotFoundError:
            continue
        hours: list[datetime] = []
        if target.stream is not None:
            name = target.stream.name
            if name not in closed_by_stream:
                closed_by_stream[name] = closed(name) if closed else closed_hours(latest(config, name))
            hours = closed_by_stream[name]
        policy = config.maintenance.policy(target.table)
        out.append(table_health(table, target.table, policy.target_file_size, hours, last.get(target.table)))
    return out


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{n}B"


def _age(now: datetime, when: datetime | None) -> str:
    if when is None:
        return "never"
    seconds = int((now - when).total_seconds())
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h ago"
    return f"{seconds / 86400:.1f}d ago"


def format_health(items: list[Health], now: datetime | None = None) -> list[str]:
    """A fixed-width table of :class:`Health` rows."""
    now = now or datetime.now(UTC)
    lines = [f"  {'table':<28} {'files':>7} {'small':>6} {'deletes':>8} {'closed h':>8} {'max/closed h':>12} "
             f"{'manifests':>9} {'snapshots':>9} {'metadata':>9}  last maintenance"]
    for h in items:
        deletes = f"{h.delete_files} ({h.delete_file_share:.0%})" if h.delete_files else "0"
        lines.append(
            f"  {h.table:<28} {h.files:>7} {h.small_file_ratio:>6.0%} {deletes:>8} {h.closed_hours:>8} "
            f"{h.max_files_per_closed_hour:>12} {h.manifests:>9} {h.snapshots:>9} {_size(h.metadata_bytes):>9}  "
            f"{_age(now, h.last_maintenance)}")
    return lines


def due_by_threshold(config: LaketideConfig) -> dict[str, list[str]]:
    """Tables past a threshold of their policy and the actions they are due for (metadata only, no Spark)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from laketide.close.status import latest
    from laketide.maintain.plan import closed_hours, small_files_per_hour, targets, threshold_actions

    catalog = load_catalog(config.catalog)
    due: dict[str, list[str]] = {}
    closed_by_stream: dict[str, list[datetime]] = {}
    for target in targets(config):
        try:
            table = catalog.load_table(target.table)
        except (NoSuchTableError, NoSuchNamespaceError):
            continue
        stats = table_stats(table)
        policy = config.maintenance.policy(target.table)
        small = 0
        if target.hour_column is not None and target.stream is not None and "rewrite_data_files" in policy.actions:
            name = target.stream.name
            if name not in closed_by_stream:
                closed_by_stream[name] = closed_hours(latest(config, name))
            per_hour = small_files_per_hour(hourly_files(table), closed_by_stream[name], policy.target_file_size)
            small = max(per_hour.values(), default=0)
        deletes = stats.delete_files if target.kind == "merged" else 0
        actions = threshold_actions(stats.manifests, stats.snapshots, policy, small, deletes)
        if actions:
            due[target.table] = actions
    return due


def due_after_close(config: LaketideConfig) -> dict[str, int]:
    """Hourly tables holding closed hours to compact (``min_input_files`` data files or more, as
    ``rewrite_data_files`` picks them), with how many such hours: metadata only, no Spark. Empty: the hours that
    closed left nothing to compact (an empty hour, a quiet one, hours compacted before), and the after-close run
    ends before Spark."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from laketide.close.status import latest
    from laketide.maintain.plan import closed_hours, hours_to_compact, targets

    catalog = load_catalog(config.catalog)
    due: dict[str, int] = {}
    closed_by_stream: dict[str, list[datetime]] = {}
    for target in targets(config):
        policy = config.maintenance.policy(target.table)
        if target.hour_column is None or target.stream is None or "rewrite_data_files" not in policy.actions:
            continue
        try:
            table = catalog.load_table(target.table)
        except (NoSuchTableError, NoSuchNamespaceError):
            continue
        name = target.stream.name
        if name not in closed_by_stream:
            closed_by_stream[name] = closed_hours(latest(config, name))
        hours = hours_to_compact(closed_by_stream[name], file_counts(table), policy.min_input_files)
        if hours:
            due[target.table] = len(hours)
    return due


#: the actions of the daily maintenance run
DAILY_ACTIONS = ("expire_tombstones", "expire_snapshots", "remove_orphan_files")


def due_daily(config: LaketideConfig, now: datetime | None = None) -> dict[str, list[str]]:
    """The daily actions each table is due for, from metadata only: ``expire_snapshots`` when it holds more than
    ``min_snapshots`` snapshots and one is older than its ``snapshot_retention``; ``remove_orphan_files`` when its
    oldest snapshot is older than its ``orphan_age`` (a younger table holds no file that old, so no orphan the
    action may remove); ``expire_tombstones`` when an upsert stream's tombstones table holds tombstones recorded
    before its expiry cutoff (``maintain.tombstones``). A fresh installation is due for nothing: no Spark
    application starts beside the writer's first batches."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from laketide.maintain import tombstones
    from laketide.maintain.plan import targets

    now = now or datetime.now(UTC)
    catalog = load_catalog(config.catalog)
    due: dict[str, list[str]] = {}
    for target in targets(config):
        try:
            table = catalog.load_table(target.table)
        except (NoSuchTableError, NoSuchNamespaceError):
            continue
        policy = config.maintenance.policy(target.table)
        times = [s.timestamp_ms for s in table.metadata.snapshots]
        if not times:
            continue
        oldest = datetime.fromtimestamp(min(times) / 1000, UTC)
        actions = []
        if ("expire_snapshots" in policy.actions and len(times) > policy.min_snapshots
                and oldest < now - policy.snapshot_retention):
            actions.append("expire_snapshots")
        if "remove_orphan_files" in policy.actions and oldest < now - policy.orphan_age:
            actions.append("remove_orphan_files")
        if (target.kind == "tombstones" and "expire_tombstones" in policy.actions and target.stream is not None
                and tombstones.due(catalog, target.stream, now)):
            actions.insert(0, "expire_tombstones")
        if actions:
            due[target.table] = actions
    return due
