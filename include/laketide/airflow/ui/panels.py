"""The other panels of the lakehouse view: the snapshot timeline and "redo from here", table health and the
maintenance record, the reported landing files, and the action history. Metadata and records only (pyiceberg,
the landing zone's listing): no Spark, no data file read.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from laketide.airflow.ui import models
from laketide.close.partitions import uncommitted
from laketide.close.status import StatusRecord
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import TableNotFoundError
from laketide.ingest.inspection import Reason, landed_files
from laketide.ingest.landing import DATA_SUFFIX, data_dir, hidden, name_hour
from laketide.lake.catalog import load_catalog
from laketide.maintain.record import MaintenanceRecord

#: the DAG "redo from here" triggers
REDO_DAG = "laketide_redo"


def close_dag(stream: str) -> str:
    """The close DAG of a stream (its read permission guards the stream's panels)."""
    return f"laketide_close_{stream}"


def streams(config: LaketideConfig) -> models.StreamList:
    return models.StreamList(streams=[
        models.StreamInfo(name=s.name, table=s.table, rejects_table=s.rejects_table, close_dag=close_dag(s.name),
                          live=s.live) for s in config.streams], redo_dag=REDO_DAG)


def timeline(config: LaketideConfig, stream: StreamConfig, limit: int = 50) -> models.Timeline:
    """The newest ``limit`` snapshots of the events table's current lineage, newest first."""
    from laketide.lake.timeline import timeline as read

    try:
        items = read(load_catalog(config.catalog), stream.table, limit)
    except TableNotFoundError:
        items = []
    return models.Timeline(stream=stream.name, table=stream.table, snapshots=[
        models.Snapshot(snapshot_id=str(s.snapshot_id), parent_id=None if s.parent_id is None else str(s.parent_id),
                        committed_at=s.committed_at.isoformat(timespec="seconds"), operation=s.operation, what=s.what,
                        rows=sum(s.rows.values()) if s.rows else None, rejects=s.rejects, watermark=s.watermark,
                        current=i == 0)
        for i, s in enumerate(items)])


def redo_plan(config: LaketideConfig, stream: StreamConfig, snapshot_id: str, user: str) -> models.RedoPlan:
    """The confirmation of "redo from here": the redo DAG's params filled in (a dry run), checked as the DAG's
    ``validate`` task checks them, and the plan it would log.

    :raises RequestError: the snapshot is not one a redo can return to (not in the current lineage, ...)
    """
    from laketide.redo.params import validate
    from laketide.redo.plan import plan_request

    request = validate(config, stream.name, snapshot_id, None, None, None, True, "lakehouse-view", user)
    plan = plan_request(config, request)
    conf: dict[str, object] = {"stream": stream.name, "snapshot_id": str(request.snapshot_id), "at": None,
                               "start": None, "end": None, "dry_run": True}
    return models.RedoPlan(
        stream=stream.name, snapshot_id=str(request.snapshot_id), dag_id=REDO_DAG, conf=conf,
        report=plan.lines(request.hours), hours=plan.hours, reingest_files=len(plan.reingest),
        snapshots_left_out=len(plan.discarded),
        note=("A dry run logs this plan in the run's validate task and changes nothing; run it again with dry_run "
              "off to redo. The redo stops the writer, rolls both tables back, rebuilds the checkpoint and "
              "re-ingests what landed since."))


#: the maintenance record, with the record table's metadata file it was read at (read again after a new record)
_records: dict[str, tuple[str, list[MaintenanceRecord]]] = {}


def maintenance_records(config: LaketideConfig) -> list[MaintenanceRecord]:
    """Every maintenance record, oldest first, read from its table once per record-table version."""
    from laketide.lake.snapshots import metadata_location
    from laketide.maintain.record import history

    name = config.maintenance.record_table
    try:
        version = metadata_location(load_catalog(config.catalog), name)
    except TableNotFoundError:
        return []
    kept = _records.get(name)
    if kept is None or kept[0] != version:
        kept = _records[name] = (version, history(config))
    return kept[1]


def health(config: LaketideConfig, per_table: int = 10) -> models.Health:
    """Each maintained table's health (``maintain.health``) and its newest ``per_table`` maintenance steps.

    Metadata only for the tables (snapshot totals, manifests: each manifest read once); the closed hours and the
    maintenance record are read once per status-table and record-table version."""
    from laketide.airflow.ui.board import recorded
    from laketide.maintain.health import health as read
    from laketide.maintain.plan import closed_hours

    records = maintenance_records(config)
    tables = [models.TableHealth(
        table=h.table, files=h.files, small_files=h.small_files, small_file_ratio=round(h.small_file_ratio, 3),
        manifests=h.manifests, snapshots=h.snapshots, metadata_bytes=h.metadata_bytes, closed_hours=h.closed_hours,
        max_files_per_closed_hour=h.max_files_per_closed_hour, delete_files=h.delete_files,
        delete_file_share=round(h.delete_file_share, 3), deleted_rows=h.deleted_rows,
        last_maintenance=None if h.last_maintenance is None else h.last_maintenance.isoformat(timespec="seconds"))
        for h in read(config, lambda stream: closed_hours(recorded(config, stream)[1]), records)]
    steps: list[models.MaintenanceStep] = []
    kept: dict[str, int] = {}
    for r in reversed(records):  # newest first
        if kept.get(r.table_name, 0) >= per_table:
            continue
        kept[r.table_name] = kept.get(r.table_name, 0) + 1
        steps.append(models.MaintenanceStep(run_id=r.run_id, table=r.table_name, action=r.action, outcome=r.outcome,
                                            dry_run=r.dry_run, started_at=r.started_at.isoformat(timespec="seconds"),
                                            line=r.line()))
    return models.Health(tables=tables, maintenance=steps)


def listed_findings(landing_path: str | Path) -> list[models.LandingFile]:
    """The files of ``data/`` the writer never reads, from the listing alone (names and sizes, no line read):
    hidden names, empty files, names not ending in ``.jsonl``. What needs the files' lines (audit counts, files of
    several hours) is found by the close's verification, whose findings the status table keeps."""
    folder = data_dir(landing_path)
    if not folder.is_dir():
        return []
    out: list[models.LandingFile] = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not entry.is_file():
            continue
        name = entry.name
        hour = name_hour(name.lstrip("_."))
        hours = [hour] if hour else []
        if not name.endswith(DATA_SUFFIX):
            out.append(models.LandingFile(
                file=name, reason=Reason.NOT_DATA.value, hours=hours, blocking=False, source="landing zone",
                detail=f"only names ending in '{DATA_SUFFIX}' are read: the writer never reads it"))
        elif hidden(name):
            out.append(models.LandingFile(
                file=name, reason=Reason.HIDDEN.value, hours=hours, source="landing zone",
                detail="names starting with '_' or '.' are never ingested: publish it again under a contract name"))
        elif entry.stat().st_size == 0:
            out.append(models.LandingFile(
                file=name, reason=Reason.EMPTY.value, hours=hours, blocking=False, source="landing zone",
                detail="the file is empty: never ingested (Spark's file scan skips empty files)"))
    return out


def recorded_findings(latest: dict[datetime, StatusRecord]) -> list[models.LandingFile]:
    """The landing files the newest verification of each hour reported (``verification.findings``)."""
    out: list[models.LandingFile] = []
    for hour, record in sorted(latest.items(), reverse=True):
        if not record.verification or '"findings"' not in record.verification:
            continue
        try:
            findings = json.loads(record.verification).get("findings") or []
        except (ValueError, AttributeError):
            continue
        for f in findings:
            if isinstance(f, dict) and "file" in f:
                out.append(models.LandingFile(
                    file=str(f["file"]), reason=str(f.get("reason", "")), detail=str(f.get("detail", "")),
                    hours=[str(h) for h in f.get("hours") or []], blocking=bool(f.get("blocking", True)),
                    source=f"verification of {hour.isoformat()}"))
            elif isinstance(f, str):  # an older verification kept only the line
                name, _, rest = f.partition(": ")
                reason, _, detail = rest.partition(": ")
                out.append(models.LandingFile(file=name, reason=reason, detail=detail, hours=[hour.isoformat()],
                                              source=f"verification of {hour.isoformat()}"))
    return out


def landing(config: LaketideConfig, stream: StreamConfig, latest: dict[datetime, StatusRecord]) -> models.Landing:
    """The landing files not ingested: pending (not committed yet) and reported (never read, or found by a
    verification), with the reason."""
    files = landed_files(stream.landing_path)
    pending = uncommitted(load_catalog(config.catalog), stream, files)
    return models.Landing(stream=stream.name, landing_path=str(stream.landing_path),
                          pending=[f.name for f in pending],
                          reported=listed_findings(stream.landing_path) + recorded_findings(latest))


def history(config: LaketideConfig, stream: StreamConfig) -> models.History:
    """Every redo, backfill and repair of ``stream``, dry runs included, newest first."""
    from laketide.close.status import history as status_history
    from laketide.redo.actions import history as read

    items = read(config, stream.name, [r for r in status_history(config, stream.name) if r.state.value == "reopened"])
    return models.History(stream=stream.name, actions=[models.ActionItem(**a.to_dict()) for a in items])
