"""The writer application's watch over its streams (a part of ``laketide.ingest.group.Application``): their
figures, metrics and alerts every status interval, and, after an application died with batches in flight, the turns
in which those batches are replayed and the streams held out (``laketide.ingest.failures``)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from laketide.errors import StreamFailedError
from laketide.ingest import failures
from laketide.notify import writer_alert

if TYPE_CHECKING:
    from laketide.config import LaketideConfig, StreamConfig
    from laketide.ingest.metrics import MetricsServer
    from laketide.ingest.stream_state import Writer

log = logging.getLogger("laketide.ingest.group")
#: how often figures are computed and reported, and streams that stopped looked at again
STATUS_INTERVAL = 30.0


def last_commit(stream: StreamConfig) -> int:
    """The newest batch id in the stream's checkpoint's ``commits/`` log (-1: none)."""
    from laketide.lake.checkpoint_log import batch_ids

    ids = batch_ids(stream.checkpoint_path / "commits")
    return ids[-1] if ids else -1


class Watch:
    """Figures, metrics, alerts, turns and held-out streams of an application's writers."""

    config: LaketideConfig
    group: str
    name: str
    writers: list[Writer]
    given: dict[str, Any]
    metrics: MetricsServer | None
    #: after the application died with batches in flight: the streams that replay theirs, in turn
    turns: list[Writer]
    probe: Writer | None

    def _report(self, w: Writer) -> None:
        raise NotImplementedError

    def start(self, w: Writer) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ after a death: turns, held-out streams

    def _hold_out(self, w: Writer, entry: dict[str, Any]) -> None:
        """The stream's batch killed the application (see ``laketide.ingest.failures``): it does not start; it is
        looked at again every status interval (a named file moved away, the record deleted: it starts)."""
        reason = failures.hold_out_reason(w.stream, entry)
        w.state, w.reason = "held out", reason  # the state says "held out": the reason says why and what to do
        w.error = StreamFailedError(f"stream {w.stream.name!r} held out: {reason}")
        w.retry_at = time.monotonic() + STATUS_INTERVAL
        self._report(w)  # the status first: whoever reads the log line or the alert finds the stream held out
        if w.reason not in w.alerted:
            w.alerted.add(w.reason)
            log.error("stream %s held out: %s", w.stream.name, w.reason)
            writer_alert(self.config, "writer held out", w.stream.name, w.reason, self.name)

    def _queue_turns(self) -> None:
        """After the application died with batches in flight (``laketide.ingest.failures``): the streams whose
        batch was in flight at a death, not committed since, replay it one at a time, each alone in the JVM; the
        other streams start after them. A batch that kills the JVM again is then the only one in flight."""
        starting = [w for w in self.writers if w.state == "starting"]
        self.turns = [w for w in starting if w.stream.name not in self.given
                      and 0 < (failures.read(w.stream) or {}).get("deaths", 0) < failures.HOLD_OUT_AFTER]
        if not self.turns:
            return
        names = ", ".join(w.stream.name for w in self.turns)
        for w in starting:
            if w not in self.turns:
                w.reason = (f"waits for its turn: the writer application died with batches in flight; stream(s) "
                            f"{names} replay theirs alone first")
                self._report(w)

    def _take_turns(self) -> None:
        """Start the streams whose turn it is: the next one of :attr:`turns` once the one replaying alone committed
        its batch (its record cleared, or any batch committed since its start: a record left from before a redo
        rebuilt the checkpoint names a batch id of the old numbering) or ended, then every stream still starting."""
        while True:
            if self.probe is not None:
                probe, entry = self.probe, failures.read(self.probe.stream)
                if (probe.query is not None and entry is not None and entry.get("deaths", 0) > 0
                        and last_commit(probe.stream) <= probe.started_from):
                    return  # its replayed batch (its first since the start) has not committed yet: it stays alone
                self.probe = None
            if self.turns:
                self.probe = self.turns.pop(0)
                entry = failures.read(self.probe.stream) or {}
                log.warning("stream %s replays batch %s alone first: the writer application died with it in flight "
                            "(%d time(s) in a row); the other streams start once it committed", self.probe.stream.name,
                            entry.get("batch_id"), entry.get("deaths", 0))
                self.start(self.probe)
                continue
            for w in self.writers:
                if w.state == "starting":
                    self.start(w)
            return

    # ------------------------------------------------------------------ figures, metrics, alerts

    def final_report(self) -> None:
        """The figures once more as the application ends: the last commit's effect is in them (an incremental run
        reports its backlog after its last batch, not before it)."""
        try:
            self._figures(renew=False)  # the leases are released by now
        except Exception as exc:
            log.warning("writer group %s: final figures not computed: %s", self.group, exc)

    def _figures(self, renew: bool = True) -> None:
        """Each stream's figures (late files looked for, freshness read from its table), reported, thresholds checked.

        They read the catalog and the landing zone for every stream of the group: on a busy catalog or a big landing
        zone that can take longer than ``writer_lease``, and the loop that renews the leases waits for them. So the
        running streams' leases are renewed from a thread meanwhile (``laketide.lake.lease.heartbeat``), as during a
        stream's start: a writer computing its figures is not silent, and no second writer takes its streams over.
        ``renew``: false for the final figures, computed once the application has released its leases."""
        from laketide.ingest.backlog import freshness
        from laketide.lake.catalog import load_catalog
        from laketide.lake.lease import heartbeat

        with heartbeat(lambda: [w.lease for w in self.writers if renew and w.query is not None and not w.lost]):
            catalog = load_catalog(self.config.catalog)
            for w in self.writers:
                if w.query is not None:
                    w.late.rescue()
                try:
                    w.figures = freshness(catalog, w.stream)
                except Exception as exc:
                    log.warning("stream %s: freshness not computed: %s", w.stream.name, exc)
                    continue
                self._report(w)
                self._check_thresholds(w)
            if self.metrics is not None:
                self.metrics.update(self.writers)

    def _check_thresholds(self, w: Writer) -> None:
        stream, figures = w.stream, w.figures
        if figures is None:
            return
        checks = []
        if stream.alert_latency is not None and figures.p95 is not None:
            limit = stream.alert_latency.total_seconds()
            checks.append(("latency", figures.p95 > limit,
                           f"landed -> committed p95 {figures.p95:.1f}s over the last hour is above alert_latency "
                           f"({limit:.0f}s)"))
        if stream.alert_backlog_files is not None:
            checks.append(("backlog", figures.backlog > stream.alert_backlog_files,
                           f"{figures.backlog} landed file(s) wait for the writer, more than alert_backlog_files "
                           f"({stream.alert_backlog_files})"))
        for kind, over, message in checks:
            if over and kind not in w.alerted:
                w.alerted.add(kind)  # once per crossing, not every interval
                writer_alert(self.config, f"writer {kind}", stream.name, message, self.name)
            elif not over:
                w.alerted.discard(kind)

    def _serve_metrics(self) -> None:
        port = self.config.group_settings(self.group).metrics_port
        if port:
            from laketide.ingest.metrics import MetricsServer

            try:
                self.metrics = MetricsServer(port, self.group)
            except OSError as exc:  # the figures are a view: a port in use never stops the writers
                log.warning("writer group %s: no metrics endpoint on port %d (%s)", self.group, port, exc)
                return
            log.info("writer group %s: Prometheus metrics on http://0.0.0.0:%d/metrics", self.group, port)
            self.metrics.update(self.writers)
