"""Parsing and validation of landing lines: a pure DataFrame transform, checked on a real SparkSession."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from laketide.errors import ConfigError
from laketide.ingest.columns import LONE_SURROGATE_REASON, RAW_PREFIX_CHARS
from laketide.ingest.rejects import rejected_rows
from laketide.ingest.transforms import Validator, parse_lines
from laketide.lake.internals import batch_files
from tests.helpers import load, write_config

NOW = datetime(2026, 11, 22, 5, 0, tzinfo=UTC)
TRAILING = "not one JSON object: something follows the object (one JSON object per line, nothing after it)"
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
     "field 'event_time' is not a valid timestamp: needs a date, a time and a UTC offset "
     "(ISO 8601, e.g. 2026-11-22T03:15:07.123Z)"),
    ('{"event_id":"j","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/h","duration_ms":1.5}',
     "field 'duration_ms' is not a valid long"),
    # optional fields written as null are fine; a null elsewhere that only looks like the key's does not hide a wrong
    # value (a key ending with the name, a nested key of the name: the key is mentioned twice)
    ('{"event_id":"w1","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/h","action": null,'
     '"duration_ms": null,"country":null}', None),
    ('{"event_id":"w2","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/h","x_duration_ms":null,'
     '"duration_ms":"abc"}', "field 'duration_ms' is not a valid long"),
    ('{"event_id":"w3","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/h","x":{"duration_ms": null},'
     '"duration_ms":"abc"}', "field 'duration_ms' is not a valid long"),
    # a string escaping half a surrogate pair alone is no text (Spark would store "?" for it); a pair, or a backslash
    # escaped before "ud800", is
    ('{"event_id":"s1","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/\\ud800x"}',
     LONE_SURROGATE_REASON),
    ('{"event_id":"s2","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/h","zz":"\\\\\\uDC00"}',
     LONE_SURROGATE_REASON),
    ('{"event_id":"s3","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/\\ud83d\\ude00"}', None),
    ('{"event_id":"s4","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/\\\\ud800"}', None),
    # a key spelled with a JSON escape is the same key: its wrong value is found, its right one or a null kept
    ('{"event_id":"k1","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/h","duration\\u005fms":"abc"}',
     "field 'duration_ms' is not a valid long"),
    ('{"event_id":"k3","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/h","duration\\u005fms":7}',
     None),
    ('{"event_id":"k4","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/h","duration\\u005fms": null}',
     None),
    ('{"event_id":"w4","event_time":"2026-11-22T03:15:07+00:00","user_id":5,"page":"/h","duration_ms":"abc",'
     '"x":{"duration_ms":null}}', "field 'duration_ms' is not a valid long"),
    # strict JSON Lines: one object per line, nothing after it but whitespace (Spark's reader reads the first)
    (GOOD.replace('"a"', '"k"') + " xyz", TRAILING),
    (GOOD.replace('"a"', '"l"') + "}", TRAILING),
    (GOOD.replace('"a"', '"m"') + "\x00", TRAILING),
    (GOOD.replace('"a"', '"n"') + GOOD, TRAILING),
    (GOOD.replace('"a"', '"o"') + "," + GOOD, TRAILING),
    (GOOD.replace('"a"', '"p"') + "] [{}", TRAILING),  # closes a wrapping array early
    (GOOD.replace('"a"', '"q"') + "]}", TRAILING),
    (GOOD.replace('"a"', '"r"') + " \t ", None),  # JSON whitespace after the object is fine
    # multi-byte UTF-8: the one-object test counts bytes, not characters
    (GOOD.replace('"a"', '"u"').replace('"/h"', '"/\u00fcn\u20ac\U0001f600"'), None),
    (GOOD.replace('"a"', '"v"').replace('"/h"', '"/\u20ac"') + " \u00e9}", TRAILING),
    (GOOD.replace('"a"', '"s"')[:-1] + ',"extra":{"b":"}{","c":[1,{"d":"]"}]}}', None),  # braces in strings, nested
    ("\ufeff" + GOOD.replace('"a"', '"t"'), "starts with a byte order mark (U+FEFF): write UTF-8 without a BOM"),
    # NaN and Infinity are no JSON (Python's json.dumps writes them for a float's nan and inf): in a long field the
    # lenient reader read them as null, in a string field as text, and accepted the line
    (GOOD.replace('"a"', '"x1"')[:-1] + ',"duration_ms":NaN}', "malformed JSON"),
    (GOOD.replace('"a"', '"x2"')[:-1] + ',"country":-Infinity}', "malformed JSON"),
    (GOOD.replace('"a"', '"x3"')[:-1] + ',"other":Infinity}', "malformed JSON"),
    # a line of control characters is a record (rejected), not a blank line: only spaces and tabs are blank
    ("\x0b", "malformed JSON"),
    ("\x0c", "malformed JSON"),
    ("\x00", "malformed JSON"),
]


def landed(spark, lines: list[str]):  # type: ignore[no-untyped-def]
    """Lines as the writer's stream has them: one landing file, landed at NOW."""
    return spark.createDataFrame([(line, "f.jsonl", NOW) for line in lines],
                                 "value string, _source_file string, _landed_at timestamp")


