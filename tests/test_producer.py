"""The bundled sample producer: events, bad lines, backfill and live mode, all against the contract."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.config import LaketideConfig, StreamConfig, load_config
from laketide.dev import producer
from laketide.ingest import landing
from laketide.lake.hours import partition_key

CONFIG = """
home: {home}
catalog:
  uri: "sqlite:///{{home}}/catalog.db"
  warehouse: "file://{{home}}/warehouse"
streams:
  - name: clicks
    landing_path: "{{home}}/landing/clicks"
    checkpoint_path: "{{home}}/checkpoints/clicks"
    table: lake.clicks
    rejects_table: lake.clicks_rejects
    writer_id: clicks-writer
    event_time_field: event_time
    event_id_field: event_id
    fields:
      event_id: {{type: string, required: true}}
      event_time: {{type: timestamp, required: true}}
      user_id: {{type: long, required: true}}
      page: {{type: string, required: true}}
      action: {{type: string}}
      duration_ms: {{type: long}}
      country: {{type: string}}
  - name: orders
    landing_path: "{{home}}/landing/orders"
    checkpoint_path: "{{home}}/checkpoints/orders"
    table: lake.orders
    rejects_table: lake.orders_rejects
    writer_id: orders-writer
    event_time_field: ts
    event_id_field: order_no
    fields:
      order_no: {{type: long, required: true}}
      ts: {{type: timestamp, required: true}}
      quantity: {{type: int, required: true}}
      price: {{type: double, required: true}}
      is_gift: {{type: boolean}}
      shipped_at: {{type: timestamp}}
      note: {{type: string}}
"""


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "laketide.yaml"
    path.write_text(CONFIG.format(home=tmp_path / "home"))
    return path


@pytest.fixture
def config(config_path: Path) -> LaketideConfig:
    return load_config(config_path, environ={})


@pytest.fixture
def clicks(config: LaketideConfig) -> StreamConfig:
    return config.stream("clicks")


@pytest.fixture
def orders(config: LaketideConfig) -> StreamConfig:
    return config.stream("orders")


START = producer.hour_floor(datetime.now(UTC)) - timedelta(hours=48)


# ---------------------------------------------------------------- an independent validator


def _type_ok(value: Any, field_type: str) -> bool:
    if field_type == "string":
        return isinstance(value, str)
    if field_type in ("long", "int"):
        limit = 2**31 if field_type == "int" else 2**63
        return isinstance(value, int) and not isinstance(value, bool) and -limit <= value < limit
    if field_type == "double":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if field_type == "boolean":
        return isinstance(value, bool)
    if field_type == "timestamp":
        if not isinstance(value, str):
            return False
        try:
            return datetime.fromisoformat(value).utcoffset() == timedelta(0)
        except ValueError:
            return False
    raise AssertionError(field_type)


def problem(stream: StreamConfig, raw: bytes) -> str | None:
    """Why a line is invalid for ``stream`` (None when valid), judged independently of the producer."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "utf8"
    try:
        obj = json.loads(text)
    except ValueError:
        return "json"
    if not isinstance(obj, dict):
        return "not an object"
    for name, spec in stream.fields.items():
        if obj.get(name) is None:
            if spec.required:
                return f"missing {name}"
            continue
        if not _type_ok(obj[name], spec.type):
            return f"type {name}"
    event_time = datetime.fromisoformat(obj[stream.event_time_field])
    low = datetime.fromisoformat(stream.min_event_time)
    if not low <= event_time <= datetime.now(UTC) + stream.max_future:
        return "event time"
    return None


def _files(landing_path: Path) -> list[Path]:
    return sorted(landing.data_dir(landing_path).glob("*.jsonl"))


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\n") if line.strip()]


def _seq(path: Path) -> int:
    match = landing.FILE_NAME.match(path.name)
    assert match, path.name
    return int(match.group("seq"))


