"""Real receivers for the done-markers' tests: an HTTP endpoint on 127.0.0.1 (a free port) that records every POST
and can fail on purpose, and a callable and an alert callback that append what they get to files named by
environment variables (the close DAG's tasks run them by their ``module:function`` names)."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: files the callable and the alert callback append one JSON line to
SINK_ENV = "LAKETIDE_TEST_MARKER_SINK"
ALERT_ENV = "LAKETIDE_TEST_ALERT_SINK"


def record(closed: dict[str, Any]) -> None:
    """A done-marker callable: appends the record it got."""
    with open(os.environ[SINK_ENV], "a") as out:
        out.write(json.dumps(closed) + "\n")


def alert(context: Any) -> None:
    """An alert callback (``close.alert_callback``): appends the failed task and its error."""
    ti = context.get("task_instance") or context.get("ti")
    with open(os.environ[ALERT_ENV], "a") as out:
        out.write(json.dumps({"task_id": getattr(ti, "task_id", None), "map_index": getattr(ti, "map_index", None),
                              "run_id": context.get("run_id"), "error": str(context.get("exception"))}) + "\n")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class Endpoint:
    """An HTTP server in a thread: ``mode`` "ok" answers 200, "fail" answers 500, "fail-then-down" answers one 500
    and then stops listening (later attempts find nothing: connection refused). ``posts`` holds every body."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.answers: list[int] = []
        self.mode = "ok"
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.posts.append(json.loads(body))
                status = 200 if owner.mode == "ok" else 500
                owner.answers.append(status)
                if owner.mode == "fail-then-down":  # nothing listens any more before the client has its answer
                    owner.stop()  # (each request has a thread of its own: stopping the server from here is safe)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/closed-hours"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.running = True

    def stop(self) -> None:
        if self.running:
            self.running = False
            self.server.shutdown()
            self.server.server_close()