@pytest.fixture()
def stream(tmp_path: Path):  # type: ignore[no-untyped-def]
    return load(write_config(tmp_path)).stream("clicks")


def test_every_bad_line_gets_one_reason(spark, stream) -> None:  # type: ignore[no-untyped-def]
    lines = [*CASES, ("   ", "blank"), ("\t \t", "blank")]
    df = landed(spark, [line for line, _ in lines])
    rows = parse_lines(df, stream).collect()
    assert len(rows) == len(CASES)  # the blank line is not a record
    assert [r["_error"] for r in rows] == [why for _, why in CASES]
    assert all(r["_raw"] == line for r, (line, _) in zip(rows, CASES, strict=True))


def test_valid_and_rejected_rows_split_without_loss(spark, stream) -> None:  # type: ignore[no-untyped-def]
    """The staged write gets one row per line: valid events, and rejects with a null event time (the null
    hour partition the writer counts as rejects and never publishes); a blank line's row has no source file,
    so it is not counted; the rejects pass finds the same lines."""
    from pyspark.sql import functions as F

    df = landed(spark, [line for line, _ in CASES] + ["  "])
    validator = Validator(stream)
    staged_df = validator.staged_rows(df, batch_id=7)
    staged = staged_df.collect()
    good = [r for r in staged if r["event_time"] is not None]
    counted = [r for r in staged if r["event_time"] is None and r["_source_file"] is not None]
    bad = rejected_rows(parse_lines(df, stream), stream, 7, NOW).collect()
    assert len(staged) == len(CASES) + 1 and len(counted) == len(bad) == len(CASES) - len(good)
    # the rejects pass reads the staged rows of the rejects alone and finds the very rows a pass over the batch does
    from_staged = rejected_rows(validator.rejects_of(staged_df), stream, 7, NOW).collect()
    assert sorted(map(tuple, from_staged)) == sorted(map(tuple, bad))
    assert [g["event_id"] for g in good] == ["a", "w1", "s3", "s4", "k3", "k4", "r", "u", "s"]
    assert [g["page"] for g in good if g["event_id"] in ("s3", "s4")] == ["/\U0001f600", "/\\ud800"]
    assert [g["duration_ms"] for g in good if g["event_id"] in ("k3", "k4")] == [7, None]  # an escaped key is read
    assert good[0]["user_id"] == 5 and good[0]["_batch_id"] == 7 and good[0]["_source_file"] == "f.jsonl"
    assert list(good[0].asDict()) == [*stream.fields, "_source_file", "_batch_id"]
    assert {b["reason"] for b in bad} == {why for _, why in CASES if why}
    # a reject's hour is its landing file's (the contract's file hour), whatever its event time says: from the
    # file's name, else from its audit record ('f.jsonl' names none, and no audit record is given here)
    assert {b["event_hour"] for b in bad} == {None}
    named = df.withColumn("_source_file", F.lit("20261122T03-p-00000001-0123abcd.jsonl"))
    in_hour = rejected_rows(parse_lines(named, stream), stream, 7, NOW).collect()
    assert {b["event_hour"].astimezone(UTC) for b in in_hour} == {datetime(2026, 11, 22, 3, tzinfo=UTC)}
    by_audit = rejected_rows(parse_lines(df, stream), stream, 7, NOW, {"f.jsonl": "2026-11-22T04:00:00+00:00"})
    assert {b["event_hour"].astimezone(UTC) for b in by_audit.collect()} == {datetime(2026, 11, 22, 4, tzinfo=UTC)}


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
    # the rejects pass keeps a rejected line's exact bytes through its staged row
    from_batch = rejected_rows(parse_lines(lines, stream), stream, 1, NOW).collect()
    from_staged = rejected_rows(Validator(stream).rejects_of(Validator(stream).staged_rows(lines, 1)), stream, 1,
                                NOW).collect()
    assert sorted(map(tuple, from_staged)) == sorted(map(tuple, from_batch))
    assert {bytes(r["raw_bytes"]) for r in from_staged if r["raw_bytes"] is not None} == {latin1}


