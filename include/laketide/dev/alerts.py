"""A development notifier: ``close.alert_callback: laketide.dev.alerts:record`` appends each alert's context, as
one JSON line, to the file named by ``$LAKETIDE_ALERT_LOG`` (tests and local trials read what was alerted)."""

from __future__ import annotations

import json
import os
from typing import Any


def record(context: dict[str, Any]) -> None:
    target = os.environ.get("LAKETIDE_ALERT_LOG")
    if not target:
        return
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps({k: v for k, v in context.items() if k in ("laketide_alert", "run_id")} or
                             {"context": sorted(context)}, default=str) + "\n")
