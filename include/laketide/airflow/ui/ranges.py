"""Actions on an hour range chosen on the partition board: a close range, a backfill, a repair, a redo.

For the hours ``[start, end)`` of a stream, :func:`action_plan` checks the request as the DAG's first task would
(the close's range rules, the backfill's and repair's ``validate``, the redo's params and scope) and fills in the
DAG's params, a dry run wherever the DAG has one. The page then starts the run through Airflow's REST API as the
logged-in user; nothing here starts or changes anything.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal, get_args

from laketide.airflow.ui import models
from laketide.airflow.ui.panels import REDO_DAG, close_dag
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import RequestError
from laketide.lake.hours import HOUR, parse_partition, partition_key

Action = Literal["close", "backfill", "repair", "redo"]
ACTIONS: tuple[str, ...] = get_args(Action)
#: the manual DAGs of the hour-range actions (the close DAG is per stream)
BACKFILL_DAG = "laketide_backfill"
REPAIR_DAG = "laketide_repair"


def action_dag(action: str, stream: str) -> str:
    """The DAG an action on ``stream``'s hours triggers.

    :raises RequestError: not one of :data:`ACTIONS`
    """
    dags = {"close": close_dag(stream), "backfill": BACKFILL_DAG, "repair": REPAIR_DAG, "redo": REDO_DAG}
    if action not in dags:
        raise RequestError(f"unknown action {action!r}: one of {list(ACTIONS)}")
    return dags[action]


def check_selection(start: datetime | None, end: datetime | None, now: datetime) -> list[datetime]:
    """The hours ``[start, end)``: both given, start before end, every hour started by ``now``.

    :raises RequestError: an empty selection, a reversed range, an hour that has not started yet
    """
    if start is None or end is None:
        raise RequestError("no hour selected: click an hour on the board (shift-click another for a range)")
    if start >= end:
        raise RequestError(f"start {start.isoformat()} must be before end {end.isoformat()} (the range is "
                           "[start, end): end is the first hour left out)")
    current = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if end > current + HOUR:
        raise RequestError(f"the selection reaches {partition_key(end - HOUR)}, an hour that has not started yet "
                           f"(now {now.isoformat(timespec='seconds')})")
    return [start + i * HOUR for i in range(int((end - start) / HOUR))]


def redo_snapshot(config: LaketideConfig, stream: StreamConfig, start: datetime, end: datetime) -> int:
    """The snapshot a redo of the hours ``[start, end)`` returns to: the parent of the oldest commit of the events
    table's current lineage that added rows to one of them.

    :raises RequestError: no commit added rows to those hours, or the table's first commit did
    """
    from laketide.lake.catalog import load_catalog
    from laketide.lake.timeline import timeline

    first = None
    for snap in reversed(timeline(load_catalog(config.catalog), stream.table, limit=100_000)):
        if any(start <= parse_partition(key) < end for key in snap.rows):
            first = snap
            break
    span = f"[{partition_key(start)}, {partition_key(end)})"
    if first is None:
        raise RequestError(f"no commit of {stream.table} added rows to the hours {span}: nothing to redo there "
                           "(a backfill re-ingests hours from the landing zone)")
    if first.parent_id is None:
        raise RequestError(f"the first commit of {stream.table} ({first.snapshot_id}) holds rows of {span}: a redo "
                           "cannot return before it (a backfill re-ingests hours from the landing zone)")
    return first.parent_id


def action_plan(config: LaketideConfig, stream: StreamConfig, action: str, start: datetime | None,
                end: datetime | None, user: str, now: datetime | None = None) -> models.ActionPlan:
    """The run an action on the hours ``[start, end)`` of ``stream`` starts: its DAG and params (a dry run where
    the DAG has one), checked as the DAG checks them first.

    :raises RequestError: the request is refused (what is wrong, what to do); :class:`laketide.errors.RangeError`
        for a close range
    """
    now = now or datetime.now(UTC)
    dag_id = action_dag(action, stream.name)
    hours = check_selection(start, end, now)
    assert start is not None and end is not None
    first, stop = start.isoformat(), end.isoformat()
    conf: dict[str, object]
    if action == "close":
        from laketide.close.closing import close_range

        close_range(first, stop, now, config.close.max_range_hours)
        conf = {"start": first, "end": stop}
        note = "closes the hours that are complete or empty; it waits for the last one (the close DAG's sensor)"
    elif action == "redo":
        from laketide.redo.job import check_scope
        from laketide.redo.params import validate
        from laketide.redo.plan import plan_request

        snapshot = str(redo_snapshot(config, stream, start, end))
        request = validate(config, stream.name, snapshot, None, first, stop, True, "lakehouse-view", user)
        check_scope(plan_request(config, request), request)
        conf = {"stream": stream.name, "snapshot_id": snapshot, "at": None, "start": first, "end": stop,
                "dry_run": True}
        note = (f"returns {stream.name} to snapshot {snapshot} (before the first commit of these hours) and "
                "re-ingests what landed since; a dry run logs the plan and changes nothing")
    else:
        from laketide.redo.cli import check_params
        from laketide.redo.overwrite import Kind

        kind: Kind = "backfill" if action == "backfill" else "repair"
        params: dict[str, object] = {"stream": stream.name, "start": first, "end": stop, "dry_run": True}
        check_params(config, kind, params, user)
        conf = params
        note = ("re-ingests the hours from the landing zone" if action == "backfill"
                else "removes duplicate event ids from the hours") + "; a dry run reports and changes nothing"
    return models.ActionPlan(action=action, stream=stream.name, dag_id=dag_id, conf=conf,
                             hours=[partition_key(h) for h in hours], dry_run="dry_run" in conf, note=note)