def check_landing_zone(stream: StreamConfig, landing_path: Path) -> dict[str, int]:
    """Assert the contract on every published file; return the lines per partition seen in data/."""
    assert list(landing.tmp_dir(landing_path).iterdir()) == [], "leftovers in _tmp"
    audits = landing.read_audits(landing_path)
    files = _files(landing_path)
    assert {f.name for f in files} == set(audits)
    seen: Counter[str] = Counter()
    for path in files:
        audit = audits[path.name]
        lines = _lines(path)
        assert path.read_bytes().endswith(b"\n")
        assert audit["stream"] == stream.name
        assert audit["records"] == len(lines)
        assert len(audit["partitions"]) == 1, "a file holds exactly one partition"
        (partition,) = audit["partitions"]
        assert audit["partitions"][partition] == len(lines)
        assert path.name.startswith(datetime.fromisoformat(partition).strftime("%Y%m%dT%H") + "-")
        for raw in lines:
            if problem(stream, raw) is None:
                event_time = datetime.fromisoformat(json.loads(raw)[stream.event_time_field])
                assert partition_key(event_time) == partition
        seen[partition] += len(lines)
    assert landing.expected_counts(landing_path) == dict(seen)
    return dict(seen)


# ---------------------------------------------------------------- events and bad lines


def test_make_event_follows_the_schema(clicks: StreamConfig) -> None:
    rng = random.Random(1)
    at = datetime(2026, 11, 22, 3, 15, 7, 123000, tzinfo=UTC)
    events = [producer.make_event(clicks, rng, at) for _ in range(500)]
    for event in events:
        assert problem(clicks, producer.encode_event(event)) is None
        assert event["event_time"] == "2026-11-22T03:15:07.123000+00:00"
        assert set(event) <= set(clicks.fields)
        assert {"event_id", "event_time", "user_id", "page"} <= set(event)
        assert event["page"].startswith("/")
    assert len({e["event_id"] for e in events}) == 500
    assert all(len(e["event_id"]) == 32 for e in events)
    for optional in ("action", "duration_ms", "country"):
        present = sum(optional in e for e in events)
        assert 300 < present < 500, f"{optional} should be present mostly, but not always ({present})"
    assert {e["action"] for e in events if "action" in e} == {"view", "click", "purchase"}


def test_make_event_works_for_any_schema(orders: StreamConfig) -> None:
    rng = random.Random(2)
    at = datetime(2026, 11, 22, 3, tzinfo=UTC)
    events = [producer.make_event(orders, rng, at) for _ in range(300)]
    for event in events:
        assert problem(orders, producer.encode_event(event)) is None, event
    assert {type(e["order_no"]) for e in events} == {int}
    assert {e["is_gift"] for e in events if "is_gift" in e} == {True, False}
    assert all(1 <= e["quantity"] <= 5 for e in events)


def test_an_upsert_streams_sample_lines_are_changes_of_a_few_keys_in_sequence() -> None:
    """The quickstart's ``accounts`` stream: its sample lines are changes (inserts, updates, deletes as its op field's
    values spell them) of a bounded set of accounts, sequenced by change time, each a valid line of the stream."""
    from laketide.config import REPO_ROOT

    accounts = load_config(REPO_ROOT / "conf" / "laketide.yaml", environ={}).stream("accounts")
    assert accounts.upsert is not None
    rng = random.Random(3)
    start = datetime(2026, 11, 22, 3, tzinfo=UTC)
    events = [producer.make_event(accounts, rng, start + timedelta(seconds=i)) for i in range(2000)]
    for event in events[:300]:
        assert problem(accounts, producer.encode_event(event)) is None, event
    ops = Counter(e["op"] for e in events)
    assert set(ops) == {"insert", "update", "delete"} and ops["update"] > ops["insert"] > ops["delete"] > 0, ops
    keys = {e["account_id"] for e in events}
    assert 300 < len(keys) <= 500 and all(k.startswith("acct-") for k in keys)  # keys change again and again
    versions = [e["version"] for e in events]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)  # later changes are newer


