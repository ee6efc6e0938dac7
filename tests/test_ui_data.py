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
                                    "close_dag": "laketide_close_clicks", "live": True}], "redo_dag": "laketide_redo",
                       "may_redo": True}  # the admin may
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
