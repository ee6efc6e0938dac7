"""The lakehouse view's health panel and charts on the small real lake of ``tests/ui_lake.py`` (its own copy: these
tests commit to it): the health figures come from metadata only (no scan planned, each manifest read once), and the
charts' data from snapshot summaries, manifests and the metadata log."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.airflow.ui import charts, panels
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


# ---------------------------------------------------------------- the charts (a lake of their own)


@pytest.fixture(scope="module")
def charted(tmp_path_factory: pytest.TempPathFactory) -> UiLake:
    """The UI lake, with rejects of H-7 in the rejects table, a second file for the closed hour H-10 and then a
    compaction of H-10 (a ``replace`` snapshot, as ``rewrite_data_files`` commits it: 2 files into 1)."""
    lake = build_ui_lake(tmp_path_factory.mktemp("ui-charted"))
    stream = lake.stream
    rejects = stream.model_copy(update={"table": stream.rejects_table})
    commit_files(lake.config, rejects, 0, [land(stream, lake.hour(-7), 3, 300, producer="bad")])
    commit_files(lake.config, stream, 5, [land(stream, lake.hour(-10), 4, 301, producer="late")])
    compact(lake, lake.hour(-10))
    return lake


def compact(lake: UiLake, hour: datetime) -> None:
    """Rewrite the data files of ``hour`` into one, committed as a ``replace`` snapshot."""
    import pyarrow.compute as pc
    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    from pyiceberg.table.snapshots import Operation, Summary
    from pyiceberg.table.update import snapshot as snapshot_update
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    table = load_catalog(lake.config.catalog).load_table(lake.stream.table)
    epoch_hour = int(hour.timestamp() // 3600)
    old = [task.file for task in table.scan().plan_files() if task.file.partition[0] == epoch_hour]
    rows = table.scan().to_arrow()
    rows = rows.filter(pc.and_(pc.greater_equal(rows["event_time"], hour),
                               pc.less(rows["event_time"], hour + timedelta(hours=1))))
    def summaries(summary: Summary, previous_summary: Any = None) -> Summary:  # totalled as an overwrite is
        totals = update(Summary(Operation.OVERWRITE, **summary.additional_properties), previous_summary)
        return Summary(Operation.REPLACE, **totals.additional_properties)

    update = snapshot_update.update_snapshot_summaries
    with pytest.MonkeyPatch.context() as patch, table.transaction() as tx:
        patch.setattr(snapshot_update, "update_snapshot_summaries", summaries)
        new = list(_dataframe_to_data_files(tx.table_metadata, rows, table.io))
        replace = _OverwriteFiles(operation=Operation.REPLACE, transaction=tx, io=table.io)
        for f in old:
            replace.delete_data_file(f)
        for f in new:
            replace.append_data_file(f)
        replace.commit()
    assert len(old) == 2 and len(new) == 1


def test_rows_and_rejects_per_hour(charted: UiLake) -> None:
    c = charts.charts(charted.config, charted.stream, charted.hour(-12), charted.hour(1))
    by_hour = {h.hour: (h.rows, h.rejects) for h in c.hours}
    assert [h.hour for h in c.hours] == [charted.key(i) for i in range(-12, 1)]  # one bar per hour of the range
    assert by_hour[charted.key(-10)] == (34, 0)  # 30 + the late file's 4, compacted or not
    assert by_hour[charted.key(-7)] == (33, 3) and by_hour[charted.key(-9)] == (0, 0)
    assert sum(r for r, _ in by_hour.values()) == 30 + 4 + 32 + 33 + 34 + 35


def test_batches_lag_and_latency(charted: UiLake) -> None:
    batches = charts.batches_chart(charted.config, charted.stream, datetime.now(UTC))
    assert [b.batch_id for b in batches] == [0, 1, 2, 3, 4, 5]  # oldest first; the compaction is not a batch
    assert [b.snapshot_id for b in batches[:5]] == [str(s) for s in charted.snapshots]  # ids as strings
    table = load_catalog(charted.config.catalog).load_table(charted.stream.table)
    snap = table.snapshot_by_id(charted.snapshots[4])
    assert snap is not None and snap.summary is not None
    watermark = datetime.fromisoformat(snap.summary["laketide.watermark"])
    assert batches[4].lag_s == round(snap.timestamp_ms / 1000 - watermark.timestamp(), 1)
    assert all(b.latency_s is not None and 0 <= b.latency_s < 600 for b in batches)


def test_files_per_closed_hour_before_and_after_compaction(charted: UiLake) -> None:
    c = charts.charts(charted.config, charted.stream, charted.hour(-12), charted.hour(1))
    assert [(f.hour, f.files, f.written) for f in c.files] == [(charted.key(-10), 1, 2)]  # the closed hour


def test_snapshots_and_metadata_size_per_day(charted: UiLake) -> None:
    now = datetime.now(UTC)
    record_maintenance(charted.config, MaintenanceRecord(
        "scheduled__1", charted.stream.table, "expire_snapshots", "ok", snapshots_before=9, snapshots_after=4,
        started_at=now - timedelta(days=2)))
    days = charts.days_chart(charted.config, charted.stream, now)
    table = load_catalog(charted.config.catalog).load_table(charted.stream.table)
    size = len(table.io.new_input(table.metadata_location))
    assert [(d.day, d.snapshots, d.metadata_bytes, d.source) for d in days] == [
        ((now - timedelta(days=2)).date().isoformat(), 4, None, "maintenance record"),
        (now.date().isoformat(), len(table.metadata.snapshots), size, "metadata file")]


@pytest.fixture(scope="module")
def client_charted(charted: UiLake, airflow_db: Path) -> Iterator[Any]:
    """The view's app through FastAPI's TestClient, logged in as an admin (the UI's JWT cookie)."""
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from laketide.airflow.ui.app import app

    manager = create_auth_manager()
    manager.init()
    token = manager.generate_jwt(SimpleAuthManagerUser(username="admin", role="ADMIN"))
    with pytest.MonkeyPatch.context() as env, TestClient(app, cookies={"_token": token}) as c:
        env.setenv("LAKETIDE_CONFIG", str(charted.config_path))
        yield c


def test_charts_route(client_charted: Any, charted: UiLake) -> None:
    body = client_charted.get("/api/streams/clicks/charts", params={"start": charted.key(-12),
                                                                    "end": charted.key(1)}).json()
    assert len(body["hours"]) == 13 and isinstance(body["batches"][0]["snapshot_id"], str)
    assert body["files"] == [{"hour": charted.key(-10), "files": 1, "written": 2}]
    assert client_charted.get("/api/streams/clicks/charts").json()["start"] < charted.key(-12)  # 7 days
    bad = client_charted.get("/api/streams/clicks/charts", params={"start": charted.key(0), "end": charted.key(-1)})
    assert bad.status_code == 400 and "must be before end" in bad.json()["detail"]
    assert client_charted.get("/api/streams/nope/charts").status_code == 404
    assert "laketideCharts" in client_charted.get("/static/charts.js").text
