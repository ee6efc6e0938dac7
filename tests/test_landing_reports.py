"""Nothing lost silently: landing files the writer cannot ingest, or that changed or vanished after it did, are
reported by name with their reason by reconciliation and by the close's verification, which agree on every
hour's expected count. Real files landed by the real producer (and by hand, breaking the contract), ingested by
the real writer process."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.reconcile import main as reconcile_main
from laketide.close.reconcile import reconcile
from laketide.close.verify import verify_partition
from laketide.ingest import landing
from laketide.lake import file_stats
from laketide.lake.catalog import load_catalog
from laketide.lake.commits import SOURCE_STATS, source_position
from laketide.lake.hours import partition_key
from tests.helpers import ingest, load, unique_catalog, write_config
from tests.test_writer import lineage_summaries, produce

pytestmark = pytest.mark.slow

H0 = datetime(2026, 11, 21, 20, tzinfo=UTC)  # landed by the producer; one of its files grows after ingest
H1 = H0 + timedelta(hours=1)  # landed by the producer; one of its files is deleted after ingest
H2 = H0 + timedelta(hours=2)  # files that break the contract
H3 = H0 + timedelta(hours=3)  # only the second hour of a file named and audited for H2


def event(hour: datetime, minute: int = 7) -> str:
    return json.dumps({"event_id": uuid.uuid4().hex, "event_time": (hour + timedelta(minutes=minute)).isoformat(),
                       "user_id": 42, "page": "/home"})


def put(root: Path, name: str, lines: list[str], audit: dict[datetime, int] | None) -> Path:
    """A data file written straight into data/ (as a careless producer would), with an audit record if given."""
    if audit is not None:
        record = {"version": 1, "stream": "clicks", "file": name, "producer": "hand",
                  "records": sum(audit.values()), "partitions": {partition_key(h): n for h, n in audit.items()},
                  "produced_at": datetime.now(UTC).isoformat()}
        (landing.audit_dir(root) / landing.audit_name(name)).write_text(json.dumps(record))
    path = landing.data_dir(root) / name
    path.write_bytes(b"".join(line.encode() + b"\n" for line in lines))
    return path


def ids(path: Path) -> set[str]:
    return {json.loads(line)["event_id"] for line in path.read_text().splitlines() if line.strip()}


def test_every_file_is_ingested_or_reported_by_name(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    config_path = write_config(tmp_path, catalog_name=unique_catalog("reports"), max_files_per_trigger=20)
    produce(config_path, "--start", H0.isoformat(), "--hours", "2", "--events-per-hour", "200",
            "--events-per-file", "100", "--seed", "3")
    ingest(spark, config_path)
    config = load(config_path)
    stream = config.stream("clicks")
    root = Path(stream.landing_path)
    landed = sorted(landing.data_dir(root).iterdir())
    assert len(landed) == 4
    good = set().union(*(ids(p) for p in landed))  # every line the producer wrote is a good event

    # the source position records the size and modification time Spark listed for each file
    events = load_catalog(config.catalog).load_table(stream.table)
    summaries = lineage_summaries(events)
    assert all(SOURCE_STATS in s for s in summaries)
    recorded = {n: st for s in summaries for n, st in source_position(s).items()}
    assert recorded == {p.name: file_stats.file_stat(p) for p in landed}

    # after ingest: one file of H0 grows (the new lines are never read), one of H1 is deleted (its audit stays)
    grown, deleted = landed[0], landed[2]
    assert grown.name.startswith("20261121T20") and deleted.name.startswith("20261121T21")
    with open(grown, "a") as handle:
        handle.write(event(H0, 1) + "\n" + event(H0, 2) + "\n")
    os.utime(grown, ns=(grown.stat().st_atime_ns, grown.stat().st_mtime_ns + 1_000_000))
    deleted.unlink()

    # files breaking the contract
    hidden = put(root, "_20261121T22-hand-00000001-0000abcd.jsonl", [event(H2)] * 1, {H2: 1})
    dotted = put(root, ".20261121T22-hand-00000002-0000abcd.jsonl", [event(H2)], None)
    empty = put(root, "20261121T22-hand-00000003-0000abcd.jsonl", [], None)
    orphan = put(root, "20261121T22-hand-00000004-0000abcd.jsonl", [event(H2, m) for m in (1, 2, 3)], None)
    miscounted = put(root, "20261121T22-hand-00000005-0000abcd.jsonl", [event(H2, m) for m in (4, 5, 6)], {H2: 5})
    split = put(root, "20261121T22-hand-00000006-0000abcd.jsonl",
                [event(H2, 8), event(H2, 9), event(H3, 1), event(H3, 2)], {H2: 4})
    ingest(spark, config_path)
    good |= ids(orphan) | ids(miscounted) | ids(split)

    report = reconcile(config, stream)
    found = {(f.file, str(f.reason)) for f in report.findings}
    assert found == {
        (grown.name, "changed after ingest"), (grown.name, "audit count differs"),
        (deleted.name, "deleted after ingest"),
        (hidden.name, "hidden name"), (dotted.name, "hidden name"), (dotted.name, "no audit"),
        (empty.name, "zero bytes"),
        (orphan.name, "no audit"),
        (miscounted.name, "audit count differs"),
        (split.name, "not one hour"),
    }
    assert report.pending_files == [] and not report.ok  # nothing left pending forever, and it is no success

    # no good line lost: every event of every file the writer could read is in the lake, once
    lake = set(events.refresh().scan(selected_fields=("event_id",)).to_arrow()["event_id"].to_pylist())
    assert lake == good and report.duplicate_ids == {}

    # reconciliation and verification agree on every hour's expected count, and name the same files
    counts = {p.partition: p for p in report.partitions}
    for hour in (H0, H1, H2, H3):
        result = verify_partition(config, stream, hour)
        key = partition_key(hour)
        assert (result.audit, result.lake, result.rejects) == (counts[key].audit, counts[key].lake,
                                                              counts[key].rejects), key
        for finding in report.findings:
            if key in finding.hours:
                assert finding.line() in result.findings, (key, finding)
                if finding.blocking:
                    assert finding.file in result.message() and str(finding.reason) in result.message()
        assert {line.split(":")[0] for line in result.findings} == {
            f.file for f in report.findings if key in f.hours}
        meta = json.loads(result.results_path.read_text())["meta"]["laketide"]
        assert {f["file"] for f in meta["findings"]} == {f.file for f in report.findings if key in f.hours}
        assert json.loads(result.summary_json())["findings"] == result.findings
        if hour == H1:  # the rows of the deleted file are in the lake and its audit still counts them
            assert result.success, result.message()
            assert f"note: landing file {deleted.name}: deleted after ingest" in result.message()
        else:
            assert not result.success and result.pending_files == 0

    # H0's counts match (the appended lines are in neither count): only the report tells
    assert counts[partition_key(H0)].ok
    assert counts[partition_key(H3)].lake == 2 and counts[partition_key(H3)].audit == 0

    # the command-line report names every file with its reason
    monkeypatch.setenv("LAKETIDE_CONFIG", str(config_path))
    capsys.readouterr()
    assert reconcile_main(["--stream", "clicks"]) == 1
    printed = capsys.readouterr().out
    for finding in report.findings:
        assert f"{'FILE' if finding.blocking else 'note'} {finding.line()}" in printed
    assert "reported files: 10" in printed and "MISMATCH (see" in printed
    # one hour asked: that hour's line alone; a range that is not one is refused before anything is read
    reconcile_main(["--stream", "clicks", "--start", partition_key(H0)])
    table = capsys.readouterr().out.split("duplicate event ids")[0]
    assert partition_key(H0) in table and partition_key(H3) not in table
    assert reconcile_main(["--stream", "clicks", "--start", partition_key(H3), "--end", partition_key(H0)]) == 2
    assert f"--end {partition_key(H0)} must be after --start {partition_key(H3)}" in capsys.readouterr().err
    assert reconcile_main(["--end", partition_key(H3)]) == 2
    assert "--end needs --start" in capsys.readouterr().err


def test_partition_status_names_pending_and_reported_files() -> None:
    from laketide.close.reconcile import PartitionCounts

    assert PartitionCounts("p", 5, 3, 0, pending=1).status.startswith("pending")
    assert PartitionCounts("p", 5, 3, 0, reported=2).status == "MISMATCH (see 2 reported file(s))"
    assert PartitionCounts("p", 5, 5, 0, reported=2).status == "ok"
