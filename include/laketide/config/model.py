"""The whole configuration and the checks across its sections (shared names, overlapping paths, retention)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import model_validator

from laketide.config.maintenance import MaintenanceConfig
from laketide.config.sections import (
    ApplicationKind,
    CatalogConfig,
    CloseConfig,
    ResourcesConfig,
    SparkConfig,
    WriterGroupConfig,
)
from laketide.config.streams import StreamConfig
from laketide.config.upsert import tombstones_table
from laketide.config.values import _inside, _local_path, _Strict, as_written
from laketide.errors import ConfigError


class LaketideConfig(_Strict):
    home: Path
    catalog: CatalogConfig
    spark: SparkConfig
    close: CloseConfig
    streams: list[StreamConfig]
    maintenance: MaintenanceConfig = MaintenanceConfig()
    #: per writer group (a stream's ``group``, else its name): the application's settings
    writer_groups: dict[str, WriterGroupConfig] = {}

    @model_validator(mode="after")
    def _unique(self) -> LaketideConfig:
        problems = (_shared_keys(self) + _overlapping_paths(self) + _maintained(self) + _groups(self)
                    + _marker_paths(self) + _resources(self))
        if problems:
            # each problem starts with the key it is about: the message lists them all
            raise ValueError("\n".join(problems))
        return self

    def stream(self, name: str) -> StreamConfig:
        for stream in self.streams:
            if stream.name == name:
                return stream
        raise ConfigError(f"unknown stream {name!r}: configured streams are {[s.name for s in self.streams]}")

    def groups(self) -> dict[str, list[StreamConfig]]:
        """The writer applications: each group's streams, in configuration order."""
        out: dict[str, list[StreamConfig]] = {}
        for stream in self.streams:
            out.setdefault(stream.writer_group, []).append(stream)
        return out

    def group_settings(self, name: str) -> WriterGroupConfig:
        """The settings of writer group ``name`` (defaults when the configuration names none)."""
        return self.writer_groups.get(name, WriterGroupConfig())

    def application_resources(self, kind: ApplicationKind, group: str | None = None) -> ResourcesConfig:
        """What an application may take of a cluster: a writer group's application (``kind`` ``writer`` with its
        ``group``), the maintenance application or a manual action's job."""
        override = self.group_settings(group).resources if kind == "writer" and group is not None else None
        return self.spark.application(kind, override)

    def group(self, name: str) -> list[StreamConfig]:
        """The streams of writer group ``name``."""
        found = self.groups().get(name)
        if not found:
            raise ConfigError(f"unknown writer group {name!r}: the groups are {sorted(self.groups())} (a stream's "
                              "group is its 'group' setting, else its own name)")
        return found


def maintained_tables(config: LaketideConfig) -> list[str]:
    """Every table maintenance looks after: each stream's events and rejects (and an upsert stream's merged table and
    its tombstones), the status and the record table."""
    tables = [t for s in config.streams for t in (s.table, s.rejects_table)]
    tables += [t for s in config.streams if s.upsert is not None for t in (s.upsert.table, tombstones_table(s.upsert))]
    return [*tables, config.close.status_table, config.maintenance.record_table]


def _maintained(config: LaketideConfig) -> list[str]:
    problems: list[str] = []
    record_table = config.maintenance.record_table
    if record_table in maintained_tables(config)[:-1]:
        problems.append(f"maintenance.record_table: {record_table!r} is already a stream's or the status table; "
                        "use a table of its own (default laketide.maintenance_log)")
    known = maintained_tables(config)
    for name in config.maintenance.tables:
        if name not in known:
            problems.append(f"maintenance.tables: {name!r} is not a maintained table; use one of {known}")
    for stream in config.streams:
        # the partition check counts an hour's rows from the writer's snapshot summaries: an hour must be closed
        # before expiry removes the commits that added its rows
        need = config.close.sensor_timeout + stream.allowed_lateness + timedelta(hours=1)
        retention = config.maintenance.policy(stream.table).snapshot_retention
        if retention < need:
            key = "tables" if stream.table in config.maintenance.tables else "defaults"
            problems.append(
                f"maintenance.{key}.snapshot_retention: {as_written(retention)} for {stream.table} is shorter than "
                f"an hour of stream {stream.name!r} may wait to close ({as_written(need)}: 1 hour + allowed_lateness + "
                "close.sensor_timeout); the partition check reads the rows of an hour from the writer's snapshots, "
                "which expiry would remove first. Keep 1d (the default) or more")
    return problems


