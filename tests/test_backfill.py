"""Backfill of an hour range against a real lake (the real producer lands, the real writer ingests), in this
process's Spark session; then the DAG with params as the trigger form sends them.

* every invalid param is refused before anything changes, with a clear message (SQL through a name too);
* a dry run changes nothing; a backfill replaces exactly its hours (events and rejects) and reconciles; a
  second backfill gives the same tables and, having changed nothing, reopens no hour;
* a backfill after rows were lost in an hour brings them back; that hour is recorded reopened with the action.

The tests of this module share one lake and run in order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.partitions import State
from laketide.close.status import history
from laketide.errors import ActionRequestError
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import parse_partition
from laketide.redo import backfill as bf
from laketide.redo.overwrite import check_against_table, record_outcome, table_facts, validate_request
from tests.helpers import ingest, load, write_config
from tests.test_writer import START, assert_exactly_once, produce

pytestmark = pytest.mark.slow

EVENTS, REJECTS = "lake.clicks", "lake.clicks_rejects"
H0 = parse_partition(START)
H = [H0 + timedelta(hours=i) for i in range(3)]


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """Three hours with malformed and late lines, ingested by the real writer; the test process's Spark session
    pointed at its catalog (a name of its own: Spark keeps a catalog it has loaded under its name)."""
    from laketide.lake.spark import use_catalog

    home = tmp_path_factory.mktemp("backfill")
    config_path = write_config(home, catalog_name="backfill", max_files_per_trigger=3)
    produce(config_path, "--start", START, "--hours", "3", "--events-per-hour", "400", "--events-per-file", "100",
            "--malformed-ratio", "0.04", "--late-ratio", "0.05", "--late-by", "40m", "--seed", "31")
    ingest(spark, config_path)
    use_catalog(spark, load(config_path))
    return config_path, spark


def table_rows(config: Any, table: str) -> list[tuple[Any, ...]]:
    """Every row of ``table``, sorted (pyiceberg; strings as bytes: rejected lines may be invalid UTF-8)."""
    import pyarrow as pa

    data = load_catalog(config.catalog).load_table(table).scan().to_arrow()
    columns = [c.cast(pa.binary()) if pa.types.is_string(c.type) or pa.types.is_large_string(c.type) else c
               for c in data.columns]
    rows = pa.table(columns, names=data.column_names).to_pylist()
    return sorted(tuple(str(v) for v in row.values()) for row in rows)


def metadata(config: Any) -> tuple[str, str]:
    catalog = load_catalog(config.catalog)
    return catalog.load_table(EVENTS).metadata_location, catalog.load_table(REJECTS).metadata_location


def run(config: Any, spark: Any, start: datetime, end: datetime, dry_run: bool = False) -> Any:
    request = validate_request(config, "backfill", "clicks", start.isoformat(), end.isoformat(), dry_run, "tester")
    check_against_table(request, table_facts(config, request.stream))
    outcome = bf.backfill(spark, config, request, bf.prepare(config, request))
    record_outcome(config, outcome, "test-run")
    return outcome


def test_invalid_params_are_refused_before_anything_changes(lake: tuple[Path, Any]) -> None:
    config = load(lake[0])
    before = metadata(config)
    s, e = H[0].isoformat(), H[1].isoformat()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"stream": "nope"}, r"stream: unknown stream 'nope'; configured streams are \['clicks'\]"),
        ({"stream": "clicks'; DROP TABLE lake.clicks; --"}, "is not a plain name"),
        ({"stream": "clicks` OR 1=1"}, "is not a plain name"),
        ({"start": e, "end": s}, "must be before end"),
        ({"start": s, "end": s}, "must be before end"),
        ({"start": "2026-11-21T20:00:00"}, "has no UTC offset"),
        ({"start": "2026-11-21T20:30:00+00:00"}, "is not the start of an hour"),
        ({"start": "yesterday"}, "is not an ISO time"),
        ({"end": ""}, "end: give a UTC hour start"),
        ({"dry_run": "yes"}, "dry_run: must be true or false"),
        ({"start": "2020-01-01T00:00:00+00:00", "end": "2030-01-01T00:00:00+00:00"}, "more than close.max_range_hours"),
    ]
    for change, message in cases:
        params = {"stream": "clicks", "start": s, "end": e, "dry_run": False, **change}
        with pytest.raises(ActionRequestError, match=message):
            validate_request(config, "backfill", params["stream"], params["start"], params["end"], params["dry_run"])
    facts = table_facts(config, config.stream("clicks"))
    outside = [
        ((H[0] - timedelta(hours=2), H[0]), "is before the first hour of lake.clicks"),
        ((H[1], H[2] + timedelta(hours=1)), "is past what the writer has finished"),
    ]
    for (start, end), message in outside:
        request = validate_request(config, "backfill", "clicks", start, end)
        with pytest.raises(ActionRequestError, match=message):
            check_against_table(request, facts)
    assert metadata(config) == before


def test_plan_files() -> None:
    hours = [H[0]]
    named = "20261121T20-p1-00000001-0123abcd.jsonl"
    other = "20261121T21-p1-00000002-0123abcd.jsonl"
    audited = "odd-name.jsonl"
    audits = {audited: {"partitions": {H[0].isoformat(): 3}}}
    plan = bf.plan_files(hours, ingested={named, other, audited, "gone.jsonl"}, present={named, other, audited,
                         "20261121T20-p1-00000009-0123abcd.jsonl"}, audits={**audits, "gone.jsonl": audits[audited]})
    assert plan.files == (named, audited) and plan.missing == ("gone.jsonl",)
    assert plan.pending == ("20261121T20-p1-00000009-0123abcd.jsonl",)


def test_dry_run_then_backfill_twice_gives_the_same_tables(lake: tuple[Path, Any]) -> None:
    config_path, spark = lake
    config = load(config_path)
    counts = assert_exactly_once(config_path)
    events, rejects = table_rows(config, EVENTS), table_rows(config, REJECTS)
    before = metadata(config)

    dry = run(config, spark, H[0], H[2], dry_run=True)
    assert not dry.committed and metadata(config) == before
    assert {k: (c.rows_before, c.rows_after) for k, c in dry.hours.items()} == {
        k: (counts[k], counts[k]) for k in (H[0].isoformat(), H[1].isoformat())}
    assert all(c.rejects_before == c.rejects_after > 0 for c in dry.hours.values()), dry.hours
    assert history(config, "clicks") == []  # a dry run records nothing

    first = run(config, spark, H[0], H[2])
    assert first.committed and first.to_snapshot != first.from_snapshot
    assert assert_exactly_once(config_path) == counts
    assert table_rows(config, EVENTS) == events and table_rows(config, REJECTS) == rejects
    summary = load_catalog(config.catalog).load_table(EVENTS).current_snapshot().summary  # type: ignore[union-attr]
    assert summary["laketide.action"] == "backfill" and summary["laketide.backfill-id"] == first.request.action_id
    assert json.loads(summary["laketide.replaced-hours"]) == [H[0].isoformat(), H[1].isoformat()]

    second = run(config, spark, H[0], H[2])
    assert second.committed
    assert table_rows(config, EVENTS) == events and table_rows(config, REJECTS) == rejects
    assert assert_exactly_once(config_path) == counts

    # both backfills re-wrote the hours as they were: no hour is reopened (a closed hour would stay closed)
    assert not any(c.changed for c in (*first.hours.values(), *second.hours.values()))
    assert history(config, "clicks") == []
    assert "(unchanged: its state is kept)" in "\n".join(second.lines())


def test_backfill_brings_back_lost_rows(lake: tuple[Path, Any]) -> None:
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    config_path, spark = lake
    config = load(config_path)
    counts = assert_exactly_once(config_path)
    events = table_rows(config, EVENTS)
    table = load_catalog(config.catalog).load_table(EVENTS)
    table.delete(delete_filter=And(GreaterThanOrEqual("event_time", (H[1] + timedelta(minutes=30)).isoformat()),
                                   LessThan("event_time", H[2].isoformat())))
    assert len(table_rows(config, EVENTS)) < len(events)

    outcome = run(config, spark, H[1], H[2])
    change = outcome.hours[H[1].isoformat()]
    assert change.rows_before < change.rows_after == counts[H[1].isoformat()]
    assert table_rows(config, EVENTS) == events
    assert assert_exactly_once(config_path) == counts
    # the hour it changed is recorded reopened, with the action
    recorded = [r for r in history(config, "clicks") if r.partition == H[1]]
    assert [r.state for r in recorded] == [State.REOPENED]
    action = json.loads(recorded[-1].verification or "{}")["action"]
    assert action["requested_by"] == "tester" and action["from_snapshot"] == str(outcome.from_snapshot)
    assert action["hours"][H[1].isoformat()]["rows_before"] == change.rows_before
    assert recorded[-1].snapshot_id == outcome.to_snapshot and recorded[-1].run_id == "test-run"


def test_a_crash_between_the_two_commits_is_repaired_by_running_again(lake: tuple[Path, Any],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    config_path, spark = lake
    config = load(config_path)
    counts = assert_exactly_once(config_path)
    events, rejects = table_rows(config, EVENTS), table_rows(config, REJECTS)
    real = bf.overwrite_hours

    def crash_before_events(df: Any, table: str, *args: Any) -> None:
        if "clicks_rejects" not in table:
            raise RuntimeError("killed between the rejects commit and the events commit")
        real(df, table, *args)

    monkeypatch.setattr(bf, "overwrite_hours", crash_before_events)
    events_meta = metadata(config)[0]
    with pytest.raises(RuntimeError, match="killed between"):
        run(config, spark, H[0], H[2])
    assert metadata(config)[0] == events_meta  # the rejects table committed, the events table did not
    monkeypatch.setattr(bf, "overwrite_hours", real)
    assert run(config, spark, H[0], H[2]).committed
    assert table_rows(config, EVENTS) == events and table_rows(config, REJECTS) == rejects
    assert assert_exactly_once(config_path) == counts


@pytest.fixture(scope="module")
def dags(lake: tuple[Path, Any], airflow_db: Path) -> Iterator[dict[str, Any]]:
    """The DAG files loaded on this module's lake (as the scheduler would, with its configuration)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAKETIDE_CONFIG", str(lake[0]))
        from airflow.dag_processing.dagbag import DagBag

        from laketide.config import REPO_ROOT

        bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
        assert bag.import_errors == {}
        yield bag.dags


