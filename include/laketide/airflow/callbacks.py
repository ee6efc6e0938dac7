"""Failure alerts: the close DAG's ``on_failure_callback``.

It logs the failure (stream, partition, reason) at ERROR level, then calls the notifier configured as
``close.alert_callback`` (``package.module:function``, called with the Airflow context), so a gap or a
failed verification reaches Slack, PagerDuty or e-mail without changing the DAG.
"""

from __future__ import annotations

import logging
from typing import Any

from laketide.notify import notify

log = logging.getLogger("laketide.alerts")


def alert(context: Any) -> None:
    from laketide.config import get_config

    ti = context.get("task_instance") or context.get("ti")
    error = context.get("exception")
    log.error("laketide ALERT: %s.%s (run %s) failed: %s", getattr(ti, "dag_id", "?"), getattr(ti, "task_id", "?"),
              context.get("run_id"), error)
    notify(get_config(), context)
