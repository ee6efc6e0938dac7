"""The lakehouse view's data functions (board, writer, timeline and redo plan, landing reports, action history) on a
small real lake (``tests/ui_lake.py``: real landing files, a real Iceberg table, real status records), the action
record, and the API's JSON shapes and errors through FastAPI's TestClient with Airflow's real SimpleAuthManager
(the token in the UI's cookie, as the iframe sends it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.airflow.ui import board, panels, writer
from laketide.close.partitions import State
from laketide.close.status import StatusRecord, record
from laketide.errors import RequestError
from laketide.redo import actions
from tests.ui_lake import EXPECTED, UiLake, build_ui_lake


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> UiLake:
    return build_ui_lake(tmp_path_factory.mktemp("ui-data"))


def test_board_shows_recorded_states_and_the_hours_being_written(lake: UiLake) -> None:
    b = board.board(lake.config, lake.stream, lake.hour(-12), lake.hour(1))
    cells = {c.hour: c for c in b.cells}
    for offset, state in EXPECTED.items():
        assert cells[lake.key(offset)].state == state, offset
    assert cells[lake.key(-12)].state == "none"  # nothing recorded, before the newest record
    failed, reopened = cells[lake.key(-7)], cells[lake.key(-6)]
    assert (failed.audit, failed.rows, failed.rejects, failed.checked_now) == (40, 33, 1, False)
    assert failed.reason == "audit 40 != lake 33 + rejects 1"
    assert reopened.duplicates_removed == 34 and reopened.snapshot_id == str(lake.snapshots[3])
    lagging = cells[lake.key(-3)]
    assert lagging.checked_now and lake.pending_file in (lagging.reason or "")
    assert b.counts["lagging"] >= 4 and b.counts["closed"] == 1 and sum(b.counts.values()) == len(b.cells) == 13
    assert b.states[-1] == "none" and set(b.states) >= {s.value for s in State}
    # a range in the past: recorded states only, nothing checked now; hours after now are left out
    past = board.board(lake.config, lake.stream, lake.hour(-10), lake.hour(-8))
    assert [c.state for c in past.cells] == ["closed", "empty"] and not any(c.checked_now for c in past.cells)
    future = board.board(lake.config, lake.stream, lake.hour(-1), lake.hour(5))
    assert [c.hour for c in future.cells][-1] <= lake.key(1)


def test_the_hour_being_written_after_a_redo_is_checked_now_not_frozen_at_reopened(lake: UiLake) -> None:
    """A redo records every hour it changed as reopened, the hour being written too: that one keeps growing, so the
    board checks it now (as before the redo); an older reopened hour keeps its record until it is closed again."""
    before = {c.hour: c for c in board.board(lake.config, lake.stream, lake.hour(-1), lake.hour(1)).cells}
    record(lake.config, StatusRecord("clicks", lake.hour(0), State.REOPENED, rows=1, reason="redo r1"))
    after = {c.hour: c for c in board.board(lake.config, lake.stream, lake.hour(-6), lake.hour(1)).cells}
    now = after[lake.key(0)]
    assert now.checked_now and now.state == before[lake.key(0)].state == EXPECTED[0], now
    assert now.rows != 1  # what the table holds now, not the redo's count
    assert after[lake.key(-6)].state == "reopened" and not after[lake.key(-6)].checked_now


def test_recorded_states_are_read_once_per_status_commit(lake: UiLake) -> None:
    board.clear_cache()
    version, first = board.recorded(lake.config, "clicks")
    again_version, again = board.recorded(lake.config, "clicks")
    assert again is first and again_version == version  # cached: the same status table version
    record(lake.config, StatusRecord("clicks", lake.hour(-9), State.REOPENED, rows=3, reason="late rows"))
    newer, fresh = board.recorded(lake.config, "clicks")
    assert newer != version and fresh[lake.hour(-9)].state == State.REOPENED
    record(lake.config, StatusRecord("clicks", lake.hour(-9), State.EMPTY, rows=0, reason="a quiet hour"))
    assert board.recorded(lake.config, "clicks")[1][lake.hour(-9)].state == State.EMPTY
    detail = board.hour_detail(lake.config, lake.stream, lake.hour(-9))
    assert [s.state for s in detail.steps][-2:] == ["reopened", "empty"] and detail.cell.state == "empty"


def test_writer_panel_lease_batches_lag_backlog_and_freshness(lake: UiLake) -> None:
    from laketide.lake.lease import WriterLease, engine_for

    stream = lake.stream
    assert writer.writer(lake.config, stream).state == "never started"
    lease = WriterLease(engine_for(lake.config.catalog), stream.writer_id, stream.writer_lease, "continuous")
    lease.acquire()
    try:
        now = datetime.now(UTC)
        w = writer.writer(lake.config, stream, limit=3, now=now)
        assert w.running and w.state == "running" and w.holder is not None and w.holder.mode == "continuous"
        assert [b.batch_id for b in w.batches] == [4, 3, 2]  # newest first, `limit` of them
        assert w.batches[2].rejects == 1 and w.batches[0].rows == 35 and w.batches[0].files == 1
        watermark = datetime.fromisoformat(w.batches[0].max_event_time or "")
        assert w.watermark == w.batches[0].watermark and w.lag_s == round((now - watermark).total_seconds(), 1)
        assert (w.backlog_files, w.oldest_backlog) == (1, lake.pending_file) and w.backlog_bytes > 0
        assert w.freshness.commits == 5 and w.freshness.files == 5 and (w.freshness.max_s or 0) < 600
        later = writer.writer(lake.config, stream, now=now + timedelta(hours=2))
        assert later.state == "stale" and later.freshness.commits == 0  # no heartbeat, no commit in the last hour
    finally:
        lease.release()
    assert writer.writer(lake.config, stream).state == "stopped"
    # a redo holds the stream with the writer's lease (redo.job.hold): the panel says so, not "running"
    from laketide.redo.job import lease_of

    held = lease_of(lake.config, stream)
    held.acquire()
    try:
        w = writer.writer(lake.config, stream)
        assert w.state == "held by redo" and not w.running and w.holder is not None and w.holder.mode == "redo"
    finally:
        held.release()


def test_timeline_and_the_redo_confirmation(lake: UiLake) -> None:
    t = panels.timeline(lake.config, lake.stream, limit=3)
    assert [s.snapshot_id for s in t.snapshots] == [str(i) for i in reversed(lake.snapshots[-3:])]
    assert t.snapshots[0].current and not t.snapshots[1].current and t.snapshots[0].what.endswith("batch 4")
    plan = panels.redo_plan(lake.config, lake.stream, str(lake.snapshots[1]), "alice")
    assert plan.conf == {"stream": "clicks", "snapshot_id": str(lake.snapshots[1]), "at": None, "start": None,
                         "end": None, "dry_run": True}
    assert plan.snapshots_left_out == 3 and plan.hours == [lake.key(-7), lake.key(-6), lake.key(-5)]
    assert plan.reingest_files == 4 and f"back to snapshot {lake.snapshots[1]}" in plan.report[0]
    with pytest.raises(RequestError, match=r"12345 is not in the history of lake\.clicks"):
        panels.redo_plan(lake.config, lake.stream, "12345", "alice")


def test_landing_reports_listing_and_recorded_findings(lake: UiLake) -> None:
    from laketide.ingest.landing import data_dir

    folder = data_dir(lake.stream.landing_path)
    (folder / "_20261122T03-p-00000001-0000abcd.jsonl").write_text('{"x": 1}\n')
    (folder / "20261122T04-p-00000002-0000abcd.jsonl").write_text("")
    (folder / "notes.txt").write_text("hello")
    try:
        report = panels.landing(lake.config, lake.stream, board.recorded(lake.config, "clicks")[1])
    finally:
        for name in ("_20261122T03-p-00000001-0000abcd.jsonl", "20261122T04-p-00000002-0000abcd.jsonl", "notes.txt"):
            (folder / name).unlink()
    assert report.pending == [lake.pending_file]
    found = {(f.file, f.reason, f.source) for f in report.reported}
    assert found == {
        ("_20261122T03-p-00000001-0000abcd.jsonl", "hidden name", "landing zone"),
        ("20261122T04-p-00000002-0000abcd.jsonl", "zero bytes", "landing zone"),
        ("notes.txt", "not a data file", "landing zone"),
        ("20260101T00-ui-late.JSONL", "not a data file", f"verification of {lake.key(-7)}"),
    }
    hidden = next(f for f in report.reported if f.reason == "hidden name")
    assert hidden.hours == ["2026-11-22T03:00:00+00:00"] and hidden.blocking


def test_action_record_and_history(lake: UiLake) -> None:
    from laketide.redo.params import validate
    from laketide.redo.plan import plan_request

    request = validate(lake.config, "clicks", str(lake.snapshots[2]), dry_run=True, run_id="manual__dry 1",
                       user="bob")
    plan = plan_request(lake.config, request)
    actions.record(lake.config, actions.from_redo_plan(plan, request, plan.lines(request.hours)))
    applied = validate(lake.config, "clicks", str(lake.snapshots[2]), dry_run=False, run_id="manual__redo 2",
                       user="carol")
    actions.record(lake.config, actions.from_redo_plan(plan, applied, ["plan"]))
    hours = {lake.key(-6): {"rows_before": 34, "rows_after": 0, "rejects_before": 0, "rejects_after": 0}}
    actions.record(lake.config, actions.from_redo_result(applied, lake.snapshots[4], 777, hours, ["done: redo"]))

    h = panels.history(lake.config, lake.stream)
    by_id = {a.action_id: a for a in h.actions}
    assert list(by_id) == ["manual__redo_2", "manual__dry_1", "r1"]  # newest first; the repair from the status table
    done, dry, repair = by_id["manual__redo_2"], by_id["manual__dry_1"], by_id["r1"]
    assert (done.outcome, done.steps, done.requested_by, done.to_snapshot) == ("done", 2, "carol", "777")
    assert done.hours[lake.key(-6)]["rows_after"] == 0 and done.report == ["done: redo"]
    assert (dry.outcome, dry.dry_run, dry.requested_by) == ("dry_run", True, "bob")
    assert dry.hours[lake.key(-5)] == {"rows_before": 35, "rows_after": 0, "rejects_before": 0, "rejects_after": 0}
    assert dry.from_snapshot == str(lake.snapshots[4]) and dry.to_snapshot == str(lake.snapshots[2])
    assert (repair.action, repair.requested_by, repair.hours[lake.key(-6)]["duplicates_removed"]) == ("repair",
                                                                                                     "alice", 34)
    with pytest.raises(ValueError, match="outcome must be one of"):
        actions.ActionRecord("x", "redo", "clicks", "maybe", False)


def test_a_manual_actions_task_log_starts_with_its_plan_then_its_outcome(lake: UiLake) -> None:
    from laketide.airflow.operators import outcome_lines, plan_lines

    assert plan_lines("redo", {"report": ["redo of stream clicks: ...", "  hour x"]}) == [
        "redo of stream clicks: ...", "  hour x"]
    assert plan_lines("backfill", {"stream": "clicks", "start": "a", "end": "b", "dry_run": "true",
                                   "requested_by": "bob"}) == [
        "DRY RUN: backfill of stream clicks [a, b) requested by bob"]
    assert outcome_lines(lake.config, "redo", "manual__redo 2") == ["outcome:", "done: redo"]
    assert outcome_lines(lake.config, "repair", "none")[0] == "repair: no outcome recorded for run none"


# ---------------------------------------------------------------- the API (TestClient, real auth manager)


@pytest.fixture(scope="module")
def client(lake: UiLake, airflow_db: Path) -> Iterator[Any]:
    import os

    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from laketide.airflow.ui.app import app

    manager = create_auth_manager()
    manager.init()
    token = manager.generate_jwt(SimpleAuthManagerUser(username="admin", role="ADMIN"))
    old = os.environ.get("LAKETIDE_CONFIG")
    os.environ["LAKETIDE_CONFIG"] = str(lake.config_path)
    try:
        with TestClient(app, cookies={"_token": token}) as c:  # the UI's JWT cookie, as the iframe sends it
            yield c
    finally:
        if old is None:
            os.environ.pop("LAKETIDE_CONFIG")
        else:
            os.environ["LAKETIDE_CONFIG"] = old


def test_api_json_shapes(client: Any, lake: UiLake) -> None:
    streams = client.get("/api/streams").json()
    assert streams == {"streams": [{"name": "clicks", "table": "lake.clicks", "rejects_table": "lake.clicks_rejects",
                                    "close_dag": "laketide_close_clicks", "live": True, "may_close": True}],
                       "redo_dag": "laketide_redo", "may_redo": True, "backfill_dag": "laketide_backfill",
                       "repair_dag": "laketide_repair", "may_backfill": True, "may_repair": True}  # the admin may
    start, end = lake.key(-10), lake.key(-5)
    b = client.get("/api/streams/clicks/board", params={"start": start, "end": end}).json()
    assert (b["start"], b["end"], [c["state"] for c in b["cells"]]) == (
        start, end, ["closed", "empty", "gap", "failed", "reopened"])
    assert set(b["cells"][0]) >= {"hour", "state", "checked_now", "rows", "rejects", "audit", "duplicates_removed",
                                  "reason", "snapshot_id"}
    week = client.get("/api/streams/clicks/board").json()
    assert len(week["cells"]) == 7 * 24 and week["cells"][-1]["hour"] >= lake.key(0)
    # a '+' that reached the query string unencoded is read as the offset it was
    assert client.get(f"/api/streams/clicks/board?start={start}&end={end}").json()["cells"] == b["cells"]
    hour = client.get(f"/api/streams/clicks/hours/{lake.key(-7)}").json()
    assert hour["cell"]["state"] == "failed" and hour["steps"][-1]["verification"]["audit"] == 40
    # a step's verification JSON hands out snapshot ids as strings, also from records written with numbers
    action = client.get(f"/api/streams/clicks/hours/{lake.key(-6)}").json()["steps"][-1]["verification"]["action"]
    assert (action["from_snapshot"], action["to_snapshot"]) == (str(lake.snapshots[2]), str(lake.snapshots[3]))
    w = client.get("/api/streams/clicks/writer", params={"limit": 2}).json()
    assert [b["batch_id"] for b in w["batches"]] == [4, 3] and isinstance(w["batches"][0]["snapshot_id"], str)
    snaps = client.get("/api/streams/clicks/snapshots").json()["snapshots"]
    assert snaps[0]["snapshot_id"] == str(lake.snapshots[-1])  # 64-bit ids as strings
    plan = client.get("/api/streams/clicks/redo-plan", params={"snapshot_id": str(lake.snapshots[0])}).json()
    assert plan["conf"]["snapshot_id"] == str(lake.snapshots[0]) and plan["conf"]["dry_run"] is True
    assert client.get("/api/streams/clicks/landing").json()["pending"] == [lake.pending_file]
    assert "actions" in client.get("/api/streams/clicks/history").json()
    health = client.get("/api/health").json()
    assert "lake.clicks" in [t["table"] for t in health["tables"]] and health["maintenance"] == []
    page = client.get("/")
    assert page.status_code == 200 and 'src="static/laketide.js"' in page.text  # relative asset paths
    assert "fetch(\"/" not in client.get("/static/laketide.js").text  # relative fetch() URLs


def test_the_api_server_reads_the_tables_ahead_when_it_starts(client: Any, lake: UiLake) -> None:
    """Airflow's API server enters the view's lifespan when it starts: the tables' metadata is read then, in the
    background, not by the health panel's first request (which paid the catalog libraries' import and every
    manifest: 0.7 s on a new quickstart, against 12-90 ms after)."""
    import threading

    from fastapi.testclient import TestClient

    from laketide.airflow.ui.app import app
    from laketide.maintain import health

    health._tables.clear()
    with TestClient(app):  # no request is made
        for thread in [t for t in threading.enumerate() if t.name == "laketide-view-warm"]:
            thread.join(60)
        assert "lake.clicks" in health._tables


@pytest.mark.parametrize(("path", "params", "status", "detail"), [
    ("/api/streams/nope/board", {}, 404, "unknown stream 'nope': configured streams are ['clicks']"),
    ("/api/streams/nope/writer", {}, 404, "unknown stream 'nope'"),
    ("/api/streams/clicks/hours/2026-11-22T03:30:00+00:00", {}, 400, "is not the start of an hour"),
    ("/api/streams/clicks/hours/tomorrow", {}, 400, "is not an ISO timestamp"),
    ("/api/streams/clicks/board", {"start": "2026-11-22T03:00:00"}, 400, "has no UTC offset"),
    ("/api/streams/clicks/board", {"start": "2026-11-22T05:00:00+00:00", "end": "2026-11-22T03:00:00+00:00"}, 400,
     "must be before end"),
    ("/api/streams/clicks/board", {"start": "2020-01-01T00:00:00+00:00", "end": "2026-01-01T00:00:00+00:00"}, 400,
     "more than one board shows"),
    ("/api/streams/clicks/redo-plan", {"snapshot_id": "12345"}, 400, "12345 is not in the history of lake.clicks"),
    ("/static/secret.py", {}, 404, "no asset"),
])
def test_api_errors_are_clear_json(client: Any, path: str, params: dict[str, str], status: int, detail: str) -> None:
    response = client.get(path, params=params)
    assert response.status_code == status, response.text
    assert detail in response.json()["detail"]


def test_api_needs_the_login(client: Any) -> None:
    from fastapi.testclient import TestClient

    from laketide.airflow.ui.app import app

    anonymous = TestClient(app)
    for path in ("/", "/api/streams", "/api/streams/clicks/board", "/api/health", "/redo",
                 "/api/streams/clicks/redo-plan?snapshot_id=1"):
        assert anonymous.get(path).status_code == 401, path
    assert json.loads(anonymous.get("/api/streams").text) == {"detail": "Not authenticated"}


# ---------------------------------------------------------------- the board's filter, days, open hours, actions


def test_board_days_filter_and_the_open_hours_audit_and_rejects(lake: UiLake) -> None:
    b = board.board(lake.config, lake.stream, lake.hour(-10), lake.hour(1))
    by_day: dict[str, dict[str, int]] = {}
    for cell in b.cells:
        by_day.setdefault(cell.hour[:10], {}).setdefault(cell.state, 0)
        by_day[cell.hour[:10]][cell.state] += 1
    assert {d.day: d.counts for d in b.days} == by_day
    assert sum(d.rows for d in b.days) == sum(c.rows or 0 for c in b.cells)
    assert sum(d.rejects for d in b.days) == sum(c.rejects or 0 for c in b.cells) >= 1  # the failed hour's reject
    only = board.board(lake.config, lake.stream, lake.hour(-10), lake.hour(1), state="lagging")
    assert only.state == "lagging" and [c.hour for c in only.cells] == [c.hour for c in b.cells
                                                                         if c.state == "lagging"]
    assert only.counts == b.counts and only.days == b.days  # every hour still counted
    # the hours being written: their audit (the landing files' audit records) and rejects so far, not rows only
    cells = {c.hour: c for c in b.cells}
    open_hour, lagging = cells[lake.key(-5)], cells[lake.key(-3)]
    assert open_hour.checked_now and (open_hour.audit, open_hour.rows, open_hour.rejects) == (35, 35, 0)
    assert lagging.checked_now and (lagging.audit, lagging.rows, lagging.rejects) == (25, 0, 0)  # landed, pending
    assert board.hour_detail(lake.config, lake.stream, lake.hour(-3)).cell.audit == 25


def test_action_plans_fill_each_dags_params_dry_run_first(lake: UiLake) -> None:
    from laketide.airflow.ui.ranges import action_plan

    def plan(action: str, start: int, end: int) -> Any:
        return action_plan(lake.config, lake.stream, action, lake.hour(start), lake.hour(end), "alice")

    close = plan("close", -10, -8)
    assert (close.dag_id, close.conf, close.dry_run) == (
        "laketide_close_clicks", {"start": lake.key(-10), "end": lake.key(-8)}, False)
    assert close.hours == [lake.key(-10), lake.key(-9)]
    for action in ("backfill", "repair"):
        p = plan(action, -10, -9)
        assert (p.dag_id, p.conf, p.dry_run) == (f"laketide_{action}", {
            "stream": "clicks", "start": lake.key(-10), "end": lake.key(-9), "dry_run": True}, True)
    # a redo of hours returns to the snapshot before their first commit, scoped to them
    redo = plan("redo", -7, -4)
    assert redo.conf == {"stream": "clicks", "snapshot_id": str(lake.snapshots[1]), "at": None,
                         "start": lake.key(-7), "end": lake.key(-4), "dry_run": True}


@pytest.mark.parametrize(("action", "start", "end", "message"), [
    ("close", None, None, "no hour selected: click an hour on the board"),
    ("backfill", -5, -7, "must be before end"),
    ("close", 1, 3, "an hour that has not started yet"),
    ("close", -2, 1, "is in the future"),  # the current hour cannot be closed yet
    ("backfill", -5, -4, "is past what the writer has finished"),
    ("redo", -7, -6, "changes hours outside the range"),  # rolling back to before -7 changes -6 and -5 too
    ("redo", -9, -8, "no commit of lake.clicks added rows"),
    ("redo", -10, -9, "the first commit of lake.clicks"),
    ("rerun", -10, -9, "unknown action 'rerun'"),
])
def test_wrong_action_requests_are_refused_clearly(lake: UiLake, action: str, start: int | None,
                                                   end: int | None, message: str) -> None:
    from laketide.airflow.ui.ranges import action_plan
    from laketide.errors import RangeError

    with pytest.raises((RequestError, RangeError), match=message):
        action_plan(lake.config, lake.stream, action, None if start is None else lake.hour(start),
                    None if end is None else lake.hour(end), "alice")


def test_the_open_hours_rejects_are_counted_from_the_rejects_table(lake: UiLake) -> None:
    """A landed file of the hour being written, its rows committed and three of its lines in the rejects table (a
    real Iceberg table partitioned by event hour, as the writer's): the hour's audit and rejects so far."""
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import HourTransform
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    from laketide.airflow.ui.live import hour_counts
    from laketide.dev.commits import commit_files, land
    from laketide.lake.catalog import append_rows, load_catalog
    from laketide.lake.commits import BATCH_ID, WRITER_ID

    hour, catalog = lake.hour(-2), load_catalog(lake.config.catalog)
    kinds = [("raw", StringType()), ("reason", StringType()), ("source_file", StringType()),
             ("event_hour", TimestamptzType()), ("batch_id", LongType())]
    schema = Schema(*[NestedField(i + 1, n, k, required=False) for i, (n, k) in enumerate(kinds)])
    rejects = catalog.create_table(
        lake.stream.rejects_table, schema,
        partition_spec=PartitionSpec(PartitionField(source_id=4, field_id=1000, transform=HourTransform(),
                                                    name="event_hour_hour")))
    landed = land(lake.stream, hour, 12, 200, producer="uirej")
    try:
        commit_files(lake.config, lake.stream, 50, [landed])
        rows = [{"raw": "{", "reason": "malformed", "source_file": landed.name, "event_hour": hour, "batch_id": 50}] * 3
        append_rows(rejects, pa.Table.from_pylist(rows, schema=rejects.schema().as_arrow()),
                    {WRITER_ID: lake.stream.writer_id, BATCH_ID: "50"})
        assert hour_counts(lake.config, lake.stream, [hour]) == {hour: (12, 3)}
        cell = {c.hour: c for c in board.board(lake.config, lake.stream, hour, lake.hour(-1)).cells}[lake.key(-2)]
        assert (cell.audit, cell.rows, cell.rejects) == (12, 12, 3)
    finally:
        landed.unlink()
        catalog.drop_table(lake.stream.rejects_table)


def test_api_permissions_per_dag_filter_and_action_plans(client: Any, lake: UiLake) -> None:
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from laketide.airflow.ui.app import app

    manager = create_auth_manager()
    manager.init()
    token = manager.generate_jwt(SimpleAuthManagerUser(username="viewer", role="VIEWER"))
    viewer = TestClient(app, cookies={"_token": token})
    listed = viewer.get("/api/streams").json()  # a viewer may start no run: the view shows no action button
    assert (listed["may_redo"], listed["may_backfill"], listed["may_repair"],
            listed["streams"][0]["may_close"]) == (False, False, False, False)
    window = {"start": lake.key(-10), "end": lake.key(-9)}
    for action in ("close", "backfill", "repair", "redo"):
        assert viewer.get(f"/api/streams/clicks/actions/{action}", params=window).status_code == 403, action
    plan = client.get("/api/streams/clicks/actions/backfill", params=window).json()
    assert plan["dag_id"] == "laketide_backfill" and plan["conf"]["dry_run"] is True and plan["dry_run"] is True
    refused = client.get("/api/streams/clicks/actions/close", params={"start": lake.key(-2), "end": lake.key(1)})
    assert refused.status_code == 400 and refused.json()["detail"].startswith(
        "close of clicks refused, nothing started: end ") and "is in the future" in refused.json()["detail"]
    empty = client.get("/api/streams/clicks/actions/repair")
    assert empty.status_code == 400 and "no hour selected" in empty.json()["detail"]
    assert client.get("/api/streams/clicks/actions/rerun", params=window).status_code == 404
    only = client.get("/api/streams/clicks/board", params={"state": "failed"}).json()
    assert [c["hour"] for c in only["cells"]] == [lake.key(-7)] and only["state"] == "failed" and only["days"]
    bad = client.get("/api/streams/clicks/board", params={"state": "green"})
    assert bad.status_code == 400 and "unknown state 'green'" in bad.json()["detail"]
