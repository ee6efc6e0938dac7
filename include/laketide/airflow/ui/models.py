"""The JSON shapes of the lakehouse view's API (Pydantic models: FastAPI validates and documents them).

Snapshot ids are strings: they are 64-bit, and a browser's JSON numbers round them past 2^53.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class StreamInfo(BaseModel):
    name: str
    table: str
    rejects_table: str
    close_dag: str
    live: bool
    #: the logged-in user may start runs of ``close_dag`` (a close range from the board)
    may_close: bool = False


class StreamList(BaseModel):
    streams: list[StreamInfo]
    #: the DAG a "redo from here" triggers
    redo_dag: str
    #: the logged-in user may start runs of ``redo_dag`` (the view shows "redo from here" only then)
    may_redo: bool = False
    #: the DAGs of the board's backfill and repair buttons, and whether the user may start their runs
    backfill_dag: str = "laketide_backfill"
    repair_dag: str = "laketide_repair"
    may_backfill: bool = False
    may_repair: bool = False


class Cell(BaseModel):
    """One hour of the partition board."""

    hour: str = Field(description="the hour's start, ISO with offset (the partition key)")
    state: str = Field(description="a partition state (open, complete, empty, lagging, gap, verified, failed, closed, "
                                   "reopened), or 'none' when nothing is recorded for the hour")
    #: True when the state was checked now from metadata (an hour being written), False when recorded
    checked_now: bool = False
    rows: int | None = None
    rejects: int | None = None
    audit: int | None = None
    duplicates_removed: int | None = None
    reason: str | None = None
    recorded_at: str | None = None
    snapshot_id: str | None = None
    run_id: str | None = None


class DaySummary(BaseModel):
    """One day of the board: its hours by state, and the rows and rejects of its hours."""

    day: str = Field(description="the UTC day, YYYY-MM-DD")
    counts: dict[str, int]
    rows: int = 0
    rejects: int = 0


class Board(BaseModel):
    """The partition board of one stream over ``[start, end)``."""

    stream: str
    table: str
    start: str
    end: str
    now: str
    #: every state, in the legend's order
    states: list[str]
    #: hours per state in the range
    counts: dict[str, int]
    cells: list[Cell]
    #: the status table's metadata file the recorded states were read from (the cache key)
    status_version: str | None = None
    #: how long the answer took on the server
    elapsed_ms: float = 0.0
    #: per day of the range (every hour, whatever ``state`` shows): hours by state, rows, rejects
    days: list[DaySummary] = []
    #: the state the cells are filtered on (``counts`` and ``days`` still count every hour), or None
    state: str | None = None


class ActionPlan(BaseModel):
    """The run an action on an hour range of the board starts: its DAG and params, checked (a dry run first where
    the DAG has one). The page starts it through Airflow's REST API as the logged-in user."""

    action: str = Field(description="close, backfill, repair or redo")
    stream: str
    dag_id: str
    conf: dict[str, object]
    hours: list[str]
    #: the DAG has a ``dry_run`` param (on in ``conf``)
    dry_run: bool
    note: str


class HourStep(BaseModel):
    state: str
    recorded_at: str
    rows: int | None = None
    rejects: int | None = None
    audit: int | None = None
    reason: str | None = None
    snapshot_id: str | None = None
    run_id: str | None = None
    verification: dict[str, object] | None = None


class HourDetail(BaseModel):
    """One hour: its latest state and every recorded step, oldest first."""

    stream: str
    hour: str
    cell: Cell
    steps: list[HourStep]


class Holder(BaseModel):
    host: str
    pid: int
    mode: str
    acquired_at: str
    heartbeat_at: str
    heartbeat_age_s: float


class Batch(BaseModel):
    batch_id: int
    snapshot_id: str
    committed_at: str
    rows: int | None = None
    rejects: int | None = None
    min_event_time: str | None = None
    max_event_time: str | None = None
    watermark: str | None = None
    files: int = 0
    #: commit time - the newest landing time of its files (seconds), when the writer recorded the files' times
    freshness_s: float | None = None
    #: an upsert stream's batch: the keys its merge changed, by the operation of their newest change
    #: (insert, update, delete; ``upsert`` for a change that does not say)
    operations: dict[str, int] | None = None


