"""A writer application's figures as Prometheus metrics: ``GET /metrics`` on ``writer_groups.<group>.metrics_port``.

The exposition format (text, version 0.0.4) that Prometheus, VictoriaMetrics, Grafana Agent and the OpenTelemetry
collector's Prometheus receiver scrape; stdlib only (a threaded ``http.server`` in the application's driver):

=============================================  ===================================================================
``laketide_writer_up{stream,group}``           1 while the stream's query runs, else 0
``laketide_writer_state{stream,group,state}``  1 for the stream's state (running, waiting, failed, held out,
                                               stopped, done); ``held out``: its batch killed the application,
                                               the writer status names the files and what to do
``laketide_writer_held_out``                   1 while the stream is held out, else 0 (``batch``: the batch that
  ``{stream,group,batch}``                       killed the application)
``laketide_landed_to_committed_seconds``       landed -> committed latency over the last hour,
  ``{stream,group,quantile="0.5"|"0.95"|"1"}``   by quantile (1: the maximum)
``laketide_writer_lag_seconds{stream,group}``  now - the stream's watermark
``laketide_backlog_files{stream,group}``       landed files not committed yet
``laketide_batches_committed_total``           counters of this process: batches, valid rows and rejected lines
``laketide_rows_committed_total``                committed, and the batches' durations summed (``rate`` of the
``laketide_rejects_committed_total``             last over the first: the mean batch duration)
``laketide_batch_seconds_total``
  ``{stream,group}``
``laketide_last_batch_seconds{stream,group}``  the last committed batch's duration
``laketide_last_commit_timestamp_seconds``     when the stream last committed (epoch seconds): alert on
  ``{stream,group}``                             ``time() - laketide_last_commit_timestamp_seconds > 600``
``laketide_watermark_timestamp_seconds``       the stream's watermark (epoch seconds)
  ``{stream,group}``
=============================================  ===================================================================

The page is rendered at each scrape: the commit counters are current; the freshness figures (latency, lag,
backlog) are those of the application's last status round (every 30 s).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from laketide.ingest import batch_figures, failures

if TYPE_CHECKING:
    from laketide.ingest.stream_state import Writer

STATES = ("running", "waiting", "failed", "held out", "stopped", "done")


def exposition(writers: Sequence[Writer], group: str) -> str:
    """The metrics of ``writers`` in Prometheus' text format."""
    lines = [
        "# HELP laketide_writer_up 1 while the stream's writer query runs",
        "# TYPE laketide_writer_up gauge",
    ]
    for w in writers:
        lines.append(f'laketide_writer_up{{stream="{w.stream.name}",group="{group}"}} {int(w.query is not None)}')
    lines += ["# HELP laketide_writer_state the state of the stream's writer", "# TYPE laketide_writer_state gauge"]
    for w in writers:
        for state in STATES:
            current = w.state if w.state != "stopping" else "running"
            lines.append(f'laketide_writer_state{{stream="{w.stream.name}",group="{group}",state="{state}"}} '
                         f"{int(current == state)}")
    lines += ["# HELP laketide_writer_held_out 1 while the stream is held out: its batch killed the writer application",
              "# TYPE laketide_writer_held_out gauge"]
    for w in writers:
        batch = (failures.read(w.stream) or {}).get("batch_id", "") if w.state == "held out" else ""
        lines.append(f'laketide_writer_held_out{{stream="{w.stream.name}",group="{group}",batch="{batch}"}} '
                     f"{int(w.state == 'held out')}")
    lines += ["# HELP laketide_landed_to_committed_seconds landed -> committed latency over the last hour",
              "# TYPE laketide_landed_to_committed_seconds gauge"]
    for w in writers:
        figures = w.figures
        if figures is None:
            continue
        for quantile, value in (("0.5", figures.p50), ("0.95", figures.p95), ("1", figures.max)):
            if value is not None:
                lines.append(f'laketide_landed_to_committed_seconds{{stream="{w.stream.name}",group="{group}",'
                             f'quantile="{quantile}"}} {value:.3f}')
    lines += ["# HELP laketide_writer_lag_seconds now - the stream's watermark",
              "# TYPE laketide_writer_lag_seconds gauge"]
    lines += [f'laketide_writer_lag_seconds{{stream="{w.stream.name}",group="{group}"}} {w.figures.lag:.3f}'
              for w in writers if w.figures is not None and w.figures.lag is not None]
    lines += ["# HELP laketide_backlog_files landed files not committed yet", "# TYPE laketide_backlog_files gauge"]
    lines += [f'laketide_backlog_files{{stream="{w.stream.name}",group="{group}"}} {w.figures.backlog}'
              for w in writers if w.figures is not None]
    return "\n".join(lines + _committed(writers, group)) + "\n"


def _committed(writers: Sequence[Writer], group: str) -> list[str]:
    """The commit counters and last-batch gauges of ``writers`` (``laketide.ingest.batch_figures``)."""
    figures = {w.stream.name: batch_figures.of(w.stream.name) for w in writers}
    lines: list[str] = []
    for name, kind, what, value in (
        ("laketide_batches_committed_total", "counter", "micro-batches committed", lambda c: c.batches),
        ("laketide_rows_committed_total", "counter", "valid rows committed to the events table", lambda c: c.rows),
        ("laketide_rejects_committed_total", "counter", "rejected lines committed to the rejects table",
         lambda c: c.rejects),
        ("laketide_batch_seconds_total", "counter", "the committed batches' durations, summed",
         lambda c: round(c.seconds, 3)),
        ("laketide_last_batch_seconds", "gauge", "the last committed batch's duration", lambda c: c.last_seconds),
        ("laketide_last_commit_timestamp_seconds", "gauge", "when the stream last committed (epoch seconds)",
         lambda c: c.last_commit),
        ("laketide_watermark_timestamp_seconds", "gauge", "the stream's watermark (epoch seconds)",
         lambda c: c.watermark),
    ):
        lines += [f"# HELP {name} {what} by this writer application", f"# TYPE {name} {kind}"]
        for stream, committed in figures.items():
            v = value(committed)
            if v is not None:
                shown = f"{v:.3f}" if isinstance(v, float) else str(v)
                lines.append(f'{name}{{stream="{stream}",group="{group}"}} {shown}')
    name = "laketide_batch_duration_seconds"
    lines += [f"# HELP {name} committed micro-batches by duration, by this writer application",
              f"# TYPE {name} histogram"]
    for stream, committed in figures.items():
        labels = f'stream="{stream}",group="{group}"'
        lines += [f'{name}_bucket{{{labels},le="{le}"}} {n}' for le, n in committed.cumulative()]
        lines += [f"{name}_sum{{{labels}}} {committed.seconds:.3f}", f"{name}_count{{{labels}}} {committed.batches}"]
    return lines


class MetricsServer:
    """``/metrics`` of a writer application, served from a daemon thread, rendered at each scrape from the writers
    :meth:`update` last gave."""

    def __init__(self, port: int, group: str, host: str = "0.0.0.0") -> None:
        self.group = group
        self.writers: Sequence[Writer] = ()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "laketide serves /metrics")
                    return
                page = exposition(server.writers, server.group).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *_args: Any) -> None:
                return  # a scrape every few seconds is no news

        self.http = ThreadingHTTPServer((host, port), Handler)
        self.port = int(self.http.server_address[1])
        threading.Thread(target=self.http.serve_forever, name="laketide-metrics", daemon=True).start()

    def update(self, writers: Sequence[Writer]) -> None:
        self.writers = list(writers)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
