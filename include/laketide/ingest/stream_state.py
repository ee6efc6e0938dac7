"""One stream of a writer application, as the application, its health rounds and its metrics page see it.

Below ``group``, ``group_health`` and ``metrics``, which all read it: none of them imports another for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from laketide.config import StreamConfig
    from laketide.ingest.backlog import Freshness
    from laketide.ingest.late_files import LateFiles
    from laketide.lake.lease import WriterLease


@dataclass
class Writer:
    """One stream of the application."""

    stream: StreamConfig
    lease: WriterLease
    late: LateFiles
    commit_path: str = "internal"
    query: StreamingQuery | None = None
    state: str = "starting"  # running | stopping | waiting | failed | held out | stopped | done
    reason: str = ""
    error: Exception | None = None
    #: when to try to start it again (monotonic), for a waiting, failed or held-out stream
    retry_at: float = 0.0
    #: its last wait after a failure (0: none yet; see :func:`retry_wait`)
    backoff: float = 0.0
    #: the newest committed batch when it last started (it recovered once a later one commits)
    started_from: int = -1
    figures: Freshness | None = None
    alerted: set[str] = field(default_factory=set)
    #: another writer took its lease while it ran
    lost: bool = False
