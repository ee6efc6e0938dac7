"""Schema evolution of a stream's events table: what the writer's start plans, applies and refuses.

* the plan, as a pure function: an optional field added, int -> long and float -> double widened, the catch-all
  column of ``unknown_fields: keep``; a field removed, renamed, narrowed, retyped, made required, or added as
  required is refused with a message naming it and what to do;
* against a real lake (the real writer, a real redo and an in-process backfill): a field added mid-stream becomes
  a column on the writer's next start, the rows written before read null (their files untouched), the counts stay
  exact, and a redo from a snapshot before the change and a backfill of an hour written before it re-ingest under
  the new schema; a refused change leaves the table untouched.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from laketide.close.verify import verify_partition
from laketide.config import EXTRA_COLUMN
from laketide.errors import SchemaChangeError
from laketide.ingest.landing import publish
from laketide.ingest.schema import REQUIRED_PROPERTY, SchemaChange, plan_change, required_property
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import parse_partition, partition_key
from tests.helpers import STREAM_FIELDS, ingest, load, write_config, writer_log
from tests.test_redo import redo_here, redo_log
from tests.test_writer import assert_exactly_once

H0 = parse_partition("2026-11-19T08:00:00+00:00")
H1 = H0 + timedelta(hours=1)
COLUMNS = {"event_id": "string", "event_time": "timestamp", "user_id": "bigint", "page": "string",
           "action": "string", "duration_ms": "bigint", "country": "string", "_source_file": "string",
           "_batch_id": "bigint"}


def stream_with(tmp_path: Path, fields: dict[str, Any], **overrides: Any) -> Any:
    return load(write_config(tmp_path, fields=fields, **overrides)).stream("clicks")


def plan(tmp_path: Path, fields: dict[str, Any], columns: dict[str, str] | None = None,
         required: str | None = "event_id,event_time,page,user_id", **overrides: Any) -> SchemaChange:
    return plan_change(stream_with(tmp_path, fields, **overrides), columns or COLUMNS, required, "event_time")


def test_added_optional_fields_and_widened_types_are_planned(tmp_path: Path) -> None:
    assert plan(tmp_path / "same", STREAM_FIELDS).empty
    fields = {**STREAM_FIELDS, "coupon": {"type": "string"}, "score": {"type": "double"}}
    change = plan(tmp_path / "add", fields, {**COLUMNS, "score": "float"})
    assert change.added == (("coupon", "string", "country"),)
    assert change.widened == (("score", "float", "double"),) and not change.extra and change.required is None
    first = plan(tmp_path / "first", {"lang": {"type": "string"}, **STREAM_FIELDS})
    assert first.added == (("lang", "string", None),)
    widened = plan(tmp_path / "int", STREAM_FIELDS, {**COLUMNS, "duration_ms": "int"})
    assert widened.widened == (("duration_ms", "int", "bigint"),)
    keep = plan(tmp_path / "keep", STREAM_FIELDS, unknown_fields="keep")
    assert keep.extra and keep.lines() == [f"column {EXTRA_COLUMN} map<string,string> added (unknown_fields: keep)"]
    assert plan(tmp_path / "kept", STREAM_FIELDS, {**COLUMNS, EXTRA_COLUMN: "map<string,string>"}).empty
    # a table older than the property gets it; a required field made optional is no change to the table
    older = plan(tmp_path / "old", STREAM_FIELDS, required=None)
    assert older.required == "event_id,event_time,page,user_id" and not older.added
    relaxed = plan(tmp_path / "relax", {**STREAM_FIELDS, "page": {"type": "string"}})
    assert relaxed.required == "event_id,event_time,user_id" and not relaxed.added and not relaxed.widened


@pytest.mark.parametrize(("change", "message"), [
    ({"drop": "country"}, "field 'country' is a column of lake.clicks but no longer in fields: Iceberg keeps a "
                          "column's rows, and dropping or renaming it would hide them; declare 'country' again"),
    ({"drop": "country", "add": ("nation", {"type": "string"})},
     "field 'country' is a column of lake.clicks but no longer in fields \\(renamed to 'nation'\\? a rename is "
     "refused too\\)"),
    ({"set": ("duration_ms", {"type": "int"})}, "field 'duration_ms' is bigint in lake.clicks and int in fields: "
                                                "that narrows its type.*declare it long again"),
    ({"set": ("page", {"type": "long", "required": True})}, "field 'page' is string in lake.clicks and long in "
                                                            "fields: that changes its type"),
    ({"set": ("action", {"type": "string", "required": True})}, "field 'action' is now required but was optional: "
                                                                 "rows already in lake.clicks may lack it.*keep it "
                                                                 "required: false"),
    ({"add": ("coupon", {"type": "string", "required": True})}, "new field 'coupon' is declared required, but the "
                                                                 "rows already in lake.clicks have no value for it: "
                                                                 "add it with required: false"),
])
def test_other_changes_are_refused_naming_the_field(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    fields = dict(STREAM_FIELDS)
    if "drop" in change:
        del fields[change["drop"]]
    for key in ("add", "set"):
        if key in change:
            name, spec = change[key]
            fields[name] = spec
    with pytest.raises(SchemaChangeError, match=message) as refused:
        plan(tmp_path, fields)
    assert "nothing was changed (the writer does not start)" in str(refused.value)


def test_another_event_time_field_is_refused(tmp_path: Path) -> None:
    fields = {**STREAM_FIELDS, "sent_at": {"type": "timestamp", "required": True}}
    stream = stream_with(tmp_path, fields, event_time_field="sent_at")
    with pytest.raises(SchemaChangeError, match="partitioned by the hour of 'event_time': set event_time_field back"):
        plan_change(stream, {**COLUMNS, "sent_at": "timestamp"}, required_property(stream), "event_time")


# ---------------------------------------------------------------- a real lake, before and after a change


def line(i: int, hour: Any, **more: Any) -> str:
    record = {"event_id": f"{hour:%H}-{i}", "event_time": (hour + timedelta(seconds=i * 41 % 3600)).isoformat(),
              "user_id": i, "page": f"/p{i % 7}", "duration_ms": 1000 + i, **more}
    return json.dumps(record)


def land(config_path: Path, hour: Any, lines_per_file: list[list[str]], seq: int) -> None:
    stream = load(config_path).stream("clicks")
    for n, lines in enumerate(lines_per_file):
        publish(stream.landing_path, lines, partition_key(hour), "p1", seq + n, stream.name)


def rows_of(config_path: Path) -> list[dict[str, Any]]:
    config = load(config_path)
    return load_catalog(config.catalog).load_table("lake.clicks").scan().to_arrow().to_pylist()


def data_files(config_path: Path, hour: Any) -> set[str]:
    config = load(config_path)
    table = load_catalog(config.catalog).load_table("lake.clicks")
    return {t.file.file_path for t in table.scan().plan_files()
            if t.file.partition[0] == int((hour - parse_partition("1970-01-01T00:00:00+00:00")).total_seconds()
                                           // 3600)}


def reconfigure(config_path: Path, fields: dict[str, Any], **stream: Any) -> None:
    raw = yaml.safe_load(config_path.read_text())
    raw["streams"][0]["fields"] = fields
    raw["streams"][0].update(stream)
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False))


BEFORE = {**STREAM_FIELDS, "duration_ms": {"type": "int"}}
AFTER = {**STREAM_FIELDS, "coupon": {"type": "string"}}


@pytest.mark.slow
def test_a_field_added_mid_stream(spark: Any, tmp_path: Path) -> None:
    from laketide.ingest.tables import ensure_tables
    from laketide.lake.spark import use_catalog
    from laketide.redo import backfill as bf
    from laketide.redo.overwrite import check_against_table, table_facts, validate_request

    config_path = write_config(tmp_path, catalog_name="schema", fields=BEFORE, max_files_per_trigger=2)
    # hour 0, written before the change: some producers already send 'coupon' (ignored), one line is malformed
    land(config_path, H0, [[line(i, H0, **({"coupon": f"c{i}"} if i % 3 == 0 else {})) for i in range(f, f + 40)]
                           for f in (0, 40, 80)] + [["{not json"]], 0)
    ingest(spark, config_path)
    table = load_catalog(load(config_path).catalog).load_table("lake.clicks")
    assert "coupon" not in table.schema().column_names and table.properties[REQUIRED_PROPERTY] == \
        "event_id,event_time,page,user_id"
    before_change = table.metadata.current_snapshot_id
    assert before_change is not None
    h0_files = data_files(config_path, H0)

    # the change: a new optional field, duration_ms widened, unknown fields kept; hour 1 carries the new field
    reconfigure(config_path, AFTER, unknown_fields="keep")
    land(config_path, H1, [[line(i, H1, coupon=f"n{i}", promo="x") for i in range(f, f + 50)] for f in (0, 50)], 10)
    ingest(spark, config_path)
    log = writer_log(config_path)
    assert "column coupon string added (rows already written read null)" in log
    assert "column duration_ms widened from int to bigint" in log
    table = load_catalog(load(config_path).catalog).load_table("lake.clicks")
    assert table.schema().column_names[:8] == ["event_id", "event_time", "user_id", "page", "action",
                                               "duration_ms", "country", "coupon"]
    assert EXTRA_COLUMN in table.schema().column_names
    assert data_files(config_path, H0) == h0_files  # no file of the older hour was rewritten
    rows = rows_of(config_path)
    old = [r for r in rows if r["event_id"].startswith("08-")]
    new = [r for r in rows if r["event_id"].startswith("09-")]
    assert len(old) == 120 and {r["coupon"] for r in old} == {None} and {r[EXTRA_COLUMN] for r in old} == {None}
    assert len(new) == 100 and all(r["coupon"] == f"n{r['user_id']}" for r in new)
    assert all(r[EXTRA_COLUMN] == [("promo", "x")] for r in new)
    assert all(isinstance(r["duration_ms"], int) for r in rows)
    counts = assert_exactly_once(config_path)
    assert counts == {partition_key(H0): 120, partition_key(H1): 100}  # lake rows (+ 1 reject in H0)
    config = load(config_path)
    for hour in (H0, H1):
        assert verify_partition(config, config.stream("clicks"), hour).success

    # a redo from the snapshot before the change: hour 1's files again, under the new schema
    assert redo_here(spark, config_path, "--snapshot-id", str(before_change), "--dry-run", "false",
                     "--run-id", "across-1") == 0, redo_log(config_path)
    assert assert_exactly_once(config_path) == counts
    again = rows_of(config_path)
    assert sorted((r["event_id"], r["coupon"]) for r in again) == sorted((r["event_id"], r["coupon"]) for r in rows)

    # a backfill of hour 0 re-reads its lines under the new schema: the coupons its producers sent are kept now
    use_catalog(spark, config)
    request = validate_request(config, "backfill", "clicks", H0.isoformat(), H1.isoformat(), False, "tester")
    check_against_table(request, table_facts(config, request.stream))
    assert bf.backfill(spark, config, request, bf.prepare(config, request)).committed
    assert assert_exactly_once(config_path) == counts
    old = [r for r in rows_of(config_path) if r["event_id"].startswith("08-")]
    assert sorted(r["coupon"] for r in old if r["coupon"]) == sorted(f"c{i}" for i in range(0, 120, 3))
    assert verify_partition(config, config.stream("clicks"), H0).success

    # a refused change: country dropped, page made an int; the message names both, the table is as it was
    reconfigure(config_path, {k: v for k, v in {**AFTER, "page": {"type": "int", "required": True}}.items()
                              if k != "country"})
    refused = load(config_path)
    before = load_catalog(config.catalog).load_table("lake.clicks").metadata_location
    with pytest.raises(SchemaChangeError) as error:
        ensure_tables(spark, refused, refused.stream("clicks"))
    assert "field 'country' is a column of lake.clicks but no longer in fields" in str(error.value)
    assert "field 'page' is string in lake.clicks and int in fields" in str(error.value)
    assert load_catalog(config.catalog).load_table("lake.clicks").metadata_location == before