def test_a_line_not_utf8_is_rejected_wherever_its_bad_bytes_are(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Invalid bytes in a key, or in a value of a field the stream does not name, make the line a reject as much as in
    a string field: for every rule for unknown fields, with the optional fields there or not. The reasons' pass and
    the writer's staged rows agree, and ``unknown_fields: keep`` stores no repaired text."""
    from pyspark.sql import functions as F

    good = GOOD.encode()
    sparse = b'{"event_id":"x","event_time":"2026-11-22T03:00:00+00:00","user_id":1,"page":"/h"'
    full = sparse + b',"action":"a","duration_ms":1,"country":"DE"'
    bad = [full + b',"note":"S\xe3o"}', sparse + b',"note":"S\xe3o"}', full + b',"n\xe3":1}', sparse + b',"n\xe3":1}']
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"\n".join([good, *bad]) + b"\n")
    for rule in ("ignore", "keep"):
        stream = load(write_config(tmp_path / rule, unknown_fields=rule)).stream("clicks")
        lines = spark.read.text(str(path)).select("value", F.lit("f.jsonl").alias("_source_file"),
                                                  F.lit(NOW).alias("_landed_at"))
        errors = [r["_error"] for r in parse_lines(lines, stream).collect()]
        assert errors == [None] + ["invalid UTF-8 encoding"] * len(bad), rule
        validator = Validator(stream)
        validator.with_extra = rule == "keep"
        staged = validator.staged_rows(lines, 1)
        assert [r["event_time"] is None for r in staged.collect()] == [False] + [True] * len(bad), rule
        rejects = rejected_rows(validator.rejects_of(staged), stream, 1, NOW).collect()
        assert sorted(bytes(r["raw_bytes"]) for r in rejects) == sorted(bad), rule
        assert {r["reason"] for r in rejects} == {"invalid UTF-8 encoding"}, rule