@pytest.mark.parametrize("kind", producer.MALFORMED_KINDS)
@pytest.mark.parametrize("stream_name", ["clicks", "orders"])
def test_every_malformed_kind_is_really_invalid(config: LaketideConfig, stream_name: str, kind: str) -> None:
    stream = config.stream(stream_name)
    rng = random.Random(kind)
    at = datetime(2026, 11, 22, 3, 30, tzinfo=UTC)
    expected = {
        "not_json": {"json"},
        "truncated_json": {"json"},
        "invalid_utf8": {"utf8"},
        "json_array": {"not an object"},
        "absurd_time": {"event time"},
    }
    for _ in range(50):
        got_kind, raw = producer.make_malformed(stream, rng, at, kind)
        assert got_kind == kind
        assert b"\n" not in raw and b"\r" not in raw and raw.strip()
        why = problem(stream, raw)
        assert why is not None, f"{kind} line is valid: {raw!r}"
        if kind in expected:
            assert why in expected[kind], (why, raw)
        elif kind == "wrong_type":
            assert why.startswith("type "), (why, raw)
        else:
            assert why.startswith("missing "), (why, raw)


def test_make_malformed_mixes_all_kinds(clicks: StreamConfig) -> None:
    rng = random.Random(3)
    kinds = Counter(producer.make_malformed(clicks, rng, START)[0] for _ in range(700))
    assert set(kinds) == set(producer.MALFORMED_KINDS)


# ---------------------------------------------------------------- backfill


def test_backfill_publishes_one_partition_per_file_with_audits(clicks: StreamConfig, tmp_path: Path) -> None:
    out = tmp_path / "landing"
    summary = producer.backfill(
        clicks, start=START, hours=5, events_per_hour=730, events_per_file=200, landing_path=out, seed=7
    )
    seen = check_landing_zone(clicks, out)
    hours = [partition_key(START + timedelta(hours=h)) for h in range(5)]
    assert seen == {h: 730 for h in hours}
    assert summary.partitions == seen
    assert summary.records == 5 * 730
    assert summary.malformed == 0 and summary.late == 0
    assert len(summary.files) == len(_files(out)) == 5 * 4  # 200+200+200+130 per hour
    assert max(len(_lines(f)) for f in _files(out)) == 200
    assert all(problem(clicks, raw) is None for f in _files(out) for raw in _lines(f))
    assert sorted(_seq(f) for f in _files(out)) == list(range(20))


def test_backfill_honours_the_malformed_ratio(clicks: StreamConfig, tmp_path: Path) -> None:
    out = tmp_path / "landing"
    summary = producer.backfill(
        clicks, start=START, hours=4, events_per_hour=1000, landing_path=out, seed=11,
        faults=producer.Faults(malformed_ratio=0.1),
    )
    check_landing_zone(clicks, out)
    reasons = Counter(problem(clicks, raw) for f in _files(out) for raw in _lines(f))
    invalid = sum(n for why, n in reasons.items() if why is not None)
    assert invalid == summary.malformed, "every line the producer calls malformed is invalid, no other"
    assert 0.07 * 4000 < invalid < 0.13 * 4000
    assert set(summary.malformed_kinds) == set(producer.MALFORMED_KINDS)
    assert {"utf8", "json", "not an object", "event time"} <= set(reasons)
    # malformed lines are records of their file: counted in the audits
    assert sum(landing.expected_counts(out).values()) == 4000


def test_quiet_hours_produce_no_files(clicks: StreamConfig, tmp_path: Path) -> None:
    out = tmp_path / "landing"
    summary = producer.backfill(
        clicks, start=START, hours=6, events_per_hour=300, landing_path=out, seed=5, quiet_hours=[2, 5],
        # late events from hour 3 would fall into quiet hour 2 if they were allowed to
        faults=producer.Faults(late_ratio=0.5, late_by=timedelta(hours=2), malformed_ratio=0.05),
    )
    seen = check_landing_zone(clicks, out)
    quiet = {partition_key(START + timedelta(hours=h)) for h in (2, 5)}
    assert not quiet & set(seen)
    for h in (2, 5):
        prefix = (START + timedelta(hours=h)).strftime("%Y%m%dT%H")
        assert not list(landing.data_dir(out).glob(prefix + "-*"))
    assert len(seen) == 4
    assert summary.records == 4 * 300
    assert min(seen) == partition_key(START), "no late event falls before --start"


