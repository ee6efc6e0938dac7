"""Upsert streams: changes kept in the change log, merged into a keyed table as the fold of every change.

Real Spark, real Iceberg tables, the real writer application (``tests.helpers.ingest``, and the writer process for
the kill points); the expected table is a fold of the landed changes computed here in plain Python.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.verify import verify_partition
from laketide.config import load_config
from laketide.config.upsert import DELETE_OPERATIONS
from laketide.errors import ConfigError
from laketide.ingest.landing import publish
from laketide.ingest.merge_sink import APPLIED
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import partition_key
from tests.helpers import (
    ACCOUNT_FIELDS,
    ACCOUNT_UPSERT,
    freeze,
    ingest,
    kill_group,
    load,
    start_writer,
    unique_catalog,
    wait_for,
    wait_for_log,
    write_config,
    writer_log,
)
from tests.test_redo import redo_here, redo_log

H0 = datetime(2026, 11, 20, 8, tzinfo=UTC)
FIELDS, UPSERT = ACCOUNT_FIELDS, ACCOUNT_UPSERT
#: the merge on a staging branch whatever the table's size (by default a table this small is one MERGE)
STAGED = {**UPSERT, "staged_merge_rows": 0}


def upsert_config(home: Path, catalog: str | None = None, **overrides: Any) -> Path:
    settings = {"table": "lake.account_changes", "rejects_table": "lake.account_changes_rejects",
                "event_time_field": "changed_at", "event_id_field": "change_id", "fields": FIELDS, "upsert": UPSERT,
                **overrides}
    return write_config(home, catalog_name=catalog or unique_catalog("upsert"), **settings)


def change(account: str, version: int, op: str = "u", balance: int | None = None, minute: int = 1,
           hour: datetime = H0, status: str | None = None, cid: str | None = None) -> dict[str, Any]:
    return {"change_id": cid or f"{account}-{version}-{op}", "account_id": account, "version": version, "op": op,
            "changed_at": (hour + timedelta(minutes=minute)).isoformat(), "balance": balance, "status": status}


class Landing:
    """Publishes change files into a stream's landing zone and remembers every change it published."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seq = 0
        self.changes: list[dict[str, Any]] = []

    def land(self, changes: Iterable[dict[str, Any]], hour: datetime = H0, producer: str = "db") -> None:
        rows = list(changes)
        self.seq += 1
        publish(self.root, [json.dumps(r) for r in rows], partition_key(hour), producer, self.seq, "accounts")
        self.changes += rows


def fold(changes: Iterable[dict[str, Any]]) -> dict[str, tuple[int, int | None, str | None]]:
    """The expected merged table: per key the greatest change by (version, delete, change id); live keys only."""
    newest: dict[str, tuple[tuple[int, bool, str], dict[str, Any]]] = {}
    for c in changes:
        order = (c["version"], c["op"] in DELETE_OPERATIONS, c["change_id"])
        if c["account_id"] not in newest or order > newest[c["account_id"]][0]:
            newest[c["account_id"]] = (order, c)
    return {k: (c["version"], c["balance"], c["status"]) for k, (order, c) in newest.items() if not order[1]}


def merged(config_path: Path) -> dict[str, tuple[int, int | None, str | None]]:
    """The merged table's rows (asserting one row per key)."""
    config = load(config_path)
    rows = load_catalog(config.catalog).load_table("lake.accounts").scan().to_arrow().to_pylist()
    keys = [r["account_id"] for r in rows]
    assert len(keys) == len(set(keys)), f"a key twice in the merged table: {sorted(keys)}"
    return {r["account_id"]: (r["version"], r["balance"], r["status"]) for r in rows}


@pytest.mark.parametrize(("upsert", "fields", "named"), [
    ({"primary_key": ["nope"]}, {}, "upsert.primary_key: 'nope' is not one of fields"),
    ({"primary_key": []}, {}, "upsert.primary_key"),
    ({"primary_key": ["balance"]}, {}, "upsert.primary_key: field 'balance' must be declared required: true"),
    ({"sequence_field": "status"}, {"status": {"type": "string", "required": True}},
     "upsert.sequence_field: field 'status' is a string: use a long, int or timestamp"),
    ({"sequence_field": "account_id"}, {}, "upsert.sequence_field: 'account_id' is part of primary_key"),
    ({"operation_field": "version"}, {}, "upsert.operation_field: field 'version' must have type string"),
    ({"operation_field": "op"}, {"op": {"type": "string", "required": True, "values": ["c", "merge"]}},
     "values ['merge'] of field 'op' are no operation laketide knows"),
    ({"table": "lake.account_changes"}, {}, "upsert.table: 'lake.account_changes' is also the stream's change log"),
    ({"tombstone_retention": "-1d"}, {}, "upsert.tombstone_retention: must be a positive duration"),
    ({"merge_mode": "sometimes"}, {}, "upsert.merge_mode"),
    ({"primary_key": ["account_id"], "unknown": 1}, {}, "upsert.unknown"),
    ({"timestamp_units": {"opened_at": "millis"}}, {"opened_at": {"type": "timestamp"}},
     "upsert.timestamp_units: only a format: debezium stream reads timestamps as numbers"),
    ({"format": "debezium", "timestamp_units": {"balance": "millis"}}, {},
     "upsert.timestamp_units: 'balance' is not a timestamp field"),
    ({"format": "debezium", "timestamp_units": {"changed_at": "millis"}}, {},
     "upsert.timestamp_units: 'changed_at' is the change time"),
    ({"format": "debezium", "timestamp_units": {"opened_at": "hours"}}, {"opened_at": {"type": "timestamp"}},
     "upsert.timestamp_units.opened_at"),
])
def test_a_bad_upsert_section_names_what_to_fix(tmp_path: Path, upsert: dict[str, Any], fields: dict[str, Any],
                                                named: str) -> None:
    config_path = write_config(
        tmp_path, table="lake.account_changes", rejects_table="lake.account_changes_rejects",
        event_time_field="changed_at", event_id_field="change_id", fields={**FIELDS, **fields},
        upsert={**UPSERT, **upsert})
    with pytest.raises(ConfigError) as err:
        load_config(config_path, environ={})
    assert named in str(err.value), str(err.value)


