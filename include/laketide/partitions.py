"""Partition status from Iceberg metadata only: open, complete, empty, lagging, gap (see docs/operations.md).

Plain functions over the snapshot summaries the writer leaves (``laketide.commits``), read incrementally
from the last snapshot a check has seen: no Spark, no data-file scans.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    """Every state a partition goes through (the status table's ``state`` column)."""

    OPEN = "open"  # the writer's watermark has not passed partition end + allowed lateness
    COMPLETE = "complete"  # watermark passed end + lateness, and no rows added for the idle window
    EMPTY = "empty"  # watermark passed end + lateness, and the partition has no rows (a real quiet hour)
    LAGGING = "lagging"  # the writer is more than two periods behind now: nothing is declared
    GAP = "gap"  # the stream stalled while the writer should be current: alert, do not close
    VERIFIED = "verified"  # counts verified by Great Expectations
    FAILED = "failed"  # verification failed: the partition stays unclosed
    CLOSED = "closed"  # verified and recorded; an Asset event names the partition
    REOPENED = "reopened"  # rows arrived after the close: re-verified and re-closed
