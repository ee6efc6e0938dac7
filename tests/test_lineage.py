"""OpenLineage: the datasets and facets each laketide task reports through Airflow's OpenLineage provider.

The unit tests build the lineage of every job from a configuration. The slow test runs the real DAGs (an ingest,
a close, a redo) with ``dag.test()``, each in a process of its own (``tests.dag_run``) whose environment configures
the provider's file transport: the provider reads its configuration when Airflow loads its plugin, once per
process, so a process of the suite (where lineage is off) cannot switch it on. The events are read back from the
transport's file, as a lineage backend (Marquez) would receive them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from laketide.config import REPO_ROOT
from tests.dag_run import run_in_process
from tests.helpers import load, unique_catalog, write_config
from tests.test_writer import produce


def lineage_dict(lineage: Any) -> dict[str, Any]:
    """An ``OperatorLineage`` as the JSON its events carry."""
    from openlineage.client.serde import Serde

    return {"inputs": [json.loads(Serde.to_json(d)) for d in lineage.inputs],
            "outputs": [json.loads(Serde.to_json(d)) for d in lineage.outputs]}


def names(datasets: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in datasets]


def test_the_jobs_report_landing_zones_in_and_iceberg_tables_out(tmp_path: Path) -> None:
    from laketide.airflow.lineage import job_lineage

    config = load(write_config(tmp_path))
    warehouse = f"file://{tmp_path}/warehouse"
    landing = ("file", str(tmp_path / "landing" / "clicks"))
    tables = [(warehouse, "lake.clicks"), (warehouse, "lake.clicks_rejects")]
    for job, args in [("ingest_stream.py", ["--stream", "clicks", "--mode", "incremental"]),
                      ("ingest_stream.py", ["--group", "clicks", "--mode", "continuous"]),
                      ("redo.py", ["--stream", "clicks", "--snapshot-id", "1", "--dry-run", "false"]),
                      ("backfill.py", ["--stream", "clicks", "--start", "x", "--end", "y", "--dry-run", "false"])]:
        out = lineage_dict(job_lineage(config, job, args))
        assert names(out["inputs"]) == [landing], job
        assert names(out["outputs"]) == tables, job
    event = lineage_dict(job_lineage(config, "ingest_stream.py", ["--stream", "clicks"]))["outputs"][0]
    assert event["facets"]["catalog"]["framework"] == "iceberg"
    assert event["facets"]["catalog"]["name"] == "laketide"
    assert event["facets"]["storage"]["storageLayer"] == "iceberg"
    assert "catalog.db" not in json.dumps(event)  # the catalog database's URI (a password, on PostgreSQL) is not sent

    repair = lineage_dict(job_lineage(config, "repair.py", ["--stream", "clicks", "--dry-run", "false"]))
    assert names(repair["inputs"]) == names(repair["outputs"]) == [(warehouse, "lake.clicks")]
    maintain = lineage_dict(job_lineage(config, "maintain.py", ["--table", "all", "--dry-run", "false"]))
    assert maintain["inputs"] == []
    assert [n for _, n in names(maintain["outputs"])] == ["lake.clicks", "lake.clicks_rejects",
                                                         "laketide.partition_status", "laketide.maintenance_log"]
    dry = lineage_dict(job_lineage(config, "maintain.py", ["--table", "lake.clicks", "--dry-run", "true"]))
    assert names(dry["inputs"]) == [(warehouse, "lake.clicks")] and dry["outputs"] == []
    # arguments not rendered yet (the xcom of the validate task), or naming nothing configured: no datasets
    assert lineage_dict(job_lineage(config, "redo.py", ["--stream", "{{ ti.xcom_pull() }}"])) == \
        {"inputs": [], "outputs": []}
    assert lineage_dict(job_lineage(config, "ingest_stream.py", ["--group", "nope"])) == {"inputs": [], "outputs": []}


def test_an_upsert_stream_writes_its_merged_table_and_tombstones(tmp_path: Path) -> None:
    from laketide.airflow.lineage import job_lineage
    from tests.helpers import ACCOUNT_FIELDS, ACCOUNT_UPSERT

    config = load(write_config(tmp_path, name="accounts", table="lake.account_changes",
                               rejects_table="lake.account_rejects", event_time_field="changed_at",
                               event_id_field="change_id", fields=ACCOUNT_FIELDS, upsert=ACCOUNT_UPSERT))
    out = lineage_dict(job_lineage(config, "ingest_stream.py", ["--stream", "accounts"]))
    assert [n for _, n in names(out["outputs"])] == ["lake.account_changes", "lake.account_rejects",
                                                     "lake.accounts", "lake.accounts__tombstones"]


def close_record(partition: str, **counts: Any) -> dict[str, Any]:
    return {"stream": "clicks", "table": "lake.clicks", "partition": partition, "snapshot_id": "123",
            "duplicates_removed": 0, "reclose": False, **counts}


def test_a_close_reports_the_hour_verified_with_its_counts(tmp_path: Path) -> None:
    from laketide.airflow.lineage import close_lineage

    config = load(write_config(tmp_path))
    hour = "2026-11-22T03:00:00+00:00"
    out = lineage_dict(close_lineage(config, close_record(hour, audit=146, rows=71, rejects=4,
                                                          duplicates_removed=71)))
    (events,) = out["inputs"]
    assert (events["namespace"], events["name"]) == (f"file://{tmp_path}/warehouse", "lake.clicks")
    assert events["facets"]["version"]["datasetVersion"] == "123"
    facets = events["inputFacets"]
    assert facets["subset"]["inputCondition"]["partitions"] == [{"dimensions": {"hour": hour}, "identifier": hour}]
    assert facets["dataQualityMetrics"]["rowCount"] == 71
    balance, unique = facets["dataQualityAssertions"]["assertions"]
    assert balance["assertion"] == "audit_equals_lake_plus_rejects" and balance["success"] is True
    assert (balance["expected"], balance["actual"]) == ("146", "146")
    assert balance["params"] == {"hour": hour, "audit": 146, "rows": 71, "rejects": 4, "duplicates": 71}
    assert unique["column"] == "event_id"
    assert [n for _, n in names(out["outputs"])] == ["laketide.partition_status"]


def test_without_a_transport_the_provider_stays_off() -> None:
    """Nothing to configure for laketide without lineage: with no transport the provider is disabled and its plugin
    registers no listener (the suite's DAG tests run that way)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__OPENLINEAGE", "OPENLINEAGE"))}
    code = ("from airflow.providers.openlineage import conf; "
            "from airflow.providers.openlineage.plugins.openlineage import OpenLineageProviderPlugin as P; "
            "print(conf.is_disabled(), P.listeners)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split("\n")[-2] == "True []", out.stdout + out.stderr


# --- the real DAGs, with the provider's file transport -------------------------------------------------------------


def run_dag(env: dict[str, str], dag_id: str, **kwargs: Any) -> dict[str, Any]:
    """``dag.test()`` of ``dag_id`` in a process of its own (``tests.dag_run``) with ``env``."""
    file = {"laketide_redo": "laketide_redo.py", "laketide_close_clicks": "laketide_close.py"}.get(
        dag_id, "laketide_ingest.py")
    started = time.monotonic()
    result, _ = run_in_process(REPO_ROOT / "dags" / file, dag_id, env, REPO_ROOT, **kwargs)
    print(f"{dag_id}: {result['state']} in {time.monotonic() - started:.0f}s")
    assert result["state"] == "success", result
    return result


def task_events(path: Path, job: str) -> dict[str, dict[str, Any]]:
    """The OpenLineage events of a task (job ``<dag id>.<task id>``) in the transport's file, by event type (the
    last of each type: a mapped task's instances share the job)."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {e["eventType"]: e for e in events if e.get("job", {}).get("name") == job}


@pytest.mark.slow
def test_an_ingest_a_close_and_a_redo_send_their_datasets_and_facets(airflow_db: Path, tmp_path: Path) -> None:
    from laketide.lake.catalog import load_catalog
    from laketide.lake.hours import partition_key

    home = tmp_path / "lake"
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=4)
    config_path = write_config(home, catalog_name=unique_catalog("lineage"), idle_window="3s",
                               max_files_per_trigger=1)
    produce(config_path, "--start", hour.isoformat(), "--hours", "2", "--events-per-hour", "200",
            "--events-per-file", "100", "--malformed-ratio", "0.05", "--seed", "7")
    config = load(config_path)
    transport = tmp_path / "openlineage.jsonl"
    env = {**os.environ, "LAKETIDE_CONFIG": str(config_path), "LAKETIDE__CLOSE__POKE_INTERVAL": "1s",
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(transport),
                                                          "append": True}),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "laketide-test",
           # dag.test() serves a task's Airflow calls in its own process: a listener forked from it (the provider's
           # default) cannot look a connection up and its events expire; in a thread (an option of the provider)
           # it can
           "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "true"}
    warehouse = f"file://{home}/warehouse"
    landing = [("file", str(home / "landing" / "clicks"))]
    tables = [(warehouse, "lake.clicks"), (warehouse, "lake.clicks_rejects")]

    # the ingest: the landing zone in, the events and rejects tables out, at the start and at the end
    run_dag(env, "laketide_ingest_clicks_once")
    ingest = task_events(transport, "laketide_ingest_clicks_once.writer")
    assert {"START", "COMPLETE"} <= set(ingest)
    for event in (ingest["START"], ingest["COMPLETE"]):
        assert event["job"]["namespace"] == "laketide-test"
        assert names(event["inputs"]) == landing and names(event["outputs"]) == tables

    # the close of the first hour: the hour of the events table verified, the counts the status table recorded
    from laketide.close.status import history

    run_dag(env, "laketide_close_clicks", logical_date=(hour + timedelta(hours=1)).isoformat())
    (closed,) = [r for r in history(config, "clicks", hour) if r.state.value == "closed"]
    close = task_events(transport, "laketide_close_clicks.close_hour.close")["COMPLETE"]
    (events,) = close["inputs"]
    assert (events["namespace"], events["name"]) == tables[0]
    facets = events["inputFacets"]
    key = partition_key(hour)
    assert facets["subset"]["inputCondition"]["partitions"][0]["identifier"] == key
    assert facets["dataQualityMetrics"]["rowCount"] == closed.rows
    assert facets["dataQualityAssertions"]["assertions"][0]["params"] == {
        "hour": key, "audit": closed.audit, "rows": closed.rows, "rejects": closed.rejects, "duplicates": 0}
    assert closed.rows > 0 and closed.audit == closed.rows + closed.rejects
    assert events["facets"]["version"]["datasetVersion"] == str(closed.snapshot_id)
    assert [n for _, n in names(close["outputs"])] == ["laketide.partition_status"]

    # a redo to the first snapshot: the landing zone in, both tables out; the hours it changed re-closed
    first = min(load_catalog(config.catalog).load_table("lake.clicks").snapshots(), key=lambda s: s.sequence_number)
    run_dag(env, "laketide_redo", run_conf={"stream": "clicks", "snapshot_id": str(first.snapshot_id),
                                            "dry_run": False})
    redo = task_events(transport, "laketide_redo.redo")
    assert {"START", "COMPLETE"} <= set(redo)
    assert names(redo["COMPLETE"]["inputs"]) == landing and names(redo["COMPLETE"]["outputs"]) == tables
    reclose = task_events(transport, "laketide_redo.reclose_clicks")["COMPLETE"]
    (events,) = reclose["inputs"]
    assert events["name"] == "lake.clicks" and events["inputFacets"]["dataQualityMetrics"]["rowCount"] > 0
