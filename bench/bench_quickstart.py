"""Benchmark: the quickstart (``scripts/run.sh``, what ``make run`` runs once the virtualenv is there) from its start
to the first commit of the writer, and what Airflow's processes hold in memory.

Each run starts ``scripts/run.sh`` with a throwaway ``LAKETIDE_HOME`` and a free port (the real sample producers, the
real Airflow components, the ingest DAG's real Spark writer), and measures:

``ready s``
    seconds until run.sh prints "laketide is running" (Airflow's API server answers);
``first commit s``
    seconds until the first snapshot of an events table (a ``snap-*.avro`` manifest list in the warehouse of
    ``lake.clicks`` or ``lake.orders``): the writer's first batch committed;
``airflow MB`` / ``writer MB``
    the resident memory (RSS, summed) of the processes of the run whose command line names Airflow (API server,
    scheduler, DAG processor, triggerer, the executor's workers, task runners) and of the writer's Spark JVM and its
    Python driver, ``--settle`` seconds after the first commit; ``airflow PSS MB``: the same processes' proportional
    set size (shared pages divided among the processes sharing them: what they hold together, as RSS overcounts
    the copy-on-write pages of processes forked from one another);
``tasks failed``
    task instances whose first try failed (``try_number`` > 1 in Airflow's database), e.g. a task started before the
    API server answered.

Then the run is stopped as a user would (SIGINT to run.sh's process group): ``stop s`` is how long run.sh took
to stop, ``left after stop`` the processes of the run still alive after it exited (then killed, and run.sh's
output printed), and the next one starts. Run from the
repository root on an idle machine::

    .venv/bin/python bench/bench_quickstart.py --runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.processes import alive, cmdline, descendants, free_port, marked  # noqa: E402


def processes_of(home: Path) -> list[int]:
    """Live processes of the run: those whose environment carries its LAKETIDE_HOME, and their descendants (a process
    that sets its title, as Airflow's executor workers do, overwrites what /proc shows of its environment)."""
    found = marked(home)
    return sorted(set(found) | descendants(found))


def rss_mb(pid: int, field: str = "VmRSS:", path: str = "status") -> float:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return 0.0


def pss_mb(pid: int) -> float:
    """The process's proportional share of its resident pages: a page shared by n processes (the executor's
    workers are forked from the scheduler, copy-on-write) counts 1/n in each, so a sum over processes is what they
    hold together."""
    return rss_mb(pid, "Pss:", "smaps_rollup")


def first_commit(home: Path) -> bool:
    warehouse = home / "warehouse"
    return any(any((warehouse / "lake" / t / "metadata").glob("snap-*.avro")) for t in ("clicks", "orders"))


def memory(home: Path) -> tuple[float, float, float, int]:
    """(Airflow MB, Airflow PSS MB, writer MB, Airflow processes) of the run."""
    airflow = airflow_pss = writer = 0.0
    count = 0
    for pid in processes_of(home):
        line = cmdline(pid)
        if "ingest_stream" in line or "org.apache.spark" in line or "SparkSubmit" in line:
            writer += rss_mb(pid)
        elif "airflow" in line:
            airflow += rss_mb(pid)
            airflow_pss += pss_mb(pid)
            count += 1
    return airflow, airflow_pss, writer, count


def retried_tasks(home: Path) -> int:
    db = home / "airflow" / "airflow.db"
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
        return int(c.execute("select count(*) from task_instance where try_number > 1").fetchone()[0])
    return -1


def one_run(settle: float, timeout: float, airflow_command: str | None = None,
            extra: dict[str, str] | None = None) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="laketide-quickstart-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKETIDE", "AIRFLOW"))}
    env.update({"LAKETIDE_HOME": str(home), "LAKETIDE_PORT": str(port),
                "LAKETIDE__SPARK__JARS_DIR": str(REPO_ROOT / ".laketide" / "jars")})
    if airflow_command:
        env["LAKETIDE_AIRFLOW_COMMAND"] = airflow_command
    env.update(extra or {})
    started = time.monotonic()
    proc = subprocess.Popen(["bash", str(REPO_ROOT / "scripts" / "run.sh")], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    result: dict[str, float] = {}
    out = b""
    try:
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        while time.monotonic() - started < timeout:
            with contextlib.suppress(TypeError):
                out += proc.stdout.read() or b""
            if "ready s" not in result and b"laketide is running" in out:
                result["ready s"] = time.monotonic() - started
            if first_commit(home):
                result["first commit s"] = time.monotonic() - started
                break
            if proc.poll() is not None:
                raise SystemExit(f"run.sh exited {proc.returncode}:\n{out.decode(errors='replace')[-3000:]}")
            time.sleep(0.5)
        else:
            raise SystemExit(f"no commit within {timeout:.0f}s (see {home}/logs)")
        time.sleep(settle)
        airflow, airflow_pss, writer, count = memory(home)
        result.update({"airflow MB": airflow, "airflow PSS MB": airflow_pss, "writer MB": writer,
                       "airflow processes": count, "tasks failed": retried_tasks(home)})
    finally:
        # what the run holds before Ctrl-C, by ancestry too (the API server sets its title, which blanks what
        # /proc shows of its environment): whatever of it outlives run.sh was left behind by its stop
        running = set(processes_of(home)) | descendants([proc.pid])
        stopping = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        stopped = time.monotonic() - stopping
        with contextlib.suppress(TypeError):
            out += (proc.stdout.read() if proc.stdout else b"") or b""
        left = [pid for pid in sorted(running | set(processes_of(home))) if alive(pid)]
        if left or b"killing:" in out:
            print(f"run.sh's stop after {stopped:.0f}s left {[cmdline(p)[:80] for p in left]}; its output:\n"
                  + out.decode(errors="replace")[-1500:], file=sys.stderr, flush=True)
        result.update({"stop s": stopped, "left after stop": len(left)})
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", str(home)], check=False)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=30.0, help="seconds after the first commit to read memory")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--airflow-command", default=None,
                        help='run all of Airflow with this command instead (e.g. "airflow standalone", as before)')
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for run.sh (e.g. AIRFLOW__CORE__PARALLELISM=32)")
    args = parser.parse_args(argv)
    rows = []
    for i in range(args.runs):
        row = one_run(args.settle, args.timeout, args.airflow_command, dict(e.split("=", 1) for e in args.env))
        rows.append(row)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in row.items()), flush=True)
    keys = list(rows[0])
    print(f"\n{'':22}" + "".join(f"{'run ' + str(i + 1):>12}" for i in range(len(rows))) + f"{'median':>12}")
    for key in keys:
        values = [r.get(key, float("nan")) for r in rows]
        print(f"{key:22}" + "".join(f"{v:>12,.1f}" for v in values) + f"{statistics.median(values):>12,.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
