"""The lakehouse view's FastAPI app: the page, its assets and its JSON API, mounted in Airflow's API server by
``plugins/laketide_plugin.py`` (``fastapi_apps``, prefix ``/laketide``) and shown in the UI's navigation as an
iframe (``external_views``).

A plugin's FastAPI app inherits none of the core API's security: every route here carries Airflow's own
``requires_access_*`` dependencies (the UI's JWT cookie reaches the iframe, so the logged-in user is checked):

* the page, its assets and the list of streams: the UI itself (``AccessView.WEBSITE``);
* a stream's board, hours, writer, snapshots, landing files and action history: read on its close DAG
  (``laketide_close_<stream>``);
* table health: read on ``laketide_maintain``;
* "redo from here" (the confirmation and its plan): DAG-run create on ``laketide_redo``. The run itself is started
  by the page through Airflow's REST API (``POST api/v2/dags/laketide_redo/dagRuns``) as the logged-in user;
* an action on the hours selected on the board (close range, backfill, repair, redo: ``ui.ranges``): DAG-run
  create on the action's DAG; the page starts the run the same way.

Catalog reads are synchronous (pyiceberg, SQLAlchemy): they run off the event loop (``asyncio.to_thread``).
Asset paths and ``fetch()`` URLs are relative, so the view works under a base URL or behind a reverse proxy.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Annotated, Any, TypeVar

from airflow.api_fastapi.auth.managers.base_auth_manager import ResourceMethod
from airflow.api_fastapi.auth.managers.models.resource_details import AccessView, DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag, requires_access_view
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse

from laketide.airflow.ui import board as boards
from laketide.airflow.ui import charts, models, panels, ranges, writer
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import ConfigError, RangeError, RequestError

log = logging.getLogger("laketide.airflow.ui")
T = TypeVar("T")
#: the maintenance DAG whose read permission guards the health panel
MAINTAIN_DAG = "laketide_maintain"
#: the page's assets, served from the package
ASSETS = {"laketide.css": "text/css", "laketide.js": "text/javascript", "charts.js": "text/javascript"}
PAGES = {"index": "index.html", "redo": "redo.html"}


def config() -> LaketideConfig:
    """The laketide configuration as Airflow's tasks see it (the ``laketide_catalog`` connection's catalog when
    there is one, else the configuration file's)."""
    from laketide.airflow.hooks import airflow_config
    from laketide.config import get_config

    try:
        return airflow_config()
    except ConfigError:
        raise
    except Exception:  # connections unreachable from this process: the configuration file's catalog
        return get_config()


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """Run a synchronous (catalog) call in a worker thread; a laketide configuration error becomes a 503."""
    def call() -> T:
        try:
            return fn(*args)
        except ConfigError as exc:
            raise HTTPException(503, f"laketide configuration: {exc}") from exc
    return await asyncio.to_thread(call)


def stream_of(cfg: LaketideConfig, name: str) -> StreamConfig:
    for stream in cfg.streams:
        if stream.name == name:
            return stream
    raise HTTPException(404, f"unknown stream {name!r}: configured streams are {[s.name for s in cfg.streams]}")


def parse_hour(value: str, param: str) -> datetime:
    """A whole UTC hour with its offset (``2026-11-22T03:00:00+00:00``); 400 otherwise."""
    from laketide.redo.params import check_hour

    text = value.strip().replace(" ", "+")  # a '+' that reached the URL unencoded
    try:
        return check_hour(text.replace("Z", "+00:00"), param)
    except RequestError as exc:
        raise HTTPException(400, str(exc)) from None


def read_stream(request: Request, stream: str, user: GetUserDep) -> None:
    """Read access to the stream's close DAG (Airflow's DAG read permission)."""
    requires_access_dag("GET", param_dag_id=panels.close_dag(stream))(request, user)


UI = [Depends(requires_access_view(AccessView.WEBSITE))]
STREAM = [Depends(read_stream)]
HEALTH = [Depends(requires_access_dag("GET", param_dag_id=MAINTAIN_DAG))]
REDO = [Depends(requires_access_dag("POST", DagAccessEntity.RUN, param_dag_id=panels.REDO_DAG))]
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": models.Problem}, 401: {"model": models.Problem}, 403: {"model": models.Problem},
    404: {"model": models.Problem}}


def _asset(name: str) -> str:
    return resources.files("laketide.airflow.ui").joinpath("static", name).read_text(encoding="utf-8")