def test_unknown_fields_are_ignored_kept_or_rejected(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A line's fields the configuration does not name: ignored (the default), kept in ``_extra`` (a map of their
    values' text: a string's own, any other value's JSON), or the line rejected naming them."""
    line = GOOD.replace('"page":"/h"', '"page":"/h","coupon":"X1","qty":2,"tags":{"a":[1,2]}')
    lines = [GOOD, line]
    for rule in ("ignore", "keep", "reject"):
        stream = load(write_config(tmp_path / rule, unknown_fields=rule)).stream("clicks")
        validator = Validator(stream)
        staged = validator.staged_rows(landed(spark, lines), 1).collect()
        errors = [r["_error"] for r in parse_lines(landed(spark, lines), stream).collect()]
        if rule == "ignore":
            assert errors == [None, None] and "_extra" not in staged[0].asDict()
        elif rule == "keep":
            assert errors == [None, None]
            assert [r["_extra"] for r in staged] == [None, {"coupon": "X1", "qty": "2", "tags": '{"a":[1,2]}'}]
        else:
            assert errors == [None, "unknown field(s) 'coupon', 'qty', 'tags': not in the stream's fields (add them "
                                    "to fields, or set unknown_fields to ignore or keep)"]
            assert [r["event_time"] is None for r in staged] == [False, True]


def test_float_fields(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A float field reads a JSON number; a string in it is a reject."""
    fields = {**load(write_config(tmp_path / "x")).stream("clicks").model_dump()["fields"],
              "ratio": {"type": "float"}}
    stream = load(write_config(tmp_path / "f", fields=fields)).stream("clicks")
    rows = parse_lines(landed(spark, [GOOD.replace("}", ',"ratio":0.5}'), GOOD.replace("}", ',"ratio":"x"}')]),
                       stream).collect()
    assert rows[0]["ratio"] == 0.5 and rows[0]["_error"] is None
    assert rows[1]["_error"] == "field 'ratio' is not a valid float"


# ------------------------------------------------------------------ event-time formats

STRICT = "needs a date, a time and a UTC offset (ISO 8601, e.g. 2026-11-22T03:15:07.123Z)"
# (value as written in the line, UTC time read by default, or None when the line is rejected by default)
TIMES = [
    ('"2026-11-22T03:15:07.123000+00:00"', "2026-11-22T03:15:07.123000Z"),
    ('"2026-11-22T03:15:07Z"', "2026-11-22T03:15:07.000000Z"),
    ('"2026-11-22t03:15:07z"', "2026-11-22T03:15:07.000000Z"),
    ('"2026-11-22T03:15:07.1Z"', "2026-11-22T03:15:07.100000Z"),
    ('"2026-11-22T03:15:07.123456789Z"', "2026-11-22T03:15:07.123456Z"),  # nanoseconds: truncated
    ('"2026-11-22T08:45:07+05:30"', "2026-11-22T03:15:07.000000Z"),
    ('"2026-11-22T08:45:07.5+0530"', "2026-11-22T03:15:07.500000Z"),  # an offset without a colon
    ('"2026-11-22T08:15:07+05"', "2026-11-22T03:15:07.000000Z"),
    ('"2026-11-21T22:15:07-05:00"', "2026-11-22T03:15:07.000000Z"),
    ('"2026-11-22T03:15Z"', "2026-11-22T03:15:00.000000Z"),  # no seconds (Java's OffsetDateTime.toString)
    ("1795000000", "2026-11-18T11:06:40.000000Z"),  # a JSON integer: seconds since the epoch
    ('"2026-11-22"', None),
    ('"2026-11-22T03:15:07"', None),
    ('"2026-11-22T03:15:07.123"', None),
    ('"2026-11-22 03:15:07Z"', None),
    ('"2026-11-22T03:15:07 UTC"', None),
    ('"2026-11-22T03:15:07Europe/Paris"', None),
    ('"2026-11-22T03:15:07+05:30:00"', None),
    ('"2026-02-30T03:15:07Z"', None),
    ('"1795000000"', None),
    # Spark's legacy parser would take it: with a pattern it can apply, Spark raises instead of reading null
    ('"2026-11-22T3:15:07Z"', None),
    # the patterns' optional sections written out: Spark's legacy parser takes them as literals (a batch failure,
    # SparkUpgradeException, unless the session's timeParserPolicy is CORRECTED)
    ('"2026-11-22T03:15[:07[.123]]+00:00"', None),
    ('"2026-11-22T03:15:07.123+00:00[]"', None),
    ('"2026-11-22T03:15:07+00:00[]"', None),
    # a dot without a fraction, ten digits of fraction, a fraction without seconds, other JSON values
    ('"2026-11-22T03:15:07.Z"', None),
    ('"2026-11-22T03:15:07.1234567891Z"', None),
    ('"2026-11-22T03:15.5Z"', None),
    ('"-1795000000"', None),
    ("1.5", None),
    ('{"t": "2026-11-22T03:15:07Z"}', None),
]
OUT_OF_RANGE = "event time out of range [2000-01-01T00:00:00+00:00, landing time + 1d]: "


def times_read(spark, stream, values: list[str]) -> list[tuple[str | None, str | None]]:  # type: ignore[no-untyped-def]
    """(event time read, as UTC text, or None; reason, or None) of one line per value."""
    from pyspark.sql import functions as F

    lines = [f'{{"event_id":"e{i}","event_time":{v},"user_id":1,"page":"/h"}}' for i, v in enumerate(values)]
    parsed = parse_lines(landed(spark, lines), stream)
    out = parsed.select(F.date_format("event_time", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX").alias("t"), "_error")
    return [(r["t"] if r["_error"] is None else None, r["_error"]) for r in out.collect()]


def test_event_times_need_a_time_and_an_offset(spark, stream) -> None:  # type: ignore[no-untyped-def]
    """By default a timestamp needs a date, a time and a UTC offset (Z, +05:30, +0530 or +05); anything else
    reads as null and the line is rejected with what is missing; no lenient fallback reads it anyway."""
    got = times_read(spark, stream, [v for v, _ in TIMES] + ["1795000000000"])
    for (value, want), (time, error) in zip(TIMES, got, strict=False):
        assert time == want, (value, error)
        if want is None:
            assert error == f"field 'event_time' is not a valid timestamp: {STRICT}", value
    # an integer in milliseconds is read as seconds: far in the future, so out of range
    assert got[-1][0] is None and got[-1][1].startswith(OUT_OF_RANGE + "+58851-")


def test_an_optional_timestamp_written_as_null_or_in_its_second_form(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """An optional timestamp written as null reads as null without a lookup; an offset without a colon is still read
    by the second pattern, from the line's key ``seen_at`` (not from a nested one of the same name)."""
    from pyspark.sql import functions as F

    from tests.helpers import STREAM_FIELDS

    stream = load(write_config(tmp_path, fields={**STREAM_FIELDS, "seen_at": {"type": "timestamp"}})).stream("clicks")
    head = '{"event_id":"a","event_time":"2026-11-22T03:15:07Z","user_id":1,"page":"/h"'
    later = '"2026-11-22T08:45:07+0530"'
    lines = [f'{head},"seen_at": null}}', f'{head},"seen_at":{later}}}', f'{head},"seen_at":"garbage"}}',
             f"{head}}}", f'{head},"seen_at":null,"x":{{"seen_at":{later}}}}}',
             f'{head},"x":{{"seen_at": null}},"seen_at":{later}}}']
    rows = parse_lines(landed(spark, lines), stream).select(
        F.date_format("seen_at", "yyyy-MM-dd'T'HH:mm:ssXXX").alias("t"), "_error").collect()
    wrong = ("field 'seen_at' is not a valid timestamp: needs a date, a time and a UTC offset (ISO 8601, e.g. "
             "2026-11-22T03:15:07.123Z)")
    assert [(r["t"], r["_error"]) for r in rows] == [
        (None, None), ("2026-11-22T03:15:07Z", None), (None, wrong), (None, None), (None, None),
        ("2026-11-22T03:15:07Z", None)]


def test_event_time_leniency_is_explicit(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Each allow key admits exactly its form, read as UTC; the reason says what is needed."""
    values = ['"2026-11-22"', '"2026-11-22T03:15:07"', '"2026-11-22T03:15:07.25"', '"2026-11-22T08:45:07+0530"',
              '"2026-11-22T03:15"', '"2026-11-22T03"', '"2026-11-22 03:15:07"']
    midnight, naive = "2026-11-22T00:00:00.000000Z", "2026-11-22T03:15:07.000000Z"
    fraction, offset, minutes = "2026-11-22T03:15:07.250000Z", naive, "2026-11-22T03:15:00.000000Z"
    cases = {
        "allow_date_only_timestamps": (
            [midnight, None, None, offset, None, None, None],
            "needs a date alone, or a date, a time and a UTC offset"),
        "allow_timestamps_without_offset": (
            [None, naive, fraction, offset, minutes, None, None], "needs a date and a time"),
        "both": ([midnight, naive, fraction, offset, minutes, None, None], "needs a date, or a date and a time"),
    }
    for key, (want, needs) in cases.items():
        keys = ["allow_date_only_timestamps", "allow_timestamps_without_offset"] if key == "both" else [key]
        home = tmp_path / key
        stream = load(write_config(home, **dict.fromkeys(keys, True))).stream("clicks")
        got = times_read(spark, stream, values)
        assert [t for t, _ in got] == want, key
        reasons = {e for t, e in got if t is None}
        assert reasons == {f"field 'event_time' is not a valid timestamp: {needs} "
                           "(ISO 8601, e.g. 2026-11-22T03:15:07.123Z)"}, key


def test_the_sample_producer_writes_accepted_times(spark, stream) -> None:  # type: ignore[no-untyped-def]
    import random

    from laketide.dev.producer import make_event

    rng = random.Random(3)
    events = [make_event(stream, rng, datetime(2026, 11, 22, 3, m, s, 1000 * m, tzinfo=UTC)) for m, s in
              ((0, 0), (15, 7), (59, 59))]
    got = times_read(spark, stream, [f'"{e["event_time"]}"' for e in events])
    assert [t for t, _ in got] == ["2026-11-22T03:00:00.000000Z", "2026-11-22T03:15:07.015000Z",
                                   "2026-11-22T03:59:59.059000Z"]


# ------------------------------------------------------------------ lines over max_line_bytes

def test_max_line_bytes_is_validated(tmp_path: Path) -> None:
    assert load(write_config(tmp_path / "a")).stream("clicks").max_line_bytes == 4 * 1024 * 1024
    for bad in (0, -1, "lots"):
        with pytest.raises(ConfigError, match="max_line_bytes"):
            load(write_config(tmp_path / "b", max_line_bytes=bad))


def test_lines_over_max_line_bytes_are_rejected_unparsed(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A line longer than max_line_bytes (bytes, not characters) is a reject, whatever it holds: never
    parsed, never dropped as blank, its rejects row holding the line's start and a marker."""
    stream = load(write_config(tmp_path, max_line_bytes=300)).stream("clicks")
    padded = GOOD.replace('"/h"', '"/' + "x" * 2000 + '"')  # a valid event, were it not too long
    accented = GOOD.replace('"/h"', '"/' + "é" * 120 + '"')  # under 300 characters, over 300 bytes
    spaces = " " * 400  # over the limit: a record (rejected), not a blank line
    lines = [GOOD, padded, accented, "x" * 301, "y" * 300, spaces]
    df = landed(spark, lines)
    errors = [r["_error"] for r in parse_lines(df, stream).collect()]
    size = [len(line.encode()) for line in lines]
    assert errors == [None, *[f"line of {n} bytes exceeds max_line_bytes (300)" for n in size[1:4]],
                      "malformed JSON", "line of 400 bytes exceeds max_line_bytes (300)"]

    validator = Validator(stream)
    staged = validator.staged_rows(df, 1)
    rows = staged.collect()
    assert [r["event_time"] is not None for r in rows] == [True] + [False] * 5
    # all counted: 5 rejects, no blank line; each carries its source file first (then what its reject needs)
    assert all(r["_source_file"].split("\x00")[0] == "f.jsonl" for r in rows)

    # the parse's input is guarded, not its result: the optimizer does not push the field reads into a CASE
    # (each would parse again), and every parse in the plan reads null for a line too long
    plan = staged._jdf.queryExecution().optimizedPlan().toString()
    guarded = re.findall(r"CASE WHEN \(octet_length\(value#\d+\) <= 300\) THEN value#\d+ END, Some\(UTC\)\)", plan)
    assert "THEN from_json" not in plan and len(guarded) == plan.count("from_json(") > 0

    rejects = {r["raw"]: r for r in rejected_rows(parse_lines(df, stream), stream, 1, NOW).collect()}
    from_staged = {r["raw"]: r for r in rejected_rows(validator.rejects_of(staged), stream, 1, NOW).collect()}
    assert from_staged == rejects  # the over-long lines' rejects, read from their staged rows, are the same
    cut = padded[:RAW_PREFIX_CHARS] + f" ... [truncated: {size[1]} bytes in the source file]"
    assert len(accented) < 300 < size[2]
    assert set(rejects) == {cut, accented + f" ... [truncated: {size[2]} bytes in the source file]",
                            "x" * 301 + " ... [truncated: 301 bytes in the source file]", "y" * 300,
                            spaces + " ... [truncated: 400 bytes in the source file]"}
    assert rejects[cut]["source_file"] == "f.jsonl" and rejects[cut]["event_hour"] is None
