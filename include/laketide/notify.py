"""The alert hook: one place that calls the notifier configured as ``close.alert_callback``.

Airflow's failure callback (``laketide.airflow.callbacks.alert``) calls it with the Airflow context; a writer
application, which runs outside Airflow's task context, calls it with a context of its own:
``{"laketide_alert": {"kind": ..., "stream": ..., "message": ...}, "run_id": <application>}``. A notifier that fails
is logged, never raised: an alert must not stop what it reports on.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from laketide.config import LaketideConfig

log = logging.getLogger("laketide.alerts")


def notify(config: LaketideConfig, context: dict[str, Any]) -> None:
    """Call ``close.alert_callback`` (``package.module:function``) with ``context``, if one is configured."""
    target = config.close.alert_callback
    if not target:
        return
    module, _, name = target.partition(":")
    try:
        getattr(importlib.import_module(module), name)(context)
    except Exception:
        log.exception("laketide alert callback %s failed", target)


def writer_alert(config: LaketideConfig, kind: str, stream: str, message: str, application: str) -> None:
    """An alert of a writer application (a stream stopped, freshness past its threshold): logged at ERROR, then
    passed to the configured notifier."""
    log.error("laketide ALERT: %s of stream %s: %s", kind, stream, message)
    notify(config, {"laketide_alert": {"kind": kind, "stream": stream, "message": message}, "run_id": application})
