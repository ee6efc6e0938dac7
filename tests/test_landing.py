"""The landing-zone contract helpers (partition keys, atomic publish, audit records, expected counts) and the
inspection of a landing zone (reports by file)."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from laketide.ingest import inspection, landing
from laketide.lake import commits, file_stats
from laketide.lake.hours import parse_partition, partition_key

P3 = "2026-11-22T03:00:00+00:00"
P4 = "2026-11-22T04:00:00+00:00"


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\n") if line.strip()]


def test_partition_key_floors_to_the_utc_hour() -> None:
    assert partition_key(datetime(2026, 11, 22, 3, 15, 7, 123000, tzinfo=UTC)) == P3
    assert partition_key(datetime(2026, 11, 22, 3, 0, tzinfo=UTC)) == P3
    assert partition_key(datetime(2026, 11, 22, 3, 59, 59, 999999, tzinfo=UTC)) == P3
    # another offset is converted to UTC first: 05:30+02:00 is 03:30Z
    plus_two = timezone(timedelta(hours=2))
    assert partition_key(datetime(2026, 11, 22, 5, 30, tzinfo=plus_two)) == P3
    # naive means UTC
    assert partition_key(datetime(2026, 11, 22, 4, 1)) == P4
    # the key is exactly isoformat() of an aware UTC hour start
    assert datetime(2026, 11, 22, 3, tzinfo=UTC).isoformat() == P3


@pytest.mark.parametrize(
    "bad", ["2026-11-22T03:30:00+00:00", "2026-11-22T03:00:00", "2026-11-22T05:00:00+02:00", "03:00", "x"]
)
def test_parse_partition_refuses_non_canonical_keys(bad: str) -> None:
    with pytest.raises(ValueError, match="partition key"):
        parse_partition(bad)


def test_dirs(tmp_path: Path) -> None:
    assert landing.data_dir(tmp_path) == tmp_path / "data"
    assert landing.audit_dir(str(tmp_path)) == tmp_path / "audit"
    assert landing.tmp_dir(tmp_path) == tmp_path / "_tmp"


def test_publish_writes_audit_and_data_atomically(tmp_path: Path) -> None:
    lines: list[bytes | str] = ['{"a": 1}', b'{"a": 2}\n', b"caf\xe9 not utf-8", "not json"]
    path = landing.publish(tmp_path, lines, P3, "prod-1", 7, "clicks")

    assert path.parent == landing.data_dir(tmp_path)
    match = landing.FILE_NAME.match(path.name)
    assert match, path.name
    assert match.group("hour") == "20261122T03"
    assert match.group("producer") == "prod-1"
    assert match.group("seq") == "00000007"
    # lines are written verbatim (bytes included), one per line, newline-terminated
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2}\ncaf\xe9 not utf-8\nnot json\n'
    assert list(landing.tmp_dir(tmp_path).iterdir()) == []

    audit_path = landing.audit_dir(tmp_path) / (path.stem + ".json")
    audit = json.loads(audit_path.read_text())
    assert audit["version"] == 1
    assert audit["stream"] == "clicks"
    assert audit["file"] == path.name
    assert audit["producer"] == "prod-1"
    assert audit["records"] == 4 == len(_lines(path))
    assert audit["partitions"] == {P3: 4}
    produced_at = datetime.fromisoformat(audit["produced_at"])
    assert produced_at.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - produced_at) < timedelta(minutes=1)


def test_publish_names_are_unique(tmp_path: Path) -> None:
    names = {landing.publish(tmp_path, ["{}"], P3, "p", 0, "s").name for _ in range(20)}
    assert len(names) == 20
    assert len(list(landing.audit_dir(tmp_path).iterdir())) == 20


def test_audit_is_published_before_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    renames: list[tuple[str, bool]] = []
    real_rename = os.rename

    def spy(src: str | Path, dst: str | Path) -> None:
        dst = Path(dst)
        if dst.parent == landing.data_dir(tmp_path):
            audit = landing.audit_dir(tmp_path) / (dst.stem + ".json")
            renames.append(("data", audit.is_file()))
        else:
            assert not any(landing.data_dir(tmp_path).iterdir()), "data published before its audit"
            renames.append(("audit", True))
        real_rename(src, dst)

    monkeypatch.setattr(landing.os, "rename", spy)
    landing.publish(tmp_path, ['{"x": 1}'], P3, "p", 0, "s")
    assert renames == [("audit", True), ("data", True)]


def test_failed_data_rename_leaves_no_tmp_and_is_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_rename = os.rename

    def failing(src: str | Path, dst: str | Path) -> None:
        if Path(dst).parent == landing.data_dir(tmp_path):
            raise OSError("disk on fire")
        real_rename(src, dst)

    landing.publish(tmp_path, ["{}", "{}"], P3, "p", 0, "s")
    monkeypatch.setattr(landing.os, "rename", failing)
    with pytest.raises(OSError, match="disk on fire"):
        landing.publish(tmp_path, ["{}"] * 5, P3, "p", 1, "s")
    assert list(landing.tmp_dir(tmp_path).iterdir()) == []
    assert len(list(landing.audit_dir(tmp_path).iterdir())) == 2  # the orphan audit stays
    assert len(landing.read_audits(tmp_path)) == 2
    assert landing.expected_counts(tmp_path) == {P3: 2}  # ... but is not counted


@pytest.mark.parametrize(
    ("lines", "partition", "producer", "message"),
    [
        ([], P3, "p", "empty"),
        (["{}", ""], P3, "p", "blank"),
        (["{}", "   "], P3, "p", "blank"),
        (['{"a":\n1}'], P3, "p", "line break"),
        ([b"{}\r{}"], P3, "p", "line break"),
        (["{}"], "2026-11-22T03:30:00+00:00", "p", "partition key"),
        (["{}"], "2026-11-22T03:00:00", "p", "partition key"),
        (["{}"], P3, "bad/id", "producer_id"),
        (["{}"], P3, "", "producer_id"),
    ],
)
def test_publish_refuses_bad_input(
    tmp_path: Path, lines: list[bytes | str], partition: str, producer: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        landing.publish(tmp_path, lines, partition, producer, 0, "s")
    assert not landing.data_dir(tmp_path).exists() or not any(landing.data_dir(tmp_path).iterdir())


def test_read_audits_keys_by_data_file(tmp_path: Path) -> None:
    a = landing.publish(tmp_path, ["{}"] * 3, P3, "p", 0, "clicks")
    b = landing.publish(tmp_path, ["{}"] * 2, P4, "p", 1, "clicks")
    audits = landing.read_audits(tmp_path)
    assert set(audits) == {a.name, b.name}
    assert audits[a.name]["partitions"] == {P3: 3}
    assert audits[b.name]["records"] == 2
    assert landing.read_audits(tmp_path / "nowhere") == {}


def test_read_audits_skips_and_names_unreadable_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = landing.publish(tmp_path, ["{}"], P3, "p", 0, "s")
    audits = landing.audit_dir(tmp_path)
    (audits / "20261122T03-p-00000001-deadbeef.json").write_text('{"version": 1, "stream": ')
    (audits / "20261122T03-p-00000002-deadbeef.json").write_text("[1, 2]")
    wrong_file = json.loads((audits / (good.stem + ".json")).read_text())
    (audits / "20261122T03-p-00000003-deadbeef.json").write_text(json.dumps(wrong_file))
    bad_count = dict(wrong_file, file="20261122T03-p-00000004-deadbeef.jsonl", records=5)
    (audits / "20261122T03-p-00000004-deadbeef.json").write_text(json.dumps(bad_count))
    (audits / "README.txt").write_text("not an audit")

    with caplog.at_level(logging.WARNING, logger="laketide.ingest.landing"):
        result = landing.read_audits(tmp_path)

    assert set(result) == {good.name}
    for seq in (1, 2, 3, 4):
        assert f"20261122T03-p-0000000{seq}-deadbeef.json" in caplog.text
    assert "README" not in caplog.text


def test_expected_counts_sums_partitions_of_published_files(tmp_path: Path) -> None:
    landing.publish(tmp_path, ["{}"] * 3, P3, "p", 0, "s")
    landing.publish(tmp_path, ["{}"] * 4, P3, "p", 1, "s")
    landing.publish(tmp_path, ["{}"] * 5, P4, "p", 2, "s")
    gone = landing.publish(tmp_path, ["{}"] * 100, P4, "p", 3, "s")
    assert landing.expected_counts(tmp_path) == {P3: 7, P4: 105}

    gone.unlink()  # audit without its data file: not expected
    assert landing.expected_counts(tmp_path) == {P3: 7, P4: 5}
    assert landing.expected_counts(tmp_path / "nowhere") == {}


def test_expected_counts_honours_multi_partition_audits(tmp_path: Path) -> None:
    # a foreign producer may list several partitions in one audit; the counts still sum per key
    data, audits = landing.data_dir(tmp_path), landing.audit_dir(tmp_path)
    data.mkdir(parents=True)
    audits.mkdir(parents=True)
    (data / "x.jsonl").write_text("{}\n" * 3)
    record = {"version": 1, "stream": "s", "file": "x.jsonl", "producer": "p", "records": 3,
              "partitions": {P3: 1, P4: 2}, "produced_at": datetime.now(UTC).isoformat()}
    (audits / "x.json").write_text(json.dumps(record))
    landing.publish(tmp_path, ["{}"], P4, "p", 0, "s")
    assert landing.expected_counts(tmp_path) == {P3: 1, P4: 3}


def test_next_seq_continues_after_existing_files(tmp_path: Path) -> None:
    assert landing.next_seq(tmp_path, "p") == 0
    landing.publish(tmp_path, ["{}"], P3, "p", 0, "s")
    landing.publish(tmp_path, ["{}"], P3, "p", 41, "s")
    landing.publish(tmp_path, ["{}"], P3, "other-p", 99, "s")
    assert landing.next_seq(tmp_path, "p") == 42
    assert landing.next_seq(tmp_path, "other-p") == 100
    assert landing.next_seq(tmp_path, "q") == 0


# ------------------------------------------------------------------ inspect: nothing lost silently

T = inspection.EventTime("t")


def _event(hour: str, minute: int = 5) -> str:
    return json.dumps({"t": hour.replace(":00:00+", f":{minute:02d}:00+")})


def _audit(tmp_path: Path, name: str, partitions: dict[str, int], prefix: str = "") -> None:
    record = {"version": 1, "stream": "s", "file": name, "producer": "p", "records": sum(partitions.values()),
              "partitions": partitions, "produced_at": datetime.now(UTC).isoformat()}
    folder = landing.audit_dir(tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / landing.audit_name(name)).write_text(json.dumps(record))


def _reasons(report: inspection.Inspection) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in report.findings:
        out.setdefault(f.file, []).append(str(f.reason))
    return out


def test_inspect_a_clean_landing_zone_reports_nothing(tmp_path: Path) -> None:
    good = landing.publish(tmp_path, [_event(P3, m) for m in range(3)], P3, "p", 0, "s")
    fresh = landing.publish(tmp_path, [_event(P4)], P4, "p", 1, "s")
    report = inspection.inspect(tmp_path, {good.name: file_stats.file_stat(good)}, event_time=T)
    assert report.findings == []
    assert report.pending == [fresh.name] and report.pending_for(P4) == [fresh.name] and report.pending_for(P3) == []
    assert report.expected() == {P3: 3, P4: 1} == landing.expected_counts(tmp_path)
    assert report.files[good.name].lines == 3 and report.files[good.name].line_hours == {P3: 3}


def test_inspect_names_every_file_that_would_be_lost(tmp_path: Path) -> None:
    data = landing.data_dir(tmp_path)
    # hidden names: Spark never reads them; the audit of '.x' is '.x.json'
    data.mkdir(parents=True)
    under = data / "_20261122T03-p-00000000-0000abcd.jsonl"
    under.write_text(f"{_event(P3)}\n{_event(P3)}\n")
    _audit(tmp_path, under.name, {P3: 2})
    (data / ".20261122T03-p-00000009-0000abcd.jsonl").write_text(_event(P3) + "\n")
    # zero bytes: with and without expected records
    empty = data / "20261122T03-p-00000001-0000abcd.jsonl"
    empty.touch()
    _audit(tmp_path, empty.name, {P3: 4})
    quiet_empty = data / "20261122T04-p-00000002-0000abcd.jsonl"
    quiet_empty.touch()
    # no audit, and an unusable one
    (data / "20261122T03-p-00000003-0000abcd.jsonl").write_text(_event(P3) + "\n")
    (data / "20261122T03-p-00000004-0000abcd.jsonl").write_text(_event(P3) + "\n")
    (landing.audit_dir(tmp_path) / "20261122T03-p-00000004-0000abcd.json").write_text("{not json")
    # the audit's count disagrees with the lines (blank lines are not lines)
    short = landing.publish(tmp_path, [_event(P3)] * 3, P3, "p", 5, "s")
    with open(short, "ab") as handle:
        handle.write(b"\n  \n" + _event(P3).encode() + b"\n")
    # two hours in one file, audited as one; and an audit naming two hours
    split = data / "20261122T03-p-00000006-0000abcd.jsonl"
    split.write_text(f"{_event(P3)}\n{_event(P4)}\n{_event(P4, 9)}\nnot json\n")
    _audit(tmp_path, split.name, {P3: 4})
    multi = data / "20261122T03-p-00000007-0000abcd.jsonl"
    multi.write_text(f"{_event(P3)}\n{_event(P4)}\n")
    _audit(tmp_path, multi.name, {P3: 1, P4: 1})

    report = inspection.inspect(tmp_path, {}, event_time=T)
    assert _reasons(report) == {
        under.name: ["hidden name"],
        ".20261122T03-p-00000009-0000abcd.jsonl": ["hidden name", "no audit"],
        empty.name: ["zero bytes"],
        quiet_empty.name: ["zero bytes"],
        "20261122T03-p-00000003-0000abcd.jsonl": ["no audit"],
        "20261122T03-p-00000004-0000abcd.jsonl": ["no audit"],
        short.name: ["audit count differs"],
        split.name: ["not one hour"],
        multi.name: ["not one hour"],
    }
    by_file = {f.file: f for f in report.findings}
    assert not by_file[quiet_empty.name].blocking and by_file[empty.name].blocking
    assert "reports 4 record(s)" in by_file[empty.name].detail
    assert "invalid" in by_file["20261122T03-p-00000004-0000abcd.jsonl"].detail or \
        "unreadable" in by_file["20261122T03-p-00000004-0000abcd.jsonl"].detail
    assert "reports 3 record(s), the file holds 4 non-blank line(s)" in by_file[short.name].detail
    assert f"{P3} (1), {P4} (2)" in by_file[split.name].detail and by_file[split.name].hours == (P3, P4)
    assert "names 2 hours" in by_file[multi.name].detail
    # what is reported is not pending: Spark will never read hidden or empty files
    assert sorted(report.pending) == sorted(
        [n for n in report.files if not landing.hidden(n) and n not in (empty.name, quiet_empty.name)])
    # every finding of an hour is found from that hour (the close's verification asks this way)
    assert {f.file for f in report.findings_for(P4)} == {quiet_empty.name, split.name, multi.name}
    # expected: every audit of a file in data/ (hidden included), so those hours mismatch and name the files
    assert report.expected() == {P3: 2 + 4 + 3 + 4 + 1, P4: 1}
    # a scoped inspection reads only the files of its hour (by audit or name) and the files it is given
    # (the verification gives the sources of the hour's rows: the split file, once ingested)
    scoped = inspection.inspect(tmp_path, {}, event_time=T, hours={P4})
    assert {f.file for f in scoped.findings} == {quiet_empty.name, multi.name}
    scoped = inspection.inspect(tmp_path, {}, event_time=T, hours={P4}, files={split.name})
    assert {f.file for f in scoped.findings} == {quiet_empty.name, split.name, multi.name}
    assert scoped.expected() == report.expected()


def test_inspect_tells_files_changed_or_deleted_after_ingest(tmp_path: Path) -> None:
    grown = landing.publish(tmp_path, [_event(P3)] * 2, P3, "p", 0, "s")
    gone = landing.publish(tmp_path, [_event(P3)] * 5, P3, "p", 1, "s")
    gone_with_audit = landing.publish(tmp_path, [_event(P4)] * 7, P4, "p", 2, "s")
    old = landing.publish(tmp_path, [_event(P4)], P4, "p", 3, "s")
    ingested: dict[str, commits.FileStat | None] = {
        n.name: file_stats.file_stat(n) for n in (grown, gone, gone_with_audit)}
    ingested[old.name] = None  # recorded before sizes were: cannot be compared
    with open(grown, "ab") as handle:
        handle.write((_event(P3) + "\n").encode())
    gone.unlink()
    gone_with_audit.unlink()
    (landing.audit_dir(tmp_path) / landing.audit_name(gone_with_audit.name)).unlink()

    report = inspection.inspect(tmp_path, ingested, event_time=T)
    by_file = {f.file: f for f in reversed(report.findings)}  # the first finding of each file
    assert _reasons(report) == {grown.name: ["changed after ingest", "audit count differs"],
                                gone.name: ["deleted after ingest"], gone_with_audit.name: ["deleted after ingest"]}
    assert by_file[grown.name].blocking and "now" in by_file[grown.name].detail
    assert not by_file[gone.name].blocking and "still expected" in by_file[gone.name].detail
    assert by_file[gone_with_audit.name].blocking and by_file[gone_with_audit.name].hours == (P4,)
    assert report.pending == []
    # the deleted file's audit still counts: its rows are in the lake
    assert report.expected() == {P3: 2 + 5, P4: 1}
    assert landing.expected_counts(tmp_path, ingested) == report.expected()
    assert landing.expected_counts(tmp_path) == {P3: 2, P4: 1}


def test_one_definition_of_a_line(tmp_path: Path) -> None:
    """Blank means empty or only spaces and tabs (JSON's whitespace, as the writer's JSON reader finds no token in
    it): a line of other control characters, a BOM or a NUL is a record (the writer rejects it), so inspection and
    reconciliation count it; lines end at LF, CRLF or CR, and the last needs none."""
    assert all(landing.is_blank(b) for b in (b"", b" ", b"\t", b" \t  "))
    assert not any(landing.is_blank(b) for b in (b"\x0b", b"\x0c", b"\x00", b"\xef\xbb\xbf", b"\x1c", b"x"))
    assert landing.split_lines(b"a\r\nb\rc\nd") == [b"a", b"b", b"c", b"d"]
    with pytest.raises(ValueError, match="blank lines are not records"):
        landing.publish(tmp_path, ["{}", " \t"], P3, "p", 0, "s")
    path = landing.publish(tmp_path, ["\x0b", "\x0c", _event(P3)], P3, "p", 1, "s")  # 3 records: 2 are rejected
    with open(path, "ab") as handle:
        handle.write(b"\r\n \t\r" + _event(P3, 1).encode())  # blank lines, then a record without a newline
    _audit(tmp_path, path.name, {P3: 4})
    report = inspection.inspect(tmp_path, {}, event_time=T)
    assert report.findings == [] and report.files[path.name].lines == 4
