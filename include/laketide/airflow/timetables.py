"""The close DAG's timetable for a stream that replays history (``live: false``).

A replayed stream's hours close when its backfill or a close range asks for them: the hourly runs the live
streams' partitioned timetable starts would each find an hour the replay has nothing for. :class:`ReplayHours` is
that timetable with the scheduler's part taken out: the scheduler never starts a run of it, while
``airflow backfill create`` still enumerates one run per hour of its range (partition key the hour), and manual
runs (a close range, a partition key) work as for a live stream. Registered by laketide's plugin (a custom
timetable must be, to be serialized).
"""

from __future__ import annotations

from typing import Any

from airflow.timetables.base import DagRunInfo, TimeRestriction
from airflow.timetables.trigger import CronPartitionTimetable


class ReplayHours(CronPartitionTimetable):
    """Hourly partitions enumerated by backfills and close ranges, never scheduled."""

    can_be_scheduled = False

    def __init__(self, cron: str, **kwargs: Any) -> None:
        super().__init__(cron, **kwargs)
        self.description = "replay: no scheduled runs (backfill or close range)"

    @property
    def summary(self) -> str:
        return "replay (backfill or close range)"

    def next_dagrun_info_v2(self, *, last_dagrun_info: DagRunInfo | None,
                            restriction: TimeRestriction) -> DagRunInfo | None:
        return None
