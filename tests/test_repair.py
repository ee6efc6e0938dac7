"""Repair of re-sent data against a real lake: a producer re-sends an hour's files under new names, the real
writer ingests them again (every id of the hour twice), verification fails; the repair keeps the
first-ingested row of each id in one commit, and the hour verifies (audit = lake + rejects + duplicates
removed). A dry run changes nothing; a second repair finds nothing and commits nothing.

The tests of this module share one lake and run in order.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.close.partitions import State
from laketide.close.reconcile import reconcile
from laketide.close.status import history
from laketide.close.verify import verify_partition
from laketide.errors import ActionRequestError
from laketide.ingest.landing import data_dir, name_hour, publish
from laketide.lake.catalog import load_catalog
from laketide.lake.hours import parse_partition
from laketide.redo import repair as rp
from laketide.redo.overwrite import check_against_table, record_outcome, table_facts, validate_request
from tests.helpers import ingest, load, write_config
from tests.test_backfill import metadata, table_rows
from tests.test_writer import START, produce

pytestmark = pytest.mark.slow

EVENTS = "lake.clicks"
H0 = parse_partition(START)
H = [H0 + timedelta(hours=i) for i in range(3)]


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """Three hours ingested; then the first hour's files re-sent under new names and ingested again."""
    from laketide.lake.spark import use_catalog

    home = tmp_path_factory.mktemp("repair")
    # its own catalog name: the test process's one SparkSession serves every module (Spark keeps a catalog it has
    # loaded under its name)
    config_path = write_config(home, catalog_name="repair", max_files_per_trigger=3)
    produce(config_path, "--start", START, "--hours", "3", "--events-per-hour", "300", "--events-per-file", "100",
            "--malformed-ratio", "0.04", "--seed", "41")
    ingest(spark, config_path)
    config = load(config_path)
    stream = config.stream("clicks")
    originals = sorted(p for p in data_dir(stream.landing_path).glob("*.jsonl") if name_hour(p.name) == START)
    for seq, path in enumerate(originals):
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
        publish(stream.landing_path, lines, START, "resender", 900 + seq, "clicks")
    ingest(spark, config_path)
    use_catalog(spark, config)
    return config_path, spark


def run(config: Any, spark: Any, dry_run: bool = False) -> Any:
    request = validate_request(config, "repair", "clicks", H[0], H[2], dry_run, "tester")
    check_against_table(request, table_facts(config, request.stream))
    outcome = rp.repair(spark, config, request)
    record_outcome(config, outcome, "test-run")
    return outcome


def test_resent_hour_fails_verification(lake: tuple[Path, Any]) -> None:
    config = load(lake[0])
    stream = config.stream("clicks")
    report = reconcile(config, stream)
    assert report.duplicate_ids and not report.ok
    result = verify_partition(config, stream, H[0])
    assert not result.success
    assert any("expect_column_values_to_be_unique(event_id)" in f for f in result.failures), result.failures
    assert verify_partition(config, stream, H[1]).success


def test_invalid_params_are_refused(lake: tuple[Path, Any]) -> None:
    config = load(lake[0])
    before = metadata(config)
    with pytest.raises(ActionRequestError, match="is not a plain name"):
        validate_request(config, "repair", "clicks; DELETE FROM lake.clicks", H[0], H[1])
    with pytest.raises(ActionRequestError, match="must be before end"):
        validate_request(config, "repair", "clicks", H[1], H[0])
    request = validate_request(config, "repair", "clicks", H[0], H[2] + timedelta(hours=5))
    with pytest.raises(ActionRequestError, match="past what the writer has finished"):
        check_against_table(request, table_facts(config, request.stream))
    assert metadata(config) == before


