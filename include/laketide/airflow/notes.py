"""Setting a DAG run's note from one of its tasks.

Airflow 3.3's task SDK and execution API can read a run's note (``dag_run.note`` in the context) but not write it:
the execution API sets a note only on a run it creates (``TriggerDagRun``). The public REST API does:
``PATCH api/v2/dags/{dag_id}/dagRuns/{run_id}?update_mask=note``. A task reaches it as a user: the Airflow
connection ``close.api_conn_id`` (default ``laketide_airflow_api``) gives the API server's address (its host,
e.g. ``http://localhost:8080``) and a user's login and password, exchanged for a token at ``auth/token`` (the
simple and FAB auth managers both serve it; a connection without a login asks for a token without credentials,
which the simple auth manager grants when ``simple_auth_manager_all_admins`` is on). Without the connection the
note is only printed and logged.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from laketide.config import LaketideConfig
from laketide.errors import RunNoteError

log = logging.getLogger("laketide.airflow.notes")


@dataclass(frozen=True)
class ApiAccess:
    """Where the REST API is and who the task is there."""

    base_url: str
    login: str | None = None
    password: str | None = None


def api_access(conn_id: str) -> ApiAccess | None:
    """The API's address and user from the Airflow connection ``conn_id``; None when there is no such connection."""
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = Connection.get(conn_id)
    except AirflowNotFoundException:
        return None
    host = conn.host or "localhost"
    if "://" not in host:
        scheme = conn.schema if conn.schema in ("http", "https") else "http"
        host = f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")
    return ApiAccess(host, conn.login or None, conn.password or None)


def _call(method: str, url: str, body: dict[str, Any] | None, token: str | None, timeout: float) -> dict[str, Any]:
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode() or "{}"
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise RunNoteError(f"{method} {url}: HTTP {exc.code} {exc.reason}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RunNoteError(f"{method} {url}: unreachable ({getattr(exc, 'reason', exc)})") from None
    parsed = json.loads(text)
    return parsed if isinstance(parsed, dict) else {}


def token(access: ApiAccess, timeout: float = 10.0) -> str:
    """A token of the REST API for ``access``'s user (none given: the all-admins token, if the server grants it).

    :raises RunNoteError: refused or unreachable
    """
    url = urllib.parse.urljoin(access.base_url.rstrip("/") + "/", "auth/token")
    if access.login:
        answer = _call("POST", url, {"username": access.login, "password": access.password or ""}, None, timeout)
    else:
        answer = _call("GET", url, None, None, timeout)
    value = answer.get("access_token")
    if not isinstance(value, str) or not value:
        raise RunNoteError(f"{url} answered without an access_token")
    return value


def set_run_note(access: ApiAccess, dag_id: str, run_id: str, note: str, attempts: int = 3,
                 timeout: float = 10.0) -> None:
    """Set the note of the run ``run_id`` of ``dag_id`` (at most 1000 characters, Airflow's limit).

    :raises RunNoteError: after ``attempts`` tries (unreachable, refused, no permission)
    """
    quote = urllib.parse.quote
    url = (urllib.parse.urljoin(access.base_url.rstrip("/") + "/", "api/v2/dags/")
           + f"{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}?update_mask=note")
    last: RunNoteError | None = None
    for attempt in range(1, attempts + 1):
        try:
            _call("PATCH", url, {"note": note[:1000]}, token(access, timeout), timeout)
            return
        except RunNoteError as exc:
            last = exc
            if attempt < attempts:
                log.warning("setting the run note failed (attempt %d of %d): %s", attempt, attempts, exc)
                time.sleep(2.0 * attempt)
    assert last is not None
    raise last


def _markers_failed(ti: Any, dag_id: str, run_id: str, by_index: dict[str, list[str]]) -> list[str]:
    """The hours whose done-markers task failed, from the run's task states (``<task>_<map index>`` keys) and the
    hour each map index stands for (``by_index``: task id -> hour per map index)."""
    states = ti.get_task_states(dag_id=dag_id, run_ids=[run_id], task_ids=list(by_index)).get(run_id, {})
    failed: list[str] = []
    for task_id, keys in by_index.items():
        for i, key in enumerate(keys):
            if states.get(f"{task_id}_{i}") == "failed":
                failed.append(key)
    return failed


def close_run_note(config: LaketideConfig, stream: str, context: Any) -> str:
    """Compose the note of the running close run (``laketide.close.notes``), print it as the task log's first
    line, and set it on the run through the REST API (a failure to set it is logged, nothing fails). Returns it."""
    from datetime import UTC, datetime

    from laketide.close.closing import run_hours
    from laketide.close.notes import compose, run_records
    from laketide.close.partitions import check_partitions
    from laketide.errors import RangeError
    from laketide.lake.hours import parse_partition, partition_key

    ti, run_id, dag_id, run = context["ti"], context["run_id"], context["dag"].dag_id, context["dag_run"]
    cfg = config.stream(stream)
    hours = ti.xcom_pull(task_ids="plan")
    if hours is None:
        try:
            hours = [partition_key(h) for h in run_hours(context["params"], run.partition_key,
                                                         run.logical_date or run.run_after, datetime.now(UTC),
                                                         config.close.max_range_hours)]
            text = f"not run: the plan of {len(hours)} hour(s) failed (see the plan task's log)"
        except RangeError as exc:
            text = f"refused, nothing closed: {exc}"
    else:
        reclosed = ti.xcom_pull(task_ids="find_reopened") or []
        records = run_records(config, stream, run_id)
        seen = {r.partition for r in records}
        silent = [parse_partition(k) for k in hours if parse_partition(k) not in seen]
        now = {partition_key(s.partition): s for s in check_partitions(config, cfg, silent)} if silent else {}
        by_index: dict[str, list[str]] = {}
        if cfg.done_markers is not None:
            for task_id, source in (("close_ready.done_markers", "decide_ready"),
                                    ("close_hour.done_markers", "decide")):
                by_index[task_id] = [d["partition"] for d in ti.xcom_pull(task_ids=source) or []]
            by_index["reclose_done_markers"] = list(reclosed)
        failed = _markers_failed(ti, dag_id, run_id, by_index) if by_index else []
        text = compose(hours, records, reclosed, now, failed)
    print(f"run note: {text}", flush=True)
    if not config.close.run_notes:
        return text
    access = api_access(config.close.api_conn_id)
    if access is None:
        log.warning("the run note was not set: there is no Airflow connection %r (the API server's address and a "
                    "user allowed to edit DAG runs; docs/operations.md, Run notes)", config.close.api_conn_id)
        return text
    try:
        set_run_note(access, dag_id, run_id, text)
        log.info("run note set on %s %s", dag_id, run_id)
    except RunNoteError as exc:
        log.warning("the run note was not set: %s (the Airflow connection %r gives the API server's address and a "
                    "user allowed to edit DAG runs)", exc, config.close.api_conn_id)
    return text
