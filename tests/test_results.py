"""The close stage's typed results keep a plain JSON wire format (trigger events, XComs, Asset extras)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from laketide.close.partitions import PartitionStatus, State
from laketide.close.results import ClosedPartition, PartitionEvent, VerifiedPartition
from laketide.close.verify import Verification, verified_partition
from tests.helpers import load, write_config

HOUR = datetime(2026, 11, 22, 3, tzinfo=UTC)
KEY = "2026-11-22T03:00:00+00:00"


def _status(state: State) -> PartitionStatus:
    return PartitionStatus("clicks", HOUR, state, "watermark passed", 7, "2026-11-22T04:20:00+00:00", 12,
                           datetime(2026, 11, 22, 5, tzinfo=UTC))


def test_a_partition_event_is_the_status_dict_and_round_trips_through_json() -> None:
    event = PartitionEvent.from_status(_status(State.COMPLETE))
    wire = event.to_dict()
    assert wire == _status(State.COMPLETE).to_dict()  # the keys sent since the first release, no "timeout"
    assert wire["snapshot_id"] == "12"  # a string, as every snapshot id laketide hands out as JSON
    back = PartitionEvent.from_dict(json.loads(json.dumps(wire)))
    assert back == event and back.decided and back.state is State.COMPLETE and back.rows == 7

    timed_out = PartitionEvent.from_status(_status(State.LAGGING), timeout=True)
    assert timed_out.to_dict()["timeout"] is True and not timed_out.decided
    assert PartitionEvent.from_dict(json.loads(json.dumps(timed_out.to_dict()))) == timed_out
    assert PartitionEvent.from_status(_status(State.GAP)).decided


def test_the_verified_partition_and_the_close_record_round_trip(tmp_path: Path) -> None:
    stream = load(write_config(tmp_path)).stream("clicks")
    verification = Verification(stream="clicks", partition=HOUR, success=True, audit=10, lake=8, rejects=2,
                                pending_files=0, snapshot_id=42, failures=[], results_path=tmp_path / "r.json")
    verified = verified_partition(verification)
    assert verified.to_dict() == {"partition": KEY, "audit": 10, "lake": 8, "rejects": 2, "duplicates": 0,
                                  "snapshot_id": "42", "results": str(tmp_path / "r.json")}
    assert VerifiedPartition.from_dict(json.loads(json.dumps(verified.to_dict()))) == verified

    at = datetime(2026, 11, 22, 4, 12, 5, tzinfo=UTC)
    closed = ClosedPartition.of(stream, verified, closed_at=at, reclose=True, previous_snapshot_id=41)
    assert closed.to_dict() == {"stream": "clicks", "table": stream.table, "partition": KEY, "rows": 8,
                                "rejects": 2, "duplicates_removed": 0, "audit": 10, "snapshot_id": "42",
                                "closed_at": "2026-11-22T04:12:05+00:00", "reclose": True,
                                "snapshot_range": {"from": "41", "to": "42"}}
    assert ClosedPartition.from_dict(json.loads(json.dumps(closed.to_dict()))) == closed
    # a repaired hour's record names the duplicates removed, which its audit counts
    repaired = VerifiedPartition.from_dict({**verified.to_dict(), "audit": 13, "duplicates": 3})
    announced = ClosedPartition.of(stream, repaired, closed_at=at).to_dict()
    assert announced["duplicates_removed"] == 3 and announced["audit"] == 8 + 2 + 3
    assert ClosedPartition.from_dict(json.loads(json.dumps(announced))).duplicates_removed == 3
    # the extra of an event emitted before audit, closed_at, reclose and duplicates_removed were added still reads
    old = {"stream": "clicks", "table": stream.table, "partition": KEY, "rows": 8, "rejects": 2, "snapshot_id": 42}
    assert ClosedPartition.from_dict(old) == ClosedPartition("clicks", stream.table, KEY, 8, 2, 42)
    # Iceberg's ids use 63 bits: as a JSON number a JavaScript reader rounds them, as a string nobody does
    big = ClosedPartition("clicks", stream.table, KEY, 8, 2, 2**63 - 25)
    assert json.loads(json.dumps(big.to_dict()))["snapshot_id"] == "9223372036854775783"
    assert ClosedPartition.from_dict(json.loads(json.dumps(big.to_dict()))) == big


def test_the_arithmetic_of_a_close_names_every_term() -> None:
    from laketide.close.results import balance

    assert balance(146, 71, 4, 71) == "audit 146 == lake 71 + rejects 4 + duplicates removed 71"
    assert balance(10, 6, 4) == "audit 10 == lake 6 + rejects 4"
    assert balance(10, 5, 4) == "audit 10 != lake 5 + rejects 4 (missing 1)"
    assert balance(10, 8, 4, 1) == "audit 10 != lake 8 + rejects 4 + duplicates removed 1 (3 more than reported)"
    verified = VerifiedPartition("2026-11-22T03:00:00+00:00", 146, 71, 4, 1, "r.json", 71)
    assert verified.balance() == "audit 146 == lake 71 + rejects 4 + duplicates removed 71"
    assert VerifiedPartition.from_dict(json.loads(json.dumps(verified.to_dict()))) == verified