def test_late_events_land_in_files_of_the_earlier_hour(clicks: StreamConfig, tmp_path: Path) -> None:
    out = tmp_path / "landing"
    late_by = timedelta(minutes=30)
    summary = producer.backfill(
        clicks, start=START, hours=4, events_per_hour=600, landing_path=out, seed=9,
        faults=producer.Faults(late_ratio=0.2, late_by=late_by),
    )
    check_landing_zone(clicks, out)
    assert 0.15 * 2400 < summary.late < 0.25 * 2400
    # files in publication order: a late file is one whose hour is older than an already published hour
    newest: str | None = None
    late_files = 0
    for path in sorted(_files(out), key=_seq):
        (partition,) = landing.read_audits(out)[path.name]["partitions"]
        if newest is not None and partition < newest:
            late_files += 1
            next_hour = datetime.fromisoformat(partition) + timedelta(hours=1)
            for raw in _lines(path):
                event_time = datetime.fromisoformat(json.loads(raw)["event_time"])
                assert next_hour - late_by <= event_time < next_hour
        newest = max(newest or partition, partition)
    assert late_files == 3  # hours 1, 2 and 3 each sent late events for the hour before


def test_backfill_is_deterministic_given_the_seed(clicks: StreamConfig, tmp_path: Path) -> None:
    def run(seed: int, folder: str) -> dict[str, bytes]:
        out = tmp_path / folder
        producer.backfill(
            clicks, start=START, hours=3, events_per_hour=400, events_per_file=150, landing_path=out,
            seed=seed, producer_id="det", quiet_hours=[1],
            faults=producer.Faults(malformed_ratio=0.1, late_ratio=0.2),
        )
        # names are <hour>-<producer>-<seq>-<random token>: compare without the token
        return {f.name.rsplit("-", 1)[0]: f.read_bytes() for f in _files(out)}

    first, second, other = run(42, "a"), run(42, "b"), run(43, "c")
    assert first == second
    assert first != other


def test_backfill_continues_the_sequence_and_paces_at_rate(clicks: StreamConfig, tmp_path: Path) -> None:
    out = tmp_path / "landing"
    producer.backfill(clicks, start=START, hours=1, events_per_hour=10, landing_path=out, producer_id="p")
    sleeps: list[float] = []
    producer.backfill(
        clicks, start=START, hours=2, events_per_hour=100, events_per_file=50, landing_path=out,
        producer_id="p", rate=1000.0, sleep=sleeps.append,
    )
    assert sorted(_seq(f) for f in _files(out)) == list(range(5))
    assert sleeps and max(sleeps) <= 0.2 + 1e-9  # 200 events at 1000/s
    check_landing_zone(clicks, out)


def test_backfill_refuses_bad_arguments(clicks: StreamConfig, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="hour-aligned"):
        producer.backfill(clicks, start=START + timedelta(minutes=5), hours=1, events_per_hour=1,
                          landing_path=tmp_path)
    with pytest.raises(ValueError, match="quiet hours"):
        producer.backfill(clicks, start=START, hours=2, events_per_hour=1, landing_path=tmp_path,
                          quiet_hours=[2])
    with pytest.raises(ValueError, match="between 0 and 1"):
        producer.Faults(malformed_ratio=1.5)


# ---------------------------------------------------------------- command line


