"""Debezium change streams (``upsert.format: debezium``): the envelope flattened into the flat change line, its
values read in their Debezium types' units, what the validation makes of a record's odd fields, and the merge by LSN.

Real Spark (the test worker's session) and the writer's real validation; the merge test runs the real writer
application (``tests.helpers.ingest``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.verify import verify_partition
from laketide.ingest.debezium import DELETE_WITHOUT_BEFORE, UNPACKED_POSITION
from laketide.ingest.landing import publish
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import partition_key
from tests.helpers import ingest, load
from tests.test_upsert import FIELDS, H0, UPSERT, change, upsert_config

DEBEZIUM_FIELDS = {
    "change_id": {"type": "string", "required": True},
    "changed_at": {"type": "timestamp", "required": True},
    "account_id": {"type": "string", "required": True},
    "lsn": {"type": "long", "required": True},
    "op": {"type": "string", "required": True},
    "balance": {"type": "long"},
    "opened_at": {"type": "timestamp"},
}


def envelope(account: str, lsn: int, op: str, balance: int | None = None, wrapped: bool = False) -> str:
    """A Debezium change event (PostgreSQL connector, JSON converter) of row ``account``."""
    row = {"account_id": account, "balance": balance, "opened_at": 1_763_600_000_000_000}  # MicroTimestamp
    ts = int((H0 + timedelta(minutes=5)).timestamp() * 1000) + lsn
    event = {"before": row if op == "d" else None, "after": None if op == "d" else row, "op": op, "ts_ms": ts,
             "source": {"connector": "postgresql", "lsn": lsn, "ts_ms": ts - 3, "db": "bank", "table": "accounts"}}
    return json.dumps({"schema": {"type": "struct"}, "payload": event} if wrapped else event)


#: a MySQL stream's fields: its changes ordered by their binlog position, which laketide fills from the source block
MYSQL_FIELDS = {**{k: v for k, v in DEBEZIUM_FIELDS.items() if k != "lsn"},
                "binlog_position": {"type": "long", "required": True}}
MYSQL_UPSERT = {**UPSERT, "sequence_field": "binlog_position", "format": "debezium"}


def mysql_envelope(account: str, file: Any, pos: Any, row: Any, op: str = "u", balance: int | None = None) -> str:
    """A MySQL connector's change event of row ``account`` at binlog ``file``, ``pos`` and ``row``; every event in the
    same second (MySQL's binlog times are seconds): their time cannot order them."""
    record = {"account_id": account, "balance": balance}
    ts = int((H0 + timedelta(minutes=5)).timestamp() * 1000)
    return json.dumps({"before": record if op == "d" else None, "after": None if op == "d" else record, "op": op,
                       "ts_ms": ts, "source": {"connector": "mysql", "name": "shop", "server_id": 223344,
                                               "ts_ms": ts, "file": file, "pos": pos, "row": row, "db": "bank"}})


def packed(file: int, pos: int, row: int) -> int:
    return (file << 44) | (pos << 12) | row


def test_a_mysql_change_is_ordered_by_its_binlog_position(spark: Any, tmp_path: Path) -> None:
    """A MySQL or MariaDB binlog position is three numbers (the file's number, the event's position in it, the row in
    the event): ``sequence_field: binlog_position`` packs them into one long that orders as they do, a later file
    above any position of an earlier one. An envelope without a position that packs (no file number, a part above its
    bits, another connector's source block) is rejected naming that, as it landed; a record holding the field keeps
    its own value."""
    stream = load(upsert_config(tmp_path, fields=MYSQL_FIELDS, upsert=MYSQL_UPSERT)).stream("clicks")
    own = json.loads(mysql_envelope("e", "mysql-bin.000009", 4, 0))
    own["after"]["binlog_position"] = 77
    good = [mysql_envelope("a", "mysql-bin.000003", 154, 0, "r", 1), mysql_envelope("a", "mysql-bin.000003", 9_000_000,
            2, "u", 2), mysql_envelope("b", "mysql-bin.000004", 4, 0, "d"),
            mysql_envelope("c", "binlog.524287", 2 ** 32 - 1, 4095, "c", 3), json.dumps(own)]
    bad = [mysql_envelope("f", "mysql-bin.000004", 2 ** 32, 0), mysql_envelope("g", "mysql-bin", 10, 0),
           mysql_envelope("h", "mysql-bin.524288", 10, 0), mysql_envelope("i", "mysql-bin.000004", 10, 4096),
           mysql_envelope("j", "mysql-bin.000004", "10", None), mysql_envelope("k", "mysql-bin.000004", 1.5, 0),
           envelope("l", 10, "u", 5)]  # a PostgreSQL event: an LSN, no binlog position
    kept, rejects = validated(spark, tmp_path, stream, good + bad)
    assert {(r["account_id"], r["op"]): r["binlog_position"] for r in kept} == {
        ("a", "r"): packed(3, 154, 0), ("a", "u"): packed(3, 9_000_000, 2), ("b", "d"): packed(4, 4, 0),
        ("c", "c"): packed(524_287, 2 ** 32 - 1, 4095), ("e", "u"): 77}
    assert packed(3, 9_000_000, 2) < packed(4, 4, 0) < packed(524_287, 2 ** 32 - 1, 4095) < 2 ** 63
    assert [r["reason"] for r in rejects] == [UNPACKED_POSITION] * len(bad)
    landed = sorted(json.loads(r["raw"])["after"]["account_id"] for r in rejects)  # the envelopes as they landed
    assert landed == ["f", "g", "h", "i", "j", "k", "l"]


def test_a_binlog_position_must_be_a_long(tmp_path: Path) -> None:
    from laketide.errors import ConfigError

    fields = {**MYSQL_FIELDS, "binlog_position": {"type": "timestamp", "required": True}}
    with pytest.raises(ConfigError, match=r"'binlog_position' .* must be a field of type long, not timestamp"):
        load(upsert_config(tmp_path, fields=fields, upsert=MYSQL_UPSERT))


def test_a_debezium_line_not_utf8_is_rejected_as_it_landed(spark: Any, tmp_path: Path) -> None:
    """An envelope with invalid UTF-8 bytes (here in its source block, which no field reads) is not flattened: a
    flattened line would hold the bytes repaired. It is rejected as not UTF-8, its bytes kept as they landed. An
    envelope that is no strict JSON (a NaN) is not flattened either: rejected as malformed JSON; nor one escaping half a
    surrogate pair alone (its flattened value would hold "?")."""
    from pyspark.sql import functions as F

    from laketide.ingest.columns import LONE_SURROGATE_REASON
    from laketide.ingest.debezium import flat_line
    from laketide.ingest.rejects import rejected_rows
    from laketide.ingest.transforms import Validator, parse_lines

    stream = load(upsert_config(tmp_path, fields=DEBEZIUM_FIELDS,
                                upsert={**UPSERT, "sequence_field": "lsn", "format": "debezium"})).stream("clicks")
    good = envelope("a", 10, "r", 100).encode()
    bad = envelope("b", 11, "u", 5).encode().replace(b'"bank"', b'"b\xe3nk"')
    # NaN is no JSON (the lenient reader read it as null in the long field, and the change was merged without it)
    nan = envelope("c", 12, "u", 7).encode().replace(b'"balance": 7', b'"balance": NaN')
    # half a surrogate pair escaped alone: flattened, the value would hold "?" instead
    lone = envelope("d", 13, "u", 8).encode().replace(b'"bank"', b'"b\\ud800nk"')
    path = tmp_path / "f.jsonl"
    path.write_bytes(good + b"\n" + bad + b"\n" + nan + b"\n" + lone + b"\n")
    lines = spark.read.text(str(path)).select(flat_line(F.col("value"), stream).alias("value"),
                                              F.lit("f.jsonl").alias("_source_file"),
                                              F.lit(H0 + timedelta(hours=1)).alias("_landed_at"))
    assert [r["_error"] for r in parse_lines(lines, stream).collect()] == [None, "invalid UTF-8 encoding",
                                                                          "malformed JSON", LONE_SURROGATE_REASON]
    validator = Validator(stream)
    rejects = rejected_rows(validator.rejects_of(validator.staged_rows(lines, 1)), stream, 1, H0).collect()
    assert sorted(bytes(r["raw_bytes"]) if r["raw_bytes"] else r["raw"].encode() for r in rejects) == sorted(
        [bad, nan, lone])


def validated(spark: Any, folder: Path, stream: Any, lines: list[str]) -> tuple[list[Any], list[Any]]:
    """``lines`` landed in one file of ``stream`` (a Debezium stream's flattened first) through the writer's
    validation: (the accepted staged rows, the rejects' rows). The accepted rows are told apart here, in Python: a
    filter in the query would be pushed into the validation's expressions, and planning it costs more than the work."""
    from pyspark.sql import functions as F

    from laketide.ingest.debezium import flat_line
    from laketide.ingest.rejects import rejected_rows
    from laketide.ingest.transforms import Validator

    path = folder / f"{stream.name}-{len(list(folder.glob('*.jsonl')))}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    value = F.col("value") if stream.upsert.format == "rows" else flat_line(F.col("value"), stream)
    flat = spark.read.text(str(path)).select(value.alias("value"), F.lit("f.jsonl").alias("_source_file"),
                                             F.lit(H0 + timedelta(hours=1)).alias("_landed_at"))
    validator = Validator(stream)
    staged = validator.staged_rows(flat, 1)
    rejects = rejected_rows(validator.rejects_of(staged), stream, 1, H0).collect()
    return [r for r in staged.collect() if r["changed_at"] is not None], rejects  # a reject has no change time


def test_a_debezium_value_of_another_type_is_a_rejected_line(spark: Any, tmp_path: Path) -> None:
    """A record value the field's type cannot hold (a DECIMAL as Debezium's default base64 bytes, or its struct, in a
    long field; a fraction in it; an LSN written as text in the record) is a rejected line naming the field: the
    typed parse read it as null, and the change was merged without the value (or with the source block's LSN)."""
    stream = load(upsert_config(tmp_path, fields=DEBEZIUM_FIELDS,
                                upsert={**UPSERT, "sequence_field": "lsn", "format": "debezium"})).stream("clicks")

    def with_value(lsn: int, name: str, value: Any, wrapped: bool = False) -> str:
        event = json.loads(envelope("a", lsn, "u", 100))
        event["after"][name] = value
        return json.dumps({"schema": {}, "payload": event} if wrapped else event)

    bad = [with_value(10, "balance", "AeJA"), with_value(11, "balance", 12.5, wrapped=True),
           with_value(12, "balance", {"scale": 2, "value": "AeJA"}), with_value(13, "lsn", "16")]
    good = [with_value(14, "balance", None), with_value(15, "balance", 7, wrapped=True), envelope("a", 16, "d", 1)]
    kept, rejects = validated(spark, tmp_path, stream, bad + good)
    assert sorted(r["reason"].split(":")[0] for r in rejects) == ["field 'balance' is not a valid long"] * 3 + [
        "field 'lsn' is not a valid long"], [r["reason"] for r in rejects]
    assert {r["lsn"]: r["balance"] for r in kept} == {14: None, 15: 7, 16: 1}


@pytest.mark.parametrize("unknown_fields", ["ignore", "keep", "reject"])
def test_a_debezium_record_field_the_stream_does_not_name_follows_unknown_fields(spark: Any, tmp_path: Path,
                                                                                unknown_fields: str) -> None:
    """A column added to the source table arrives in the record before it is added to the stream's fields: as a flat
    line's key, it is dropped (ignore), kept in _extra (keep) or the line is rejected naming it (reject). Before, the
    flattening dropped it whatever unknown_fields said: nothing rejected, _extra always null."""
    stream = load(upsert_config(tmp_path, fields=DEBEZIUM_FIELDS, unknown_fields=unknown_fields,
                                upsert={**UPSERT, "sequence_field": "lsn", "format": "debezium"})).stream("clicks")
    added = json.loads(envelope("a", 10, "u", 100, wrapped=True))
    added["payload"]["after"].update(nickname="bob", limits={"daily": 5}, note=None)
    deleted = json.loads(envelope("b", 11, "d", 7))
    deleted["before"]["nickname"] = "ann"
    lines = [json.dumps(added), json.dumps(deleted), envelope("c", 12, "c", 1)]
    accepted, rejects = validated(spark, tmp_path, stream, lines)
    kept = {r["lsn"]: r for r in accepted}
    if unknown_fields == "reject":
        # a reject keeps the flat line (the landing file keeps the envelope)
        assert sorted((json.loads(r["raw"])["lsn"], r["reason"]) for r in rejects) == [
            (10, "unknown field(s) 'nickname', 'limits', 'note': not in the stream's fields (add them to fields, or "
                 "set unknown_fields to ignore or keep)"),
            (11, "unknown field(s) 'nickname': not in the stream's fields (add them to fields, or set unknown_fields "
                 "to ignore or keep)")]
        assert set(kept) == {12}
        return
    assert rejects == []
    assert {lsn: (r["balance"], r["op"]) for lsn, r in kept.items()} == {10: (100, "u"), 11: (7, "d"), 12: (1, "c")}
    if unknown_fields == "keep":
        assert {lsn: r["_extra"] for lsn, r in kept.items()} == {
            10: {"nickname": "bob", "limits": '{"daily":5}', "note": None}, 11: {"nickname": "ann"}, 12: None}
    else:
        assert all("_extra" not in r.asDict() for r in accepted)


def test_a_delete_needs_only_its_key_and_the_change_fields(spark: Any, tmp_path: Path) -> None:
    """A field declared required (a NOT NULL column of the source) is required of an insert or update, not of a
    delete: PostgreSQL's Debezium connector (replica identity DEFAULT) sends a delete's before with the key alone,
    every other column null. Such deletes were rejected ("missing required field 'balance'") and never applied:
    the deleted keys lived on in the merged table. A delete without its key, sequence, change time or id is still
    rejected, as is an update without the required field."""
    def staged(stream: Any, lines: list[str]) -> tuple[dict[Any, Any], list[tuple[str, str]]]:
        kept, rejects = validated(spark, tmp_path, stream, lines)
        return ({r["account_id"]: r["op"] for r in kept},
                sorted((str(json.loads(r["raw"]).get("account_id")), r["reason"]) for r in rejects))

    fields = {**FIELDS, "balance": {"type": "long", "required": True}, "status": {"type": "string", "required": True}}
    rows = load(upsert_config(tmp_path / "rows", fields=fields)).stream("clicks")
    without = {"balance": None, "status": None}
    lines = [json.dumps({**change("a", 1, "d"), **without}), json.dumps({**change("b", 2, "D"), **without}),
             json.dumps({**change("c", 3, "u", balance=5), "status": None}),
             json.dumps({k: v for k, v in change("d", 4, "d").items() if k != "version"}),
             json.dumps({k: v for k, v in change("e", 5, "delete").items() if k not in ("balance", "status")}),
             json.dumps(change("f", 6, "u", balance=1, status="open"))]
    assert staged(rows, lines) == ({"a": "d", "b": "D", "e": "delete", "f": "u"}, [
        ("c", "missing required field 'status'"), ("d", "missing required field 'version'")])

    debezium = load(upsert_config(tmp_path / "debezium", fields={**DEBEZIUM_FIELDS, "balance": {
        "type": "long", "required": True}}, upsert={**UPSERT, "sequence_field": "lsn", "format": "debezium"}))
    key_only = json.loads(envelope("a", 10, "d"))
    key_only["before"] = {"account_id": "a", "balance": None, "opened_at": None}
    no_balance = json.loads(envelope("b", 11, "u"))
    assert staged(debezium.stream("clicks"), [json.dumps(key_only), json.dumps(no_balance)]) == (
        {"a": "d"}, [("b", "missing required field 'balance'")])

    # a delete whose before is null (replica identity NOTHING), wrapped or not: its reason says so, not the first
    # field it lacks; a line that is no envelope keeps its own reason
    no_before = json.loads(envelope("c", 12, "d"))
    no_before["before"] = None
    wrapped = json.loads(envelope("d", 13, "d", wrapped=True))
    wrapped["payload"]["before"] = None
    kept, rejects = validated(spark, tmp_path, debezium.stream("clicks"),
                              [json.dumps(no_before), json.dumps(wrapped), '{"not": "an envelope"}'])
    assert kept == []
    assert sorted(r["reason"] for r in rejects) == sorted([DELETE_WITHOUT_BEFORE] * 2 + [
        "missing required field 'change_id'"])
    landed = [json.loads(r["raw"]) for r in rejects]
    assert sorted(raw.get("payload", raw).get("op", "-") for raw in landed) == ["-", "d", "d"]  # as they landed


def typed_envelope(opened_at: int | str, kind: str | None, wrapped: bool) -> str:
    """A change event whose ``opened_at`` is ``opened_at`` and, in the schema the converter writes with it, of the
    Debezium type ``kind`` (as Debezium's JSON converter with ``schemas.enable``; ``wrapped`` False: without)."""
    event = json.loads(envelope("a", 10, "u", 100))
    event["after"]["opened_at"] = opened_at
    if not wrapped:
        return json.dumps(event)
    row = [{"type": "string", "optional": False, "field": "account_id"},
           {"type": "int64", "optional": True, "field": "balance"},
           {"type": "int64", "optional": True, "field": "opened_at", **({"name": kind, "version": 1} if kind else {})}]
    schema = {"type": "struct", "name": "bank.public.accounts.Envelope", "fields": [
        {"type": "struct", "optional": True, "name": "bank.public.accounts.Value", "field": name, "fields": row}
        for name in ("before", "after")] + [{"type": "string", "optional": False, "field": "op"}]}
    return json.dumps({"schema": schema, "payload": event})


@pytest.mark.parametrize(("opened_at", "kind", "wrapped", "units", "read"), [
    # the schema names each field's type: its unit follows
    (1_763_600_000_123, "io.debezium.time.Timestamp", True, {}, "2025-11-20T00:53:20.123000Z"),
    (1_763_600_000_123_456, "io.debezium.time.MicroTimestamp", True, {}, "2025-11-20T00:53:20.123456Z"),
    (1_763_600_000_123_456_789, "io.debezium.time.NanoTimestamp", True, {}, "2025-11-20T00:53:20.123456Z"),
    (-1_500, "io.debezium.time.NanoTimestamp", True, {}, "1969-12-31T23:59:59.999998Z"),  # rounded down
    (20_412, "io.debezium.time.Date", True, {}, "2025-11-20T00:00:00.000000Z"),
    (1_763_600_000_123, "org.apache.kafka.connect.data.Timestamp", True, {}, "2025-11-20T00:53:20.123000Z"),
    (20_412, "org.apache.kafka.connect.data.Date", True, {}, "2025-11-20T00:00:00.000000Z"),
    # the schema decides over the configured unit; a schema naming no time type leaves it to the configuration
    (1_763_600_000_123, "io.debezium.time.Timestamp", True, {"opened_at": "nanos"}, "2025-11-20T00:53:20.123000Z"),
    (1_763_600_000_123, None, True, {"opened_at": "millis"}, "2025-11-20T00:53:20.123000Z"),
    # without a schema: the configured unit, micros by default
    (1_763_600_000_123, None, False, {"opened_at": "millis"}, "2025-11-20T00:53:20.123000Z"),
    (20_412, None, False, {"opened_at": "days"}, "2025-11-20T00:00:00.000000Z"),
    (1_763_600_000_123_456, None, False, {}, "2025-11-20T00:53:20.123456Z"),
    # text (ZonedTimestamp) is read as written
    ("2025-11-20T00:53:20.5+01:00", "io.debezium.time.ZonedTimestamp", True, {}, "2025-11-20T00:53:20.5+01:00"),
])
def test_a_debezium_timestamp_number_is_read_in_its_types_unit(spark: Any, tmp_path: Path, opened_at: int | str,
                                                               kind: str | None, wrapped: bool,
                                                               units: dict[str, str], read: str) -> None:
    """MySQL's DATETIME comes as milliseconds (io.debezium.time.Timestamp), PostgreSQL's timestamp as microseconds, a
    DATE as days: each is read in its unit, from the envelope's schema, else from ``upsert.timestamp_units``."""
    from pyspark.sql import functions as F

    from laketide.ingest.debezium import flat_line

    stream = load(upsert_config(tmp_path, fields=DEBEZIUM_FIELDS, upsert={
        **UPSERT, "sequence_field": "lsn", "format": "debezium", "timestamp_units": units})).stream("clicks")
    path = tmp_path / "f.jsonl"
    path.write_text(typed_envelope(opened_at, kind, wrapped) + "\n")
    (flat,) = spark.read.text(str(path)).select(flat_line(F.col("value"), stream)).collect()
    assert json.loads(flat[0])["opened_at"] == read


@pytest.mark.parametrize(("source", "top", "read"), [
    ({"ts_ms": 1_795_161_900_123}, {}, "2026-11-20T08:05:00.123000Z"),  # the source block's, in milliseconds
    ({}, {"ts_ms": 1_795_161_900_456}, "2026-11-20T08:05:00.456000Z"),  # the envelope's
    ({"ts_us": 1_795_161_900_123_456}, {}, "2026-11-20T08:05:00.123456Z"),  # Debezium 2's, in micro-
    ({}, {"ts_ns": 1_795_161_900_123_456_789}, "2026-11-20T08:05:00.123456Z"),  # and nanoseconds
])
def test_a_debezium_time_taken_as_the_sequence_is_read_in_its_unit(spark: Any, tmp_path: Path,
                                                                    source: dict[str, int], top: dict[str, int],
                                                                    read: str) -> None:
    """A stream may order its changes by ts_ms (a SQL Server stream: its LSNs are text, no number): a timestamp
    sequence_field the record lacks is Debezium's own ts_ms (ts_us, ts_ns), from the source block or the envelope,
    in the unit its name says. It was read as microseconds: the merged table's ts_ms said 1970-01-21."""
    from pyspark.sql import functions as F

    from laketide.ingest.debezium import flat_line

    name = next(iter(source or top))
    fields = {**{k: v for k, v in DEBEZIUM_FIELDS.items() if k != "lsn"}, name: {"type": "timestamp", "required": True}}
    stream = load(upsert_config(tmp_path, fields=fields, upsert={
        **UPSERT, "sequence_field": name, "format": "debezium"})).stream("clicks")
    event = json.loads(envelope("a", 10, "u", 100))
    event["source"] = {"connector": "mysql", "file": "binlog.000003", "pos": 4711, **source}
    event.update(top)
    path = tmp_path / "f.jsonl"
    path.write_text(json.dumps(event) + "\n")
    (flat,) = spark.read.text(str(path)).select(flat_line(F.col("value"), stream)).collect()
    assert json.loads(flat[0])[name] == read


@pytest.mark.slow
def test_debezium_change_events_are_merged_by_their_lsn(spark: Any, tmp_path: Path) -> None:
    config_path = upsert_config(tmp_path, fields=DEBEZIUM_FIELDS,
                                upsert={**UPSERT, "sequence_field": "lsn", "format": "debezium"})
    config = load(config_path)
    stream = config.stream("clicks")
    lines = [envelope("a", 10, "r", 100), envelope("b", 11, "r", 200, wrapped=True), envelope("a", 30, "u", 130),
             envelope("a", 20, "u", 120),  # older than the update at 30: ignored
             envelope("b", 40, "d", 200), envelope("c", 50, "c", 5, wrapped=True),
             envelope("c", 60, "t"),  # a truncate: no operation laketide applies
             '{"not": "an envelope"}']
    publish(stream.landing_path, lines, partition_key(H0), "pg", 1, "accounts")
    landed_again = [envelope("c", 50, "c", 5, wrapped=True), envelope("b", 35, "u", 999)]  # a retry; an older b
    publish(stream.landing_path, landed_again, partition_key(H0), "pg", 2, "accounts")
    ingest(spark, config_path)
    catalog = load_catalog(config.catalog)
    rows = {r["account_id"]: r for r in catalog.load_table("lake.accounts").scan().to_arrow().to_pylist()}
    assert {k: (r["lsn"], r["balance"]) for k, r in rows.items()} == {"a": (30, 130), "c": (50, 5)}
    assert rows["a"]["opened_at"].replace(tzinfo=UTC) == datetime.fromtimestamp(1_763_600_000, UTC)  # from micros
    changes = catalog.load_table("lake.account_changes").scan().to_arrow().to_pylist()
    assert len(changes) == 8  # every envelope but the two rejected lines, the retry included
    assert {c["op"] for c in changes} == {"r", "u", "d", "c"}
    assert all(c["changed_at"].replace(tzinfo=UTC) >= H0 + timedelta(minutes=5) for c in changes)
    retry = [c["change_id"] for c in changes if c["account_id"] == "c"]
    assert len(retry) == 2 and retry[0] == retry[1]  # the same event landed twice: the same change id
    rejects = catalog.load_table("lake.account_changes_rejects").scan().to_arrow().column("reason").to_pylist()
    assert sorted(r.split(":")[0] for r in rejects) == ["field 'op' is 't'", "missing required field 'change_id'"]
    assert verify_partition(config, stream, H0).success

    # the hour closed: its close event carries its snapshot range, and the example consumer reads its changes
    from laketide.airflow.downstream import hour_changes
    from laketide.close.closing import close, verify

    with pytest.raises(ValueError, match="is not closed"):
        hour_changes(config, "clicks", H0)
    first = close(config, stream, verify(config, stream, H0))
    assert first.to_dict()["snapshot_range"] == {"from": None, "to": str(first.snapshot_id)}
    assert hour_changes(config, "clicks", H0) == {
        "stream": "clicks", "hour": partition_key(H0), "snapshot_range": {"from": None, "to": str(first.snapshot_id)},
        "changes": 8, "operations": {"delete": 1, "insert": 4, "update": 3}, "keys": 3}
    # late changes of the hour re-close it: the consumer reads only what came since the first close
    publish(stream.landing_path, [envelope("a", 70, "u", 140), envelope("d", 71, "c", 1)], partition_key(H0), "pg",
            3, "accounts")
    ingest(spark, config_path)
    again = close(config, stream, verify(config, stream, H0))
    assert again.reclose and again.to_dict()["snapshot_range"] == {"from": str(first.snapshot_id),
                                                                    "to": str(again.snapshot_id)}
    assert hour_changes(config, "clicks", H0) == {
        "stream": "clicks", "hour": partition_key(H0),
        "snapshot_range": {"from": str(first.snapshot_id), "to": str(again.snapshot_id)},
        "changes": 2, "operations": {"insert": 1, "update": 1}, "keys": 2}


@pytest.mark.slow
def test_mysql_changes_are_merged_by_their_binlog_position(spark: Any, tmp_path: Path) -> None:
    """MySQL changes of one second, landed out of order over a binlog rotation, merged by the real writer: each key
    ends at its change latest in the binlog (a later file wins over a larger position in an earlier one; a snapshot
    read is older than any change after it), a late update of a deleted key stays out, and the hour verifies."""
    config_path = upsert_config(tmp_path, fields=MYSQL_FIELDS, upsert=MYSQL_UPSERT)
    config = load(config_path)
    stream = config.stream("clicks")
    first = [mysql_envelope("a", "mysql-bin.000003", 154, 0, "r", 1), mysql_envelope("b", "mysql-bin.000003", 154, 0,
             "r", 10), mysql_envelope("a", "mysql-bin.000004", 4000, 0, "u", 3),
             mysql_envelope("b", "mysql-bin.000003", 9000, 1, "d"), mysql_envelope("c", "mysql-bin.000003", 9000, 0,
             "c", 5)]
    publish(stream.landing_path, first, partition_key(H0), "shop", 1, "accounts")
    later = [mysql_envelope("a", "mysql-bin.000003", 700, 0, "u", 2),  # before the rotation: older than 000004's
             mysql_envelope("b", "mysql-bin.000003", 8000, 0, "u", 11),  # before b's delete: stays deleted
             mysql_envelope("c", "mysql-bin.000003", 9400, 0, "u", 6),
             mysql_envelope("d", "mysql-bin.000004", 2 ** 32, 0, "c", 1)]  # no position that packs: rejected
    publish(stream.landing_path, later, partition_key(H0), "shop", 2, "accounts")
    ingest(spark, config_path)
    catalog = load_catalog(config.catalog)
    rows = catalog.load_table("lake.accounts").scan().to_arrow().to_pylist()
    assert {r["account_id"]: (r["binlog_position"], r["balance"]) for r in rows} == {
        "a": (packed(4, 4000, 0), 3), "c": (packed(3, 9400, 0), 6)}
    rejects = catalog.load_table("lake.account_changes_rejects").scan().to_arrow().column("reason").to_pylist()
    assert rejects == [UNPACKED_POSITION]
    assert catalog.load_table("lake.account_changes").scan().to_arrow().num_rows == 8
    assert verify_partition(config, stream, H0).success
