"""Parsing and validation of landing lines: a pure DataFrame transform, checked on a real SparkSession."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from laketide.writer import Validator, batch_files, parse_lines, rejected_rows
from tests.helpers import load, write_config

NOW = datetime(2026, 11, 22, 5, 0, tzinfo=UTC)
GOOD = '{"event_id":"a","event_time":"2026-11-22T03:15:07.123000+00:00","user_id":5,"page":"/h","action":null}'
CASES = [
    (GOOD, None),
    ('{"event_id":"b","event_time":"2026-11-22T03:15:07Z","user_id":"abc","page":"/h"}',
     "field 'user_id' is not a valid long"),
    ('{"event_id":"c","event_time":"2026-11-22T03:15:07+00:00","page":"/h"}', "missing required field 'user_id'"),
    ('{"event_id":"d","event_time":"1970-01-01T00:00:00+00:00","user_id":5,"page":"/h"}',
     "event time out of range [2000-01-01T00:00:00+00:00, landing time + 1d]: 1970-01-01T00:00:00Z"),
    ('{"event_id":"e","event_time":"2026-11-24T00:00:00+00:00","user_id":5,"page":"/h"}',
     "event time out of range [2000-01-01T00:00:00+00:00, landing time + 1d]: 2026-11-24T00:00:00Z"),
    ('{"event_id":"f","event_time":"2026-11-22T03:15', "malformed JSON"),
    ("garbage", "malformed JSON"),
    ("[1,2]", "not a JSON object"),
    ("42", "not a JSON object"),
    ('{"event_id":"i","event_time":"not a time","user_id":5,"page":"/h"}',
     "field 'event_time' is not a valid timestamp"),
    ('{"event_id":"j","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/h","duration_ms":1.5}',
     "field 'duration_ms' is not a valid long"),
]


def landed(spark, lines: list[str]):  # type: ignore[no-untyped-def]
    """Lines as the writer's stream has them: one landing file, landed at NOW."""
    return spark.createDataFrame([(line, "f.jsonl", NOW) for line in lines],
                                 "value string, _source_file string, _landed_at timestamp")


@pytest.fixture()
def stream(tmp_path: Path):  # type: ignore[no-untyped-def]
    return load(write_config(tmp_path)).stream("clicks")


def test_every_bad_line_gets_one_reason(spark, stream) -> None:  # type: ignore[no-untyped-def]
    lines = [*CASES, ("   ", "blank")]
    df = landed(spark, [line for line, _ in lines])
    rows = parse_lines(df, stream).collect()
    assert len(rows) == len(CASES)  # the blank line is not a record
    assert [r["_error"] for r in rows] == [why for _, why in CASES]
    assert all(r["_raw"] == line for r, (line, _) in zip(rows, CASES, strict=True))


def test_valid_and_rejected_rows_split_without_loss(spark, stream) -> None:  # type: ignore[no-untyped-def]
    """The staged write gets one row per line: valid events, and rejects with a null event time (the null
    hour partition the writer counts as rejects and never publishes); a blank line's row has no source file,
    so it is not counted; the rejects pass finds the same lines."""
    df = landed(spark, [line for line, _ in CASES] + ["  "])
    validator = Validator(stream)
    staged = validator.staged_rows(df, batch_id=7).collect()
    good = [r for r in staged if r["event_time"] is not None]
    counted = [r for r in staged if r["event_time"] is None and r["_source_file"] is not None]
    bad = rejected_rows(parse_lines(df, stream), stream, 7, NOW).collect()
    assert len(staged) == len(CASES) + 1 and len(counted) == len(bad) == len(CASES) - len(good)
    assert [g["event_id"] for g in good] == ["a"]
    assert good[0]["user_id"] == 5 and good[0]["_batch_id"] == 7 and good[0]["_source_file"] == "f.jsonl"
    assert list(good[0].asDict()) == [*stream.fields, "_source_file", "_batch_id"]
    assert {b["reason"] for b in bad} == {why for _, why in CASES if why}
    # the event hour is kept for rejects whose event time could be read (reconciliation uses it)
    by_raw = {b["raw"]: b for b in bad}
    assert by_raw[CASES[1][0]]["event_hour"] is not None
    assert by_raw["garbage"]["event_hour"] is None


def test_staged_columns_follow_the_input_columns(spark, stream) -> None:  # type: ignore[no-untyped-def]
    """One Validator serves many micro-batches: its staged columns are bound to the input's columns, reused
    while they are the same ones and rebuilt for another input (here: two DataFrames, other column ids)."""
    validator = Validator(stream)
    first, second = landed(spark, [GOOD]), landed(spark, [CASES[2][0], GOOD.replace('"a"', '"z"')])
    assert [r["event_id"] for r in validator.staged_rows(first, 1).collect()] == ["a"]
    built = validator._staged
    assert validator.staged_rows(first.where("value != ''"), 2).count() == 1 and validator._staged is built
    rows = validator.staged_rows(second, 3).collect()
    assert validator._staged is not built
    assert [(r["event_id"], r["event_time"] is None, r["_batch_id"]) for r in rows] == [("c", True, 3), ("z", False, 3)]


def test_batch_files_come_from_the_plan(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The landing files of a batch are named from its file scan, without a pass over the rows: every file
    read, once, by name, including one holding only a blank line; a batch without a file scan is refused."""
    from pyspark.sql import functions as F

    names = ["a-1.jsonl", "b-2.jsonl", "c-3.jsonl"]
    for i, name in enumerate(names):
        (tmp_path / name).write_text("\n" if i == 2 else f"{GOOD}\n" * (i + 1))
    lines = spark.read.text(str(tmp_path)).select("value", F.col("_metadata.file_name").alias("_source_file"))
    assert batch_files(lines) == names
    assert batch_files(lines.where("value != ''")) == names
    with pytest.raises(RuntimeError, match=r"FileScanRDD.*landing files"):
        batch_files(spark.createDataFrame([(GOOD, "f.jsonl")], "value string, _source_file string"))


def test_bytes_read_from_a_landing_file(spark, stream, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Invalid UTF-8 and single-quoted pseudo-JSON, read by Spark's text source as the writer does."""
    from pyspark.sql import functions as F

    good = GOOD.encode()
    latin1 = '{"event_id":"x","event_time":"2026-11-22T03:00:00+00:00","user_id":1,"page":"São"}'.encode("latin-1")
    quoted = b"{'event_id':'y','event_time':'2026-11-22T03:00:00+00:00','user_id':1,'page':'/h'}"
    utf8 = '{"event_id":"z","event_time":"2026-11-22T03:00:00+00:00","user_id":1,"page":"São ✓"}'.encode()
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"\n".join([good, latin1, quoted, utf8]) + b"\n")
    lines = spark.read.text(str(path)).select("value", F.lit("f.jsonl").alias("_source_file"),
                                              F.lit(NOW).alias("_landed_at"))
    errors = [r["_error"] for r in parse_lines(lines, stream).collect()]
    assert errors == [None, "invalid UTF-8 encoding", "malformed JSON", None]
