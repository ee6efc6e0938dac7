"""A stand-in for ``airflow standalone`` in the tests of ``scripts/run.sh``: cheap to start, with the process
shapes that make stopping hard.

It answers the health check on ``$AIRFLOW__API__PORT`` and starts:

* a plain child (like the scheduler or the API server);
* a child in a session of its own that ignores SIGTERM, SIGINT and SIGHUP (like a task runner's
  ``spark-submit`` and its JVM, which Airflow starts with ``start_new_session``), with a child of its own;
* a daemon that left the tree (double fork: its parent exited, it is re-parented to init) and ignores them too.

Each process appends its pid to ``$LAKETIDE_HOME/fake-airflow.pids``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PIDS = Path(os.environ["LAKETIDE_HOME"]) / "fake-airflow.pids"
STUBBORN = ("import signal, time\n"
            "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)\n")


def note(pid: int) -> None:
    with PIDS.open("a") as out:
        out.write(f"{pid}\n")


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"metadatabase": {"status": "healthy"}}')

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    note(os.getpid())
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["AIRFLOW__API__PORT"])), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    python = sys.executable
    plain = subprocess.Popen([python, "-c", "import time; time.sleep(3600)"])
    note(plain.pid)
    # a session of its own, ignoring the polite signals, with a child: spark-submit and its JVM
    runner = subprocess.Popen([python, "-c", STUBBORN + (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])\n"
        f"open({str(PIDS)!r}, 'a').write(f'{{child.pid}}\\n')\n"
        "time.sleep(3600)\n"
    )], start_new_session=True)
    note(runner.pid)
    # a daemon re-parented to init: not a descendant of anything we started any more
    subprocess.run([python, "-c", STUBBORN + (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    open({str(PIDS)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "    time.sleep(3600)\n"
    )], check=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
