"""Done-markers without Airflow: the configuration's checks, the marker file (atomic, overwritten by a re-close),
the HTTP POST to a real endpoint on 127.0.0.1 (retried with back-off, then given up on with the reason), the user
callable, and one action's failure leaving the others done. Also the close run's note, composed from status rows."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.markers import fire, marker_file, payload, post
from laketide.close.notes import compose
from laketide.close.partitions import PartitionStatus, State
from laketide.close.results import ClosedPartition
from laketide.close.status import StatusRecord
from laketide.config import HttpMarker, LaketideConfig
from laketide.errors import ConfigError, DoneMarkerError
from tests.endpoint import ALERT_ENV, SINK_ENV, Endpoint, lines
from tests.helpers import load, write_config

HOUR = datetime(2026, 11, 22, 19, tzinfo=UTC)
KEY = "2026-11-22T19:00:00+00:00"
TEMPLATE = "{warehouse}/_done/{stream}/{date}/{hour}/_SUCCESS"


def config(tmp_path: Path, **markers: Any) -> LaketideConfig:
    return load(write_config(tmp_path, done_markers=markers))


def closed(reclose: bool = False, rows: int = 21690) -> ClosedPartition:
    return ClosedPartition("clicks", "lake.clicks", KEY, rows, 12, 4712 if reclose else 4711, rows + 12,
                           "2026-11-22T20:11:00+00:00", reclose, previous_snapshot_id=4711 if reclose else None)


@pytest.fixture()
def endpoint() -> Any:
    server = Endpoint()
    yield server
    server.stop()


# -- the configuration -------------------------------------------------------------------------------------------

def test_a_stream_configures_its_markers(tmp_path: Path) -> None:
    cfg = config(tmp_path, file=TEMPLATE, http="http://127.0.0.1:9/hook", callable="tests.endpoint:record")
    markers = cfg.stream("clicks").done_markers
    assert markers is not None and markers.http is not None
    assert markers.http.url == "http://127.0.0.1:9/hook" and markers.http.attempts == 3
    assert markers.retries == 3 and markers.retry_delay == timedelta(minutes=2)
    assert marker_file(cfg, cfg.stream("clicks"), KEY) == tmp_path / "warehouse/_done/clicks/2026-11-22/19/_SUCCESS"
    assert load(write_config(tmp_path / "none")).stream("clicks").done_markers is None
    # from the environment too: a template that is not YAML (it begins with a brace) is taken as it is
    from laketide.config import load_config

    prefix = "LAKETIDE__STREAMS__CLICKS__DONE_MARKERS__"
    overridden = load_config(write_config(tmp_path / "env"), environ={
        f"{prefix}FILE": TEMPLATE, f"{prefix}HTTP__URL": "http://127.0.0.1:9/hook", f"{prefix}HTTP__ATTEMPTS": "5"})
    markers = overridden.stream("clicks").done_markers
    assert markers is not None and markers.file == TEMPLATE and markers.http is not None
    assert (markers.http.url, markers.http.attempts) == ("http://127.0.0.1:9/hook", 5)


@pytest.mark.parametrize(("markers", "message"), [
    ({}, "done_markers: no action: set file, http and/or callable"),
    ({"file": "{warehouse}/_done/{stream}/{date}/_SUCCESS"}, "does not name the hour"),
    ({"file": "{warehouse}/_done/{stream}/{date}/{hour}/{minute}"}, "unknown placeholder(s) ['minute']"),
    ({"file": "_done/{date}/{hour}/_SUCCESS"}, "is a relative path"),
    ({"file": "/m/{date}/{hour}/"}, "names a folder"),
    ({"file": "/m/{date}/{hour:02}/x"}, "without a format or conversion"),
    ({"file": "{warehouse}/lake/clicks/_done/{date}/{hour}/_SUCCESS"},
     "lies inside the location of table lake.clicks"),
    ({"file": "{warehouse}/laketide.db/partition_status/{date}/{hour}/_S"},
     "lies inside the location of table laketide.partition_status"),
    ({"file": "{home}/landing/clicks/done/{date}/{hour}/_SUCCESS"}, "lies inside the landing zone of stream"),
    ({"http": "ftp://example.com/x"}, "is not an http:// or https:// URL"),
    ({"http": {"url": "http://h/x", "timeout": "10m"}}, "timeout: 10m is longer than 5 minutes"),
    ({"http": {"url": "http://h/x", "attempts": 0}}, "attempts"),
    ({"callable": "not a function"}, "must be 'package.module:function'"),
    ({"callable": "m:f", "retries": -1}, "retries"),
    ({"callable": "m:f", "surprise": 1}, "surprise"),
])
def test_bad_markers_are_refused_with_the_key(tmp_path: Path, markers: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config(tmp_path, **markers)
    text = str(err.value)
    assert "streams[clicks].done_markers" in text and message in text, text


def test_a_remote_warehouse_needs_a_local_marker_folder(tmp_path: Path) -> None:
    import yaml

    path = write_config(tmp_path, done_markers={"file": TEMPLATE})
    raw = yaml.safe_load(path.read_text())
    raw["catalog"]["warehouse"] = "s3://bucket/warehouse"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=re.escape("uses {warehouse}, but the catalog's warehouse is not a local")):
        load(path)


# -- firing ----------------------------------------------------------------------------------------------------

def test_every_action_gets_the_record_and_a_reclose_overwrites_the_file(
        tmp_path: Path, endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = tmp_path / "sink.jsonl"
    monkeypatch.setenv(SINK_ENV, str(sink))
    cfg = config(tmp_path, file=TEMPLATE, http=endpoint.url, callable="tests.endpoint:record")
    stream = cfg.stream("clicks")
    results = fire(cfg, stream, closed())
    assert [(r.action, r.ok) for r in results] == [("file", True), ("http", True), ("callable", True)]
    path = marker_file(cfg, stream, KEY)
    expected = {"stream": "clicks", "table": "lake.clicks", "partition": KEY, "rows": 21690, "rejects": 12,
                "duplicates_removed": 0, "audit": 21702,
                "snapshot_id": "4711", "closed_at": "2026-11-22T20:11:00+00:00", "reclose": False,
                "snapshot_range": {"from": None, "to": "4711"}}
    assert json.loads(path.read_text()) == expected
    assert endpoint.posts == [expected] and lines(sink) == [expected]

    fire(cfg, stream, closed(reclose=True, rows=21730))
    assert json.loads(path.read_text()) == {**expected, "rows": 21730, "audit": 21742, "reclose": True,
                                            "snapshot_id": "4712", "snapshot_range": {"from": "4711", "to": "4712"}}
    assert ClosedPartition.from_dict(json.loads(path.read_text())) == closed(reclose=True, rows=21730)
    assert path.read_bytes() == payload(closed(reclose=True, rows=21730))
    assert [p["reclose"] for p in endpoint.posts] == [False, True] and len(lines(sink)) == 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["_SUCCESS"]  # no temporary file left


def test_a_failing_endpoint_is_retried_then_reported_and_the_other_actions_still_run(
        tmp_path: Path, endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = tmp_path / "sink.jsonl"
    monkeypatch.setenv(SINK_ENV, str(sink))
    endpoint.mode = "fail-then-down"  # one HTTP 500, then nothing listens
    cfg = config(tmp_path, file=TEMPLATE, callable="tests.endpoint:record",
                 http={"url": endpoint.url, "attempts": 3, "backoff": "0.2s", "timeout": "2s"})
    waits: list[float] = []
    with pytest.raises(DoneMarkerError) as err:
        fire(cfg, cfg.stream("clicks"), closed(), sleep=waits.append)
    text = str(err.value)
    assert "1 of 3 done-marker action(s) of the close of clicks 2026-11-22T19:00:00+00:00 failed" in text
    assert f"POST {endpoint.url} failed 3 time(s); last: unreachable" in text and "The hour stays closed" in text
    assert endpoint.answers == [500] and waits == [0.2, 0.4]  # doubling back-off between the attempts
    assert marker_file(cfg, cfg.stream("clicks"), KEY).exists() and len(lines(sink)) == 1


def test_a_refused_request_is_not_retried() -> None:
    """An endpoint that answers 404: the request itself is wrong, another attempt would not help."""
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from threading import Thread

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    Thread(target=server.handle_request, daemon=True).start()
    http = HttpMarker(url=f"http://127.0.0.1:{server.server_address[1]}/nope", attempts=5)
    waits: list[float] = []
    with pytest.raises(DoneMarkerError, match=r"was refused: HTTP 404 .*not retried"):
        post(http, b"{}", sleep=waits.append)
    server.server_close()
    assert waits == []


def test_a_callable_that_cannot_be_loaded_or_raises_is_reported(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALERT_ENV, raising=False)
    for target, message in (("tests.no_such_module:f", "cannot import tests.no_such_module (ModuleNotFoundError"),
                            ("tests.endpoint:nothing", "tests.endpoint has no function 'nothing'"),
                            ("tests.endpoint:alert", f"callable: KeyError: '{ALERT_ENV}'")):
        cfg = config(tmp_path / target.replace(":", "_"), callable=target)
        with pytest.raises(DoneMarkerError, match=re.escape(message)):
            fire(cfg, cfg.stream("clicks"), closed())


# -- the run note ----------------------------------------------------------------------------------------------

def _rec(hour: datetime, state: State, rows: int | None = None, reason: str = "") -> StatusRecord:
    return StatusRecord("clicks", hour, state, rows=rows, reason=reason, run_id="r")


def test_the_note_names_the_hours_and_the_outcome() -> None:
    one = [_rec(HOUR, State.COMPLETE, 21690), _rec(HOUR, State.VERIFIED, 21690), _rec(HOUR, State.CLOSED, 21690)]
    assert compose([KEY], one) == "hour 2026-11-22 19:00: closed, complete, 21,690 rows"

    reason = (f"partition {KEY} of clicks FAILED verification: audit 75 != lake 70 + rejects 4 (missing 1) at "
              "snapshot 42; expect_table_row_count_to_equal: observed 70 rows, expected 71; full result: /r.json")
    failed = [_rec(HOUR, State.COMPLETE, 74), _rec(HOUR, State.FAILED, 70, reason)]
    assert compose([KEY], failed) == ("hour 2026-11-22 19:00: not closed: verification failed (audit 75 != lake 70 "
                                      "+ rejects 4 (missing 1); expect_table_row_count_to_equal: observed 70 rows, "
                                      "expected 71)")

    gap = PartitionStatus("clicks", HOUR, State.GAP, "no file landed for 15m", 0, None, None, HOUR)
    assert compose([KEY], [], now={KEY: gap}) == "hour 2026-11-22 19:00: not closed: gap (no file landed for 15m)"

    hours = [HOUR + timedelta(hours=i) for i in range(36)]
    keys = [h.isoformat() for h in hours]
    rows = [r for i, h in enumerate(hours) for r in (
        _rec(h, State.EMPTY if i % 5 == 0 else State.COMPLETE, 0 if i % 5 == 0 else 40),
        _rec(h, State.CLOSED, 0 if i % 5 == 0 else 40)) if i != 7]
    earlier = HOUR - timedelta(hours=3)
    rows += [_rec(earlier, State.REOPENED, 80), _rec(earlier, State.VERIFIED, 80), _rec(earlier, State.CLOSED, 80)]
    note = compose(keys, rows, reclosed=[earlier.isoformat()], markers_failed=[keys[2]])
    assert note == ("36 hours 2026-11-22 19:00 to 2026-11-24 06:00: 35 closed (27 complete, 8 empty), 1,080 rows; "
                    "1 not closed: 2026-11-23 02:00 not closed; "
                    "re-closed: 2026-11-22 16:00 (80 rows); "
                    "done-markers failed for 2026-11-22 21:00 (alerted; the hours stay closed)")
    many = compose(keys, [_rec(h, State.FAILED, 1, "x" * 300) for h in hours])
    assert len(many) == 1000 and many.endswith("…")