def _groups(config: LaketideConfig) -> list[str]:
    """A group named like a stream of another group would give two writer applications one DAG id; settings of a
    group no stream is in; two groups on one metrics port."""
    problems: list[str] = []
    known = sorted({s.writer_group for s in config.streams})
    ports: dict[int, str] = {}
    for name, group in config.writer_groups.items():
        if name not in known:
            problems.append(f"writer_groups.{name}: no stream is in writer group {name!r}; the groups are {known} "
                            "(a stream's group is its 'group' setting, else its own name)")
        if group.metrics_port and group.metrics_port in ports:
            problems.append(f"writer_groups.{name}.metrics_port: {group.metrics_port} is already the port of group "
                            f"{ports[group.metrics_port]!r}")
        ports.setdefault(group.metrics_port, name)
    names = {s.name: s for s in config.streams}
    for stream in config.streams:
        other = names.get(stream.writer_group)
        if other is not None and other.writer_group != stream.writer_group:
            problems.append(f"{_key(stream, 'group')}: {stream.writer_group!r} is the name of stream {other.name!r}, "
                            f"which runs in group {other.writer_group!r}: name the group otherwise")
    return problems


def _resources(config: LaketideConfig) -> list[str]:
    """Limits that only fail together: a group's or a kind's executor_cores above the cores it inherits."""
    problems: list[str] = []
    kinds: tuple[ApplicationKind, ...] = ("writer", "maintenance", "actions")
    for kind in kinds:
        problem = config.spark.application(kind).problem()
        if problem:
            problems.append(f"spark.resources.{kind}.{problem} (with the defaults of its kind)")
    for name in sorted({s.writer_group for s in config.streams}):
        problem = config.application_resources("writer", name).problem()
        if problem and name in config.writer_groups:
            problems.append(f"writer_groups.{name}.resources.{problem} (over spark.resources.writer)")
    return problems


def _key(stream: StreamConfig, field: str) -> str:
    return f"streams[{stream.name}].{field}"


def _shared_keys(config: LaketideConfig) -> list[str]:
    """Names, writer ids and tables that two streams (or a stream and the status table) share."""
    problems: list[str] = []
    owners: dict[tuple[str, str], str] = {}
    for i, stream in enumerate(config.streams):
        if stream.name in [s.name for s in config.streams[:i]]:
            problems.append(f"streams[{i}].name: stream name {stream.name!r} is used twice; give each stream its own")
            continue
        # (the key naming it, what it is, its value)
        claims = [("writer_id", "writer_id", stream.writer_id), ("table", "table", stream.table),
                  ("rejects_table", "rejects_table", stream.rejects_table)]
        if stream.upsert is not None:  # the merged table and its tombstones (two merges into one table: no fold)
            claims += [("upsert.table", "upsert.table", stream.upsert.table),
                       ("upsert.table", "tombstones table", tombstones_table(stream.upsert))]
        for field, label, value in claims:
            kind = "writer id" if field == "writer_id" else "table"
            owner = owners.get((kind, value))
            if owner is not None:
                what = ("the dedupe key: two streams with one writer id would skip each other's batches"
                        if kind == "writer id" else "each stream needs its own tables")
                problems.append(f"{_key(stream, field)}: {value!r} is already {owner}; {what}")
            else:
                owners[(kind, value)] = f"the {label} of stream {stream.name!r}"
    status = config.close.status_table
    if ("table", status) in owners:
        problems.append(f"close.status_table: {status!r} is {owners[('table', status)]}; "
                        "use a table of its own (default laketide.partition_status)")
    actions = config.close.action_table
    taken = {**{v: o for (k, v), o in owners.items() if k == "table"}, status: "the status table",
             config.maintenance.record_table: "the maintenance record"}
    if actions in taken:
        problems.append(f"close.action_table: {actions!r} is {taken[actions]}; "
                        "use a table of its own (default laketide.action_log)")
    return problems


