"""The action record: every redo, backfill and repair, dry runs included, in an Iceberg table written with pyiceberg.

Table ``close.action_table`` (default ``laketide.action_log``), append-only, partitioned by stream. One row per
step of an action: the redo DAG's ``validate`` task records its plan (``planned``, or ``dry_run`` for a dry run),
the redo job its outcome (``done``), a backfill or repair job its outcome (``dry_run``, ``done`` or ``unchanged``
when it committed nothing). Columns: ``action_id`` (the redo's run id, a backfill's or repair's action id),
``action``, ``stream``, ``outcome`` (:data:`OUTCOMES`), ``dry_run``, ``requested_by``, ``run_id`` (the Airflow
run), ``recorded_at``, ``from_snapshot`` / ``to_snapshot``, ``start_hour`` / ``end_hour`` (the range, when
given), ``hours`` (JSON {hour: rows and rejects before and after, duplicates removed}) and ``report`` (the lines
the task logged). :func:`history` reads it back, one :class:`Action` per action with its latest step; the
lakehouse view in the Airflow UI lists it.

Committed backfills and repairs recorded before this table existed are found in the status table
(``reopened`` rows whose ``verification`` holds ``{"action": ...}``): :func:`history` adds them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from laketide.close.status import TABLE_PROPERTIES, StatusRecord
from laketide.config import LaketideConfig
from laketide.lake.catalog import append_rows, load_catalog, table_or_create
from laketide.lake.snapshots import id_number, id_text

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from laketide.redo.overwrite import Outcome
    from laketide.redo.params import RedoRequest
    from laketide.redo.plan import RedoPlan

#: planned: a redo checked and about to run; dry_run: reported only; done: committed; unchanged: ran, nothing to commit
OUTCOMES = ("planned", "dry_run", "done", "unchanged")
#: the outcomes that end an action (a ``planned`` step is followed by one of these)
FINAL = ("dry_run", "done", "unchanged")


@dataclass(frozen=True)
class ActionRecord:
    """One step of one manual action."""

    action_id: str
    action: str
    stream: str
    outcome: str
    dry_run: bool
    requested_by: str | None = None
    run_id: str | None = None
    recorded_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    from_snapshot: int | None = None
    to_snapshot: int | None = None
    start_hour: datetime | None = None
    end_hour: datetime | None = None
    #: JSON {hour: {"rows_before", "rows_after", "rejects_before", "rejects_after", "duplicates_removed"}}
    hours: str | None = None
    report: str | None = None

    def __post_init__(self) -> None:
        if self.action not in ("redo", "backfill", "repair"):
            raise ValueError(f"action must be redo, backfill or repair, not {self.action!r}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {self.outcome!r}")

    @property
    def hour_changes(self) -> dict[str, dict[str, int | None]]:
        return dict(json.loads(self.hours)) if self.hours else {}

    def lines(self) -> list[str]:
        return self.report.splitlines() if self.report else []


def table_schema() -> Schema:
    from pyiceberg.schema import Schema
    from pyiceberg.types import BooleanType, LongType, NestedField, StringType, TimestamptzType

    return Schema(
        NestedField(1, "action_id", StringType(), required=True),
        NestedField(2, "action", StringType(), required=True, doc="redo, backfill or repair"),
        NestedField(3, "stream", StringType(), required=True),
        NestedField(4, "outcome", StringType(), required=True, doc="planned, dry_run, done or unchanged"),
        NestedField(5, "dry_run", BooleanType(), required=True),
        NestedField(6, "requested_by", StringType(), required=False),
        NestedField(7, "run_id", StringType(), required=False, doc="Airflow run id"),
        NestedField(8, "recorded_at", TimestamptzType(), required=True),
        NestedField(9, "from_snapshot", LongType(), required=False),
        NestedField(10, "to_snapshot", LongType(), required=False),
        NestedField(11, "start_hour", TimestamptzType(), required=False),
        NestedField(12, "end_hour", TimestamptzType(), required=False),
        NestedField(13, "hours", StringType(), required=False, doc="JSON: rows and rejects before/after per hour"),
        NestedField(14, "report", StringType(), required=False, doc="the report lines"),
    )


def action_table(config: LaketideConfig) -> Table:
    """The action table; namespace and table are created when missing."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    spec = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="stream"))
    return table_or_create(load_catalog(config.catalog), config.close.action_table, table_schema(), spec,
                           TABLE_PROPERTIES)


