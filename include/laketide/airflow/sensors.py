"""The partition-completion sensor: deferrable by default, with a poke/reschedule fallback."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from laketide.airflow.triggers import PartitionCompletionTrigger, check
from laketide.close.results import PartitionEvent


class PartitionCompletionSensor(BaseSensorOperator):
    """Wait until an hourly partition of a stream is decided from metadata (Iceberg snapshot summaries and the
    landing zone's listing; the rules of ``laketide.close.partitions.classify``).

    Outcomes: ``complete`` and ``empty`` succeed and push the status (XCom ``return_value``) for the close;
    ``gap`` (a stalled stream) records the gap in the status table and fails without retrying, which runs
    the task's ``on_failure_callback`` (the alert hook); ``open`` (including "the writer has not committed yet,
    its table may not exist") and ``lagging`` (landed files not committed yet) keep waiting, until ``timeout``
    fails the task with the last reason.

    :param stream: stream name (templated)
    :param partition: the hour to wait for (templated), by default the run's data interval start
    :param deferrable: wait in the triggerer (default) instead of holding a worker slot
    """

    template_fields: Sequence[str] = ("stream", "partition")
    ui_color = "#cfe8ff"

    def __init__(self, *, stream: str, partition: str = "{{ data_interval_start }}", deferrable: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.partition = partition
        self.deferrable = deferrable

    def _config_path(self) -> str:
        from laketide.config import config_path

        return str(config_path())

    def _catalog(self) -> dict[str, Any]:
        """The catalog settings in force on this worker (the ``laketide_catalog`` connection, else the YAML)."""
        from laketide.airflow.hooks import LaketideCatalogHook, catalog_kwargs
        from laketide.config import get_config

        return catalog_kwargs(LaketideCatalogHook(config=get_config(self._config_path())).catalog_config())

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        catalog = self._catalog()
        status, cursor = check(self._config_path(), self.stream, self.partition, None, catalog=catalog)
        if status.decided:
            return self._outcome(PartitionEvent.from_status(status), context)
        self.log.info("partition %s is %s: %s; deferring", self.partition, status.state, status.reason)
        deadline = datetime.now(UTC) + timedelta(seconds=self.timeout)
        self.defer(
            trigger=PartitionCompletionTrigger(
                self._config_path(), self.stream, self.partition, cursor.to_dict(),
                poke_interval=float(self.poke_interval), deadline=deadline.isoformat(), catalog=catalog,
            ),
            method_name="execute_complete",
            # a backstop: the trigger itself fires a timeout event with the last reason at the deadline
            timeout=timedelta(seconds=self.timeout) + timedelta(minutes=5),
        )

    def poke(self, context: Any) -> PokeReturnValue:
        status, _ = check(self._config_path(), self.stream, self.partition, None, catalog=self._catalog())
        if status.decided:
            return PokeReturnValue(is_done=True, xcom_value=self._outcome(PartitionEvent.from_status(status), context))
        self.log.info("partition %s is %s: %s", self.partition, status.state, status.reason)
        return PokeReturnValue(is_done=False)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        return self._outcome(PartitionEvent.from_dict(event), context)

    def _outcome(self, event: PartitionEvent, context: Any) -> dict[str, Any]:
        """Fail on a timeout or a gap; else the decision, as the XCom for the close (``PartitionEvent.to_dict()``)."""
        from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

        from laketide.close.partitions import State

        if event.timeout:
            raise AirflowSensorTimeout(
                f"partition {event.partition} of {event.stream} still {event.state} after "
                f"{timedelta(seconds=self.timeout)}: {event.reason}"
            )
        if event.state == State.GAP:
            self._record_gap(event, context)
            raise AirflowFailException(f"GAP in partition {event.partition} of {event.stream}: {event.reason}")
        self.log.info("partition %s is %s: %s", event.partition, event.state, event.reason)
        return event.to_dict()

    def _record_gap(self, event: PartitionEvent, context: Any) -> None:
        from laketide.airflow.hooks import airflow_config
        from laketide.close.closing import record_decision

        record_decision(airflow_config(self._config_path()), event, context["run_id"])