def form(start: datetime, end: datetime, dry_run: bool) -> dict[str, Any]:
    """The params as the trigger form sends them: strings for the hours, a boolean."""
    return {"stream": "clicks", "start": start.isoformat(), "end": end.isoformat(), "dry_run": dry_run}


def test_backfill_dag_refuses_bad_params_then_runs_the_job(lake: tuple[Path, Any], dags: dict[str, Any]) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    config = load(lake[0])
    dag = dags["laketide_backfill"]
    assert dag.params["dry_run"] is True and dag.max_active_runs == 1
    assert dag.get_task("backfill").fatal_exit_codes == {2: "bad request (nothing changed)",
                                                         4: "the committed result failed its check"}
    before, rows = metadata(config), table_rows(config, EVENTS)
    # the form's schema refuses an unknown stream (a name carrying SQL too) before the run starts
    with pytest.raises(ParamValidationError, match="is not one of"):
        dag.test(run_conf={**form(H[0], H[1], True), "stream": "clicks'; DROP TABLE lake.clicks; --"})
    # what the schema cannot say, the validation task refuses: Spark is never started
    for conf in (form(H[1], H[0], False), form(H[0], H[2] + timedelta(hours=3), False),
                 {**form(H[0], H[1], False), "start": "2026-11-21T20:30:00+00:00"}):
        run = dag.test(run_conf=conf)
        assert run.state == "failed"
        assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {
            "validate": "failed", "backfill": "upstream_failed"}
    assert metadata(config) == before

    recorded = len(history(config, "clicks"))
    run = dag.test(run_conf=form(H[0], H[1], False))
    assert run.state == "success", {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert table_rows(config, EVENTS) == rows and metadata(config) != before
    assert history(config, "clicks")[recorded:] == []  # it re-wrote the hour as it was: nothing reopened
    summary = load_catalog(config.catalog).load_table(EVENTS).current_snapshot().summary  # type: ignore[union-attr]
    assert summary["laketide.action"] == "backfill" and summary["laketide.requested-by"] == "dag_test"


def test_names_reaching_sql_are_checked() -> None:
    from laketide.redo.overwrite import check_name, hours_condition, quoted_table

    assert quoted_table("laketide", "lake.clicks") == "`laketide`.`lake`.`clicks`"
    for table in ("lake.clicks; DROP TABLE x", "lake.`clicks`", "lake", "a.b.c", "lake.clicks\n"):
        with pytest.raises(ActionRequestError, match="plain identifiers"):
            quoted_table("laketide", table)
    with pytest.raises(ActionRequestError, match="not a plain identifier"):
        hours_condition("event_time) OR (1=1", [H[0]])
    assert hours_condition("event_hour", [H[0]], with_null=True) == (
        "((`event_hour` >= TIMESTAMP '2026-11-21 20:00:00.000' AND `event_hour` < TIMESTAMP '2026-11-21 21:00:00.000'))"
        " OR (`event_hour` IS NULL)")
    with pytest.raises(ActionRequestError, match="not a plain name"):
        check_name("stream", "clicks\n")


def lineage(df: Any) -> str:
    """The RDD lineage a DataFrame's rows come from."""
    return str(df._jdf.queryExecution().toRdd().toDebugString())


def test_the_driver_side_tables_of_a_backfill_start_no_python_worker(lake: tuple[Path, Any]) -> None:
    """The backfill's small driver-side tables (batch of first ingestion per file, hour per file) reach the JVM as
    Arrow: no Python worker unpickles them, at each action, as ``spark.createDataFrame`` of a list would."""
    from laketide.lake.spark import local_frame

    _, spark = lake
    assert "PythonRDD" in lineage(spark.createDataFrame([("f", 1)], "_source_file string, _batch_id bigint"))
    rows = [("a.jsonl", 3), ("b.jsonl", 2**40)]
    frame = local_frame(spark, rows, "_source_file string, _batch_id bigint")
    empty = local_frame(spark, [], "_source_file string, _batch_id bigint")
    assert sorted(tuple(r) for r in frame.collect()) == rows and empty.collect() == []
    assert frame.schema == empty.schema and frame.columns == ["_source_file", "_batch_id"]
    events = spark.table(f"backfill.{EVENTS}")
    rejects = spark.table(f"backfill.{REJECTS}")
    files = sorted({r[0] for r in events.select("_source_file").distinct().collect()})
    origin = bf.first_ingestion(events, rejects, [*files, "never.jsonl"], {"never.jsonl": 7, files[0]: 0})
    got = {r["_source_file"]: r["_batch_id"] for r in origin.collect()}
    assert set(got) == {*files, "never.jsonl"} and got["never.jsonl"] == 7 and all(
        isinstance(b, int) for b in got.values())
    for df in (frame, empty, origin):
        assert "PythonRDD" not in lineage(df), lineage(df)