def record(config: LaketideConfig, *records: ActionRecord) -> None:
    """Append ``records`` in one commit (a conflicting commit or a busy catalog is retried, as status records are).

    :raises CatalogUnavailableError: the catalog stayed busy or unreachable for ``catalog.retry_timeout``
    """
    import pyarrow as pa

    from laketide.close.status import _retryable
    from laketide.ingest.sink import retrying

    if not records:
        return
    names = [f.name for f in fields(ActionRecord)]

    def append() -> None:
        table = action_table(config)
        rows = [{n: getattr(r, n) for n in names} for r in records]
        append_rows(table, pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))

    retrying(f"action record of {config.close.action_table}", append, config.catalog.retry_timeout, _retryable)


def records(config: LaketideConfig, stream: str | None = None, run_id: str | None = None) -> list[ActionRecord]:
    """Every recorded step (of ``stream``, of Airflow run ``run_id``), oldest first; ``[]`` before the first one."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, Reference
    from pyiceberg.expressions.literals import literal

    try:
        table = load_catalog(config.catalog).load_table(config.close.action_table)
    except (NoSuchTableError, NoSuchNamespaceError):
        return []
    row_filter: BooleanExpression = AlwaysTrue()
    if stream is not None:
        row_filter = EqualTo(term=Reference("stream"), value=literal(stream))
    if run_id is not None:
        row_filter = And(row_filter, EqualTo(term=Reference("run_id"), value=literal(run_id)))
    rows = table.scan(row_filter=row_filter).to_arrow().to_pylist()
    return sorted((ActionRecord(**row) for row in rows), key=lambda r: r.recorded_at)


def _hours_json(hours: Mapping[str, Mapping[str, Any]]) -> str:
    return json.dumps({h: dict(c) for h, c in sorted(hours.items())}, separators=(",", ":"))


def from_outcome(outcome: Outcome, run_id: str | None) -> ActionRecord:
    """The record of a backfill's or repair's outcome (``laketide.redo.overwrite.Outcome``)."""
    r = outcome.request
    kind = "dry_run" if r.dry_run else ("done" if outcome.committed else "unchanged")
    return ActionRecord(
        action_id=r.action_id, action=r.kind, stream=r.stream.name, outcome=kind, dry_run=r.dry_run,
        requested_by=r.requested_by, run_id=run_id, recorded_at=outcome.at, from_snapshot=outcome.from_snapshot,
        to_snapshot=outcome.to_snapshot, start_hour=r.start, end_hour=r.end,
        hours=_hours_json({h: c.as_dict() for h, c in outcome.hours.items()}), report="\n".join(outcome.lines()),
    )


def from_redo_plan(plan: RedoPlan, request: RedoRequest, report: list[str]) -> ActionRecord:
    """The record of a redo's plan: ``dry_run`` for a dry run, else ``planned`` (the job records the outcome).
    Rows before are the table's now, rows after those at the snapshot (what re-ingest adds comes on top)."""
    hours = {h: {"rows_before": plan.rows_now.get(h, 0), "rows_after": plan.rows_at_snapshot.get(h, 0),
                 "rejects_before": plan.rejects_now.get(h, 0), "rejects_after": plan.rejects_at_snapshot.get(h, 0)}
             for h in plan.hours}
    return ActionRecord(
        action_id=request.run_id, action="redo", stream=request.stream,
        outcome="dry_run" if request.dry_run else "planned", dry_run=request.dry_run, requested_by=request.user,
        run_id=request.run_id, from_snapshot=plan.head_id, to_snapshot=plan.snapshot_id,
        start_hour=request.hours.start, end_hour=request.hours.end, hours=_hours_json(hours),
        report="\n".join(report),
    )


