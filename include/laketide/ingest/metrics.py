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
=============================================  ===================================================================
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from laketide.ingest import failures

if TYPE_CHECKING:
    from laketide.ingest.group import Writer

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
    return "\n".join(lines) + "\n"


class MetricsServer:
    """``/metrics`` of a writer application, served from a daemon thread; :meth:`update` replaces the page."""

    def __init__(self, port: int, group: str, host: str = "0.0.0.0") -> None:
        self.group = group
        self.page = b""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "laketide serves /metrics")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(server.page)))
                self.end_headers()
                self.wfile.write(server.page)

            def log_message(self, *_args: Any) -> None:
                return  # a scrape every few seconds is no news

        self.http = ThreadingHTTPServer((host, port), Handler)
        self.port = int(self.http.server_address[1])
        threading.Thread(target=self.http.serve_forever, name="laketide-metrics", daemon=True).start()

    def update(self, writers: Sequence[Writer]) -> None:
        self.page = exposition(writers, self.group).encode()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
