"""What each stream's writer committed in this process, batch by batch: the counters and last-batch figures of the
metrics page (``laketide.ingest.metrics``), so that a team can graph throughput and alert on "no commit for 10
minutes" or a stuck watermark.

Stdlib only. The writer's ``foreachBatch`` calls :func:`record` after each commit (from the py4j callback thread of
its stream); the metrics server reads :func:`of` when it is scraped. Counters start at 0 with the process, as
Prometheus counters do (its ``rate`` and ``increase`` handle the reset of a restarted application).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from bisect import bisect_left
from datetime import datetime

#: upper bounds (seconds) of the batch-duration histogram's buckets (``le``), +Inf beside them
BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclasses.dataclass(frozen=True)
class Committed:
    """A stream's commits in this process."""

    batches: int = 0
    rows: int = 0  # valid rows committed to the events table
    rejects: int = 0  # rejected lines committed to the rejects table
    seconds: float = 0.0  # the batches' durations, summed
    last_seconds: float | None = None  # the last batch's duration
    last_commit: float | None = None  # when the last batch committed (epoch seconds)
    watermark: float | None = None  # the stream's watermark after it (epoch seconds)
    #: batches per bucket of BUCKETS (not cumulative; longer ones counted in ``batches`` only)
    durations: tuple[int, ...] = (0,) * len(BUCKETS)

    def cumulative(self) -> list[tuple[str, int]]:
        """The histogram's buckets as Prometheus writes them: ``(le, batches that took at most le)``, +Inf last."""
        out, seen = [], 0
        for bound, count in zip(BUCKETS, self.durations, strict=True):
            seen += count
            out.append((f"{bound:g}", seen))
        return [*out, ("+Inf", self.batches)]


_FIGURES: dict[str, Committed] = {}
_LOCK = threading.Lock()


def record(stream: str, valid: int, rejected: int, seconds: float, watermark: str | None) -> None:
    """One committed batch of ``stream``: ``valid`` rows, ``rejected`` lines, ``seconds`` long; ``watermark``: the
    watermark its commit recorded (ISO 8601, or None)."""
    mark = datetime.fromisoformat(watermark).timestamp() if watermark else None
    with _LOCK:
        before = _FIGURES.get(stream, Committed())
        bucket = bisect_left(BUCKETS, seconds)
        durations = tuple(n + (i == bucket) for i, n in enumerate(before.durations))
        _FIGURES[stream] = Committed(
            batches=before.batches + 1, rows=before.rows + valid, rejects=before.rejects + rejected,
            seconds=before.seconds + seconds, last_seconds=seconds, last_commit=time.time(),
            watermark=mark if mark is not None else before.watermark, durations=durations,
        )


def of(stream: str) -> Committed:
    """``stream``'s commits in this process (all zero before its first)."""
    with _LOCK:
        return _FIGURES.get(stream, Committed())
