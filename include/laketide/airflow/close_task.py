"""``@close_task``: the close DAG's and the redo DAG's tasks that close an hour, with their OpenLineage datasets.

A module of its own, light to import: a close DAG's task process parses the DAG file, and the Spark operators'
module (``laketide.airflow.operators``) imports the Spark provider and, through it, OpenLineage's listener (about
two seconds on two cores) that a close task never needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.providers.standard.decorators.python import _PythonDecoratedOperator

if TYPE_CHECKING:
    from collections.abc import Callable

    from airflow.sdk.bases.decorator import TaskDecorator


class CloseTaskOperator(_PythonDecoratedOperator):
    """The operator of an ``@close_task``: a ``@task`` that closes an hour and returns its close record
    (:meth:`laketide.close.results.ClosedPartition.to_dict`), from which it reports its OpenLineage datasets when
    it ends (:func:`laketide.airflow.lineage.close_lineage`)."""

    custom_operator_name = "@close_task"

    def execute(self, context: Any) -> Any:
        from laketide.airflow.hooks import airflow_config

        #: the close record and the configuration, read by the lineage method after the task ran (in this process
        #: or a fork of it: the configuration is resolved here, where the catalog connection can be looked up)
        self.close_record = super().execute(context)
        self.lineage_config = airflow_config() if lineage_enabled() else None
        return self.close_record

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from airflow.providers.openlineage.extractors import OperatorLineage

        from laketide.airflow.lineage import close_lineage

        record, config = getattr(self, "close_record", None), getattr(self, "lineage_config", None)
        return close_lineage(config, record) if isinstance(record, dict) and config else OperatorLineage()


def lineage_enabled() -> bool:
    """Whether Airflow's OpenLineage provider is installed and configured (a transport set, not disabled)."""
    try:
        from airflow.providers.openlineage.conf import is_disabled
    except ImportError:
        return False
    return not is_disabled()


def close_task(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> TaskDecorator:
    """``@task`` for a task that closes an hour and returns its close record: the same arguments, and the close's
    OpenLineage datasets (the hour verified, its counts) when lineage is configured."""
    from airflow.sdk.bases.decorator import task_decorator_factory

    return task_decorator_factory(python_callable=python_callable, decorated_operator_class=CloseTaskOperator,
                                  **kwargs)