def test_dedupe_on_write_and_values_of_a_non_string_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dedupe_on_write: an upsert stream's merge keeps one row per key"):
        load_config(upsert_config(tmp_path, dedupe_on_write=True), environ={})
    bad = {**FIELDS, "version": {"type": "long", "required": True, "values": ["1"]}}
    with pytest.raises(ConfigError, match="only a string field has a list of values"):
        load_config(upsert_config(tmp_path, fields=bad), environ={})


def test_backfill_and_repair_of_an_upsert_stream_are_refused_naming_redo(tmp_path: Path) -> None:
    from laketide.errors import ActionRequestError
    from laketide.redo.overwrite import validate_request

    config = load_config(upsert_config(tmp_path), environ={})
    for kind in ("backfill", "repair"):
        with pytest.raises(ActionRequestError, match=f"'clicks' is an upsert stream: a {kind} would rewrite") as err:
            validate_request(config, kind, "clicks", "2026-11-20T08:00:00+00:00", "2026-11-20T09:00:00+00:00")  # type: ignore[arg-type]
        assert "Use a redo from a snapshot instead" in str(err.value)


@pytest.mark.slow
def test_the_fold_is_counted_in_its_own_pass_and_again_when_the_count_does_not_arrive(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge commits' figures come from an observation of the fold's checkpoint; a wait for it is bounded, and
    without it (Spark's listener bus dropped it) a job over the checkpoint counts the same figures."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from laketide.ingest import merge_sink
    from laketide.ingest.columns import json_options, record_schema

    ran, never = Observation("test-ran"), Observation("test-never")
    spark.range(10).observe(ran, F.count(F.lit(1)).alias("n")).localCheckpoint()
    assert merge_sink.observed(ran, 30) == {"n": 10}
    spark.range(10).observe(never, F.count(F.lit(1)).alias("n"))  # no action: its metrics never come
    started = time.monotonic()
    assert merge_sink.observed(never, 0.5) is None and time.monotonic() - started < 5

    config = load(upsert_config(tmp_path))
    stream = config.streams[0]
    rows = [change("a", 1, "c"), change("a", 2, "u"), change("b", 1, "c"), change("b", 3, "d"), change("c", 2, "I"),
            change("d", 1, "upsert", cid="d-1"), change("d", 1, "u", cid="d-1-later")]  # a tie: the greater id wins
    lines = spark.createDataFrame([(json.dumps(r),) for r in rows], "value string")
    changes = lines.select(F.from_json("value", record_schema(stream), json_options(stream)).alias("r")).select("r.*")
    sink = merge_sink.MergeSink(config, stream)
    _, observed_figures = sink._folded(changes, 7, 42)
    monkeypatch.setattr(merge_sink, "observed", lambda observation, timeout: None)
    _, counted = sink._folded(changes, 7, 42)
    assert observed_figures == counted
    total, deletes, props = counted
    assert (total, deletes) == (4, 1)
    assert json.loads(props["laketide.operations"]) == {"delete": 1, "insert": 1, "update": 2}


@pytest.mark.slow
def test_the_merged_table_is_the_fold_of_every_change(spark: Any, tmp_path: Path) -> None:
    config_path = upsert_config(tmp_path, upsert=STAGED)
    stream = load(config_path).stream("clicks")
    landing = Landing(stream.landing_path)
    # many changes to one key in one batch, out of order; a duplicate change; spread over two hours
    landing.land([change("a", 1, "c", 10), change("a", 3, "u", 30), change("a", 2, "u", 20),
                  change("b", 1, "c", 5), change("c", 1, "c", 7)])
    landing.land([change("a", 3, "u", 30), change("b", 2, "u", 6, minute=59)])
    landing.land([change("d", 1, "r", 100, hour=H0 + timedelta(hours=1))], hour=H0 + timedelta(hours=1))
    # a change whose operation is none laketide knows is rejected, by name, and changes nothing
    publish(stream.landing_path, [json.dumps(change("a", 9, "merge", 0))], partition_key(H0), "db", 99, "accounts")
    ingest(spark, config_path)
    assert merged(config_path) == fold(landing.changes) == {
        "a": (3, 30, None), "b": (2, 6, None), "c": (1, 7, None), "d": (1, 100, None)}
    # the lakehouse view's batches: the keys each merge changed, by the operation of their newest change
    from laketide.airflow.ui.writer import writer as writer_panel

    batches = writer_panel(load(config_path), stream).batches
    assert batches and all(b.operations for b in batches), batches
    assert sum((Counter(b.operations) for b in batches), Counter()) == {"insert": 2, "update": 2}
    rejects = load_catalog(load(config_path).catalog).load_table("lake.account_changes_rejects").scan().to_arrow()
    assert [r.split(": not one of")[0] for r in rejects.column("reason").to_pylist()] == ["field 'op' is 'merge'"]

    # a delete before the insert it follows (e: delete v5 lands first, its insert v4 later: e stays deleted); an older
    # update after a newer one (b v1 again); delete and update of one version: the delete wins; a key deleted, then
    # inserted again with a newer version
    landing.land([change("e", 5, "d"), change("a", 4, "d"), change("c", 2, "u", 8), change("c", 2, "d")])
    # a full load (snapshot reads, 'r') of f and g at the source's version 10, then changes overlapping it: f's
    # change at version 5 is older than the loaded row (ignored), g's at 11 newer (applied)
    landing.land([change("f", 10, "r", 1000, status="loaded"), change("g", 10, "r", 2000, status="loaded")],
                 producer="load")
    ingest(spark, config_path)
    landing.land([change("e", 4, "c", 40), change("b", 1, "u", 999, cid="b-again"), change("a", 5, "c", 55),
                  change("a", 2, "u", 22, cid="a-late"), change("f", 5, "u", 5), change("g", 11, "u", 2001)])
    ingest(spark, config_path)
    assert merged(config_path) == fold(landing.changes) == {
        "a": (5, 55, None), "b": (2, 6, None), "d": (1, 100, None), "f": (10, 1000, "loaded"), "g": (11, 2001, None)}

    # every change is in the change log, hour-partitioned by change time, with the usual markers
    config = load(config_path)
    catalog = load_catalog(config.catalog)
    log_rows = catalog.load_table("lake.account_changes").scan().to_arrow()
    assert log_rows.num_rows == len(landing.changes)  # the rejected change is not there
    tombstones = sorted((r["account_id"], r["version"]) for r in
                        catalog.load_table("lake.accounts__tombstones").scan().to_arrow().to_pylist())
    assert tombstones == [("a", 4), ("c", 2), ("e", 5)]
    snapshot = catalog.load_table("lake.accounts").current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    head = catalog.load_table("lake.account_changes").current_snapshot()
    assert head is not None and snapshot.summary[APPLIED] == str(head.snapshot_id)
    assert snapshot.summary["laketide.writer-id"] == stream.writer_id
    assert "merged into lake.accounts" in writer_log(config_path)

    # nothing new: a run applies nothing and commits nothing to the merged table
    ingest(spark, config_path)
    assert catalog.load_table("lake.accounts").current_snapshot().snapshot_id == snapshot.snapshot_id  # type: ignore[union-attr]

    # maintenance compacts the merged table's position deletes away (merge-on-read): its content is unchanged
    from laketide.maintain import job as maintain_job
    from laketide.maintain import plan as maintain_plan

    def delete_files() -> int:
        return catalog.load_table("lake.accounts").inspect.files().column("content").to_pylist().count(1)

    before, deletes_before = merged(config_path), delete_files()
    assert deletes_before > 0  # the merges wrote position deletes
    from laketide.maintain.health import format_health, health

    shown = {h.table: h for h in health(config)}["lake.accounts"]  # the health panel and `make status`
    assert shown.delete_files == deletes_before and 0 < shown.delete_file_share < 1 and shown.deleted_rows > 0
    assert any(line.split()[0] == "lake.accounts" and f"{deletes_before} (" in line
               for line in format_health([shown])), format_health([shown])
    request = maintain_plan.validate_request(config, "lake.accounts", "rewrite_data_files", False)
    records = maintain_job.run(config, spark, request, "upsert-maintenance")
    assert [r.outcome for r in records] == ["ok"], records
    assert delete_files() == 0 and merged(config_path) == before, (deletes_before, delete_files())
    assert {h.table: h for h in health(config)}["lake.accounts"].delete_files == 0

    # a redo from the change log's first snapshot, after someone damaged the merged table by hand: the change log is
    # rolled back and re-ingested, the merged table rebuilt from it: what a fresh replay gives
    from pyiceberg.expressions import EqualTo

    verified = verify_partition(config, stream, H0)
    assert verified.success, verified.message()
    catalog.load_table("lake.accounts").delete(EqualTo("account_id", "a"))
    # the close's verification compares the merged table with the fold of the change log: the damage is named
    damaged = verify_partition(config, stream, H0)
    assert not damaged.success and any("1 key(s) live in the change log but missing" in f and "e.g. a" in f
                                       for f in damaged.failures), damaged.failures
    tampered = catalog.load_table("lake.accounts")
    tampered.append(tampered.scan(row_filter=EqualTo("account_id", "b")).to_arrow())
    twice = verify_partition(config, stream, H0)
    assert any("1 key(s) held more than once" in f for f in twice.failures), twice.failures
    first = catalog.load_table("lake.account_changes").metadata.snapshots[0].snapshot_id
    assert redo_here(spark, config_path, "--snapshot-id", str(first), "--dry-run", "false", "--run-id", "upsert-redo",
                     "--user", "alice") == 0, redo_log(config_path)
    assert "rebuilding it from the change log" in redo_log(config_path)
    assert merged(config_path) == fold(landing.changes) == {
        "a": (5, 55, None), "b": (2, 6, None), "d": (1, 100, None), "f": (10, 1000, "loaded"), "g": (11, 2001, None)}
    assert verify_partition(config, stream, H0).success
    catalog = load_catalog(config.catalog)
    assert catalog.load_table("lake.account_changes").scan().to_arrow().num_rows == len(landing.changes)
    # the rebuilt tombstones are those of the deleted keys (a tombstone under a newer live row, as 'a' had, does
    # nothing: the row is newer than any change the tombstone would stop)
    assert {r["account_id"]: r["version"] for r in
            catalog.load_table("lake.accounts__tombstones").scan().to_arrow().to_pylist()} == {"c": 2, "e": 5}

    # schema evolution as for an append stream: a field added to the stream (an int), then widened (to a long):
    # the change log, the merged table and the tombstones follow; rows merged before read null
    name = config.catalog.name
    for kind, changes in (("int", [change("b", 3, "u", 7), change("h", 1, "c", 1)]),
                          ("long", [change("h", 2, "u", 2), change("g", 12, "d")])):
        upsert_config(tmp_path, catalog=name, fields={**FIELDS, "tier": {"type": kind}},
                      upsert={**UPSERT, "sequence_field": "version"})
        tiers = {c["account_id"]: 2 ** 40 if kind == "long" else 3 for c in changes}
        landing.land([{**c, "tier": tiers[c["account_id"]]} for c in changes])
        ingest(spark, config_path)
        for table in ("lake.account_changes", "lake.accounts"):
            assert str(catalog.load_table(table).schema().find_field("tier").field_type) == kind, table
    rows = {r["account_id"]: r for r in catalog.load_table("lake.accounts").scan().to_arrow().to_pylist()}
    assert {k: r["tier"] for k, r in rows.items()} == {"a": None, "b": 3, "d": None, "f": None, "h": 2 ** 40}
    assert merged(config_path) == fold(landing.changes)
    assert verify_partition(load(config_path), stream, H0).success


def test_a_changed_key_or_sequence_is_refused_until_the_merged_tables_are_dropped(spark: Any, tmp_path: Path) -> None:
    """The merged table is keyed by primary_key and ordered by sequence_field: merged by another key, every row
    would come back a second time. A changed key or sequence is refused at writer start, naming both and what to
    do, with nothing changed; once the merged and tombstones tables are dropped, the writer builds them again from
    the change log by the new key."""
    from laketide.errors import SchemaChangeError, TableNotFoundError
    from laketide.ingest.upsert_tables import SEQUENCE_PROPERTY, ensure_upsert_tables

    fields = {**FIELDS, "region": {"type": "string", "required": True}, "lsn": {"type": "long", "required": True}}
    config_path = upsert_config(tmp_path, fields=fields)
    name = load(config_path).catalog.name
    landing = Landing(load(config_path).stream("clicks").landing_path)

    def at(region: str, *args: Any) -> dict[str, Any]:
        c = change(*args)
        return {**c, "region": region, "lsn": c["version"], "change_id": f"{c['change_id']}-{region}"}

    landing.land([at("eu", "a", 1, "c", 10), at("us", "a", 2, "c", 20), at("eu", "b", 1, "c", 5),
                  at("eu", "b", 2, "d")])
    ingest(spark, config_path)
    assert merged(config_path) == {"a": (2, 20, None)}
    catalog = load_catalog(load(config_path).catalog)
    before = {t: catalog.load_table(t).metadata_location for t in ("lake.accounts", "lake.accounts__tombstones")}
    assert catalog.load_table("lake.accounts").properties[SEQUENCE_PROPERTY] == "version"

    rekeyed = {**UPSERT, "primary_key": ["account_id", "region"]}
    for upsert, named in ((rekeyed, "upsert.primary_key is ['account_id', 'region'], but lake.accounts is keyed by "
                                    "['account_id']"),
                          ({**UPSERT, "sequence_field": "lsn"},
                           "upsert.sequence_field is 'lsn', but the rows of lake.accounts are ordered by 'version'")):
        upsert_config(tmp_path, catalog=name, fields=fields, upsert=upsert)
        with pytest.raises(SchemaChangeError) as err:
            ensure_upsert_tables(spark, load(config_path), load(config_path).stream("clicks"))
        assert named in str(err.value) and "drop lake.accounts and lake.accounts__tombstones" in str(err.value)
    assert {t: catalog.load_table(t).metadata_location for t in before} == before  # nothing changed

    upsert_config(tmp_path, catalog=name, fields=fields, upsert=rekeyed)
    with pytest.raises(SchemaChangeError):
        ingest(spark, config_path)  # the writer does not start
    for table in before:
        spark.sql(f"DROP TABLE {name}.{table}")
    # a close meanwhile names the missing table and what makes it (not pyiceberg's bare NoSuchTableError)
    with pytest.raises(TableNotFoundError, match=r"table lake\.accounts of stream 'clicks' does not exist"):
        verify_partition(load(config_path), load(config_path).stream("clicks"), H0)
    ingest(spark, config_path)
    rows = catalog.load_table("lake.accounts").scan().to_arrow().to_pylist()
    assert sorted((r["account_id"], r["region"], r["balance"]) for r in rows) == [("a", "eu", 10), ("a", "us", 20)]
    assert sorted(catalog.load_table("lake.accounts").schema().identifier_field_names()) == ["account_id", "region"]
    assert [(r["account_id"], r["region"]) for r in
            catalog.load_table("lake.accounts__tombstones").scan().to_arrow().to_pylist()] == [("b", "eu")]


@pytest.mark.slow
def test_a_batch_too_big_to_broadcast_is_one_merge_and_the_same_fold(spark: Any, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``merge_sink.BROADCAST_CHANGES`` folded changes (a catch-up after a long stop) a batch is merged by one
    ``MERGE`` with an insert clause, not on a staging branch: the same fold (inserts, a delete before its insert, an
    older update after a newer one, a key deleted then inserted again), one commit per batch, no branch left."""
    from laketide.ingest import merge_sink

    config_path = upsert_config(tmp_path, upsert=STAGED)
    stream = load(config_path).stream("clicks")
    landing = Landing(stream.landing_path)
    landing.land([change("a", 1, "c", 10), change("a", 3, "u", 30), change("b", 1, "c", 5), change("c", 1, "c", 7)])
    ingest(spark, config_path)  # staged on a branch (two commits: the update of no key, the append of three)
    monkeypatch.setattr(merge_sink, "BROADCAST_CHANGES", 0)
    landing.land([change("e", 5, "d"), change("a", 4, "d"), change("c", 2, "u", 8), change("b", 2, "u", 6)])
    ingest(spark, config_path)
    landing.land([change("e", 4, "c", 40), change("b", 1, "u", 999, cid="b-again"), change("a", 5, "c", 55)])
    ingest(spark, config_path)
    assert merged(config_path) == fold(landing.changes) == {"a": (5, 55, None), "b": (2, 6, None), "c": (2, 8, None)}
    table = load_catalog(load(config_path).catalog).load_table("lake.accounts")
    assert list(table.metadata.refs) == ["main"]
    batches = Counter(s.summary.additional_properties.get("laketide.batch-id") for s in table.snapshots()
                      if s.summary is not None)
    # None: the empty snapshot Iceberg makes for the first branch of an empty table
    assert batches == {None: 1, "0": 2, "1": 1, "2": 1}, batches


@pytest.mark.slow
def test_a_stream_named_with_a_dash_and_a_dot_merges_on_its_staging_branch(spark: Any, tmp_path: Path) -> None:
    """A stream's name may hold '-' and '.', which a Spark identifier does not: the staging branch's name (part of
    the identifier ``<table>.branch_<name>``) holds '_' instead. Before, such a stream's merge into a table of
    staged_merge_rows or more failed every batch with a ParseException (INVALID_IDENTIFIER)."""
    config_path = upsert_config(tmp_path, name="acct-changes.v2", upsert=STAGED)
    landing = Landing(load(config_path).stream("acct-changes.v2").landing_path)
    landing.land([change("a", 1, "c", 10), change("b", 1, "c", 5)])
    ingest(spark, config_path, group="acct-changes.v2")
    landing.land([change("a", 2, "u", 11), change("b", 2, "d")])
    ingest(spark, config_path, group="acct-changes.v2")
    assert merged(config_path) == fold(landing.changes) == {"a": (2, 11, None)}
    table = load_catalog(load(config_path).catalog).load_table("lake.accounts")
    assert set(table.metadata.refs) == {"main"}  # the staging branches were fast-forwarded and removed
    assert "batch 1 merged into lake.accounts" in writer_log(config_path)


def test_copy_on_write_merges_the_fold_without_delete_files(spark: Any, tmp_path: Path) -> None:
    """``merge_mode: copy-on-write``: the merged table's properties say it, a merge rewrites the data files holding
    the rows it changes (no delete file), and the table is the fold of every change as under merge-on-read. Set back
    to merge-on-read, the existing table follows."""
    config_path = upsert_config(tmp_path, upsert={**STAGED, "merge_mode": "copy-on-write"})
    config = load(config_path)
    landing = Landing(config.stream("clicks").landing_path)
    landing.land([change("a", 1, "c", 10), change("b", 1, "c", 20), change("c", 1, "c", 30)])
    ingest(spark, config_path)
    # rows of the first merge's file updated and deleted; an older update of a deleted key stays out
    landing.land([change("a", 3, "u", 31), change("a", 2, "u", 21), change("b", 2, "d"), change("d", 1, "c", 40),
                  change("b", 1, "u", 99, cid="b-late")])
    ingest(spark, config_path)
    assert merged(config_path) == fold(landing.changes) == {
        "a": (3, 31, None), "c": (1, 30, None), "d": (1, 40, None)}
    table = load_catalog(config.catalog).load_table("lake.accounts")
    assert {table.properties[f"write.{op}.mode"] for op in ("merge", "update", "delete")} == {"copy-on-write"}
    assert table.inspect.files().column("content").to_pylist().count(1) == 0  # no position delete file
    # back to merge-on-read: the existing table follows the configuration, the next update writes a delete file
    upsert_config(tmp_path, catalog=config.catalog.name, upsert=UPSERT)
    landing.land([change("c", 2, "u", 32)])
    ingest(spark, config_path)
    table = load_catalog(config.catalog).load_table("lake.accounts")
    assert {table.properties[f"write.{op}.mode"] for op in ("merge", "update", "delete")} == {"merge-on-read"}
    assert table.inspect.files().column("content").to_pylist().count(1) == 1
    assert merged(config_path) == fold(landing.changes)


@pytest.mark.slow
def test_a_writer_killed_anywhere_in_an_upsert_batch_leaves_the_fold(spark: Any, tmp_path: Path) -> None:
    """The real writer process SIGKILLed after the change log's commit, then (at its restart, which merges what the
    change log holds first: batch -1) before that merge, then after a batch's merge (before the checkpoint), then
    after a merge's data files were written (before its commit), changes landing in between: each restart leaves
    the merged table equal to the fold, every change logged once. The first batch and the last restart, which only
    ingest, run on this process's session. While the restart's merge holds the writer's main loop for longer than
    ``writer_lease``, the lease stays live (no second writer could take the stream over)."""
    from laketide.lake.lease import WriterLease, engine_for

    config_path = upsert_config(tmp_path, upsert=STAGED, writer_lease="5s")
    stream = load(config_path).stream("clicks")
    lease = WriterLease(engine_for(load(config_path).catalog), stream.writer_id, stream.writer_lease, "test")
    landing = Landing(stream.landing_path)
    landing.land([change("a", 1, "c", 1), change("b", 1, "c", 1)])
    ingest(spark, config_path)
    landing.land([change("a", 2, "u", 2), change("b", 2, "d"), change("c", 1, "c", 3)])
    faults = tmp_path / "faults"
    for point, batch, more in (("after_commit", 1, [change("c", 2, "u", 4), change("b", 1, "c", 9, cid="b-late")]),
                               ("before_merge", -1, [change("d", 1, "c", 5)]),  # the restart's merge
                               ("after_merge", 2, [change("a", 3, "d"), change("d", 2, "u", 6)])):
        writer = start_writer(config_path, LAKETIDE_FAULT=f"{point}:{batch}", LAKETIDE_FAULT_DIR=str(faults))
        wait_for(faults / f"{point}-{batch}.reached", writer, timeout=300)
        if batch == -1:
            time.sleep(stream.writer_lease.total_seconds() + 2)
            assert lease.live_holder() is not None, "the lease lapsed while the writer merged at its start"
        kill_group(writer)
        writer.wait(timeout=60)
        landing.land(more)
    # after the merge's data files, before its commit: the writer held before a merge, let go, frozen as soon as a
    # file of the merge appears in the merged table's folder (Parquet files appear when a task opens them), and
    # killed there, its files in no snapshot
    landing.land([change("c", 3, "u", 7), change("e", 1, "c", 8)])
    table = Path(load_catalog(load(config_path).catalog).load_table("lake.accounts").location().removeprefix("file:"))
    written = set((table / "data").rglob("*.parquet"))
    held = tmp_path / "held"
    writer = start_writer(config_path, LAKETIDE_FAULT="before_merge", LAKETIDE_FAULT_DIR=str(held),
                          LAKETIDE_FAULT_MODE="hold")
    reached = wait_until_found(held, "before_merge-*.reached", writer)
    def main_head() -> int | None:  # the merge stages its commits on a branch: main moves once, at the end
        head = load_catalog(load(config_path).catalog).load_table("lake.accounts").current_snapshot()
        return None if head is None else head.snapshot_id

    before = main_head()
    reached.with_suffix(".release").touch()
    deadline = time.monotonic() + 120
    while not set((table / "data").rglob("*.parquet")) - written:
        assert writer.poll() is None and time.monotonic() < deadline, writer_log(config_path)[-3000:]
        time.sleep(0.005)
    os.killpg(writer.pid, signal.SIGSTOP)
    assert main_head() == before  # the merge is not committed
    kill_group(writer)
    ingest(spark, config_path)
    assert merged(config_path) == fold(landing.changes) == {"c": (3, 7, None), "d": (2, 6, None), "e": (1, 8, None)}
    config = load(config_path)
    log_rows = load_catalog(config.catalog).load_table("lake.account_changes").scan().to_arrow()
    assert sorted(log_rows.column("change_id").to_pylist()) == sorted(c["change_id"] for c in landing.changes)
    text = writer_log(config_path)
    assert "batch 1 already committed" in text and "merged into lake.accounts" in text
    assert list(load_catalog(config.catalog).load_table("lake.accounts").metadata.refs) == ["main"]  # the killed
    # merge's staging branch was removed by the next merge


def test_tombstones_expire_once_no_change_still_to_come_can_be_older(spark: Any, tmp_path: Path) -> None:
    """``tombstone_retention``: a change more than the retention older than its file's landing is refused, naming
    the rule. The daily maintenance finds the tombstones due only once no change still to come can be older than
    them (not while an older landing file waits), a dry run counts them, the run deletes them; a late older change
    of the deleted key after that is refused, not merged: the merged table stays the fold of what was taken."""
    from laketide.maintain import plan as maintain_plan
    from laketide.maintain.health import due_daily
    from laketide.maintain.job import Maintainer

    config_path = upsert_config(tmp_path, upsert={**UPSERT, "tombstone_retention": "1h"}, max_future="10m")
    config = load(config_path)
    stream = config.stream("clicks")
    landing = Landing(stream.landing_path)
    now = datetime.now(UTC)
    hour, minute = now.replace(minute=0, second=0, microsecond=0), now.minute
    taken = [change("x", 1, "c", 10, minute=minute, hour=hour), change("y", 1, "c", 20, minute=minute, hour=hour)]
    landing.land(taken, hour=hour)
    landing.land([change("old", 1, "c", 5, minute=minute, hour=hour - timedelta(hours=2))],
                 hour=hour - timedelta(hours=2))
    landing.land([change("x", 2, "d", minute=minute, hour=hour)], hour=hour)
    taken.append(landing.changes[-1])
    ingest(spark, config_path)
    catalog = load_catalog(config.catalog)
    reasons = catalog.load_table("lake.account_changes_rejects").scan().to_arrow().column("reason").to_pylist()
    assert len(reasons) == 1 and "is more than upsert.tombstone_retention (1h) before its file landed" in reasons[0]
    assert merged(config_path) == fold(taken) == {"y": (1, 20, None)}
    tombs = "lake.accounts__tombstones"
    assert catalog.load_table(tombs).scan().to_arrow().num_rows == 1

    later = now + timedelta(hours=3)
    assert "expire_tombstones" not in due_daily(config, now).get(tombs, [])  # just recorded: kept
    # a file that landed 5 hours ago and waits: a change of it may be as old as that - 1h, so nothing expires
    then = now - timedelta(hours=5)
    z_hour = then.replace(minute=0, second=0, microsecond=0)
    landing.land([change("z", 1, "c", 1, minute=then.minute, hour=z_hour)], hour=z_hour)
    taken.append(landing.changes[-1])
    waiting = sorted((Path(stream.landing_path) / "data").iterdir(), key=lambda p: p.stat().st_mtime)[-1]
    os.utime(waiting, (then.timestamp(),) * 2)
    assert "expire_tombstones" not in due_daily(config, later).get(tombs, [])
    ingest(spark, config_path)
    assert "expire_tombstones" in due_daily(config, later)[tombs]
    request = maintain_plan.validate_request(config, tombs, "expire_tombstones", True)
    (dry,) = Maintainer(config, spark, "tombstones-dry", now=lambda: later).run(request)
    assert dry.outcome == "dry_run" and dry.detail.startswith("1 tombstone(s) expired: recorded before"), dry
    assert catalog.load_table(tombs).scan().to_arrow().num_rows == 1
    request = maintain_plan.validate_request(config, tombs, "expire_tombstones", False)
    (done,) = Maintainer(config, spark, "tombstones", now=lambda: later).run(request)
    assert done.outcome == "ok", done
    assert load_catalog(config.catalog).load_table(tombs).scan().to_arrow().num_rows == 0

    # three hours later, x's older change arrives: refused by the same rule the expiry relied on
    landing.land([change("x", 1, "u", 99, minute=minute, hour=hour, cid="x-late")], hour=hour)
    late = sorted((Path(stream.landing_path) / "data").iterdir(), key=lambda p: p.stat().st_mtime)[-1]
    os.utime(late, (later.timestamp(),) * 2)
    ingest(spark, config_path)
    assert merged(config_path) == fold(taken) == {"y": (1, 20, None), "z": (1, 1, None)}
    rejects = load_catalog(config.catalog).load_table("lake.account_changes_rejects").scan().to_arrow()
    assert rejects.num_rows == 2 and any("x-late" in raw for raw in rejects.column("raw").to_pylist())


def wait_until_found(folder: Path, pattern: str, writer: subprocess.Popen[bytes], timeout: float = 300) -> Path:
    """The first file matching ``pattern`` in ``folder``, waited for while ``writer`` runs."""
    deadline = time.monotonic() + timeout
    while not (found := sorted(folder.glob(pattern))):
        assert writer.poll() is None, f"the writer exited ({writer.returncode}) before {pattern}"
        assert time.monotonic() < deadline, f"no {pattern} after {timeout:.0f} s"
        time.sleep(0.1)
    return found[0]


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before_merge", "merge_staged"])
def test_a_frozen_upsert_writer_overtaken_then_resumed_merges_nothing(tmp_path: Path, point: str) -> None:
    """Writer A holds before its merge (its change-log batch committed), or with its merge written on its staging
    branch, is frozen past its lease; B takes the stream over, merges A's batch and newer changes; A resumed is
    fenced: its older fold is not merged, the merged table's pointer does not go back, the table is the fold."""
    config_path = upsert_config(tmp_path, catalog="laketide", writer_lease="5s",
                                upsert=UPSERT if point == "before_merge" else STAGED)
    stream = load(config_path).stream("clicks")
    landing = Landing(stream.landing_path)
    landing.land([change("a", 1, "c", 1), change("b", 1, "c", 1), change("c", 3, "d")])
    faults = tmp_path / "faults"
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    a = start_writer(config_path, log=log_a, LAKETIDE_FAULT=f"{point}:0", LAKETIDE_FAULT_MODE="hold",
                     LAKETIDE_FAULT_DIR=str(faults))
    try:
        wait_for(faults / f"{point}-0.reached", a)
        freeze(a, config_path)
        time.sleep(6)  # past A's lease
        landing.land([change("a", 2, "u", 2), change("b", 2, "d"), change("c", 2, "c", 9)])
        b = start_writer(config_path, log=log_b)
        assert b.wait(timeout=300) == 0, log_b.read_text(errors="replace")[-3000:]
        assert "silent for longer than writer_lease" in log_b.read_text(errors="replace")
        (faults / f"{point}-0.release").touch()
        os.killpg(a.pid, signal.SIGCONT)
        assert a.wait(timeout=120) == 5, log_a.read_text(errors="replace")[-5000:]
        text = log_a.read_text(errors="replace")
        assert "moved on under this writer" in text or "lost its lease" in text, text[-5000:]
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGCONT)
            kill_group(a)
    assert merged(config_path) == fold(landing.changes) == {"a": (2, 2, None)}
    catalog = load_catalog(load(config_path).catalog)
    head = catalog.load_table("lake.account_changes").current_snapshot()
    snapshot = catalog.load_table("lake.accounts").current_snapshot()
    assert head is not None and snapshot is not None and snapshot.summary is not None
    assert snapshot.summary[APPLIED] == str(head.snapshot_id)  # the pointer did not go back
    assert list(catalog.load_table("lake.accounts").metadata.refs) == ["main"]  # A's branch is gone, B removed it


def rows_at(table: Any, snapshot_id: int) -> dict[str, tuple[int, int | None, str | None]]:
    rows = table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
    assert len(rows) == len({r["account_id"] for r in rows}), f"a key twice at snapshot {snapshot_id}"
    return {r["account_id"]: (r["version"], r["balance"], r["status"]) for r in rows}


@pytest.mark.slow
def test_maintenance_beside_a_live_upsert_writer_compacts_its_deletes_and_changes_no_row(
        spark: Any, tmp_path: Path) -> None:
    """The real writer merging changes every second (updates, deletes, late older changes) while this process
    compacts the merged table twice (Spark, Iceberg's procedures): the writer never fails, each compaction
    commit holds exactly the rows of the snapshot before it, the delete files are gone after the last one, and the
    merged table is the fold of every change."""
    import random
    import threading

    from laketide.lake.spark import use_catalog
    from laketide.maintain import job as maintain_job
    from laketide.maintain import plan as maintain_plan

    config_path = upsert_config(tmp_path, trigger_interval="1s", upsert=STAGED)
    config = load(config_path)
    use_catalog(spark, config)
    stream = config.stream("clicks")
    landing = Landing(stream.landing_path)
    rng = random.Random(11)
    versions: dict[str, int] = {}

    def changes(n: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(n):
            key = f"k{rng.randrange(30)}"
            version = versions[key] = versions.get(key, 0) + 1
            op = "c" if version == 1 else rng.choice(["u", "u", "u", "d"])
            out.append(change(key, version, op, rng.randrange(1000), minute=rng.randrange(60), cid=f"{key}-{version}"))
        late = rng.choice(out)  # an older change of a key arriving after newer ones
        if versions[late["account_id"]] > 2:
            key = late["account_id"]
            out.append(change(key, versions[key] - 2, "u", -1, cid=f"{key}-late-{len(landing.changes)}"))
        return out

    landing.land(changes(20))
    writer = start_writer(config_path, mode="continuous")
    stop = threading.Event()

    def produce() -> None:
        while not stop.wait(0.7):
            landing.land(changes(6))

    catalog = load_catalog(config.catalog)
    producer = threading.Thread(target=produce, daemon=True)
    outcomes: list[str] = []
    try:
        wait_for_log(config_path, "merged into lake.accounts", writer, timeout=300)
        producer.start()
        request = maintain_plan.validate_request(config, "lake.accounts", "rewrite_data_files", False)
        for run in range(2):  # each compaction with merges committing beside it
            # merges with position deletes between compactions: a delete file to compact, however slow the machine
            # (a fixed 3 s wait once found the table with one data file and no delete: nothing to compact)
            deadline = time.monotonic() + 180
            while 1 not in catalog.load_table("lake.accounts").inspect.files().column("content").to_pylist():
                assert writer.poll() is None and time.monotonic() < deadline, writer_log(config_path)[-5000:]
                time.sleep(0.5)
            outcomes += [r.outcome for r in maintain_job.run(config, spark, request, f"live-upsert-{run}")]
            assert writer.poll() is None, writer_log(config_path)[-5000:]
    finally:
        stop.set()
        producer.join(timeout=30)
        (stream.checkpoint_path.parent / "clicks.stop").touch()
        try:
            writer.wait(timeout=180)
        except subprocess.TimeoutExpired:
            kill_group(writer)
    assert writer.returncode == 0, writer_log(config_path)[-5000:]
    assert "ok" in outcomes, outcomes
    # the writer stopped after its last batch: everything landed is in the change log and merged
    assert merged(config_path) == fold(landing.changes)
    table = catalog.load_table("lake.accounts")
    replaced = [s for s in table.metadata.snapshots
                if s.summary is not None and s.summary.operation.value == "replace" and s.parent_snapshot_id]
    assert replaced, "no compaction committed"
    for snap in replaced:  # a compaction commit changes no row
        assert snap.parent_snapshot_id is not None
        assert rows_at(table, snap.snapshot_id) == rows_at(table, snap.parent_snapshot_id), snap
    # the merges that lost to a compaction were planned again, not failed
    merges = writer_log(config_path).count("merged into lake.accounts")
    assert merges >= 5, merges
    # a last compaction with the writer stopped: no delete file left, the same rows
    before = merged(config_path)
    assert [r.outcome for r in maintain_job.run(config, spark, request, "live-upsert-last")] == ["ok"]
    files = catalog.load_table("lake.accounts").inspect.files().column("content").to_pylist()
    assert files.count(1) == 0 and merged(config_path) == before, files
