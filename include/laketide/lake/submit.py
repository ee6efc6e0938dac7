"""Run a laketide Spark job by hand, exactly as Airflow submits it: ``laketide-submit JOB [ARGS...]``.

    laketide-submit ingest_stream.py --stream clicks --mode incremental

builds the ``spark-submit`` command (``laketide.lake.spark.submit_command``: master, catalog, jars, quiet
logging, the ``laketide`` package) from the configuration in force (``$LAKETIDE_CONFIG`` or
``conf/laketide.yaml``) and runs it; the exit code is the job's. ``--print`` shows the command instead.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path


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
    env = {**os.environ, "TZ": "UTC"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this venv's spark-submit
    return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
