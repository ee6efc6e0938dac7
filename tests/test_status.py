"""The partition status table: real pyiceberg writes and reads on a throwaway SQLite catalog."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from laketide.close.partitions import State
from laketide.close.status import StatusRecord, history, latest, main, record, status_table
from laketide.config import LaketideConfig
from laketide.errors import ConfigError, StatusRecordError
from laketide.lake.catalog import load_catalog
from tests.helpers import config_env, load, write_config

P = datetime(2026, 11, 22, 3, tzinfo=UTC)
T0 = datetime(2026, 11, 22, 5, 0, 0, 123456, tzinfo=UTC)


def with_second_stream(path: Path) -> Path:
    """Add a stream 'views' (own landing folder and tables) to the configuration at ``path``."""
    raw = yaml.safe_load(path.read_text())
    views = dict(raw["streams"][0], name="views", landing_path="{home}/landing/views",
                 checkpoint_path="{home}/checkpoints/views", table="lake.views", rejects_table="lake.views_rejects",
                 writer_id="views-writer")
    raw["streams"].append(views)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def config(tmp_path: Path) -> LaketideConfig:
    return load(with_second_stream(write_config(tmp_path)))


def rec(state: State | str, hour: int = 0, at: int = 0, **kw: object) -> StatusRecord:
    return StatusRecord("clicks", P + timedelta(hours=hour), state, recorded_at=T0 + timedelta(seconds=at), **kw)


def test_table_is_created_once_with_its_layout(config: LaketideConfig) -> None:
    table = status_table(config)
    assert table.name() == ("laketide", "partition_status")
    assert table.properties["commit.manifest-merge.enabled"] == "true"
    fields = {f.name: f for f in table.schema().fields}
    assert str(fields["partition"].field_type) == "timestamptz"
    assert str(fields["recorded_at"].field_type) == "timestamptz"
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("stream", "identity")]
    assert status_table(config).metadata_location == table.metadata_location  # idempotent


def test_records_leave_one_metadata_file_per_commit(config: LaketideConfig) -> None:
    """Each record is one commit and one metadata file: none is written for a table that already exists (the
    status and maintenance tables here; the action table is found the same way, ``table_or_create``)."""
    from laketide.maintain.record import MaintenanceRecord, record_table
    from laketide.maintain.record import record as record_maintenance

    for i in range(5):
        record(config, StatusRecord("clicks", P + timedelta(hours=i), State.CLOSED, rows=i))
        record_maintenance(config, MaintenanceRecord(run_id="r", table_name="lake.clicks", action="expire_snapshots"))
    for table in (status_table(config), record_table(config)):
        folder = Path(table.metadata_location.removeprefix("file://").removeprefix("file:")).parent
        files = sorted(p.name for p in folder.glob("*.metadata.json"))
        assert len(table.metadata.snapshots) == 5
        assert len(files) == 6, files  # the table's creation and its five commits, nothing else


def test_round_trip_history_and_latest(config: LaketideConfig) -> None:
    verification = json.dumps({"success": True, "audit": 10})
    first = rec(State.COMPLETE, 0, 0, rows=9, snapshot_id=2**62 + 5, reason="idle window passed", run_id="r1")
    second = rec(State.OPEN, 1, 1)
    third = rec(State.VERIFIED, 0, 2, rows=9, rejects=1, audit=10, verification=verification,
                snapshot_id=2**62 + 5, reason="audit 10 == lake 9 + rejects 1", run_id="r2")
    record(config, first, second)  # one commit
    record(config, third)
    record(config, StatusRecord("views", P, State.EMPTY, rows=0, recorded_at=T0))

    assert history(config, "clicks") == [first, second, third]
    assert history(config, "clicks", P) == [first, third]
    assert history(config, "clicks", P + timedelta(hours=1)) == [second]
    assert history(config, "clicks", P + timedelta(hours=7)) == []
    assert latest(config, "clicks") == {P: third, P + timedelta(hours=1): second}
    assert [r.state for r in latest(config, "views").values()] == [State.EMPTY]
    got = history(config, "clicks", P)[1]
    assert got.recorded_at == third.recorded_at and got.recorded_at.tzinfo is not None
    assert json.loads(got.verification or "") == {"success": True, "audit": 10}
    # one commit per record() call
    assert len(status_table(config).metadata.snapshots) == 3


def test_newest_record_wins_whatever_the_commit_order(config: LaketideConfig) -> None:
    record(config, rec(State.CLOSED, 0, 10, rows=5))
    record(config, rec(State.VERIFIED, 0, 5, rows=5))  # recorded later, but decided earlier
    record(config, rec(State.COMPLETE, 0, 1))
    assert [r.state for r in history(config, "clicks", P)] == [State.COMPLETE, State.VERIFIED, State.CLOSED]
    assert latest(config, "clicks")[P].state == State.CLOSED
    record(config, rec(State.REOPENED, 0, 11, rows=6))
    assert latest(config, "clicks")[P].state == State.REOPENED


def test_partition_in_another_zone_is_the_same_utc_hour(config: LaketideConfig) -> None:
    cet = timezone(timedelta(hours=1))
    record(config, StatusRecord("clicks", datetime(2026, 11, 22, 4, tzinfo=cet), "empty", rows=0))
    assert list(latest(config, "clicks")) == [P]
    assert history(config, "clicks", datetime(2026, 11, 22, 4, tzinfo=cet))[0].state == State.EMPTY


def test_reading_before_anything_was_recorded(config: LaketideConfig) -> None:
    assert history(config, "clicks") == []
    assert latest(config, "clicks") == {}
    assert not load_catalog(config.catalog).table_exists(config.close.status_table)  # reading creates nothing


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"state": "bogus"}, ["unknown partition state 'bogus'", "closed"]),
        ({"partition": datetime(2026, 11, 22, 3)}, ["naive", "timezone-aware"]),
        ({"partition": P + timedelta(minutes=30)}, ["not an hour start"]),
        ({"partition": "2026-11-22T03:00:00+00:00"}, ["partition must be a datetime"]),
        ({"recorded_at": datetime(2026, 11, 22, 5)}, ["recorded_at", "naive"]),
        ({"rows": -1}, ["rows must be a non-negative integer"]),
        ({"audit": True}, ["audit must be a non-negative integer"]),
        ({"verification": "not json"}, ["verification must be a JSON string"]),
        ({"stream": ""}, ["stream must be a non-empty string"]),
    ],
)
def test_bad_records_are_refused_clearly(kwargs: dict[str, object], words: list[str]) -> None:
    values: dict[str, object] = {"stream": "clicks", "partition": P, "state": State.OPEN, **kwargs}
    with pytest.raises(StatusRecordError) as info:
        StatusRecord(**values)
    assert isinstance(info.value, ValueError)
    for word in words:
        assert word in str(info.value)


def test_unknown_stream_is_refused_and_nothing_is_written(config: LaketideConfig) -> None:
    with pytest.raises(ConfigError, match="unknown stream 'nope'"):
        record(config, rec(State.OPEN), StatusRecord("nope", P, State.OPEN))
    assert history(config, "clicks") == []


@pytest.mark.parametrize("inner_retries", [None, "0"], ids=["pyiceberg-retries", "record-retries"])
def test_concurrent_writers_all_land(config: LaketideConfig, inner_retries: str | None) -> None:
    table = status_table(config)
    assert table.properties["commit.retry.num-retries"] == "10"
    if inner_retries is not None:  # conflicts reach record()'s own reload-and-retry loop
        with table.transaction() as tx:
            tx.set_properties({"commit.retry.num-retries": inner_retries})
    threads, per_thread = 3, 4
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                record(config, rec(State.OPEN, hour=n, at=i, run_id=f"t{n}-{i}"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert errors == []
    runs = sorted(r.run_id or "" for r in history(config, "clicks"))
    assert runs == sorted(f"t{n}-{i}" for n in range(threads) for i in range(per_thread))


def test_cli_prints_the_latest_state(config: LaketideConfig, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    record(config, rec(State.COMPLETE, 0, 0, rows=1498), rec(State.EMPTY, 1, 1, rows=0, reason="a quiet hour"))
    record(config, rec(State.CLOSED, 0, 5, rows=1498, rejects=2, audit=1500, snapshot_id=77, run_id="r"))
    config_path = tmp_path / "laketide.yaml"

    out = subprocess.run([sys.executable, "-m", "laketide.close.status", "--stream", "clicks"],
                         env=config_env(config_path), capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "stream clicks: laketide.partition_status (latest state per partition)"
    assert lines[1].split()[:6] == ["partition", "state", "rows", "rejects", "audit", "snapshot"]
    assert lines[2].split()[:6] == ["2026-11-22T03:00:00+00:00", "closed", "1498", "2", "1500", "77"]
    assert lines[3].split()[:3] == ["2026-11-22T04:00:00+00:00", "empty", "0"]
    assert lines[3].endswith("a quiet hour")
    assert len(lines) == 4

    monkeypatch.setenv("LAKETIDE_CONFIG", str(config_path))
    assert main(["--all"]) == 0
    out = capsys.readouterr().out
    assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("  2026")] == ["complete", "empty", "closed"]
    assert out.endswith("stream views: laketide.partition_status (every recorded state)\n  no status recorded yet\n")
    assert main(["--stream", "nope"]) == 2
    assert "unknown stream 'nope'" in capsys.readouterr().err


def test_an_append_computes_the_table_metadata_a_few_times_not_twenty(config: LaketideConfig,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """pyiceberg 0.12 rebuilds and deep-copies the whole table metadata (every snapshot with its summary) at each
    read of a transaction's metadata, about twenty times per append: a status record on a table of 150 snapshots
    cost 0.47 s of CPU. A status record computes it once per state of its transaction, and still lands."""
    import pyiceberg.table as iceberg_table

    real = iceberg_table.update_table_metadata
    calls: list[int] = []
    monkeypatch.setattr(iceberg_table, "update_table_metadata", lambda *a, **k: calls.append(1) or real(*a, **k))
    record(config, rec(State.OPEN, run_id="first"))
    ours = len(calls)
    calls.clear()
    table = status_table(config)
    table.append(table.scan().to_arrow())  # pyiceberg's own append of the same row, for comparison
    assert ours <= 3 < 10 < len(calls), (ours, len(calls))
    assert [r.run_id for r in history(config, "clicks")] == ["first", "first"]


def test_the_overview_checks_every_hour_with_rows_and_no_recorded_state(
        config: LaketideConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay of history written after the last close: its hours are older than the newest recorded hour and
    than ``LOOKBACK``, yet the overview lists them, checked now from metadata, with their rows; a closed hour is
    not checked again."""
    from laketide.close.status import LOOKBACK, being_written
    from laketide.lake.commits import BATCH_ID, PARTITION_ROWS, WATERMARK, WRITER_ID
    from laketide.lake.hours import partition_key
    from tests.bighour import chunk, create_tables

    stream = config.stream("clicks")
    events = create_tables(config, stream)
    replayed = [P - timedelta(days=3), P - timedelta(days=3) + timedelta(hours=1)]
    for batch, hour in enumerate([P, *replayed]):
        rows = 5 + batch
        events.append(chunk(stream, hour, 100 * batch, rows, f"f{batch}.jsonl"), snapshot_properties={
            WRITER_ID: stream.writer_id, BATCH_ID: str(batch), WATERMARK: (P + timedelta(hours=1)).isoformat(),
            PARTITION_ROWS: json.dumps({partition_key(hour): rows})})
    record(config, rec(State.CLOSED, 0, 0, rows=5))  # the hour P: closed before the replay was written
    now = P + timedelta(hours=3)
    assert P - replayed[0] > LOOKBACK

    checked = {s.partition: s for s in being_written(config, stream, [P], now)}
    assert {h: checked[h].rows for h in replayed} == {replayed[0]: 6, replayed[1]: 7}
    assert P not in checked and set(checked) == {*replayed, P + timedelta(hours=1), P + timedelta(hours=2),
                                                 P + timedelta(hours=3)}

    monkeypatch.setenv("LAKETIDE_CONFIG", str(tmp_path / "laketide.yaml"))
    assert main(["--stream", "clicks"]) == 0
    lines = [ln.split() for ln in capsys.readouterr().out.splitlines()]
    shown = {ln[0]: ln for ln in lines if ln and ln[0].startswith("20")}
    assert shown[partition_key(P)][1:3] == ["closed", "5"]
    for hour, rows in zip(replayed, (6, 7), strict=True):
        line = shown[partition_key(hour)]
        assert line[2] == str(rows) and "(checked" in line, line
