"""The close of one partition, as plain functions the close DAG's tasks call.

sensor outcome (complete | empty) -> :func:`verify` (Great Expectations; records verified or failed)
-> :func:`close` (records closed; the caller emits the Asset event with :func:`close_extra`).
Rows that reach a closed partition later are found by :func:`find_reopened` (the partition is recorded
reopened) and the partition goes through verify and close again.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import LaketideError
from laketide.landing import hour_start, parse_partition, partition_key
from laketide.partitions import State, partition_rows
from laketide.status import StatusRecord, history, record
from laketide.verify import Verification, verify_partition


class VerificationFailed(LaketideError):
    """Counts do not add up: the partition stays unclosed. ``retryable`` when files are still pending."""

    def __init__(self, verification: Verification) -> None:
        super().__init__(verification.message())
        self.verification = verification
        self.retryable = verification.pending_files > 0


def parse_hour(value: str | datetime) -> datetime:
    """A partition given as a DAG param or a template (``{{ data_interval_start }}``): a UTC hour start."""
    if isinstance(value, datetime):
        return hour_start(value)
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"partition {value!r} is not an ISO timestamp like 2026-11-22T03:00:00+00:00") from None
    if dt.tzinfo is None:
        raise ValueError(f"partition {value!s} has no UTC offset: write e.g. 2026-11-22T03:00:00+00:00")
    return hour_start(dt)


def record_decision(config: LaketideConfig, decision: dict[str, Any], run_id: str | None) -> None:
    """Record the sensor's decision about a partition (``PartitionStatus.to_dict()``) in the status table."""
    record(config, StatusRecord(
        decision["stream"], parse_hour(decision["partition"]), State(decision["state"]), rows=decision["rows"],
        snapshot_id=decision["snapshot_id"], reason=decision["reason"], run_id=run_id,
    ))


def verify(config: LaketideConfig, stream: StreamConfig, partition: datetime, run_id: str | None = None,
           decision: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record the sensor's decision (if given), verify the partition, record verified or failed.

    :raises VerificationFailed: with the numbers in the message; nothing is closed.
    """
    if decision is not None:
        record_decision(config, decision, run_id)
    result = verify_partition(config, stream, partition)
    state = State.VERIFIED if result.success else State.FAILED
    record(config, _record(stream, partition, state, result, run_id))
    if not result.success:
        raise VerificationFailed(result)
    return {"partition": partition_key(partition), "audit": result.audit, "lake": result.lake,
            "rejects": result.rejects, "snapshot_id": result.snapshot_id, "results": str(result.results_path)}


def _record(stream: StreamConfig, partition: datetime, state: State, result: Verification,
            run_id: str | None) -> StatusRecord:
    return StatusRecord(
        stream.name, partition, state, rows=result.lake, rejects=result.rejects, audit=result.audit,
        verification=result.summary_json(), snapshot_id=result.snapshot_id, reason=result.message(), run_id=run_id,
    )


def close(config: LaketideConfig, stream: StreamConfig, verified: dict[str, Any],
          run_id: str | None = None) -> dict[str, Any]:
    """Record the partition closed at the verified snapshot; return the Asset event's extra."""
    partition = parse_partition(verified["partition"])
    record(config, StatusRecord(
        stream.name, partition, State.CLOSED, rows=verified["lake"], rejects=verified["rejects"],
        audit=verified["audit"], snapshot_id=verified["snapshot_id"],
        verification=json.dumps({"success": True, "results": verified["results"]}),
        reason=f"verified: audit {verified['audit']} == lake {verified['lake']} + rejects {verified['rejects']}",
        run_id=run_id,
    ))
    return close_extra(stream, verified)


def close_extra(stream: StreamConfig, verified: dict[str, Any]) -> dict[str, Any]:
    """What downstream DAGs get in the Asset event: the table, the partition and its counts."""
    return {
        "stream": stream.name, "table": stream.table, "partition": verified["partition"],
        "rows": verified["lake"], "rejects": verified["rejects"], "snapshot_id": verified["snapshot_id"],
    }


def find_reopened(config: LaketideConfig, stream: StreamConfig, run_id: str | None = None) -> list[str]:
    """Closed partitions whose row count changed since their close (late rows): record them reopened.

    Row counts come from the partitions metadata table (manifests, not data files). A reopened partition
    whose re-close has not succeeded yet is returned again, until it closes.
    """
    records = history(config, stream.name)
    if not any(r.state == State.CLOSED for r in records):
        return []
    current = partition_rows(config, stream)
    last: dict[datetime, StatusRecord] = {}
    ever_closed: set[datetime] = set()
    for rec in records:
        last[rec.partition] = rec
        if rec.state == State.CLOSED:
            ever_closed.add(rec.partition)
    reopened: list[StatusRecord] = []
    pending: set[datetime] = set()
    for partition, rec in sorted(last.items()):
        rows = current.get(partition, 0)
        if rec.state == State.CLOSED and rows != (rec.rows or 0):
            reopened.append(StatusRecord(
                stream.name, partition, State.REOPENED, rows=rows, snapshot_id=rec.snapshot_id, run_id=run_id,
                reason=f"{rows - (rec.rows or 0):+d} rows since the close at snapshot {rec.snapshot_id} "
                       f"({rec.rows} rows then, {rows} now): re-verify and re-close",
            ))
        elif rec.state in (State.REOPENED, State.VERIFIED, State.FAILED) and partition in ever_closed:
            pending.add(partition)
    if reopened:
        record(config, *reopened)
    return [partition_key(p) for p in sorted(pending | {r.partition for r in reopened})]