def from_redo_result(request: RedoRequest, head_before: int | None, head_after: int | None,
                     hours: Mapping[str, Mapping[str, Any]], report: list[str]) -> ActionRecord:
    """The record of a finished redo: the events table went from ``head_before`` to ``head_after``."""
    return ActionRecord(
        action_id=request.run_id, action="redo", stream=request.stream, outcome="done", dry_run=False,
        requested_by=request.user, run_id=request.run_id, from_snapshot=head_before, to_snapshot=head_after,
        start_hour=request.hours.start, end_hour=request.hours.end, hours=_hours_json(hours),
        report="\n".join(report),
    )


@dataclass(frozen=True)
class Action:
    """One action as the history lists it: its latest step, and when it started."""

    latest: ActionRecord
    started_at: datetime
    steps: int

    def to_dict(self) -> dict[str, Any]:
        r = self.latest
        return {
            "action_id": r.action_id, "action": r.action, "stream": r.stream, "outcome": r.outcome,
            "dry_run": r.dry_run, "requested_by": r.requested_by, "run_id": r.run_id,
            "started_at": self.started_at.isoformat(timespec="seconds"),
            "recorded_at": r.recorded_at.isoformat(timespec="seconds"),
            "from_snapshot": id_text(r.from_snapshot), "to_snapshot": id_text(r.to_snapshot),
            "start": None if r.start_hour is None else r.start_hour.isoformat(),
            "end": None if r.end_hour is None else r.end_hour.isoformat(),
            "hours": r.hour_changes, "report": r.lines(), "steps": self.steps,
        }


def _from_status(rows: Iterable[StatusRecord]) -> list[ActionRecord]:
    """Committed backfills and repairs the status table recorded (``verification`` = ``{"action": ...}``)."""
    seen: dict[str, ActionRecord] = {}
    for r in rows:
        if not r.verification or '"action"' not in r.verification:
            continue
        try:
            action = json.loads(r.verification).get("action")
        except ValueError:
            continue
        if not isinstance(action, dict) or action.get("action") not in ("backfill", "repair"):
            continue
        key = str(action.get("action_id"))
        if key in seen:
            continue
        at = datetime.fromisoformat(action["at"]) if action.get("at") else r.recorded_at
        seen[key] = ActionRecord(
            action_id=key, action=action["action"], stream=r.stream, outcome="done", dry_run=False,
            requested_by=action.get("requested_by"), run_id=r.run_id, recorded_at=at,
            from_snapshot=id_number(action.get("from_snapshot")), to_snapshot=id_number(action.get("to_snapshot")),
            start_hour=datetime.fromisoformat(action["start"]) if action.get("start") else None,
            end_hour=datetime.fromisoformat(action["end"]) if action.get("end") else None,
            hours=_hours_json(action.get("hours") or {}), report=r.reason,
        )
    return list(seen.values())


def history(config: LaketideConfig, stream: str, status_rows: Iterable[StatusRecord] = ()) -> list[Action]:
    """Every action of ``stream``, newest first: the action record's steps grouped by action (the latest step
    says where it stands), plus committed backfills and repairs found only in ``status_rows`` (the stream's status
    history, for actions recorded before the action table existed)."""
    steps = records(config, stream)
    known = {r.action_id for r in steps}
    steps += [r for r in _from_status(status_rows) if r.action_id not in known]
    grouped: dict[tuple[str, str], list[ActionRecord]] = {}
    for r in sorted(steps, key=lambda r: r.recorded_at):
        grouped.setdefault((r.action, r.action_id), []).append(r)
    out = [Action(group[-1], group[0].recorded_at, len(group)) for group in grouped.values()]
    return sorted(out, key=lambda a: a.latest.recorded_at, reverse=True)
