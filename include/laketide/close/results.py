"""The close stage's results as they travel between tasks: typed objects with a plain-dict wire format.

A trigger event's payload, an XCom value and an Asset event's extra must stay JSON-serialisable, so each object
has ``to_dict()`` (what is sent: plain JSON values, the same keys as always) and ``from_dict()`` (what a task
reads back); code in between uses attributes, not keys.

* :class:`PartitionEvent`: a partition decided (or given up on) by the sensor and its trigger;
* :class:`VerifiedPartition`: a partition that passed verification, handed from ``verify`` to ``close``;
* :class:`ClosedPartition`: the close record downstream DAGs get as the Asset event's extra, and the done-markers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from laketide.close.partitions import State
from laketide.lake.snapshots import id_number, id_text

if TYPE_CHECKING:
    from laketide.close.partitions import PartitionStatus
    from laketide.config import StreamConfig


def balance(audit: int, lake: int, rejects: int, duplicates: int = 0) -> str:
    """The count arithmetic of a partition as one phrase: ``audit 146 == lake 71 + rejects 4 + duplicates removed
    71`` (with ``!=`` and what is missing or extra when it does not add up)."""
    dups = f" + duplicates removed {duplicates}" if duplicates else ""
    missing = audit - lake - rejects - duplicates
    if missing == 0:
        return f"audit {audit} == lake {lake} + rejects {rejects}{dups}"
    diff = f"missing {missing}" if missing > 0 else f"{-missing} more than reported"
    return f"audit {audit} != lake {lake} + rejects {rejects}{dups} ({diff})"


@dataclass(frozen=True)
class PartitionEvent:
    """What the partition-completion trigger fires and the sensor pushes: one check's outcome about a partition.

    ``timeout``: the trigger gave up at its deadline with the last undecided outcome (the sensor fails with it).
    """

    stream: str
    #: the partition key (``2026-11-22T03:00:00+00:00``)
    partition: str
    state: State
    reason: str
    rows: int
    watermark: str | None
    snapshot_id: int | None
    #: ISO time of the check
    checked_at: str
    timeout: bool = False

    @classmethod
    def from_status(cls, status: PartitionStatus, *, timeout: bool = False) -> PartitionEvent:
        return cls.from_dict({**status.to_dict(), "timeout": timeout})

    @property
    def decided(self) -> bool:
        """Complete, empty (close it) or gap (alert): the outcomes a sensor stops on."""
        return self.state in (State.COMPLETE, State.EMPTY, State.GAP)

    def to_dict(self) -> dict[str, Any]:
        """The trigger event's payload and the sensor's XCom (``timeout`` only when set; the snapshot id a string:
        Airflow's UI shows XComs in JavaScript, which rounds integers above 2^53)."""
        out: dict[str, Any] = {
            "stream": self.stream, "partition": self.partition, "state": self.state.value, "reason": self.reason,
            "rows": self.rows, "watermark": self.watermark, "snapshot_id": id_text(self.snapshot_id),
            "checked_at": self.checked_at,
        }
        if self.timeout:
            out["timeout"] = True
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionEvent:
        return cls(
            stream=str(data["stream"]), partition=str(data["partition"]), state=State(data["state"]),
            reason=str(data.get("reason") or ""), rows=int(data.get("rows") or 0), watermark=data.get("watermark"),
            snapshot_id=id_number(data.get("snapshot_id")), checked_at=str(data.get("checked_at") or ""),
            timeout=bool(data.get("timeout", False)),
        )


@dataclass(frozen=True)
class VerifiedPartition:
    """A partition that passed verification: the counts and the snapshot its close records."""

    #: the partition key
    partition: str
    audit: int
    lake: int
    rejects: int
    snapshot_id: int | None
    #: where the full Great Expectations result was saved
    results: str
    #: rows removed or dropped as duplicate event ids (repair, ``dedupe_on_write``): the audit still counts them
    duplicates: int = 0

    def balance(self) -> str:
        """The verified arithmetic, e.g. ``audit 146 == lake 71 + rejects 4 + duplicates removed 71``."""
        return balance(self.audit, self.lake, self.rejects, self.duplicates)

    def to_dict(self) -> dict[str, Any]:
        """The ``verify`` task's XCom (the snapshot id a string, as in every JSON laketide hands out)."""
        return {"partition": self.partition, "audit": self.audit, "lake": self.lake, "rejects": self.rejects,
                "duplicates": self.duplicates, "snapshot_id": id_text(self.snapshot_id), "results": self.results}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerifiedPartition:
        return cls(str(data["partition"]), int(data["audit"]), int(data["lake"]), int(data["rejects"]),
                   id_number(data.get("snapshot_id")), str(data["results"]), int(data.get("duplicates") or 0))


@dataclass(frozen=True)
class ClosedPartition:
    """The close record: the Asset event's extra, and what the done-markers send (file, HTTP POST, callable)."""

    stream: str
    table: str
    #: the partition key
    partition: str
    rows: int
    rejects: int
    snapshot_id: int | None
    #: the audited count (producers' reports): rows + rejects + duplicates removed
    audit: int = 0
    #: ISO time the close was recorded (the status row's ``recorded_at``)
    closed_at: str = ""
    #: the hour had been closed before (late rows, a redo, a backfill): consumers should read it again
    reclose: bool = False
    #: rows removed as duplicate event ids (a repair, ``dedupe_on_write``) at the verified snapshot: the audit
    #: counts them, so ``audit == rows + rejects + duplicates_removed``
    duplicates_removed: int = 0
    #: the snapshot of the hour's previous close (None: its first close): the hour's rows at ``snapshot_id`` that
    #: were not there at this one are what changed since a consumer last read it (``snapshot_range``)
    previous_snapshot_id: int | None = None

    @classmethod
    def of(cls, stream: StreamConfig, verified: VerifiedPartition, closed_at: datetime | None = None,
           reclose: bool = False, previous_snapshot_id: int | None = None) -> ClosedPartition:
        return cls(stream.name, stream.table, verified.partition, verified.lake, verified.rejects,
                   verified.snapshot_id, verified.audit, closed_at.isoformat() if closed_at else "", reclose,
                   verified.duplicates, previous_snapshot_id)

    def to_dict(self) -> dict[str, Any]:
        """The Asset event's extra and the done-marker record (plain JSON values). The snapshot id is a string of
        digits: Iceberg's ids use all 63 bits, and a JSON number above 2^53 is rounded by every JavaScript reader
        (Airflow's own UI among them) and by many JSON libraries.

        ``snapshot_range``: ``{"from": <the snapshot of the hour's previous close, null at its first>, "to": <this
        close's snapshot>}``: a consumer reads the hour at ``to`` (``snapshot_id``), and what changed since it last
        read the hour as the rows at ``to`` that were not at ``from`` (``laketide.airflow.downstream.hour_changes``;
        an upsert stream's change log only grows, so those are the hour's new changes)."""
        return {"stream": self.stream, "table": self.table, "partition": self.partition, "rows": self.rows,
                "rejects": self.rejects, "duplicates_removed": self.duplicates_removed, "audit": self.audit,
                "snapshot_id": id_text(self.snapshot_id), "closed_at": self.closed_at, "reclose": self.reclose,
                "snapshot_range": {"from": id_text(self.previous_snapshot_id), "to": id_text(self.snapshot_id)}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClosedPartition:
        """Also an extra of an event emitted before ``audit``, ``closed_at``, ``reclose`` and ``duplicates_removed``
        were added, or with the snapshot id as a JSON number."""
        previous = (data.get("snapshot_range") or {}).get("from")
        return cls(str(data["stream"]), str(data["table"]), str(data["partition"]), int(data["rows"]),
                   int(data["rejects"]), id_number(data.get("snapshot_id")), int(data.get("audit") or 0),
                   str(data.get("closed_at") or ""), bool(data.get("reclose", False)),
                   int(data.get("duplicates_removed") or 0), id_number(previous))
