"""The note of a close run: the hours it closed and the outcome, in one line a person reads in Airflow's run list.

    hour 2026-11-22 19:00: closed, complete, 21,690 rows
    36 hours 2012-03-05 18:00 to 2012-03-07 05:00: 36 closed (29 complete, 7 empty), 1,160 rows
    hour 2026-11-22 21:00: not closed: verification failed (audit 146 != lake 70 + rejects 4 (missing 72))

It is made from what the run recorded in the status table (its run id), plus, for an hour the run recorded nothing
about (a gap, a sensor that timed out), the hour's state checked now from metadata. Re-closes of reopened hours
and done-markers that failed are added. Airflow keeps at most :data:`MAX_NOTE` characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime

from laketide.close.partitions import PartitionStatus, State
from laketide.close.status import StatusRecord
from laketide.config import LaketideConfig
from laketide.lake.hours import parse_partition

#: the longest note Airflow accepts
MAX_NOTE = 1000
_REASON = 160


def label(hour: datetime) -> str:
    """``2026-11-22 19:00`` (hours are UTC)."""
    return hour.strftime("%Y-%m-%d %H:%M")


def _short(text: str | None, limit: int = _REASON) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _failure(reason: str | None) -> str:
    """A failed verification's reason without what the note says already (the partition, the stream), the snapshot
    and the result file: the arithmetic and the failed expectations."""
    text = re.sub(r"^partition \S+ of \S+ FAILED verification: ", "", reason or "")
    text = re.sub(r" at (snapshot \d+|no snapshot \(empty table\))", "", text)
    return _short("; ".join(p for p in text.split("; ") if not p.startswith("full result: ")))


def run_records(config: LaketideConfig, stream: str, run_id: str) -> list[StatusRecord]:
    """The status rows ``run_id`` recorded for ``stream``, oldest first (none when the table does not exist)."""
    from dataclasses import fields

    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    from pyiceberg.expressions import And, EqualTo, Reference
    from pyiceberg.expressions.literals import literal

    from laketide.lake.catalog import load_catalog

    try:
        table = load_catalog(config.catalog).load_table(config.close.status_table)
    except (NoSuchTableError, NoSuchNamespaceError):
        return []
    row_filter = And(EqualTo(term=Reference("stream"), value=literal(stream)),
                     EqualTo(term=Reference("run_id"), value=literal(run_id)))
    names = {f.name for f in fields(StatusRecord)}
    rows = table.scan(row_filter=row_filter).to_arrow().to_pylist()
    return sorted((StatusRecord(**{k: v for k, v in row.items() if k in names}) for row in rows),
                  key=lambda r: r.recorded_at)


def _outcome(records: list[StatusRecord], now: PartitionStatus | None) -> tuple[str, bool, State | None, int]:
    """(what happened to one hour, closed?, the decision (complete/empty) if any, rows closed)."""
    decision = next((r.state for r in records if r.state in (State.COMPLETE, State.EMPTY)), None)
    if not records:
        if now is None:
            return "not closed", False, None, 0
        return f"not closed: {now.state} ({_short(now.reason)})", False, None, 0
    last = records[-1]
    if last.state == State.CLOSED:
        rows = last.rows or 0
        what = "closed" + (f", {decision}" if decision else "") + f", {rows:,} rows"
        return what, True, decision, rows
    if last.state == State.FAILED:
        return f"not closed: verification failed ({_failure(last.reason)})", False, decision, 0
    if last.state == State.REOPENED:
        return f"reopened ({_short(last.reason)}), not closed again yet", False, None, 0
    return f"not closed: {last.state} ({_short(last.reason)})", False, decision, 0


def compose(hours: Iterable[str], records: Iterable[StatusRecord], reclosed: Iterable[str] = (),
            now: Mapping[str, PartitionStatus] | None = None, markers_failed: Iterable[str] = ()) -> str:
    """The note of a run that was to close ``hours`` (partition keys) and re-close ``reclosed``, from the status
    rows it recorded (``records``); ``now``: the state checked now of hours it recorded nothing about;
    ``markers_failed``: hours whose done-markers failed."""
    keys = list(hours)
    by_hour: dict[datetime, list[StatusRecord]] = {}
    for r in records:
        by_hour.setdefault(r.partition, []).append(r)
    now = now or {}
    outcomes = {key: _outcome(by_hour.get(parse_partition(key), []), now.get(key)) for key in keys}
    parts: list[str] = []
    if len(keys) == 1:
        (key,) = keys
        parts.append(f"hour {label(parse_partition(key))}: {outcomes[key][0]}")
    elif keys:
        closed = [o for o in outcomes.values() if o[1]]
        kinds = ", ".join(f"{n} {s}" for s in (State.COMPLETE, State.EMPTY)
                          if (n := sum(1 for o in closed if o[2] == s)))
        rows = sum(o[3] for o in closed)
        parts.append(f"{len(keys)} hours {label(parse_partition(keys[0]))} to {label(parse_partition(keys[-1]))}: "
                     f"{len(closed)} closed" + (f" ({kinds})" if kinds else "") + f", {rows:,} rows")
        problems = [f"{label(parse_partition(k))} {o[0]}" for k, o in outcomes.items() if not o[1]]
        if problems:
            parts.append(f"{len(problems)} not closed: " + "; ".join(problems))
    again = []
    for key in reclosed:
        hour = parse_partition(key)
        steps = by_hour.get(hour, [])
        if steps and steps[-1].state == State.CLOSED:
            again.append(f"{label(hour)} ({steps[-1].rows or 0:,} rows)")
        else:
            again.append(f"{label(hour)} {_outcome(steps, None)[0]}")
    if again:
        parts.append("re-closed: " + ", ".join(again))
    failed = [label(parse_partition(k)) for k in markers_failed]
    if failed:
        parts.append(f"done-markers failed for {', '.join(failed)} (alerted; the hours stay closed)")
    note = "; ".join(parts) or "nothing to close"
    return note if len(note) <= MAX_NOTE else note[: MAX_NOTE - 1] + "…"