def test_dry_run_then_repair_twice(lake: tuple[Path, Any]) -> None:
    config_path, spark = lake
    config = load(config_path)
    stream = config.stream("clicks")
    before_rows, before_meta = table_rows(config, EVENTS), metadata(config)
    lake_before = {p.partition: p.lake for p in reconcile(config, stream).partitions}
    duplicated = lake_before[H[0].isoformat()] // 2

    dry = run(config, spark, dry_run=True)
    assert not dry.committed and metadata(config) == before_meta and table_rows(config, EVENTS) == before_rows
    assert {k: c.duplicates_removed for k, c in dry.hours.items()} == {H[0].isoformat(): duplicated,
                                                                       H[1].isoformat(): 0}
    assert history(config, "clicks") == []

    done = run(config, spark)
    assert done.committed and done.hours[H[0].isoformat()].rows_after == duplicated
    # the rejects of each hour are reported as they are (a repair leaves them), not as 0 -> 0
    rejects_before = {p.partition: p.rejects for p in reconcile(config, stream).partitions}
    for hour, change in done.hours.items():
        assert change.rejects_before == change.rejects_after == rejects_before[hour] > 0, (hour, change)
    report = reconcile(config, stream)
    assert report.duplicate_ids == {} and report.ok, report
    assert {p.partition: p.duplicates for p in report.partitions if p.duplicates} == {H[0].isoformat(): duplicated}
    verified = verify_partition(config, stream, H[0])
    assert verified.success, verified.message()
    assert verified.duplicates == duplicated and "duplicates removed" in verified.message()
    # the first-ingested rows are kept: every kept row comes from an original file, none from a re-sent one
    kept = load_catalog(config.catalog).load_table(EVENTS).scan(selected_fields=("_source_file",)).to_arrow()
    assert not any("resender" in name for name in kept["_source_file"].to_pylist())
    summary = load_catalog(config.catalog).load_table(EVENTS).current_snapshot().summary  # type: ignore[union-attr]
    assert summary["laketide.action"] == "repair"
    assert json.loads(summary["laketide.duplicates-removed"]) == {H[0].isoformat(): duplicated}

    after_rows, after_meta = table_rows(config, EVENTS), metadata(config)
    again = run(config, spark)
    assert not again.committed and "nothing to repair" in again.notes[0]
    assert metadata(config) == after_meta and table_rows(config, EVENTS) == after_rows

    recorded = history(config, "clicks")  # the hour it changed is reopened; the other one kept its state
    assert {r.partition for r in recorded} == {H[0]} and {r.state for r in recorded} == {State.REOPENED}
    action = json.loads(recorded[0].verification or "{}")["action"]
    assert action["action"] == "repair" and action["requested_by"] == "tester"
    assert (action["from_snapshot"], action["to_snapshot"]) == (str(done.from_snapshot), str(done.to_snapshot))

    # its re-close records arithmetic that adds up: the duplicates removed are in it
    from laketide.close.closing import close, verify
    from laketide.close.markers import payload

    closed = close(config, stream, verify(config, stream, H[0], "test-close"), "test-close")
    record = history(config, "clicks", H[0])[-1]
    assert record.state == State.CLOSED and closed.rows == duplicated
    assert record.reason == f"verified: audit {record.audit} == lake {duplicated} + rejects {record.rejects} + " \
                            f"duplicates removed {duplicated}", record.reason
    assert record.audit == 2 * duplicated + (record.rejects or 0)
    # and it is announced: the Asset event's extra and the done-markers' payload carry the count
    assert json.loads(record.verification or "{}")["duplicates"] == duplicated
    assert closed.to_dict()["duplicates_removed"] == duplicated
    assert json.loads(payload(closed))["duplicates_removed"] == duplicated


def test_repair_dag_with_params_as_the_form_sends_them(lake: tuple[Path, Any], airflow_db: Path) -> None:
    config = load(lake[0])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAKETIDE_CONFIG", str(lake[0]))
        from airflow.dag_processing.dagbag import DagBag

        from laketide.config import REPO_ROOT

        bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
        assert bag.import_errors == {}
        dag = bag.dags["laketide_repair"]
        before = metadata(config)
        conf = {"stream": "clicks", "start": H[0].isoformat(), "end": H[1].isoformat(), "dry_run": True}
        run = dag.test(run_conf={**conf, "end": "2026-11-21T20:00:00"})  # no offset: refused before Spark
        assert {ti.task_id: ti.state for ti in run.get_task_instances()} == {
            "validate": "failed", "repair": "upstream_failed"}
        run = dag.test(run_conf=conf)  # a dry run through the real job: counts, changes nothing
        assert run.state == "success", {ti.task_id: ti.state for ti in run.get_task_instances()}
        assert metadata(config) == before