def test_main_backfill(config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "elsewhere"
    code = producer.main([
        "--config", str(config_path), "--landing-path", str(out), "--start", START.isoformat(),
        "--hours", "3", "--events-per-hour", "120", "--events-per-file", "50", "--malformed-ratio", "0.05",
        "--late-ratio", "0.1", "--late-by", "20m", "--quiet-hours", "1", "--seed", "1",
        "--producer-id", "cli",
    ])
    assert code == 0
    summary = capsys.readouterr().out.strip()
    assert len(summary.splitlines()) == 1
    assert "stream=clicks" in summary and "producer=cli" in summary and "records=240" in summary
    assert "malformed=" in summary and partition_key(START) in summary
    seen = check_landing_zone(load_config(config_path, environ={}).stream("clicks"), out)
    assert sum(seen.values()) == 240
    assert all(f.name.split("-")[1] == "cli" for f in _files(out))


def test_main_uses_the_configured_landing_path_and_stream(config_path: Path, config: LaketideConfig) -> None:
    assert producer.main(["--config", str(config_path), "--stream", "orders", "--hours", "2",
                          "--events-per-hour", "10"]) == 0
    orders = config.stream("orders")
    seen = check_landing_zone(orders, orders.landing_path)
    assert sum(seen.values()) == 20
    assert not config.stream("clicks").landing_path.exists()


def test_main_live_in_process(config_path: Path, config: LaketideConfig, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "live"
    started = time.monotonic()
    code = producer.main([
        "--config", str(config_path), "--mode", "live", "--duration", "2", "--rate", "50",
        "--flush-seconds", "0.5", "--landing-path", str(out), "--malformed-ratio", "0.1",
    ])
    assert code == 0
    assert 1.9 <= time.monotonic() - started < 10
    assert "records=" in capsys.readouterr().out
    seen = check_landing_zone(config.stream("clicks"), out)
    assert len(_files(out)) >= 3  # flushed several times, not just at the end
    assert 60 <= sum(seen.values()) <= 110
    now = datetime.now(UTC)
    for path in _files(out):
        for raw in _lines(path):
            if problem(config.stream("clicks"), raw) is None:
                event_time = datetime.fromisoformat(json.loads(raw)["event_time"])
                assert now - timedelta(seconds=10) <= event_time <= now


def test_live_flushes_at_the_end_and_pauses(clicks: StreamConfig, tmp_path: Path) -> None:
    out = tmp_path / "live"
    started = time.monotonic()
    summary = producer.live(
        clicks, landing_path=out, rate=100, flush_seconds=60, duration=1.5, pause_after=0.5, pause_for=0.7,
        faults=producer.Faults(late_ratio=0.5, late_by=timedelta(hours=3)),
    )
    assert time.monotonic() - started < 5
    seen = check_landing_zone(clicks, out)
    # one flush before the pause, one at the end; late events add files of earlier hours
    assert summary.records == sum(seen.values())
    assert 50 <= summary.records <= 100, "about 0.8s of writing at 100/s: the pause wrote nothing"
    assert len(seen) >= 2, "late events went into files of earlier hours"
    assert summary.late > 0


def test_live_stops_cleanly_on_sigterm(config_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "live"
    env = dict(os.environ, LAKETIDE_CONFIG=str(config_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "laketide.dev.producer", "--mode", "live", "--rate", "200",
         "--landing-path", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        early = ""
        for line in proc.stderr:  # wait until the signal handlers are installed
            early += line
            if "SIGTERM" in line:
                break
        time.sleep(1.0)
        assert not landing.data_dir(out).exists(), "nothing is due before the first 5s flush"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, early + stderr
    assert "received SIGTERM" in stderr
    assert "records=" in stdout
    assert len(_files(out)) >= 1, "the buffer was flushed on exit"
    check_landing_zone(load_config(config_path, environ={}).stream("clicks"), out)


@pytest.mark.parametrize(
    "argv",
    [
        ["--mode", "live", "--quiet-hours", "1"],
        ["--mode", "live", "--start", "2026-11-22T00:00Z"],
        ["--mode", "backfill", "--duration", "5"],
        ["--mode", "live", "--pause-after", "5"],
        ["--start", "2026-11-22T00:30Z"],
        ["--malformed-ratio", "2"],
        ["--late-by", "soon"],
        ["--hours", "3", "--quiet-hours", "3"],
        ["--producer-id", "a/b"],
    ],
)
def test_main_refuses_bad_options(config_path: Path, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        producer.main(["--config", str(config_path), *argv])
    assert exc.value.code == 2


def test_main_reports_an_unknown_stream(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert producer.main(["--config", str(config_path), "--stream", "nope"]) == 2
    assert "unknown stream 'nope'" in capsys.readouterr().err
