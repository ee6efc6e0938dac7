"""The landing-zone contract helpers: partition keys, atomic publish, audit records, expected counts."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from laketide import landing

P3 = "2026-11-22T03:00:00+00:00"
P4 = "2026-11-22T04:00:00+00:00"


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\n") if line.strip()]


def test_partition_key_floors_to_the_utc_hour() -> None:
    assert landing.partition_key(datetime(2026, 11, 22, 3, 15, 7, 123000, tzinfo=UTC)) == P3
    assert landing.partition_key(datetime(2026, 11, 22, 3, 0, tzinfo=UTC)) == P3
    assert landing.partition_key(datetime(2026, 11, 22, 3, 59, 59, 999999, tzinfo=UTC)) == P3
    # another offset is converted to UTC first: 05:30+02:00 is 03:30Z
    plus_two = timezone(timedelta(hours=2))
    assert landing.partition_key(datetime(2026, 11, 22, 5, 30, tzinfo=plus_two)) == P3
    # naive means UTC
    assert landing.partition_key(datetime(2026, 11, 22, 4, 1)) == P4
    # the key is exactly isoformat() of an aware UTC hour start
    assert datetime(2026, 11, 22, 3, tzinfo=UTC).isoformat() == P3


@pytest.mark.parametrize(
    "bad", ["2026-11-22T03:30:00+00:00", "2026-11-22T03:00:00", "2026-11-22T05:00:00+02:00", "03:00", "x"]
)
def test_parse_partition_refuses_non_canonical_keys(bad: str) -> None:
    with pytest.raises(ValueError, match="partition key"):
        landing.parse_partition(bad)


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

    with caplog.at_level(logging.WARNING, logger="laketide.landing"):
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
