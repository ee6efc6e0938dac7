"""The hours of a close range decided when the run starts, verified together by one task.

Every Airflow task costs a process: its start, the DAG file's parsing, the Task SDK's calls and, for a
verification, Great Expectations' import, several seconds each on a small machine against a fraction of a second
of work per hour. A range verifies its ready hours in one task instead (:func:`verify_batch`), each hour as a task
of its own would (its decision and outcome recorded); each is then closed by a task of its own (its Asset event
carries its own close record: an Airflow task emits one extra per asset). An hour that fails its verification
fails the batch's task, every failed hour named (:func:`failures`): no hour of the batch closes in that run.
"""

from __future__ import annotations

from typing import Any

from laketide.close.closing import parse_hour, verify
from laketide.close.results import PartitionEvent
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import VerificationFailed


def verify_batch(config: LaketideConfig, stream: StreamConfig, decisions: list[dict[str, Any]],
                 run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Verify each hour of a batch, oldest first (as :func:`laketide.close.closing.verify`: the decision recorded,
    then the verification, its outcome recorded). Returns the hours that passed (``verified``: their records) and
    those that failed (``failed``: partition, message, ``retryable`` when landed files of the hour still wait for
    the writer)."""
    verified: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for decision in decisions:
        event = PartitionEvent.from_dict(decision)
        try:
            verified.append(verify(config, stream, parse_hour(event.partition), run_id, event).to_dict())
        except VerificationFailed as exc:
            failed.append({"partition": event.partition, "message": str(exc), "retryable": exc.retryable})
    return {"verified": verified, "failed": failed}


def failures(result: dict[str, list[dict[str, Any]]]) -> tuple[str, bool] | None:
    """What failed in a verified batch (one hour a line) and whether a retry may help (landed files of a failed hour
    still wait for the writer), or None."""
    failed = result.get("failed") or []
    if not failed:
        return None
    lines = "\n".join(f"  {f['partition']}: {f['message']}" for f in failed)
    return (f"{len(failed)} of {len(failed) + len(result.get('verified') or [])} hours failed their verification; "
            f"none of them closes in this run:\n{lines}", any(f["retryable"] for f in failed))
