"""
### laketide maintain: table maintenance out of the write path

One Spark application (`spark_jobs/maintain.py`) serves every maintained table in one session: each stream's
events and rejects tables, the status table and the maintenance record. Per table the actions run one after
the other under a per-table lease (two DAGs never maintain one table at once: the second skips it and says
so), each recorded in the maintenance record (`make status` shows the age of the last one).

* **laketide_maintain_after_close**: runs when hours close (the closed-hours Assets, whose events are
  partitioned by hour; every hour maps to one key, `closed-hours`, so the closes the scheduler sees in one loop
  make one run): `rewrite_data_files` of the closed hours only, then `rewrite_manifests`. When no closed hour
  holds files to compact (an empty hour closed, hours compacted before) the run ends there, from metadata only,
  before Spark.
* **laketide_maintain_daily**: `expire_snapshots` (every writer's newest marker is kept) and
  `remove_orphan_files` (files older than `orphan_age`, never less than a day), on the tables due for them by
  their metadata (nothing due, e.g. a fresh installation: the run stops before Spark).
* **laketide_maintain_thresholds**: hourly, from metadata only: a table with a closed hour holding more small
  data files than `max_small_files`, more manifests than `max_manifests` or more snapshots than
  `max_snapshots` gets `rewrite_data_files` / `rewrite_manifests` / `expire_snapshots` at once (nothing due:
  the run stops before Spark).
* **laketide_maintain**: manual, with a form: table (`all` or one), actions (`default` = each table's
  policy), dry run (plan and count, change nothing). The params are checked before anything runs.

Policies: the `maintenance` section of the configuration. Guide: docs/operations.md (Table maintenance).
"""

from __future__ import annotations

import functools
import operator
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, CronTriggerTimetable, FixedKeyMapper, Param, PartitionedAssetTimetable, task

from laketide.airflow.assets import closed_partitions_asset
from laketide.airflow.hooks import airflow_config
from laketide.airflow.operators import LaketideSparkSubmitOperator
from laketide.config import MAINTENANCE_ACTIONS, get_config, maintained_tables

_config = get_config()
_DEFAULT_ARGS = {"owner": "laketide", "retries": 1, "retry_delay": timedelta(minutes=10)}
_TAGS = ["laketide", "maintain"]


def _submit(actions: str, table: str = "all", dry_run: str = "false") -> LaketideSparkSubmitOperator:
    return LaketideSparkSubmitOperator(
        task_id="maintain",
        job="maintain.py",
        job_args=["--table", table, "--actions", actions, "--dry-run", dry_run, "--run-id", "{{ run_id }}"],
        name="laketide-maintain",
    )


with DAG(
    dag_id="laketide_maintain",
    description="Manual table maintenance: choose the table, the actions, dry run",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=_TAGS,
    default_args=_DEFAULT_ARGS,
    params={
        "table": Param("all", type="string", enum=["all", *maintained_tables(_config)], title="Table",
                       description="'all' or one maintained table"),
        "actions": Param(["default"], type="array", minItems=1, uniqueItems=True,
                         items={"type": "string", "enum": ["default", *MAINTENANCE_ACTIONS]}, title="Actions",
                         description="'default' (each table's policy) or the actions to run, in any order"),
        "dry_run": Param(True, type="boolean", title="Dry run",
                         description="plan and count, change nothing (the default: untick it to maintain)"),
    },
) as manual:

    @task
    def validate(**context: Any) -> dict[str, str]:
        """Check the params against the configuration before anything runs (a bad request is not retried)."""
        from airflow.sdk.exceptions import AirflowFailException

        from laketide.errors import MaintenanceRequestError
        from laketide.maintain.plan import validate_request

        params = context["params"]
        try:
            request = validate_request(airflow_config(), params["table"], params["actions"], params["dry_run"])
        except MaintenanceRequestError as exc:
            raise AirflowFailException(str(exc)) from exc
        return {"table": ",".join(request.tables),
                "actions": ",".join(request.actions) if request.actions is not None else "default",
                "dry_run": "true" if request.dry_run else "false"}

    checked = validate()
    checked >> _submit(
        "{{ ti.xcom_pull(task_ids='validate')['actions'] }}",
        "{{ ti.xcom_pull(task_ids='validate')['table'] }}",
        "{{ ti.xcom_pull(task_ids='validate')['dry_run'] }}",
    )

with DAG(
    dag_id="laketide_maintain_daily",
    description="Daily expire_snapshots and remove_orphan_files on every maintained table",
    doc_md=__doc__,
    schedule=CronTriggerTimetable(_config.maintenance.daily_schedule, timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=_TAGS,
    default_args=_DEFAULT_ARGS,
) as daily:

    @task.short_circuit
    def due_daily() -> dict[str, str] | None:
        """Tables due for expiry or orphan removal (metadata only); none, e.g. on a fresh installation whose
        first run comes at once: the run ends here, no Spark application beside the writer's first batches."""
        from laketide.maintain.health import DAILY_ACTIONS
        from laketide.maintain.health import due_daily as due

        tables = due(airflow_config())
        if not tables:
            return None
        actions = [a for a in DAILY_ACTIONS if any(a in wanted for wanted in tables.values())]
        return {"table": ",".join(tables), "actions": ",".join(actions)}

    due_daily() >> _submit("{{ ti.xcom_pull(task_ids='due_daily')['actions'] }}",
                           "{{ ti.xcom_pull(task_ids='due_daily')['table'] }}")

_assets = [closed_partitions_asset(_config, s) for s in _config.streams]
with DAG(
    dag_id="laketide_maintain_after_close",
    description="Compaction of closed hours and manifest rewrite, after partitions close",
    doc_md=__doc__,
    # the closed-hours events are partitioned (one key per hour): every key maps to one fixed key, so the closes
    # the scheduler sees in one loop make one run, not one Spark run per hour
    schedule=PartitionedAssetTimetable(assets=functools.reduce(operator.or_, _assets),
                                       default_partition_mapper=FixedKeyMapper("closed-hours")) if _assets else None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=_TAGS,
    default_args=_DEFAULT_ARGS,
) as after_close:

    @task.short_circuit
    def due_after_close() -> dict[str, int] | None:
        """Hourly tables with closed hours to compact (metadata only); none: the run ends here, no Spark."""
        from laketide.maintain.health import due_after_close as due

        return due(airflow_config()) or None

    due_after_close() >> _submit("rewrite_data_files,rewrite_manifests")

with DAG(
    dag_id="laketide_maintain_thresholds",
    description="Maintenance of tables past their thresholds (too many small files, manifests or snapshots)",
    doc_md=__doc__,
    schedule=CronTriggerTimetable(_config.maintenance.threshold_schedule, timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=_TAGS,
    default_args=_DEFAULT_ARGS,
) as thresholds:

    @task.short_circuit
    def due() -> dict[str, str] | None:
        """Tables past max_small_files, max_manifests or max_snapshots (metadata only); none: the run ends here."""
        from laketide.maintain.health import due_by_threshold

        tables = due_by_threshold(airflow_config())
        if not tables:
            return None
        actions = sorted({a for wanted in tables.values() for a in wanted}, key=MAINTENANCE_ACTIONS.index)
        return {"table": ",".join(tables), "actions": ",".join(actions)}

    due() >> _submit("{{ ti.xcom_pull(task_ids='due')['actions'] }}", "{{ ti.xcom_pull(task_ids='due')['table'] }}")

if __name__ == "__main__":
    manual.test()
