"""A writer application: the exactly-once writers of a group of streams in one Spark application.

Each stream keeps everything of its own: its lease (one live writer per stream), its checkpoint, its tables and
commit markers, its rejects, its fence, its query (in a FAIR scheduler pool of its own) and its late-file rescue;
the streams share the JVM, the SparkSession and the catalog connection. What happens to one stream happens to it
alone:

* a stream whose start is refused for good (its checkpoint and table disagree, a setting the writer cannot run)
  or whose query fails (a broken input, a batch that keeps failing) stops, is reported (an ERROR in the log, its
  writer status ``failed``, the alert notifier) and the others go on; a failed query is started again after a
  back-off (1 minute, doubling up to 30, 1 minute again once it committed a batch since its start), a refusal only
  by the next start of the application;
* a stream whose batch killed the application (the shared JVM out of memory) twice in a row is held out, the others
  go on (``laketide.ingest.failures``, ``laketide.ingest.group_health``); after a death the batches that were in
  flight are replayed in turn, before the other streams start;
* a stream whose lease another live writer holds (a redo holding it, a one-off run) or that lost its lease waits,
  and is started again once the lease is free; its stop file stops it between batches (a redo asks this way), and
  one found at its start keeps it from starting; either way the file is used up;
* adding a stream to the group or removing it takes effect at the application's next start; the other streams'
  checkpoints are untouched (a stream's checkpoint is its own folder).

A group of one stream behaves as a single writer always did: when its stream cannot run, the application ends
with that stream's error (``spark_jobs/ingest_stream.py`` turns it into the exit code). A group's application
ends when no stream runs or waits any more (an incremental run: every stream has ingested what had landed), or
on SIGTERM/SIGINT (every stream stops between batches; a stop of the whole process group ends the JVM too, and the
errors of its going are a stop, not a failure); it then raises the first failure, if any.

Every status interval each stream's figures (``laketide.ingest.backlog.freshness``: landed -> committed latency,
lag, backlog) go to its writer status (``laketide.lake.writer_status``), to the group's Prometheus endpoint
(``writer_groups.<group>.metrics_port``) and, past the stream's ``alert_latency`` / ``alert_backlog_files``, to the
alert notifier.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from typing import TYPE_CHECKING, Literal

from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import (
    CatalogUnavailableError,
    CheckpointMismatchError,
    ConfigError,
    LaketideError,
    StreamFailedError,
    WriterBusyError,
    WriterFencedError,
)
from laketide.ingest import failures, sink
from laketide.ingest.group_health import STATUS_INTERVAL, Watch, last_commit
from laketide.ingest.late_files import LateFiles
from laketide.ingest.stream_state import Writer
from laketide.lake import writer_status
from laketide.notify import writer_alert

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from laketide.ingest.metrics import MetricsServer
    from laketide.lake.lease import WriterLease

log = logging.getLogger("laketide.ingest.group")

Mode = Literal["continuous", "incremental"]
#: how long a failed stream waits before it is started again (doubling up to ``MAX_BACKOFF``, see :func:`retry_wait`)
FIRST_BACKOFF = 60.0
MAX_BACKOFF = 1800.0
#: errors a stream cannot get over without someone changing something: no start again in this application
PERMANENT = (CheckpointMismatchError, ConfigError)
#: Spark settings of a writer application (the configuration's ``spark.conf`` wins). A writer runs for months and
#: reads every landed file once: Spark's defaults would keep what it no longer needs. Each batch's files would stay
#: in the session's file-status cache (up to 250 MB), and the status store (kept with the UI off too) would keep
#: 1,000 stages of up to 100,000 finished tasks each: measured, its tasks were the one part of a writer's live heap
#: that grew with the files read. Here the cache is off (a writer never lists a file twice) and the store keeps what
#: an operator looks at, the last batches: at most 100 stages of 1,000 tasks (20 MiB after 300,000 files read).
WRITER_SETTINGS = {
    "spark.scheduler.mode": "FAIR",
    "spark.sql.hive.filesourcePartitionFileCacheSize": "0",
    "spark.ui.retainedTasks": "1000",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedJobs": "100",
    "spark.sql.ui.retainedExecutions": "100",
    "spark.sql.streaming.ui.retainedProgressUpdates": "100",
}


def retry_wait(previous: float, recovered: bool) -> float:
    """How long a stream that just failed waits before it is started again: ``FIRST_BACKOFF`` at its first failure
    (``previous`` 0) and after it recovered (committed a batch since its last start: an unrelated failure later is a
    new story), else twice its previous wait, up to ``MAX_BACKOFF``."""
    if recovered or previous <= 0:
        return FIRST_BACKOFF
    return min(MAX_BACKOFF, previous * 2)


def _no_lost_connection(record: logging.LogRecord) -> bool:
    return record.getMessage() != "Exception while sending command."


def _no_proxy_traceback(record: logging.LogRecord) -> bool:
    """py4j's traceback of a batch that a stop cut short (the writer logged the batch's end in one line)."""
    return not record.getMessage().startswith("There was an exception while executing the Python Proxy")


class Application(Watch):
    """The writers of ``streams`` in one SparkSession (see the module docstring).

    :param summary: more snapshot summary properties for every commit (a redo names itself)
    :param leases: leases the caller already holds, by stream name (a redo re-ingests this way)
    """

    def __init__(self, config: LaketideConfig, streams: list[StreamConfig], mode: Mode,
                 spark: SparkSession | None = None, summary: dict[str, str] | None = None,
                 leases: dict[str, WriterLease] | None = None) -> None:
        from laketide.ingest.runner import lease_for
        from laketide.lake.lease import engine_for

        self.config = config
        self.mode = mode
        self.group = streams[0].writer_group if streams else "?"
        self.name = f"{self.group}@{socket.gethostname()}:{os.getpid()}"
        self.summary = summary
        self.given = dict(leases or {})
        self.writers = [Writer(s, self.given.get(s.name) or lease_for(config, s, mode), LateFiles(s))
                        for s in streams]
        self.engine = engine_for(config.catalog)
        self._spark = spark
        self.stopping: list[str] = []
        self.metrics: MetricsServer | None = None
        #: after the application died with batches in flight: the streams that replay theirs alone, in turn
        self.turns: list[Writer] = []
        self.probe: Writer | None = None
        self.looped = False

    # ------------------------------------------------------------------ the session and each stream's start

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from laketide.lake.spark import build_session

            self._spark = build_session(self.config, f"laketide-ingest-{self.group}", extra=WRITER_SETTINGS)
        return self._spark

    def prepare(self) -> None:
        """The session, the commit path of each stream (the internal path's check runs once), the catalog."""
        from laketide.ingest.writer import choose_commit_path
        from laketide.lake import internals
        from laketide.lake.internals import SqlitePool

        reason = internals.check(self.spark)
        for w in self.writers:
            try:
                w.commit_path = choose_commit_path(w.stream.commit_path, reason)
            except ConfigError as exc:
                self._fail(w, exc)
        self.pool = SqlitePool(self.spark, self.config.catalog.name)  # starts the catalog (stale SQLite connection)

    def start(self, w: Writer) -> None:
        """Take the stream's lease and start its query; a refusal leaves it waiting or failed, never raises."""
        from laketide.ingest.merge_sink import catch_up
        from laketide.ingest.runner import preflight, start, stop_file
        from laketide.ingest.tables import ensure_tables
        from laketide.ingest.upsert_tables import ensure_upsert_tables
        from laketide.lake.lease import heartbeat

        stream = w.stream
        w.started_from = last_commit(stream)  # a failure before a later commit is not a recovery: the wait doubles
        if stream.name not in self.given:
            entry = failures.held_out(stream)
            if entry is not None:
                self._hold_out(w, entry)
                return
            flag = stop_file(stream)
            if flag.exists():  # asked to stop before it started (a redo, an operator): honoured, and used up
                flag.unlink(missing_ok=True)
                w.state, w.reason, w.error = "stopped", f"stop file {flag} (found at its start)", None
                w.retry_at = time.monotonic() + STATUS_INTERVAL  # once its lease is free again (a redo keeps it)
                log.info("stream %s does not start: its stop file %s asked it to stop", stream.name, flag)
                self._report(w)
                return
            try:
                w.lease.acquire()
            except WriterBusyError as exc:
                self._wait(w, exc)
                return
        # the heartbeat goes on while the stream starts (a merge at its start can take minutes): its own lease and
        # those of the streams already running stay live
        try:
            with heartbeat(lambda: [x.lease for x in self.writers if x is w or x.query is not None]):
                def create_tables() -> None:
                    self.pool.reopen()
                    ensure_tables(self.spark, self.config, stream)
                    if stream.upsert:
                        ensure_upsert_tables(self.spark, self.config, stream)

                sink.retrying(f"creating the tables of stream {stream.name}", create_tables,
                              self.config.catalog.retry_timeout)
                if stream.upsert:
                    catch_up(self.spark, self.config, stream)
                preflight(self.config, stream)
                if stream.name in self.given:  # the caller holds the lease: a stop file asked the writer before it
                    stop_file(stream).unlink(missing_ok=True)
                w.late.rescue()  # before the stream's first listing: an incremental run takes them too
                context = self.spark.sparkContext
                context.setLocalProperty("spark.scheduler.pool", stream.name)
                try:
                    w.query = start(self.spark, self.config, stream, self.mode, w.commit_path, self.summary)
                finally:
                    context.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
        except Exception as exc:
            self._release(w)
            if isinstance(exc, CatalogUnavailableError):
                self._wait(w, exc)
            else:
                self._fail(w, exc)
            return
        w.state, w.reason, w.error = "running", "", None
        log.info("writer %s started in %s mode (%s commit path): %s -> %s", stream.writer_id, self.mode,
                 w.commit_path, stream.landing_path, stream.table)
        self._report(w)

    # ------------------------------------------------------------------ states

    def _release(self, w: Writer) -> None:
        if w.stream.name not in self.given:
            w.lease.release()

    def _report(self, w: Writer) -> None:
        figures = w.figures.to_dict() if w.figures is not None else {}
        writer_status.report(self.engine, w.stream.name, self.group, w.state, w.reason,
                             {**figures, "application": self.name})

    def _wait(self, w: Writer, exc: Exception) -> None:
        w.state, w.reason, w.error = "waiting", str(exc), exc
        w.retry_at = time.monotonic() + STATUS_INTERVAL * 2
        log.warning("stream %s waits: %s", w.stream.name, exc)
        self._report(w)

    def _fail(self, w: Writer, exc: Exception) -> None:
        if not isinstance(exc, LaketideError):  # a Java stack: its innermost cause says what broke
            exc = StreamFailedError(f"stream {w.stream.name!r}: {sink.root_cause(exc)}")
        w.state, w.reason, w.error = "failed", str(exc), exc
        permanent = isinstance(exc, PERMANENT)
        if not permanent:
            w.backoff = retry_wait(w.backoff, last_commit(w.stream) > w.started_from)
        w.retry_at = float("inf") if permanent else time.monotonic() + w.backoff
        again = "" if permanent else f"; it is started again in {w.backoff:.0f}s"
        log.error("stream %s stopped: %s: %s%s (the other streams of group %s go on)", w.stream.name,
                  type(exc).__name__, exc, again, self.group)
        self._report(w)
        writer_alert(self.config, "writer stopped", w.stream.name, f"{type(exc).__name__}: {exc}", self.name)

    def _ended(self, w: Writer) -> None:
        """The stream's query is no longer active: done (incremental), stopped on request, or failed."""
        from laketide.ingest.runner import translate

        assert w.query is not None
        problem = w.query.exception()
        w.query = None
        self._release(w)
        if w.lost:  # stopped because another writer took its lease (a batch it cancelled failed: that is why)
            w.lost = False
            self._wait(w, WriterFencedError(
                f"writer {w.stream.writer_id!r} lost its lease to another writer of stream {w.stream.name!r} (this "
                "one was silent for longer than writer_lease: frozen, cut off or overloaded); it stopped so that "
                "only one writer commits. Nothing is lost: the other writer goes on from the shared checkpoint."))
        elif problem is not None and self.stopping and not isinstance(translate(problem), LaketideError):
            # asked to stop (SIGTERM of the process group reaches the JVM too): its batch ended with the JVM
            w.state, w.reason = "stopped", f"stopped on {self.stopping[0]}"
            log.info("stream %s stopped on %s (its batch ended with the Spark JVM: %s); nothing of it is committed, "
                     "it is replayed at the next start", w.stream.name, self.stopping[0], sink.root_cause(problem))
            self._report(w)
        elif problem is not None:
            error = translate(problem)
            if isinstance(error, WriterFencedError):
                self._wait(w, error)
            else:
                self._fail(w, error)
        elif w.state == "stopping":
            w.state, w.reason = "stopped", w.reason or "stopped on request"
            w.retry_at = time.monotonic() + STATUS_INTERVAL  # once its lease is free again (a redo keeps it)
            self._report(w)
        else:
            w.state, w.reason = "done", "ingested what had landed"
            self._report(w)

    # ------------------------------------------------------------------ the loop

    def run(self) -> list[Writer]:
        """Run until no stream runs or waits (see the module docstring); the writers, as they ended."""
        from laketide.ingest.runner import stop_file

        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for w in self.writers:  # a stream another live writer holds waits; none left: no JVM is started
                if w.stream.name not in self.given:
                    try:
                        w.lease.check()
                    except WriterBusyError as exc:
                        self._wait(w, exc)
            for w in self.writers:  # no live writer holds it: the batch a dead application had in flight is named
                if w.state == "starting" and w.stream.name not in self.given:
                    failures.died(w.stream)
                    entry = failures.held_out(w.stream)
                    if entry is not None:  # its batch killed the application: the others go on without it
                        self._hold_out(w, entry)
            if not any(w.state == "starting" for w in self.writers):
                return self.writers
            self.prepare()
            self._queue_turns()
            self._take_turns()
            if not any(w.state == "running" for w in self.writers):
                return self.writers  # nothing could start: the caller reports the first refusal
            self._serve_metrics()
            self.looped = True
            next_status = time.monotonic()
            while True:
                time.sleep(1.0)
                for w in self.writers:
                    if w.query is None:
                        continue
                    if not w.query.isActive:
                        self._ended(w)
                        continue
                    if not w.lease.renew():
                        log.error("writer %s: another writer took over the stream; stopping it now",
                                  w.stream.writer_id)
                        w.lost = True
                        w.query.stop()
                        continue
                    flag = stop_file(w.stream)
                    if (self.stopping or flag.exists()) and w.state != "stopping":
                        w.state, w.reason = "stopping", self.stopping[0] if self.stopping else f"stop file {flag}"
                    if w.state == "stopping" and not w.query.status["isTriggerActive"]:
                        log.info("stream %s stops between batches (%s)", w.stream.name, w.reason)
                        w.query.stop()
                        flag.unlink(missing_ok=True)
                self._take_turns()
                if not any(w.query is not None for w in self.writers):
                    # no stream runs any more: the application ends (Airflow's retries start it again)
                    return self.writers
                now = time.monotonic()
                if now >= next_status:
                    self._figures()
                    next_status = now + STATUS_INTERVAL
                if not self.stopping and self.mode == "continuous":
                    for w in self.writers:  # while others run, a stream that stopped is started again in time
                        if w.state in ("waiting", "failed", "held out", "stopped") and now >= w.retry_at:
                            self.start(w)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            for w in self.writers:
                try:
                    if w.query is not None and w.query.isActive:
                        w.query.stop()
                except Exception as exc:  # the JVM is gone: nothing to stop; the leases are released all the same
                    log.debug("stream %s: query not stopped: %s", w.stream.name, exc)
                self._release(w)
            if self.metrics is not None:
                self.metrics.close()
            logging.getLogger().removeFilter(_no_lost_connection)
            logging.getLogger("py4j.clientserver").removeFilter(_no_proxy_traceback)
            failures.stop_asked(False)

    def _on_signal(self, signum: int, _frame: object) -> None:
        """SIGTERM/SIGINT: every stream stops between batches. A stop of the whole process group reaches the JVM too:
        py4j's tracebacks of the connection it loses then (logged at INFO on the root logger) are no news."""
        if not self.stopping:
            logging.getLogger().addFilter(_no_lost_connection)
            logging.getLogger("py4j.clientserver").addFilter(_no_proxy_traceback)
            failures.stop_asked()
            for w in self.writers:  # a stop was asked: a batch the JVM's end cuts short is no death of it (now: a
                failures.forget(w.stream)  # driver under spark-submit may not outlive the JVM by much)
        self.stopping.append(signal.Signals(signum).name)

    def stopped_on_signal(self, exc: BaseException | None) -> None:
        """The application ends on SIGTERM/SIGINT: a batch it had in flight is not a death of its JVM (forgotten);
        with ``exc`` (the JVM went away with the signal: a process group's stop reaches it too) the streams it
        interrupted are stopped, not failed."""
        for w in self.writers:
            failures.forget(w.stream)
            if exc is not None and w.state in ("starting", "running", "stopping"):
                w.state, w.reason, w.query = "stopped", f"stopped on {self.stopping[0]}", None
                self._report(w)
        log.info("writer group %s stopped on %s%s; nothing of an unfinished batch is committed, each stream replays "
                 "it at its next start", self.group, self.stopping[0],
                 f" (the Spark JVM ended with it: {type(exc).__name__})" if exc is not None else "")



def run_group(config: LaketideConfig, streams: list[StreamConfig], mode: Mode, spark: SparkSession | None = None,
              summary: dict[str, str] | None = None, leases: dict[str, WriterLease] | None = None) -> None:
    """Run the writer application of ``streams``; when it ends, raise the error of the first stream that ended in
    one (a group of one: that stream's error, as a single writer always did)."""
    app = Application(config, streams, mode, spark, summary, leases)
    try:
        writers = app.run()
    except Exception as exc:
        from py4j.protocol import Py4JError

        # the JVM gone, or a call it failed while shutting down ("An error occurred while calling ...isActive")
        if not isinstance(exc, Py4JError) and not failures.jvm_gone(exc):
            raise
        if not app.stopping:
            time.sleep(1.0)  # a signal that ended the JVM is handled by the main thread first
        if not app.stopping:
            raise  # the JVM died on its own (out of memory?): exit 7; another py4j error: exit 1
        app.stopped_on_signal(exc)
        writers = app.writers
    else:
        if app.stopping:
            app.stopped_on_signal(None)
    if app.looped:
        app.final_report()
    for w in writers:
        if w.state in ("failed", "waiting", "held out") and w.error is not None:
            if len(writers) > 1:
                others = [f"{o.stream.name}: {o.state}" for o in writers if o is not w]
                log.error("writer group %s ended; stream %s %s (%s); %s", w.stream.writer_group, w.stream.name,
                          w.state, w.reason, ", ".join(others))
            raise w.error


def run_held(config: LaketideConfig, stream: StreamConfig, mode: Mode, lease: WriterLease,
             spark: SparkSession | None = None, summary: dict[str, str] | None = None) -> None:
    """The writer of ``stream`` alone (a group of one) with the stream's lease already taken by the caller (a redo
    re-ingests this way); ``summary``: more snapshot summary properties for every commit."""
    run_group(config, [stream], mode, spark, summary, {stream.name: lease})
