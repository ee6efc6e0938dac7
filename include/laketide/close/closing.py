"""The close of one partition, as plain functions the close DAG's tasks call.

:func:`run_hours` (the hours a run closes: its partition key, or a validated range)
-> :func:`decided_prefix` (the hours decided now, from the first: they close at once)
-> sensor outcome (complete | empty) of the last of them -> :func:`decide_range` (the others, in event-time order)
-> :func:`verify` per hour (Great Expectations; records verified or failed)
-> :func:`close` per hour (records closed, archives the hour's landing files: ``close.archive``; the caller emits
the Asset event, partitioned by :func:`airflow_key`, with the close record as extra, and fires the done-markers).
Rows that reach a closed partition later are found by :func:`find_reopened` (the partition is recorded
reopened) and the partition goes through verify and close again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from laketide.close.archive import archive_closed
from laketide.close.partitions import State, check_partitions, partition_rows
from laketide.close.results import ClosedPartition, PartitionEvent, VerifiedPartition
from laketide.close.status import StatusRecord, history, record
from laketide.close.verify import Verification, verified_partition, verify_partition
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import RangeError, RangeNotDecided, VerificationFailed
from laketide.lake.hours import AIRFLOW_KEY_FORMAT, HOUR, hour_start, parse_partition, partition_key

log = logging.getLogger(__name__)


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


def close_range(start: str | None, end: str | None, now: datetime, max_hours: int) -> list[datetime] | None:
    """The hours ``[start, end)`` of a "close range" run, oldest first; None when neither is given (the run closes
    its data interval).

    :raises RangeError: only one of them given; not an ISO time with a UTC offset; not a whole hour; ``start`` not
        before ``end``; ``end`` after ``now`` (an hour is closed once it has ended); more than ``max_hours`` hours
    """
    given = [v for v in (start, end) if v not in (None, "")]
    if not given:
        return None
    if len(given) == 1:
        raise RangeError("give both start and end (the range [start, end) of whole UTC hours), or neither "
                         "(the run closes its data interval)")
    assert start is not None and end is not None
    bounds = []
    for name, value in (("start", start), ("end", end)):
        try:
            bounds.append(parse_hour(value))
        except ValueError as exc:
            raise RangeError(f"{name}: {exc}") from None
    first, stop = bounds
    if first >= stop:
        raise RangeError(f"start {first.isoformat()} must be before end {stop.isoformat()} (the range is "
                         "[start, end): end is the first hour not closed)")
    if stop > now:
        raise RangeError(f"end {stop.isoformat()} is in the future (now {now.isoformat(timespec='seconds')}): "
                         "an hour is closed once it has ended; the hourly schedule closes the hours to come")
    count = int((stop - first) / HOUR)
    if count > max_hours:
        raise RangeError(f"the range holds {count} hours, more than close.max_range_hours ({max_hours}): split it "
                         "into several runs, or backfill the close DAG (docs/operations.md, Closing history)")
    return [first + i * HOUR for i in range(count)]


def airflow_key(hour: datetime) -> str:
    """The Airflow partition key of an hour (close runs and the closed-hours Asset's events carry it)."""
    return hour_start(hour).strftime(AIRFLOW_KEY_FORMAT)


def parse_airflow_key(key: str) -> datetime:
    """The hour of an Airflow partition key (``2026-11-22T03:00:00``, UTC).

    :raises RangeError: not such a key, or not an hour start
    """
    try:
        hour = datetime.strptime(key.strip(), AIRFLOW_KEY_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise RangeError(f"partition key {key!r} is not a UTC hour like 2026-11-22T03:00:00 (the hour to close)"
                         ) from None
    try:
        return hour_start(hour)
    except ValueError:
        raise RangeError(f"partition key {key!r} is not the start of an hour (e.g. 2026-11-22T03:00:00)") from None


def run_hours(params: Mapping[str, Any], partition_key: str | None, run_time: datetime, now: datetime,
              max_hours: int) -> list[datetime]:
    """The hours a close run closes, oldest first.

    * a "close range" (params ``start`` and ``end``): :func:`close_range`;
    * else the run's partition key (a scheduled run, a backfill, a run triggered with one): that hour;
    * else (a manual run without either) the last hour that ended at or before ``run_time`` (the run's logical
      date or, without one, its ``run_after``), as a run of an hourly interval schedule would.

    :raises RangeError: a bad range, a bad partition key, or an hour that has not started yet
    """
    hours = close_range(params.get("start"), params.get("end"), now, max_hours)
    if hours is not None:
        return hours
    if partition_key:
        hour = parse_airflow_key(partition_key)
        if hour > now:
            raise RangeError(f"partition key {partition_key} is an hour that has not started yet (now "
                             f"{now.isoformat(timespec='seconds')}): nothing of it can be closed")
        return [hour]
    return [run_time.astimezone(UTC).replace(minute=0, second=0, microsecond=0) - HOUR]


def decided_prefix(config: LaketideConfig, stream: StreamConfig, hours: list[str],
                   now: datetime | None = None) -> list[PartitionEvent]:
    """The hours of a run that can close at once: the longest run of complete or empty hours from its first one,
    checked now from metadata, the last hour excepted (the sensor waits for it). A replay's close range closes
    the hours it has decided while its undecided tail waits."""
    ready: list[PartitionEvent] = []
    for status in check_partitions(config, stream, [parse_hour(key) for key in hours[:-1]], now):
        if status.state not in (State.COMPLETE, State.EMPTY):
            break
        ready.append(PartitionEvent.from_status(status))
    return ready


def decide_range(config: LaketideConfig, stream: StreamConfig, hours: list[str], last: PartitionEvent,
                 now: datetime | None = None, closed: int = 0) -> list[PartitionEvent]:
    """The decision of every hour of a run not closed yet, oldest first: ``last`` is the sensor's for the last
    hour, the others (after the ``closed`` first ones, :func:`decided_prefix`) are checked now from metadata
    (together: :func:`laketide.close.partitions.check_partitions`).

    Once the last hour is complete or empty every earlier one is too (its watermark or its idle, committed input
    covers them, and no backlog of the last hour or earlier means none of theirs): an hour that is not, e.g. a
    file of it landed since, fails the run before anything more is recorded.

    :raises RangeNotDecided: naming each such hour with its state and reason
    """
    decisions: list[PartitionEvent] = []
    undecided: list[str] = []
    for status in check_partitions(config, stream, [parse_hour(key) for key in hours[closed:-1]], now):
        key = partition_key(status.partition)
        if status.state in (State.COMPLETE, State.EMPTY):
            decisions.append(PartitionEvent.from_status(status))
        else:
            undecided.append(f"{key} is {status.state}: {status.reason}")
    if undecided:
        raise RangeNotDecided(f"{len(undecided)} hour(s) of {stream.name} before {hours[-1]} (which is "
                              f"{last.state}) are not decided; nothing more recorded: " + "; ".join(undecided))
    return [*decisions, last]


def record_decision(config: LaketideConfig, decision: PartitionEvent, run_id: str | None) -> None:
    """Record the sensor's decision about a partition in the status table."""
    record(config, StatusRecord(
        decision.stream, parse_hour(decision.partition), decision.state, rows=decision.rows,
        snapshot_id=decision.snapshot_id, reason=decision.reason, run_id=run_id,
    ))


def verify(config: LaketideConfig, stream: StreamConfig, partition: datetime, run_id: str | None = None,
           decision: PartitionEvent | None = None) -> VerifiedPartition:
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
    return verified_partition(result)


def _record(stream: StreamConfig, partition: datetime, state: State, result: Verification,
            run_id: str | None) -> StatusRecord:
    return StatusRecord(
        stream.name, partition, state, rows=result.lake, rejects=result.rejects, audit=result.audit,
        verification=result.summary_json(), snapshot_id=result.snapshot_id, reason=result.message(), run_id=run_id,
    )


def close(config: LaketideConfig, stream: StreamConfig, verified: VerifiedPartition,
          run_id: str | None = None) -> ClosedPartition:
    """Record the partition closed at the verified snapshot; return the close record (the Asset event's extra and
    the done-markers' record), a re-close when the hour had been closed before."""
    partition = parse_partition(verified.partition)
    before = [r for r in history(config, stream.name, partition) if r.state == State.CLOSED]
    closed = StatusRecord(
        stream.name, partition, State.CLOSED, rows=verified.lake, rejects=verified.rejects,
        audit=verified.audit, snapshot_id=verified.snapshot_id,
        verification=json.dumps({"success": True, "duplicates": verified.duplicates, "results": verified.results}),
        reason=f"verified: {verified.balance()}",
        run_id=run_id,
    )
    record(config, closed)
    try:  # the hour's landing files out of the writer's way; a failure leaves them for the next close or sweep
        archive_closed(config, stream, {verified.partition: closed.recorded_at})
    except Exception:
        log.warning("archiving the landing files of %s hour %s failed; they stay in data/ (./laketide archive moves "
                    "them)", stream.name, verified.partition, exc_info=True)
    return ClosedPartition.of(stream, verified, closed.recorded_at, bool(before),
                              before[-1].snapshot_id if before else None)


def find_reopened(config: LaketideConfig, stream: StreamConfig, run_id: str | None = None,
                  closing: Iterable[str] = ()) -> list[str]:
    """Closed partitions whose row count changed since their close (late rows): record them reopened.

    Row counts come from the partitions metadata table (manifests, not data files). A reopened partition
    whose re-close has not succeeded yet is returned again, until it closes. The hours in ``closing`` (those the
    calling run closes itself) are recorded but not returned: each hour is verified once per run.
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
    skip = set(closing)
    return [key for p in sorted(pending | {r.partition for r in reopened}) if (key := partition_key(p)) not in skip]
