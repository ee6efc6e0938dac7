"""A real Airflow API server for a test module: ``airflow api-server`` on a free port of 127.0.0.1, on the test
process's Airflow home and metadata database, with the simple auth manager and a known admin password."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PASSWORD = "laketide-test"


@dataclass(frozen=True)
class ApiServer:
    url: str
    login: str
    password: str

    def connection(self) -> str:
        """The server as an Airflow connection (JSON, for ``AIRFLOW_CONN_<ID>``)."""
        return json.dumps({"conn_type": "http", "host": self.url, "login": self.login, "password": self.password})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def api_server(airflow_home: Path, log: Path, timeout: float = 120) -> Iterator[ApiServer]:
    """Start the API server, wait until it answers its health check, stop it (its process group) at the end."""
    (airflow_home / "simple_auth_manager_passwords.json.generated").write_text(json.dumps({"admin": PASSWORD}))
    port = free_port()
    env = {**os.environ, "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(port),
           "AIRFLOW__API__WORKERS": "1", "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "airflow", "api-server", "--port", str(port)], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the API server did not start: {log.read_text()[-3000:]}") from None
                time.sleep(0.5)
        yield ApiServer(url, "admin", PASSWORD)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def sync_dags(unpause: tuple[str, ...] = ()) -> None:
    """Write the DAG folder's DAGs to the metadata database as ``dag.test()`` does (the scheduler's view of them),
    and unpause ``unpause`` (a paused DAG is not queued by Asset events)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        sync_bag_to_db(bag, bundle.name, bundle.version)
    with create_session() as session:
        for dag_id in unpause:
            model = session.get(DagModel, dag_id)
            assert model is not None, f"{dag_id} is not in the metadata database"
            model.is_paused = False