def warm() -> None:
    """Read every table's health once: the catalog and metadata libraries imported, each manifest read and kept
    (``laketide.maintain.health``), so that the panel's first request costs what the next ones do. The file IO the
    tables are read with is imported also when no table exists yet (a new quickstart: the writer creates them)."""
    try:
        import pyiceberg.io.pyarrow  # noqa: F401  (about 0.5 s: pyarrow's file systems)

        panels.health(config())
    except Exception as exc:  # a view that cannot read the lake says so on each request; nothing to do here
        log.info("lakehouse view: tables not read ahead (%s)", exc)


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """When the API server starts (Airflow enters a mounted app's lifespan; no other Airflow process does), the
    metadata the view answers from is read ahead in the background (:func:`warm`)."""
    threading.Thread(target=warm, name="laketide-view-warm", daemon=True).start()
    yield


# no unauthenticated documentation routes (/docs, /redoc, /openapi.json): every route needs the login
app = FastAPI(title="laketide lakehouse view", description=__doc__, responses=ERRORS, docs_url=None, redoc_url=None,
              openapi_url=None, lifespan=lifespan)


@app.get("/", response_class=HTMLResponse, dependencies=UI, include_in_schema=False)
async def index() -> HTMLResponse:
    return HTMLResponse(_asset(PAGES["index"]))


@app.get("/redo", response_class=HTMLResponse, dependencies=REDO, include_in_schema=False)
async def redo_page() -> HTMLResponse:
    """The confirmation page of "redo from here" (its plan comes from ``api/streams/{stream}/redo-plan``)."""
    return HTMLResponse(_asset(PAGES["redo"]))


@app.get("/static/{name}", dependencies=UI, include_in_schema=False)
async def asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(404, f"no asset {name!r}")
    return Response(_asset(name), media_type=ASSETS[name], headers={"Cache-Control": "no-cache"})


@app.get("/api/streams", dependencies=UI)
async def list_streams(user: GetUserDep) -> models.StreamList:
    """The configured streams, and what the user may do with them (the page shows no action it would refuse)."""
    listed = await off_loop(lambda: panels.streams(config()))
    listed.may_redo = may(user, "POST", DagAccessEntity.RUN, panels.REDO_DAG)
    listed.may_backfill = may(user, "POST", DagAccessEntity.RUN, ranges.BACKFILL_DAG)
    listed.may_repair = may(user, "POST", DagAccessEntity.RUN, ranges.REPAIR_DAG)
    for info in listed.streams:
        info.may_close = may(user, "POST", DagAccessEntity.RUN, info.close_dag)
    return listed


def may(user: Any, method: ResourceMethod, entity: DagAccessEntity, dag_id: str) -> bool:
    """Whether Airflow's auth manager lets ``user`` do ``method`` on ``entity`` of DAG ``dag_id`` (what
    ``requires_access_dag`` checks before a request)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    return bool(get_auth_manager().is_authorized_dag(method=method, access_entity=entity,
                                                      details=DagDetails(id=dag_id), user=user))


@app.get("/api/streams/{stream}/board", dependencies=STREAM)
async def get_board(
    stream: str,
    start: Annotated[str | None, Query(description="first hour, e.g. 2026-11-22T03:00:00+00:00")] = None,
    end: Annotated[str | None, Query(description="first hour after the range (exclusive)")] = None,
    days: Annotated[int, Query(ge=1, le=400, description="without start: how many days up to now")] = 7,
    state: Annotated[str | None, Query(description="only the hours in this state (a legend entry)")] = None,
) -> models.Board:
    """The partition board: one cell per hour of ``[start, end)`` (default: the last ``days`` days up to now)."""
    if state is not None and state not in boards.STATES:
        raise HTTPException(400, f"unknown state {state!r}: one of {boards.STATES}")
    cfg = await off_loop(config)
    chosen = stream_of(cfg, stream)
    now = datetime.now(UTC)
    first, stop = boards.default_range(now, days)
    if end is not None:
        stop = parse_hour(end, "end")
    if start is not None:
        first = parse_hour(start, "start")
    elif end is not None:
        first = stop - timedelta(days=days)
    if first >= stop:
        raise HTTPException(400, f"start {first.isoformat()} must be before end {stop.isoformat()}")
    if (stop - first) / timedelta(hours=1) > boards.MAX_HOURS:
        raise HTTPException(400, f"the range holds {int((stop - first) / timedelta(hours=1))} hours, more than one "
                                 f"board shows ({boards.MAX_HOURS}): choose a shorter range")
    return await off_loop(boards.board, cfg, chosen, first, stop, now, state)


@app.get("/api/streams/{stream}/hours/{hour}", dependencies=STREAM)
async def get_hour(stream: str, hour: str) -> models.HourDetail:
    """One hour: its state and every recorded step (counts, reason, verification)."""
    cfg = await off_loop(config)
    chosen = stream_of(cfg, stream)
    return await off_loop(boards.hour_detail, cfg, chosen, parse_hour(hour, "hour"))


@app.get("/api/streams/{stream}/writer", dependencies=STREAM)
async def get_writer(stream: str, limit: Annotated[int, Query(ge=1, le=200)] = 20) -> models.Writer:
    """The writer: running or not, recent batches, lag, backlog, landed -> committed freshness."""
    cfg = await off_loop(config)
    return await off_loop(writer.writer, cfg, stream_of(cfg, stream), limit)


@app.get("/api/streams/{stream}/snapshots", dependencies=STREAM)
async def get_snapshots(stream: str, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> models.Timeline:
    """The events table's snapshot timeline, newest first (the ids "redo from here" returns to)."""
    cfg = await off_loop(config)
    return await off_loop(panels.timeline, cfg, stream_of(cfg, stream), limit)