class Freshness(BaseModel):
    """Landed -> committed over the last hour: commit time - the landing time of each file it committed."""

    commits: int
    files: int
    median_s: float | None = None
    p95_s: float | None = None
    max_s: float | None = None


class Reported(BaseModel):
    """What the stream's writer application last reported (its writer status record)."""

    group: str
    state: str = Field(description="starting, running, stopping, waiting, failed, held out (its batch killed the "
                                   "writer application; the reason names its files), stopped, done")
    reason: str
    application: str
    updated_at: str


class Writer(BaseModel):
    """The stream's writer: running or not, its recent batches, lag, backlog and freshness."""

    stream: str
    group: str = Field(description="the writer group (application) the stream runs in")
    reported: Reported | None = None
    writer_id: str
    running: bool
    state: str = Field(description="running, stale (lease not renewed within writer_lease), stopped, never started")
    holder: Holder | None = None
    writer_lease_s: float
    batches: list[Batch]
    last_commit: str | None = None
    watermark: str | None = None
    lag_s: float | None = Field(None, description="now - watermark, seconds")
    backlog_files: int = 0
    backlog_bytes: int = 0
    oldest_backlog: str | None = None
    oldest_backlog_landed: str | None = None
    freshness: Freshness
    now: str


class Snapshot(BaseModel):
    snapshot_id: str
    parent_id: str | None = None
    committed_at: str
    operation: str
    what: str
    rows: int | None = None
    rejects: int | None = None
    watermark: str | None = None
    current: bool = False


class Timeline(BaseModel):
    stream: str
    table: str
    snapshots: list[Snapshot]


class RedoPlan(BaseModel):
    """What "redo from here" would do, and the redo DAG's params, filled in (a dry run first)."""

    stream: str
    snapshot_id: str
    dag_id: str
    conf: dict[str, object]
    report: list[str]
    hours: list[str]
    reingest_files: int
    snapshots_left_out: int
    note: str


class TableHealth(BaseModel):
    table: str
    files: int
    small_files: int
    small_file_ratio: float
    manifests: int
    snapshots: int
    metadata_bytes: int
    closed_hours: int
    max_files_per_closed_hour: int
    last_maintenance: str | None = None
    #: delete files (an upsert stream's merged table under merge-on-read), their share of the files a read opens
    #: and the rows they delete
    delete_files: int = 0
    delete_file_share: float = 0.0
    deleted_rows: int = 0


class MaintenanceStep(BaseModel):
    run_id: str
    table: str
    action: str
    outcome: str
    dry_run: bool
    started_at: str
    line: str


class Health(BaseModel):
    tables: list[TableHealth]
    maintenance: list[MaintenanceStep]


class LandingFile(BaseModel):
    file: str
    reason: str
    detail: str
    hours: list[str] = []
    blocking: bool = True
    #: where it was found: "landing zone" (now, metadata only) or "verification of <hour>" (recorded)
    source: str


class Landing(BaseModel):
    stream: str
    landing_path: str
    #: files of data/ the writer reads and has not committed yet (the backlog)
    pending: list[str]
    reported: list[LandingFile]


class ActionItem(BaseModel):
    action_id: str
    action: str
    stream: str
    outcome: str
    dry_run: bool
    requested_by: str | None = None
    run_id: str | None = None
    started_at: str
    recorded_at: str
    from_snapshot: str | None = None
    to_snapshot: str | None = None
    start: str | None = None
    end: str | None = None
    hours: dict[str, dict[str, int | None]] = {}
    report: list[str] = []
    steps: int = 1


class History(BaseModel):
    stream: str
    actions: list[ActionItem]


class Problem(BaseModel):
    """An error answer: what is wrong and what to do."""

    detail: str
