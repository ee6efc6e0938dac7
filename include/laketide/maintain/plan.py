"""Maintenance decisions as plain functions: what to compact, what an expiry keeps, what is safe to run.

Nothing here talks to Spark; the functions take what the metadata says (snapshots, file counts per hour,
partition states) and return what the Spark application should do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from laketide.close.partitions import State
from laketide.config import MAINTENANCE_ACTIONS, ORPHAN_AGE_FLOOR, LaketideConfig, TablePolicy, maintained_tables
from laketide.config.upsert import tombstones_table
from laketide.errors import MaintenanceRequestError, UnsafeOrphanAgeError
from laketide.lake.commits import BATCH_ID, WRITER_ID
from laketide.lake.snapshots import Snap

#: a data file smaller than this share of the target size is "small" (Iceberg binpack's min-file-size default)
SMALL_FILE_SHARE = 0.75

if TYPE_CHECKING:
    from laketide.close.status import StatusRecord
    from laketide.config import StreamConfig


def staging_branch_owner(streams: Iterable[StreamConfig], branch: str) -> StreamConfig | None:
    """The stream whose writer made ``branch``, one of laketide's staging branches (an append on the public commit
    path: ``laketide_stage_<writer id>_<batch>_<id>``; an upsert stream's merge on a big table:
    ``laketide_merge_<stream>_<batch>_<id>``), or None for any other branch (a user's, a tag's name)."""
    from laketide.ingest.merge_sink import merge_prefix
    from laketide.ingest.public_sink import is_staging_branch, stage_prefix

    for stream in streams:
        if any(is_staging_branch(branch, prefix) for prefix in (stage_prefix(stream.writer_id),
                                                                 merge_prefix(stream))):
            return stream
    return None


Kind = Literal["events", "rejects", "status", "record", "merged", "tombstones"]
ALL = "all"


@dataclass(frozen=True)
class Target:
    """One maintained table and what kind it is."""

    table: str
    kind: Kind
    #: the stream whose writer commits to it (events and rejects tables)
    stream: StreamConfig | None = None

    @property
    def hour_column(self) -> str | None:
        """The timestamp column the table is partitioned by hour on (None: no hourly partitions)."""
        if self.stream is None or self.kind in ("merged", "tombstones"):  # an upsert stream's keyed tables
            return None
        return self.stream.event_time_field if self.kind == "events" else "event_hour"

    @property
    def streaming(self) -> bool:
        return self.kind in ("events", "rejects")


def targets(config: LaketideConfig) -> list[Target]:
    """Every maintained table, in the order a run serves them."""
    out: list[Target] = []
    for stream in config.streams:
        out += [Target(stream.table, "events", stream), Target(stream.rejects_table, "rejects", stream)]
        if stream.upsert is not None:
            out += [Target(stream.upsert.table, "merged", stream), Target(tombstones_table(stream.upsert), "tombstones",
                                                                          stream)]
    out += [Target(config.close.status_table, "status"), Target(config.maintenance.record_table, "record")]
    return out


@dataclass(frozen=True)
class Request:
    """A validated maintenance request: which tables, which actions (None: each table's policy), dry run."""

    tables: tuple[str, ...]
    actions: tuple[str, ...] | None
    dry_run: bool

    def actions_for(self, policy: TablePolicy) -> list[str]:
        """The actions to run on a table, in the order they must run (never expire under a compaction)."""
        wanted = self.actions if self.actions is not None else tuple(policy.actions)
        return [a for a in MAINTENANCE_ACTIONS if a in wanted]


def validate_request(config: LaketideConfig, table: str | Sequence[str], actions: str | Sequence[str] | None,
                     dry_run: object = False) -> Request:
    """Check a manual request before anything runs.

    :param table: ``all``, one maintained table, a list of them, or a comma-separated string
    :param actions: action names (list or comma-separated), ``default`` or None for each table's policy
    :raises MaintenanceRequestError: naming what is wrong and what is accepted
    """
    known = maintained_tables(config)
    names = [t.strip() for t in (table.split(",") if isinstance(table, str) else table)]
    if not names or any(not n for n in names):
        raise MaintenanceRequestError(f"table: give 'all' or one of {known}, not {table!r}")
    if ALL in names:
        if len(names) > 1:
            raise MaintenanceRequestError(f"table: 'all' cannot be combined with other tables ({table!r})")
        chosen = tuple(known)
    else:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise MaintenanceRequestError(f"table: {unknown} not maintained; use 'all' or any of {known}")
        chosen = tuple(dict.fromkeys(names))
    chosen_actions: tuple[str, ...] | None
    if actions is None or actions == "default" or (not isinstance(actions, str) and list(actions) == ["default"]):
        chosen_actions = None
    else:
        items = [a.strip() for a in (actions.split(",") if isinstance(actions, str) else actions)]
        bad = [a for a in items if a not in MAINTENANCE_ACTIONS]
        if not items or bad:
            raise MaintenanceRequestError(
                f"actions: {bad or items} not known; use 'default' (each table's policy) or any of "
                f"{list(MAINTENANCE_ACTIONS)}")
        chosen_actions = tuple(a for a in MAINTENANCE_ACTIONS if a in items)
    if not isinstance(dry_run, bool):
        raise MaintenanceRequestError(f"dry_run: must be true or false, not {dry_run!r}")
    return Request(chosen, chosen_actions, dry_run)


# ---- rewrite_data_files: closed hours only ----

def closed_hours(latest: Mapping[datetime, StatusRecord]) -> list[datetime]:
    """Hours whose newest status is closed (a reopened hour is not, until its re-close)."""
    return sorted(hour for hour, rec in latest.items() if rec.state == State.CLOSED)


def hours_to_compact(closed: Iterable[datetime], file_counts: Mapping[datetime, int], min_files: int) -> list[datetime]:
    """Closed hours holding at least ``min_files`` data files (an hour compacted before has one or two: skipped,
    so a run is idempotent; a re-closed hour that received late files qualifies again)."""
    return sorted(h for h in set(closed) if file_counts.get(h, 0) >= min_files)


# ---- expire_snapshots: keep every writer's newest marker ----

@dataclass(frozen=True)
class ExpiryPlan:
    """Arguments of expire_snapshots that keep each writer's newest marker, and what they expire."""

    older_than_ms: int
    retain_last: int
    #: writer id -> the snapshot of its newest commit in the current lineage (kept, with every newer ancestor)
    protected: dict[str, int]
    #: snapshot ids Iceberg will remove with these arguments, from the metadata the plan was made on
    expired: list[int]


def current_lineage(snapshots: Iterable[Snap], current_id: int | None) -> list[Snap]:
    """The current snapshot and its ancestors, newest first (stops at an expired parent)."""
    by_id = {s.snapshot_id: s for s in snapshots}
    out: list[Snap] = []
    sid = current_id
    while sid is not None and sid in by_id:
        out.append(by_id[sid])
        sid = by_id[sid].parent_id
    return out


def newest_markers(lineage: Sequence[Snap]) -> dict[str, tuple[int, Snap]]:
    """Each writer id's newest commit in ``lineage`` (newest first), with its depth (0 = current)."""
    found: dict[str, tuple[int, Snap]] = {}
    for depth, snap in enumerate(lineage):
        writer = snap.summary.get(WRITER_ID)
        if writer is not None and BATCH_ID in snap.summary and writer not in found:
            found[writer] = (depth, snap)
    return found


def plan_expiry(snapshots: Sequence[Snap], current_id: int | None, now: datetime, retention: timedelta,
                min_snapshots: int) -> ExpiryPlan:
    """expire_snapshots arguments that never remove a writer's newest marker.

    Iceberg keeps the current snapshot's ancestors while fewer than ``retain_last`` are kept or while they are
    not older than ``older_than``, and removes every other snapshot older than ``older_than``. The writer's
    dedupe reads the newest snapshot carrying its marker in the current lineage; if an idle writer's marker is
    older than the retention (compactions and manifest rewrites came after it), a plain expiry removes it and a
    restarted writer would find nothing and re-ingest. So both arguments are chosen to keep it:
    ``older_than`` is at most the oldest protected marker's commit time, and ``retain_last`` reaches down to it.
    """
    lineage = current_lineage(snapshots, current_id)
    markers = newest_markers(lineage)
    older_than = int((now - retention).timestamp() * 1000)
    retain_last = min_snapshots
    for depth, snap in markers.values():
        older_than = min(older_than, snap.timestamp_ms)
        retain_last = max(retain_last, depth + 1)
    kept: set[int] = set()
    for snap in lineage:
        if len(kept) < retain_last or snap.timestamp_ms >= older_than:
            kept.add(snap.snapshot_id)
        else:
            break
    expired = sorted(s.snapshot_id for s in snapshots if s.snapshot_id not in kept and s.timestamp_ms < older_than)
    return ExpiryPlan(older_than, retain_last, {w: s.snapshot_id for w, (_, s) in markers.items()}, expired)


# ---- remove_orphan_files: a safe age only ----

def check_orphan_age(age: timedelta) -> timedelta:
    """``age`` when it is safe: at least :data:`ORPHAN_AGE_FLOOR`.

    :raises UnsafeOrphanAgeError: the age would delete files of commits still in flight (Iceberg #4194)
    """
    if age < ORPHAN_AGE_FLOOR:
        raise UnsafeOrphanAgeError(
            f"remove_orphan_files: an age of {age} is below the safe floor of {ORPHAN_AGE_FLOOR}: a file younger "
            "than the longest batch or compaction in flight is not an orphan yet, and deleting it corrupts the "
            "table (Iceberg #4194). Use orphan_age 3d (the default) or more.")
    return age


def check_orphan_location(table: str, location: str, keep: Mapping[str, str]) -> None:
    """Refuse remove_orphan_files when a folder that is not the table's (a checkpoint, a landing zone) lies in
    the table location: every file there is "not in the table's metadata" (Iceberg #7334).

    :param keep: description -> local path of every folder that must survive
    :raises MaintenanceRequestError: naming the folder
    """
    from laketide.config.values import _inside, _local_path

    root = _local_path(location)
    if root is None:
        return
    from pathlib import Path

    for what, path in keep.items():
        if _inside(Path(path), root):
            raise MaintenanceRequestError(
                f"remove_orphan_files on {table}: {what} {path} lies inside the table location {location}; "
                "its files would be deleted as orphans. Move it out of the table location first.")


def small_files_per_hour(sizes: Mapping[datetime, Sequence[int]], hours: Iterable[datetime],
                         target_file_size: int) -> dict[datetime, int]:
    """Small data files (below ``SMALL_FILE_SHARE`` of the target size) of each of ``hours`` that has any."""
    limit = SMALL_FILE_SHARE * target_file_size
    counts = {hour: sum(1 for size in sizes.get(hour, ()) if size < limit) for hour in set(hours)}
    return {hour: n for hour, n in sorted(counts.items()) if n}


def threshold_actions(manifests: int, snapshots: int, policy: TablePolicy, small_files: int = 0,
                      delete_files: int = 0) -> list[str]:
    """The actions a table is due for by its thresholds, among its policy's actions: between the runs after closes
    and the daily one, a table that grows fast is not left waiting.

    :param manifests: manifests of the current snapshot (``max_manifests``: rewrite_manifests)
    :param snapshots: snapshots the table keeps, i.e. those since the last expiry (``max_snapshots``:
        expire_snapshots)
    :param small_files: the most small data files of any closed hour (``max_small_files``: rewrite_data_files;
        open hours are never compacted)
    :param delete_files: delete files of an upsert stream's merged table, which every read merges in
        (``min_input_files`` or more: rewrite_data_files applies them)
    """
    due = []
    if "rewrite_data_files" in policy.actions and (small_files > policy.max_small_files
                                                   or delete_files >= max(1, policy.min_input_files)):
        due.append("rewrite_data_files")
    if "rewrite_manifests" in policy.actions and manifests > policy.max_manifests:
        due.append("rewrite_manifests")
    if "expire_snapshots" in policy.actions and snapshots > policy.max_snapshots:
        due.append("expire_snapshots")
    return due