@app.get("/api/streams/{stream}/landing", dependencies=STREAM)
async def get_landing(stream: str) -> models.Landing:
    """Landing files not ingested: pending ones, and those reported with a reason."""
    cfg = await off_loop(config)
    chosen = stream_of(cfg, stream)
    _, latest = await off_loop(boards.recorded, cfg, chosen.name)
    return await off_loop(panels.landing, cfg, chosen, latest)


@app.get("/api/streams/{stream}/history", dependencies=STREAM)
async def get_history(stream: str) -> models.History:
    """Every redo, backfill and repair of the stream, dry runs included, newest first."""
    cfg = await off_loop(config)
    return await off_loop(panels.history, cfg, stream_of(cfg, stream))


@app.get("/api/streams/{stream}/charts", dependencies=STREAM)
async def get_charts(stream: str, start: Annotated[str | None, Query()] = None,
                     end: Annotated[str | None, Query()] = None,
                     days: Annotated[int, Query(ge=1, le=400)] = 7) -> charts.Charts:
    """The charts: rows and rejects per hour of the board's range (as ``board`` takes it), the writer's recent
    batches, files per closed hour before/after compaction, snapshots and metadata size per day."""
    cfg = await off_loop(config)
    chosen = stream_of(cfg, stream)
    stop = parse_hour(end, "end") if end else boards.default_range(datetime.now(UTC), days)[1]
    first = parse_hour(start, "start") if start else stop - timedelta(days=days)
    if not timedelta(0) < stop - first <= timedelta(hours=boards.MAX_HOURS):
        raise HTTPException(400, f"start {first.isoformat()} must be before end {stop.isoformat()}, by "
                                 f"{boards.MAX_HOURS} hours at most")
    return await off_loop(charts.charts, cfg, chosen, first, stop)


@app.get("/api/health", dependencies=HEALTH)
async def get_health() -> models.Health:
    """Each maintained table's health and its recent maintenance."""
    return await off_loop(lambda: panels.health(config()))


@app.get("/api/streams/{stream}/redo-plan", dependencies=REDO)
async def get_redo_plan(stream: str, user: GetUserDep,
                        snapshot_id: Annotated[str, Query(pattern=r"^[0-9]+$", max_length=20)]) -> models.RedoPlan:
    """The confirmation of "redo from here": the redo DAG's params filled in (a dry run) and the plan it would log.
    400 when the snapshot is not one a redo can return to."""
    cfg = await off_loop(config)
    chosen = stream_of(cfg, stream)

    def plan() -> models.RedoPlan:
        try:
            return panels.redo_plan(cfg, chosen, snapshot_id, user.get_name())
        except RequestError as exc:
            raise HTTPException(400, f"redo from snapshot {snapshot_id} refused: {exc}") from None

    return await off_loop(plan)


def start_action(request: Request, stream: str, action: str, user: GetUserDep) -> None:
    """DAG-run create on the DAG the action triggers (Airflow's permission, as its REST API checks it)."""
    try:
        dag_id = ranges.action_dag(action, stream)
    except RequestError as exc:
        raise HTTPException(404, str(exc)) from None
    requires_access_dag("POST", DagAccessEntity.RUN, param_dag_id=dag_id)(request, user)


@app.get("/api/streams/{stream}/actions/{action}", dependencies=[Depends(start_action)])
async def get_action_plan(
    stream: str, action: str, user: GetUserDep,
    start: Annotated[str | None, Query(description="the first hour selected on the board")] = None,
    end: Annotated[str | None, Query(description="the first hour after the selection (exclusive)")] = None,
) -> models.ActionPlan:
    """The run an action on the hours ``[start, end)`` starts (close, backfill, repair, redo): its DAG and params,
    checked as its first task checks them, a dry run where the DAG has one. 400 when it would be refused."""
    cfg = await off_loop(config)
    chosen = stream_of(cfg, stream)
    first = None if not start else parse_hour(start, "start")
    stop = None if not end else parse_hour(end, "end")

    def plan() -> models.ActionPlan:
        try:
            return ranges.action_plan(cfg, chosen, action, first, stop, user.get_name())
        except (RequestError, RangeError) as exc:
            raise HTTPException(400, f"{action} of {stream} refused, nothing started: {exc}") from None

    return await off_loop(plan)
