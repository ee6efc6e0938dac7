"""Run a laketide Spark job by hand, exactly as Airflow submits it: ``laketide-submit JOB [ARGS...]``.

    laketide-submit ingest_stream.py --stream clicks --mode incremental

builds the ``spark-submit`` command (``laketide.lake.spark.submit_command``: master, catalog, jars, quiet
logging, the ``laketide`` package) from the configuration in force (``$LAKETIDE_CONFIG`` or
``conf/laketide.yaml``) and runs it; the exit code is the job's. ``--print`` shows the command instead.

A writer (``ingest_stream.py``) asked to stop by SIGTERM or SIGINT (to this process, which passes it on, or to the
whole process group: ``kill -- -<pgid>``, Ctrl-C, ``systemctl stop``) ends with exit 0 when spark-submit ends on
that signal: the JVM that spark-submit runs exits 143 on SIGTERM whatever its Python driver made of the stop.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path


def job_env(environ: dict[str, str]) -> dict[str, str]:
    """The environment of a job submitted by hand: UTC, this virtualenv's ``spark-submit`` first on the path, and the
    configuration in force named explicitly (``LAKETIDE_CONFIG``), as the Airflow operator names it. The job's driver
    imports laketide from the ``--py-files`` zip under the state folder, where the default configuration's path
    (beside the checkout's package) does not lead to ``conf/laketide.yaml``."""
    from laketide.config.loading import config_path

    env = {**environ, "TZ": "UTC", "LAKETIDE_CONFIG": str(config_path(environ))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def main(argv: list[str] | None = None) -> int:
    from laketide.config import get_config
    from laketide.errors import ConfigError
    from laketide.lake.spark import submit_command

    parser = argparse.ArgumentParser(prog="laketide-submit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", help="a file in spark_jobs/, e.g. ingest_stream.py")
    parser.add_argument("--master", help="Spark master (default: spark.master of the configuration)")
    parser.add_argument("--print", action="store_true", help="print the spark-submit command, run nothing")
    args, job_args = parser.parse_known_args(argv)
    try:
        command = submit_command(get_config(), args.job, job_args, args.master)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.print:
        print(shlex.join(command))
        return 0
    received: list[int] = []
    proc = subprocess.Popen(command, env=job_env(dict(os.environ)))

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if proc.poll() is None:  # a signal to this process alone reaches the job too
            proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    stopped = {0} | {128 + s for s in received} | {-s for s in received}
    if received and Path(args.job).name == "ingest_stream.py" and code in stopped:
        print(f"laketide-submit: the writer stopped on {signal.Signals(received[0]).name}", file=sys.stderr)
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
