"""The ``maintenance`` section: the default table policy, per-table overrides and the schedules."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator, model_validator

from laketide.config.values import _Strict, as_written, check_table_name, parse_size, positive_duration

#: remove_orphan_files refuses an age below this (Iceberg #4194: a short age deleted files of commits in flight;
#: Iceberg's Spark procedure refuses less than 24 hours too). There is no override: a test ages its files instead.
ORPHAN_AGE_FLOOR = timedelta(days=1)
#: in the order a run takes them (expire_tombstones: an upsert stream's tombstones table only, before its compaction)
MAINTENANCE_ACTIONS = ("expire_tombstones", "rewrite_data_files", "rewrite_manifests", "expire_snapshots",
                       "remove_orphan_files")


class TablePolicy(_Strict):
    """What maintenance does to one table (``maintenance.defaults``, overridden per table)."""

    #: actions run by default (a manual run may pick others): any of MAINTENANCE_ACTIONS
    actions: list[str] = list(MAINTENANCE_ACTIONS)
    #: rewrite_data_files: binpack closed hours to files of this size
    target_file_size: int = 128 * 1024**2
    #: rewrite_data_files: a closed hour is compacted when it has at least this many data files
    min_input_files: int = Field(default=2, ge=2)
    #: expire_snapshots: snapshots older than this are expired (the writer's newest marker is always kept)
    snapshot_retention: timedelta = timedelta(days=1)
    #: expire_snapshots: at least this many snapshots of the current lineage are kept, whatever their age
    min_snapshots: int = Field(default=50, ge=1)
    #: remove_orphan_files: only files older than this are candidates (at least 1 day, see ORPHAN_AGE_FLOOR)
    orphan_age: timedelta = timedelta(days=3)
    #: threshold run: rewrite_manifests as soon as the current snapshot has more manifests than this
    max_manifests: int = Field(default=100, ge=2)
    #: threshold run: expire_snapshots as soon as the table keeps more snapshots than this
    max_snapshots: int = Field(default=5000, ge=2)
    #: threshold run: rewrite_data_files as soon as a closed hour holds more small data files than this (small:
    #: below 75% of target_file_size, as Iceberg's binpack counts them)
    max_small_files: int = Field(default=50, ge=1)

    @field_validator("target_file_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        size = parse_size(value)
        if size < 1024 * 1024:
            raise ValueError(f"{value!r} is below 1MB: compaction would make more files, not fewer")
        return size

    @field_validator("snapshot_retention", "orphan_age", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return positive_duration(value)

    @field_validator("actions")
    @classmethod
    def _actions(cls, value: list[str]) -> list[str]:
        unknown = [a for a in value if a not in MAINTENANCE_ACTIONS]
        if unknown:
            raise ValueError(f"unknown action(s) {unknown}: use any of {list(MAINTENANCE_ACTIONS)}")
        return value

    @model_validator(mode="after")
    def _orphan_floor(self) -> TablePolicy:
        if self.orphan_age < ORPHAN_AGE_FLOOR:
            raise ValueError(
                f"orphan_age: {as_written(self.orphan_age)} is below the safe floor of 1 day: files of a batch or "
                "compaction still in flight would be deleted (Iceberg #4194); use 3d (the default) or more")
        return self


class MaintenanceConfig(_Strict):
    """Table maintenance out of the write path (``laketide.maintain``): policies, record, schedule."""

    #: Iceberg table (namespace.table) where every maintenance action records what it did
    record_table: str = "laketide.maintenance_log"
    #: the policy of every maintained table (events, rejects, status and this record table)
    defaults: TablePolicy = TablePolicy()
    #: per-table overrides of ``defaults`` (keys: namespace.table), e.g. {"lake.clicks": {"min_snapshots": 100}}
    tables: dict[str, TablePolicy] = {}
    #: cron (UTC) of the daily run of expire_snapshots and remove_orphan_files over every table
    daily_schedule: str = "30 3 * * *"
    #: cron (UTC) of the threshold check: tables past max_manifests, max_snapshots or max_small_files are
    #: maintained at once
    threshold_schedule: str = "45 * * * *"
    #: a maintenance run holds a lease per table; a silent holder loses it after this long
    lease: timedelta = timedelta(hours=2)

    @model_validator(mode="before")
    @classmethod
    def _merge(cls, raw: Any) -> Any:
        """Each table's override is read on top of the defaults (only the keys it names change)."""
        if isinstance(raw, dict) and isinstance(raw.get("tables"), dict):
            defaults = raw.get("defaults") or {}
            if isinstance(defaults, TablePolicy):
                defaults = defaults.model_dump()
            raw = {**raw, "tables": {name: {**defaults, **policy} if isinstance(policy, dict) else policy
                                     for name, policy in raw["tables"].items()}}
        return raw

    @field_validator("record_table")
    @classmethod
    def _table(cls, value: str) -> str:
        return check_table_name(value)

    @field_validator("tables")
    @classmethod
    def _tables(cls, value: dict[str, TablePolicy]) -> dict[str, TablePolicy]:
        for name in value:
            check_table_name(name)
        return value

    @field_validator("lease", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return positive_duration(value)

    @field_validator("daily_schedule", "threshold_schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError(f"{value!r} is not a 5-field cron expression like '30 3 * * *'")
        return value

    def policy(self, table: str) -> TablePolicy:
        """The policy of ``table``: its override, else the defaults."""
        return self.tables.get(table, self.defaults)
