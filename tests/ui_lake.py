"""A small real lake for the lakehouse view's tests: real landing files (the contract's data files and audit
records) committed to a real Iceberg events table with the writer's markers (``laketide.dev.commits``, pyiceberg:
no Spark), real status records of every recorded state, a real landed file the writer has not committed, a real
writer lease and a real action record.

With H the current hour: hours H-10 .. H-5 are landed and committed (H-9 is a quiet hour: nothing landed), and the
status table records H-10 closed, H-9 empty, H-8 gap, H-7 failed (with a landing-file finding), H-6 reopened by a
repair. A file of H-3 landed and is not committed: of the hours being written (H-5 .. H, checked now from metadata),
H-5 and H-4 are open (the watermark has not passed them, the writer is busy with later files) and H-3 on lagging.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from laketide.close.partitions import State
from laketide.close.status import StatusRecord, record
from laketide.config import LaketideConfig
from laketide.dev.commits import commit_files, land
from laketide.lake.hours import partition_key
from tests.helpers import load, write_config

#: what the board must show for each hour offset from the current hour
EXPECTED = {-10: "closed", -9: "empty", -8: "gap", -7: "failed", -6: "reopened", -5: "open", -3: "lagging",
            0: "lagging"}


def close_run_id(hour: datetime) -> str:
    """The id of the (scheduled) close run recorded on a closed hour of the lake."""
    return f"scheduled__{(hour + timedelta(hours=1)).isoformat()}"


@dataclass(frozen=True)
class UiLake:
    config_path: Path
    config: LaketideConfig
    now_hour: datetime
    #: snapshot ids of the events table, oldest first
    snapshots: list[int]
    pending_file: str

    @property
    def stream(self):  # type: ignore[no-untyped-def]
        return self.config.stream("clicks")

    def hour(self, offset: int) -> datetime:
        return self.now_hour + timedelta(hours=offset)

    def key(self, offset: int) -> str:
        return partition_key(self.hour(offset))


def build_ui_lake(home: Path, catalog_name: str = "laketide") -> UiLake:
    config_path = write_config(home, catalog_name=catalog_name, idle_window="30m", allowed_lateness="10m")
    config = load(config_path)
    stream = config.stream("clicks")
    now_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    hour = lambda offset: now_hour + timedelta(hours=offset)
    snapshots = []
    for batch, offset in enumerate((-10, -8, -7, -6, -5)):
        files = [land(stream, hour(offset), 40 + offset, batch + 1, producer="ui")]
        snapshots.append(commit_files(config, stream, batch, files, rejects=1 if offset == -7 else 0))
    pending = land(stream, hour(-3), 25, 99, producer="ui")
    finding = {"file": "20260101T00-ui-late.JSONL", "reason": "not a data file", "detail": "never read",
               "hours": [partition_key(hour(-7))], "blocking": True}
    repair = {"action": {"action": "repair", "action_id": "r1", "stream": "clicks", "requested_by": "alice",
                         "at": hour(-1).isoformat(), "start": hour(-6).isoformat(), "end": hour(-5).isoformat(),
                         "dry_run": False, "committed": True, "from_snapshot": snapshots[2],
                         "to_snapshot": snapshots[3],
                         "hours": {partition_key(hour(-6)): {"rows_before": 68, "rows_after": 34, "rejects_before": 0,
                                                             "rejects_after": 0, "duplicates_removed": 34}}}}
    t0 = datetime.now(UTC) - timedelta(minutes=30)
    record(config,
           StatusRecord("clicks", hour(-10), State.COMPLETE, rows=30, recorded_at=t0),
           StatusRecord("clicks", hour(-10), State.CLOSED, rows=30, rejects=0, audit=30,
                        snapshot_id=snapshots[0], reason="verified: audit 30 == lake 30 + rejects 0",
                        run_id=close_run_id(hour(-10)), recorded_at=t0 + timedelta(seconds=1)),
           StatusRecord("clicks", hour(-9), State.EMPTY, rows=0, reason="a quiet hour", recorded_at=t0),
           StatusRecord("clicks", hour(-8), State.GAP, rows=32, reason="stream clicks stalled", recorded_at=t0),
           StatusRecord("clicks", hour(-7), State.FAILED, rows=33, rejects=1, audit=40,
                        verification=json.dumps({"success": False, "audit": 40, "lake": 33, "rejects": 1,
                                                 "duplicates": 0, "findings": [finding]}),
                        reason="audit 40 != lake 33 + rejects 1", recorded_at=t0),
           StatusRecord("clicks", hour(-6), State.REOPENED, rows=34, rejects=0, verification=json.dumps(repair),
                        snapshot_id=snapshots[3], run_id="manual__repair",
                        reason="repair r1 by alice: rows 68 -> 34", recorded_at=t0 + timedelta(seconds=2)))
    return UiLake(config_path, config, now_hour, snapshots, pending.name)
