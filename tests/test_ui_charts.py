"""The lakehouse view's health panel and charts on the small real lake of ``tests/ui_lake.py`` (its own copy: these
tests commit to it): the health figures come from metadata only (no scan planned, each manifest read once), and the
charts' data from snapshot summaries, manifests and the metadata log."""

from __future__ import annotations

from typing import Any

import pytest

from laketide.airflow.ui import panels
from laketide.dev.commits import commit_files, land
from laketide.lake.catalog import load_catalog
from laketide.maintain.record import MaintenanceRecord
from laketide.maintain.record import record as record_maintenance
from tests.ui_lake import UiLake, build_ui_lake


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> UiLake:
    return build_ui_lake(tmp_path_factory.mktemp("ui-charts"))


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the health panel planned a scan or read a metadata table")


def test_health_is_read_from_metadata_only_each_manifest_once(lake: UiLake, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table import DataScan
    from pyiceberg.table.inspect import InspectTable

    first = panels.health(lake.config)  # reads every manifest once, the status and record tables once
    clicks = {t.table: t for t in first.tables}["lake.clicks"]
    table = load_catalog(lake.config.catalog).load_table("lake.clicks")
    assert clicks.files == len(table.inspect.data_files()) == 5 and clicks.snapshots == 5
    assert clicks.closed_hours == 1 and clicks.max_files_per_closed_hour == 1  # H-10: closed, one file

    reads: list[str] = []
    fetch = ManifestFile.fetch_manifest_entry

    def counted(self: ManifestFile, io: Any, discard_deleted: bool = True) -> Any:
        reads.append(self.manifest_path)
        return fetch(self, io, discard_deleted)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counted)
    for name in ("plan_files", "to_arrow"):
        monkeypatch.setattr(DataScan, name, _refuse)
    for name in ("data_files", "files", "partitions", "entries"):
        monkeypatch.setattr(InspectTable, name, _refuse)
    again = panels.health(lake.config)
    assert reads == [] and again == first  # nothing changed: no manifest read again

    commit_files(lake.config, lake.stream, 20, [land(lake.stream, lake.hour(-10), 7, 120, producer="late")])
    after = {t.table: t for t in panels.health(lake.config).tables}["lake.clicks"]
    table = load_catalog(lake.config.catalog).load_table("lake.clicks")
    newest = table.current_snapshot()
    assert newest is not None
    added = [m.manifest_path for m in newest.manifests(table.io) if m.added_snapshot_id == newest.snapshot_id]
    assert reads == added and len(added) == 1  # only the new commit's manifest
    assert (after.files, after.snapshots, after.max_files_per_closed_hour) == (6, 6, 2)


def test_health_lists_a_new_maintenance_record(lake: UiLake) -> None:
    assert panels.health(lake.config).maintenance == []
    record_maintenance(lake.config, MaintenanceRecord("manual__1", "lake.clicks", "rewrite_manifests", "skipped",
                                                      detail="1 manifest(s)"))
    health = panels.health(lake.config)
    assert [(m.table, m.action, m.outcome) for m in health.maintenance] == [
        ("lake.clicks", "rewrite_manifests", "skipped")]
    assert {t.table: t for t in health.tables}["lake.clicks"].last_maintenance is not None
