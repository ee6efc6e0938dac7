"""A throwaway PostgreSQL cluster on 127.0.0.1 (``initdb`` + ``pg_ctl``), for catalog tests that need a real
server: started, stopped under a running writer, started again."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgCluster:
    """One cluster in a fresh folder; as root, the server runs as the ``postgres`` user (initdb refuses root)."""

    def __init__(self) -> None:
        if not PG_BIN:
            raise RuntimeError("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin: "
                               "install the 'postgresql' package (make setup does)")
        self.bin = Path(PG_BIN[-1])
        self.root = Path(tempfile.mkdtemp(prefix="laketide-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "laketide", "--auth=trust", "-E", "UTF8")
        conf = self.data / "postgresql.conf"
        with conf.open("a") as f:
            f.write(f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.root}'\n"
                    "fsync = off\nmax_connections = 100\n")

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def createdb(self, name: str) -> str:
        """Create database ``name``; return its SQLAlchemy URI."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "laketide", name)
        return self.uri(name)

    def uri(self, name: str) -> str:
        return f"postgresql+psycopg2://laketide@127.0.0.1:{self.port}/{name}"

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def wait_port_closed(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return
        time.sleep(0.2)