def _overlapping_paths(config: LaketideConfig) -> list[str]:
    """Landing zones, checkpoints, the warehouse and the results folder must not lie inside one another."""
    problems: list[str] = []
    warehouse = _local_path(config.catalog.warehouse)
    for i, stream in enumerate(config.streams):
        landing, checkpoint = stream.landing_path, stream.checkpoint_path
        if warehouse is not None:
            if _inside(landing, warehouse) or _inside(warehouse, landing):
                problems.append(f"{_key(stream, 'landing_path')}: {str(landing)!r} overlaps the warehouse "
                                f"{config.catalog.warehouse!r}: the writer would read table files as landed events; "
                                "keep the landing zone apart (e.g. {home}/landing/<stream>)")
            if _inside(checkpoint, warehouse) or _inside(warehouse, checkpoint):
                problems.append(f"{_key(stream, 'checkpoint_path')}: {str(checkpoint)!r} is inside the warehouse "
                                f"{config.catalog.warehouse!r} (the table location): remove_orphan_files would delete "
                                "it (Iceberg #7334); keep it apart (e.g. {home}/checkpoints/<stream>)")
        for other in config.streams[:i]:
            if _inside(landing, other.landing_path) or _inside(other.landing_path, landing):
                problems.append(f"{_key(stream, 'landing_path')}: {str(landing)!r} overlaps the landing zone of "
                                f"stream {other.name!r} ({str(other.landing_path)!r}): give each stream its own folder")
            if _inside(checkpoint, other.checkpoint_path) or _inside(other.checkpoint_path, checkpoint):
                problems.append(f"{_key(stream, 'checkpoint_path')}: {str(checkpoint)!r} overlaps the checkpoint of "
                                f"stream {other.name!r} ({str(other.checkpoint_path)!r}): give each stream its own")
        for other in config.streams:
            if other is stream:
                continue
            if _inside(checkpoint, other.landing_path) or _inside(other.landing_path, checkpoint):
                problems.append(f"{_key(stream, 'checkpoint_path')}: {str(checkpoint)!r} overlaps the landing zone "
                                f"of stream {other.name!r} ({str(other.landing_path)!r}): keep checkpoints apart")
        results = config.close.results_dir
        if _inside(results, landing) or _inside(results, checkpoint):
            problems.append(f"close.results_dir: {str(results)!r} is inside the landing zone or the checkpoint of "
                            f"stream {stream.name!r}: keep it apart (default {{home}}/gx)")
    if warehouse is not None and _inside(config.close.results_dir, warehouse):
        problems.append(f"close.results_dir: {str(config.close.results_dir)!r} is inside the warehouse "
                        f"{config.catalog.warehouse!r}: remove_orphan_files would delete it; keep it apart")
    return problems


def _marker_paths(config: LaketideConfig) -> list[str]:
    """A stream's marker files go to a local folder outside every landing zone, checkpoint and table location."""
    problems: list[str] = []
    warehouse = _local_path(config.catalog.warehouse)
    for stream in config.streams:
        markers = stream.done_markers
        if markers is None or markers.file is None:
            continue
        key = _key(stream, "done_markers.file")
        try:
            marker = markers.path(warehouse, stream.name, stream.table, datetime(2026, 1, 1, tzinfo=UTC))
        except ValueError as exc:
            problems.append(f"{key}: {exc}")
            continue
        for other in config.streams:
            for kind, folder in (("landing zone", other.landing_path), ("checkpoint", other.checkpoint_path)):
                if _inside(marker, folder):
                    problems.append(f"{key}: {markers.file!r} lies inside the {kind} of stream {other.name!r} "
                                    f"({str(folder)!r}); write markers elsewhere, e.g. "
                                    "'{warehouse}/_done/{stream}/{date}/{hour}/_SUCCESS'")
        if warehouse is None:
            continue
        for table in maintained_tables(config):
            namespace, name = table.split(".")
            # the table's location as Spark's JDBC catalog (namespace/table) or pyiceberg (namespace.db/table) makes it
            for location in (warehouse / namespace / name, warehouse / f"{namespace}.db" / name):
                if _inside(marker, location):
                    problems.append(f"{key}: {markers.file!r} lies inside the location of table {table} "
                                    f"({str(location)!r}): remove_orphan_files deletes every file there that the "
                                    "table does not reference; write markers outside table folders, e.g. "
                                    "'{warehouse}/_done/{stream}/{date}/{hour}/_SUCCESS'")
    return problems
