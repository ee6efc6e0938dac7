"""The done-markers task body the close and redo DAGs share (the actions: ``laketide.close.markers``)."""

from __future__ import annotations

from typing import Any


def run_done_markers(stream: str, closed: dict[str, Any]) -> list[str]:
    """Fire ``stream``'s done-markers for the close record ``closed`` (a close task's return value); what each
    action did.

    :raises AirflowException: an action failed (the others ran): Airflow retries the task (``done_markers.retries``)
        and, after the last try, the alert callback runs. The hour stays closed.
    """
    from airflow.sdk.exceptions import AirflowException

    from laketide.airflow.hooks import airflow_config
    from laketide.close.markers import fire
    from laketide.close.results import ClosedPartition
    from laketide.errors import DoneMarkerError

    config = airflow_config()
    try:
        results = fire(config, config.stream(stream), ClosedPartition.from_dict(closed))
    except DoneMarkerError as exc:
        raise AirflowException(str(exc)) from exc
    return [f"{r.action}: {r.detail}" for r in results]
