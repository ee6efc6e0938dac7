"""The edges of laketide's two promises, "an hour closes only when it is final" and "nothing landed is lost
silently", attacked as a hostile producer would, on one live stream with the real writer and a real catalog:

* a producer whose clock runs 3 h ahead, first alone, then beside two honest producers: no hour is declared before
  its end + allowed_lateness, the close DAG closes nothing early, and the fast producer is named;
* a file landed after newer ones with a modification time 30 days old (``cp -p``): ingested, its hour verifies;
* a file of every odd-bytes case (BOM, CRLF and CR line ends, NUL, invalid UTF-8, lines of only ``\\x0b`` or
  ``\\x0c``, trailing garbage, absurd event times, blank lines, no final newline): every line ingested or rejected
  with a reason, audit == lake + rejects, the rejects table read back completely by pyiceberg, Spark and DuckDB,
  each reject in the hour of its file;
* files whose names are not data files, reported by name.

The tests of this module share one lake and run in order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.partitions import State, check_partition, check_partitions
from laketide.close.reconcile import reconcile
from laketide.close.verify import verify_partition
from laketide.config import LaketideConfig
from laketide.ingest.landing import (
    AUDIT_VERSION,
    audit_dir,
    audit_name,
    data_dir,
    is_blank,
    publish,
    split_lines,
    tmp_dir,
)
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import partition_key
from tests.helpers import ingest as run_group_here
from tests.helpers import load, unique_catalog, write_config, writer_log

pytestmark = pytest.mark.slow

HOUR = timedelta(hours=1)
LATENESS = timedelta(minutes=10)


@dataclass
class Edges:
    config_path: Path
    config: LaketideConfig
    #: the test process's Spark session, on which the writer runs (``tests.helpers.ingest``)
    spark: Any
    #: the current real hour when the lake was built
    hour: datetime
    #: when its events were stamped (the writer's clock, a little before the first commit)
    stamped: datetime

    @property
    def stream(self):  # type: ignore[no-untyped-def]
        return self.config.stream("clicks")


def event(n: str, at: datetime, **extra: Any) -> str:
    return json.dumps({"event_id": n, "event_time": at.isoformat(), "user_id": 7, "page": "/p", **extra})


def land(edges: Edges, producer: str, at: datetime, count: int, seq: int) -> Path:
    """``count`` valid events of ``producer`` stamped at ``at`` (one hour: the file's), through the contract."""
    lines = [event(f"{producer}-{seq}-{i}", at + timedelta(milliseconds=i)) for i in range(count)]
    return publish(edges.stream.landing_path, lines, partition_key(at), producer, seq, "clicks")


def snapshot_summary(config: LaketideConfig) -> dict[str, str]:
    snapshot = load_catalog(config.catalog).load_table("lake.clicks").current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    return dict(snapshot.summary.additional_properties)


def ingest(edges: Edges) -> None:
    run_group_here(edges.spark, edges.config_path)


@pytest.fixture(scope="module")
def edges(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edges]:
    home = tmp_path_factory.mktemp("edges")
    # a catalog name of its own: the Spark test reads this lake in the test process's shared session
    config_path = write_config(home, catalog_name=unique_catalog("edges"), allowed_lateness="10m", idle_window="5m",
                               max_files_per_trigger=20)
    now = datetime.now(UTC)
    stamped = now - timedelta(seconds=30)
    if (stamped + timedelta(seconds=5)).replace(minute=0, second=0, microsecond=0) != stamped.replace(
            minute=0, second=0, microsecond=0):
        stamped -= timedelta(seconds=10)  # keep one file's events in one hour
    yield Edges(config_path, load(config_path), spark, stamped.replace(minute=0, second=0, microsecond=0), stamped)


# -- a producer whose clock runs ahead ---------------------------------------------------------------------

def undecided_before_due(edges: Edges, hours: list[datetime]) -> None:
    """No hour is complete or empty before its end + lateness, at any clock before then."""
    for hour in hours:
        due = hour + HOUR + LATENESS
        for now in (datetime.now(UTC), edges.hour + HOUR, due - timedelta(seconds=1)):
            if now >= due:
                continue
            status, _ = check_partition(edges.config, edges.stream, hour, now=now)
            assert not status.decided, (hour, now, status.state, status.reason)
            assert status.state == State.OPEN, status.reason


def test_a_fast_producer_alone_closes_no_hour_early(edges: Edges) -> None:
    ahead = edges.stamped + timedelta(hours=3)
    land(edges, "fast", ahead, 30, 0)
    ingest(edges)
    summary = snapshot_summary(edges.config)
    assert set(json.loads(summary["laketide.ahead-of-clock"])) == {"fast"}
    # the watermark went no further than the writer's clock + max_clock_skew (5 minutes), not 3 hours ahead
    committed = datetime.fromisoformat(summary["laketide.max-event-time"])
    watermark = datetime.fromisoformat(summary["laketide.watermark"])
    assert committed >= ahead and watermark < edges.stamped + timedelta(minutes=10), (committed, watermark)
    assert "producer clock ahead: fast" in writer_log(edges.config_path)
    # the hour being written and the next two would have been complete and empty with a 3 h watermark
    hours = [edges.hour + i * HOUR for i in range(3)]
    undecided_before_due(edges, hours)
    status, _ = check_partition(edges.config, edges.stream, edges.hour)
    assert "fast" in status.reason and "clock ahead" in status.reason, status.reason


def test_beside_honest_producers_the_fast_one_decides_nothing(edges: Edges, airflow_db: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    land(edges, "honest-1", edges.stamped, 40, 0)
    land(edges, "honest-2", edges.stamped + timedelta(seconds=1), 40, 0)
    land(edges, "fast", edges.stamped + timedelta(hours=3, seconds=2), 30, 1)
    ingest(edges)
    undecided_before_due(edges, [edges.hour + i * HOUR for i in range(3)])
    status, _ = check_partition(edges.config, edges.stream, edges.hour)
    assert status.rows == 80 and "fast" in status.reason and "honest" not in status.reason.split("Note:")[-1]

    # the scheduled close of the next hour (empty with a 3 h watermark) waits and closes nothing
    monkeypatch.setenv("LAKETIDE_CONFIG", str(edges.config_path))
    monkeypatch.setenv("LAKETIDE__CLOSE__POKE_INTERVAL", "1s")
    monkeypatch.setenv("LAKETIDE__CLOSE__SENSOR_TIMEOUT", "3s")
    from airflow.dag_processing.dagbag import DagBag

    from laketide.close.status import history
    from laketide.config import REPO_ROOT

    dag = DagBag(dag_folder=str(REPO_ROOT / "dags")).dags["laketide_close_clicks"]
    run = dag.test(logical_date=edges.hour + 2 * HOUR)  # closes [hour + 1, hour + 2)
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "failed" and states["wait_for_partition"] == "failed", states
    assert history(edges.config, "clicks") == []  # nothing recorded, nothing closed


# -- a file with an old modification time ------------------------------------------------------------------

def test_a_file_landed_with_an_old_modification_time_is_ingested(edges: Edges) -> None:
    earlier = edges.hour - HOUR
    land(edges, "honest-1", earlier + timedelta(minutes=20), 25, 1)  # the hour has other data
    ingest(edges)
    copied = land(edges, "archive", earlier + timedelta(minutes=30), 35, 0)
    month_ago = (datetime.now(UTC) - timedelta(days=30)).timestamp()
    os.utime(copied, (month_ago, month_ago))  # cp -p of an old file, landed after newer ones were committed

    # the partition check sees it as landed, not committed: its hour is lagging, not complete or empty
    later = datetime.now(UTC) + 2 * HOUR
    (status,) = check_partitions(edges.config, edges.stream, [earlier], later)
    assert status.state == State.LAGGING and copied.name in status.reason, status.reason

    ingest(edges)
    log = writer_log(edges.config_path)
    assert f"landing file {copied.name} landed with a modification time of" in log
    report = reconcile(edges.config, edges.stream)
    assert copied.name not in report.pending_files and not report.findings
    verified = verify_partition(edges.config, edges.stream, earlier)
    assert verified.success and verified.lake == 60 and verified.audit == 60, verified.message()


def test_the_source_log_keeps_its_retention_and_a_restart_reads_nothing_twice(spark: Any, tmp_path: Path) -> None:
    """The real writer on files read over six days (one a batch, the file source's log compacted every three
    batches), ``max_file_age`` 1 day, ``source_log_retention`` 2 days: the compacted log loses the entries older than
    the retention; Spark restarts on it and reads no file again, and its next compaction carries the shorter log
    forward. A file landing 36 hours old is ingested; one landing 10 days old is named and left until touched."""
    config_path = write_config(tmp_path, catalog_name=unique_catalog("retention"), max_file_age="1d",
                               source_log_retention="2d", max_files_per_trigger=1)
    config = load(config_path)
    stream = config.stream("clicks")
    now = datetime.now(UTC)

    def land_old(seq: int, age: timedelta) -> Path:
        at = now - age  # events stamped when the file was written, so that its landing time admits them
        lines = [event(f"r-{seq}-{i}", at - timedelta(minutes=1, milliseconds=i)) for i in range(5)]
        path = publish(stream.landing_path, lines, partition_key(at - timedelta(minutes=1)), "p", seq, "clicks")
        os.utime(path, (at.timestamp(), at.timestamp()))
        return path

    def entries() -> set[str]:  # the landing files in the newest compacted file of the source's log
        compact = max((stream.checkpoint_path / "sources" / "0").glob("*.compact"),
                      key=lambda p: int(p.name.split(".")[0]))
        return {json.loads(line)["path"].rsplit("/", 1)[-1] for line in compact.read_text().splitlines()[1:]}

    def lake() -> list[str]:
        return load_catalog(config.catalog).load_table("lake.clicks").scan().to_arrow()["event_id"].to_pylist()

    spark.conf.set("spark.sql.streaming.fileSource.log.compactInterval", "3")
    try:
        read = [land_old(seq, timedelta(days=days)) for seq, days in enumerate([6, 5, 4, 3, 2, 1 / 24])]
        run_group_here(spark, config_path)  # log batches 0-5, compacted at 2 and 5
        assert len(lake()) == 30

        late = land_old(10, timedelta(hours=36))  # beyond max_file_age, within the retention
        too_old = land_old(11, timedelta(days=10))  # beyond the retention
        fresh = [land_old(12, timedelta(minutes=30)), land_old(13, timedelta(0))]
        run_group_here(spark, config_path)  # the restart prunes the log first; then log batches 6-8, compacted at 8
        ids = lake()
        assert len(ids) == 45 and len(set(ids)) == 45  # nothing read twice
        assert not any(i.startswith("r-11-") for i in ids)
        kept = entries()
        assert not kept & {p.name for p in read[:4]}, kept  # more than 2 days older than the newest: gone
        assert {p.name for p in [read[5], late, *fresh]} <= kept
        # the file of two days ago goes once a look prunes 8.compact against its newest file, the late file the
        # rescue touched (to the look's time: more than 2 days after it); that look may come before this run ends
        # or at the next start, as the machine's timing has it
        pruned = "8.compact: dropped 1 entry older than the retention" in writer_log(config_path)
        assert (read[4].name in kept) is not pruned, (pruned, kept)
        log = writer_log(config_path)
        assert f"landing file {late.name} landed with a modification time of" in log
        assert log.count(f"landing file {too_old.name} landed with a modification time of") == 1 and "touch " in log
        assert "5.compact: dropped 4 entries older than the retention" in log  # the four oldest files read

        os.utime(too_old)  # what the warning says to do
        run_group_here(spark, config_path)
        ids = lake()
        assert len(ids) == 50 and len(set(ids)) == 50
        rejects = load_catalog(config.catalog).load_table("lake.clicks_rejects").scan().to_arrow().num_rows
        assert rejects == 0
        # Spark's compaction at batch 8 read the pruned file: the writer found one entry more to drop in it (the
        # file of two days ago, now older than the retention), not five
        assert "8.compact: dropped 1 entry older than the retention" in writer_log(config_path)
    finally:
        spark.conf.unset("spark.sql.streaming.fileSource.log.compactInterval")


# -- bytes that are not text, lines that are not records ---------------------------------------------------

def odd_file(edges: Edges, hour: datetime) -> tuple[Path, dict[str, str], int]:
    """A contract-named data file of ``hour`` holding every odd-bytes case, published by hand (``publish`` refuses
    blank lines and line breaks); its audit counts its records (non-blank lines). Returns the file, the reason
    expected for each rejected line (by a marker in it), and the number of valid lines."""
    at = hour + timedelta(minutes=40)
    ok = event("odd-ok-1", at).encode()
    rejects = {
        "bom": b"\xef\xbb\xbf" + event("bom", at).encode(),
        "nul": event("nul", at).encode() + b"\x00",
        "utf8": event("utf8", at, country="\xff").encode().replace(b"\\u00ff", b"\xff\xfe"),
        "vt": b"\x0b",
        "ff": b"\x0c",
        "xyz": event("xyz", at).encode() + b" xyz",
        "brace": event("brace", at).encode() + b"}",
        "twice": event("twice", at).encode() + event("twice-2", at).encode(),
        "future": event("future", datetime(2999, 11, 23, tzinfo=UTC)).encode(),
        "epoch": event("epoch", datetime(1970, 1, 1, tzinfo=UTC)).encode(),
    }
    reasons = {
        "bom": "byte order mark", "nul": "not one JSON object", "utf8": "invalid UTF-8", "vt": "malformed JSON",
        "ff": "malformed JSON", "xyz": "not one JSON object", "brace": "not one JSON object",
        "twice": "not one JSON object", "future": "event time out of range", "epoch": "event time out of range",
    }
    body = (ok + b"\r\n" + rejects["bom"] + b"\r\n" + rejects["nul"] + b"\n" + b"   \n" + rejects["utf8"] + b"\r"
            + rejects["vt"] + b"\n" + rejects["ff"] + b"\n\n" + rejects["xyz"] + b"\n" + rejects["brace"] + b"\r\n"
            + rejects["twice"] + b"\n" + b"\t\n" + rejects["future"] + b"\n" + rejects["epoch"] + b"\n"
            + event("odd-ok-2", at + timedelta(seconds=1)).encode())  # no final newline
    records = [line for line in split_lines(body) if not is_blank(line)]
    assert len(records) == 12
    name = f"{hour:%Y%m%dT%H}-odd-00000000-0badcafe.jsonl"
    landing = edges.stream.landing_path
    tmp_dir(landing).mkdir(parents=True, exist_ok=True)
    audit = {"version": AUDIT_VERSION, "stream": "clicks", "file": name, "producer": "odd", "records": 12,
             "partitions": {partition_key(hour): 12}, "produced_at": datetime.now(UTC).isoformat()}
    (tmp_dir(landing) / audit_name(name)).write_text(json.dumps(audit))
    (tmp_dir(landing) / name).write_bytes(body)
    (tmp_dir(landing) / audit_name(name)).rename(audit_dir(landing) / audit_name(name))
    (tmp_dir(landing) / name).rename(data_dir(landing) / name)
    return data_dir(landing) / name, reasons, 2


def test_every_odd_line_is_ingested_or_rejected_and_every_reader_reads_the_rejects(edges: Edges,
                                                                                  spark: Any) -> None:
    import duckdb

    from laketide.lake.spark import use_catalog

    hour = edges.hour - 2 * HOUR
    path, reasons, valid = odd_file(edges, hour)
    ingest(edges)
    key = partition_key(hour)
    (counts,) = [p for p in reconcile(edges.config, edges.stream).partitions if p.partition == key]
    assert (counts.audit, counts.lake, counts.rejects) == (12, valid, 12 - valid), counts
    verified = verify_partition(edges.config, edges.stream, hour)
    assert verified.success, verified.message()

    table = load_catalog(edges.config.catalog).load_table("lake.clicks_rejects")
    rows = [r for r in table.scan().to_arrow().to_pylist() if r["source_file"] == path.name]  # no decode error
    assert len(rows) == 12 - valid
    control = {"vt": "\x0b", "ff": "\x0c"}
    by_marker = {m: next(r for r in rows if (r["raw"] == control[m] if m in control else f'"{m}"' in r["raw"]))
                 for m in reasons}
    for marker, reason in reasons.items():
        assert reason in by_marker[marker]["reason"], (marker, by_marker[marker]["reason"])
    # the line that is not UTF-8: readable text (U+FFFD), and its exact bytes beside it
    bad = by_marker["utf8"]
    assert "\ufffd" in bad["raw"] and bad["raw_bytes"] is not None and b"\xff\xfe" in bad["raw_bytes"]
    assert all(r["raw_bytes"] is None for r in rows if r is not bad)
    # every reject is in the hour of its file, the absurd times included (kept in the raw line)
    assert {r["event_hour"].astimezone(UTC) for r in rows} == {hour}
    assert "2999-11-23" in by_marker["future"]["raw"] and "1970-01-01" in by_marker["epoch"]["raw"]

    # Spark reads every row of the table, and DuckDB every row of its data files
    use_catalog(spark, edges.config)
    assert spark.table(f"{edges.config.catalog.name}.lake.clicks_rejects").where(
        f"source_file = '{path.name}'").count() == 12 - valid
    files = [task.file.file_path.removeprefix("file:") for task in table.scan().plan_files()]
    read = duckdb.sql(f"SELECT raw, raw_bytes, source_file FROM read_parquet({files!r})").fetchall()
    assert len(read) == len(table.scan().to_arrow()) and sum(1 for r in read if r[2] == path.name) == 12 - valid


def test_files_that_are_not_data_files_are_reported_by_name(edges: Edges) -> None:
    data, audits = data_dir(edges.stream.landing_path), audit_dir(edges.stream.landing_path)
    hour = edges.hour - 2 * HOUR
    meant = f"{hour:%Y%m%dT%H}-upper-00000000-00c0ffee"
    (data / f"{meant}.JSONL").write_text(event("upper", hour + timedelta(minutes=1)) + "\n")
    (audits / f"{meant}.json").write_text(json.dumps({
        "version": AUDIT_VERSION, "stream": "clicks", "file": f"{meant}.jsonl", "producer": "upper", "records": 1,
        "partitions": {partition_key(hour): 1}, "produced_at": datetime.now(UTC).isoformat()}))
    (data / "notes.txt").write_text("who put this here\n")
    copy = next(p for p in data.glob("*.jsonl"))
    (data / f"{copy.name}.bak").write_bytes(copy.read_bytes())
    report = reconcile(edges.config, edges.stream)
    found = {f.file: f for f in report.findings}
    assert set(found) == {f"{meant}.JSONL", "notes.txt", f"{copy.name}.bak"}
    assert all(f.reason == "not a data file" and "never reads it" in f.detail for f in found.values())
    # the one an audit record expects blocks its hour (its event would be lost without a word); the others are notes
    assert found[f"{meant}.JSONL"].blocking and partition_key(hour) in found[f"{meant}.JSONL"].hours
    assert not found["notes.txt"].blocking and not found[f"{copy.name}.bak"].blocking
    failed = verify_partition(edges.config, edges.stream, hour)
    assert not failed.success and any(f"{meant}.JSONL" in line for line in failed.failures), failed.message()
