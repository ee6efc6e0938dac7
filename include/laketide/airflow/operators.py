"""Operators that submit laketide's Spark jobs through the Airflow Spark connection."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from laketide.airflow.hooks import LaketideCatalogHook
from laketide.config import REPO_ROOT
from laketide.lake.spark import package_zip

SPARK_JOBS = REPO_ROOT / "spark_jobs"
#: exit codes of laketide Spark jobs that a retry cannot fix
FATAL_EXIT_CODES = {2: "bad arguments or configuration", 3: "checkpoint and table disagree"}


class LaketideSparkSubmitOperator(SparkSubmitOperator):
    """Submit a laketide Spark job; the catalog, jars, Python and the application's limits (cores, memory) come
    from the laketide configuration, the master from the Spark connection.

    Everything is resolved in ``execute()``, never when the DAG file is parsed. A connection asking for cluster
    deploy mode fails the task at once, without retrying, naming what to change (laketide's jobs run in client
    mode: :func:`laketide.lake.spark.check_deploy_mode`).

    :param job: file name in ``spark_jobs/``
    :param job_args: arguments of the job (templated)
    :param fatal_exit_codes: exit codes of the job that fail the task without retrying (default
        :data:`FATAL_EXIT_CODES`), with what they mean
    :param action: a manual action's job (``redo``, ``backfill``, ``repair``): the task log then starts with the
        plan (the ``validate`` task's result), the job's own output follows in a collapsed log group, and the
        outcome (from the action record) comes right after that group
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "job_args")

    def __init__(self, *, job: str, job_args: list[str], fatal_exit_codes: dict[int, str] | None = None,
                 action: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("conn_id", "spark_default")
        #: a deploy mode given to the operator wins over the connection's (as in the Spark provider's hook)
        self.given_deploy_mode: str | None = kwargs.get("deploy_mode")
        super().__init__(application=str(SPARK_JOBS / job), **kwargs)
        self.job_args = job_args
        self.fatal_exit_codes = dict(FATAL_EXIT_CODES if fatal_exit_codes is None else fatal_exit_codes)
        self.action = action

    def execute(self, context: Any) -> None:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from laketide.config import config_path
        from laketide.errors import DeployModeError
        from laketide.lake.spark import check_deploy_mode, executor_paths, is_local, submit_conf

        master, deploy_mode = self.spark_target()
        try:
            check_deploy_mode(master, deploy_mode, f"connection {self._conn_id!r}")
        except DeployModeError as exc:  # a retry would fail the same way: fail now, with what to change
            raise AirflowFailException(str(exc)) from exc
        hook = LaketideCatalogHook()
        config = hook.laketide_config()  # the catalog of the laketide_catalog connection, if there is one
        self.lineage_config = config  # the lineage methods' at the end, without a second connection lookup
        self.conf = {**submit_conf(config, Path(self.application).name, self.job_args), **(self.conf or {})}
        if not is_local(master):
            self.log.info("Spark master %s: the executors read and write %s; each must be the same storage at the "
                          "same path on every Spark worker", master, "; ".join(executor_paths(config)))
        self.py_files = str(package_zip(config))
        # the job finds the same configuration, state folder and catalog (the laketide_catalog connection when
        # there is one) as this worker
        self.env_vars = {
            "LAKETIDE_CONFIG": str(config_path()),
            "LAKETIDE_HOME": str(config.home),
            "TZ": "UTC",
            **hook.spark_env(),
            **(self.env_vars or {}),
        }
        self.application_args = list(self.job_args)
        if self.action is not None:
            for line in plan_lines(self.action, context["ti"].xcom_pull(task_ids="validate")):
                self.log.info("%s", line)
            self.log.info("::group::%s: the Spark job's output", Path(self.application).name)
        try:
            super().execute(context)
        except AirflowException as exc:
            if self.action is not None:
                self.log.info("::endgroup::")
                self.log.error("%s failed: its output is in the group above", self.action)
            match = re.search(r"Error code is: (\d+)", str(exc))
            code = int(match.group(1)) if match else None
            if code in self.fatal_exit_codes:
                raise AirflowFailException(
                    f"{self.application} failed: {self.fatal_exit_codes[code]} (exit {code}); not retrying. "
                    "The task log above has the job's message and what to do."
                ) from exc
            raise
        if self.action is not None:
            self.log.info("::endgroup::")
            for line in outcome_lines(config, self.action, context["run_id"]):
                self.log.info("%s", line)

    def get_openlineage_facets_on_start(self) -> Any:
        """The job's OpenLineage datasets (Airflow's OpenLineage provider calls this at the start, and again at the
        end: the datasets do not depend on the outcome): :func:`laketide.airflow.lineage.job_lineage`."""
        from laketide.airflow.hooks import airflow_config
        from laketide.airflow.lineage import job_lineage

        config = getattr(self, "lineage_config", None) or airflow_config()
        return job_lineage(config, Path(self.application).name, list(self.job_args))

    def spark_target(self) -> tuple[str, str | None]:
        """The master and deploy mode of the Spark connection, as the Spark provider's hook reads them (a missing
        connection: ``yarn``, the hook's default)."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException:
            return "yarn", self.given_deploy_mode
        return connection_master(conn), self.given_deploy_mode or conn.extra_dejson.get("deploy-mode")


def connection_master(conn: Any) -> str:
    """The Spark master of an Airflow Spark connection: its host when it holds a whole master URL (the form's way,
    ``spark://host:7077`` or ``local[2]``), else ``<conn type>://<host>``, with the port appended when given."""
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = str(conn.host)
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


def plan_lines(action: str, checked: Any) -> list[str]:
    """The first lines of a manual action's job task: the plan its ``validate`` task checked."""
    if not isinstance(checked, dict):
        return [f"{action}: no plan from the validate task"]
    if isinstance(checked.get("report"), list):  # the redo's
        return [str(line) for line in checked["report"]]
    dry = checked.get("dry_run") in (True, "true")
    return [f"{'DRY RUN: ' if dry else ''}{action} of stream {checked.get('stream')} "
            f"[{checked.get('start')}, {checked.get('end')}) requested by {checked.get('requested_by')}"]


def outcome_lines(config: Any, action: str, run_id: str) -> list[str]:
    """The outcome of a manual action's job, from the action record of this Airflow run."""
    from laketide.redo import actions
    from laketide.redo.params import check_run_id

    ids = {run_id, check_run_id(run_id)}  # the redo records its run id made fit for a file name
    done = [r for r in actions.records(config) if r.action == action and r.run_id in ids and r.outcome in
            actions.FINAL]
    if not done:
        return [f"{action}: no outcome recorded for run {run_id}"]
    return ["outcome:", *done[-1].lines()]
