"""The processes of a ``scripts/run.sh`` run, read from ``/proc``: what the quickstart's test and its two
benchmarks (bench/bench_quickstart.py, bench/bench_close_range.py) look for, stop and count. Stdlib only."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable
from pathlib import Path


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def free_port() -> int:
    """A port with the next two free too (with ``LAKETIDE_SERVE_LOGS=1``, run.sh puts Airflow's log servers there)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port < 65000 and all(port_free(port + i) for i in (1, 2)):
            return port
    raise RuntimeError("no free port")


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, dead and not yet reaped, does not)."""
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def cmdline(pid: int) -> str:
    """The command line of ``pid`` ("" once it is gone)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def marked(home: Path) -> list[int]:
    """Processes whose environment carries the run's ``LAKETIDE_HOME`` (run.sh exports it to everything; a process
    that sets its title, as Airflow's API server and executor workers do, blanks what /proc shows of it)."""
    marker = f"LAKETIDE_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def descendants(roots: Iterable[int]) -> set[int]:
    """The live processes under ``roots``, by their parents (a task process may leave its parent's process group)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return found - set(roots)
