"""Spark job: redo a stream from a snapshot of its events table (see ``laketide.redo.job``).

Submitted by the ``laketide_redo`` DAG through ``SparkSubmitOperator``; runnable by hand:

    laketide-submit redo.py --stream clicks --snapshot-id 123 --dry-run true
    laketide-submit redo.py --stream clicks --at 2026-11-22T03:00:00+00:00 --dry-run false --run-id fix-1

Every param is checked before anything changes. ``--dry-run true`` (the default) prints what would change and
changes nothing. Run it again with the same ``--run-id`` after an interruption: it finishes the redo.
Exit codes: 0 done, 2 bad params or configuration, 3 checkpoint and table disagree, 4 another redo of the stream
runs or its writer did not stop, 5 a writer took the stream over, 6 the catalog stayed unreachable.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from laketide.config import LaketideConfig, get_config
from laketide.errors import (
    CatalogUnavailableError,
    CheckpointMismatchError,
    ConfigError,
    RedoBusyError,
    RequestError,
    WriterBusyError,
    WriterFencedError,
    exit_code,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXIT_CODES: dict[type[Exception], int] = {
    ConfigError: 2, RequestError: 2, CheckpointMismatchError: 3, RedoBusyError: 4, WriterBusyError: 4,
    WriterFencedError: 5, CatalogUnavailableError: 6,
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", required=True, help="stream name from the configuration")
    parser.add_argument("--snapshot-id", default=None, help="the events table's snapshot to return to")
    parser.add_argument("--at", default=None, help="or a time (ISO, with offset): the snapshot current then")
    parser.add_argument("--start", default=None, help="first hour the redo may change (UTC hour start)")
    parser.add_argument("--end", default=None, help="end of that range, exclusive")
    parser.add_argument("--dry-run", default="true", help="true (default): report only; false: redo")
    parser.add_argument("--run-id", default=None,
                        help="names the redo (records, the kept checkpoint); default manual-<UTC time>. Give the same "
                             "one to finish an interrupted redo")
    parser.add_argument("--user", default=None, help="who asked (default: the OS user)")
    parser.add_argument("--wait", type=float, default=900.0, help="seconds to wait for the writer to stop")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from laketide import logs

    logs.setup()
    return execute(args)


def execute(args: argparse.Namespace, session: SparkSession | None = None,
            configured: LaketideConfig | None = None) -> int:
    """The job on parsed ``args``: its output on stdout and stderr, its exit code returned. ``session``: a running
    SparkSession to redo in, left running (by default the job builds its own and stops it); ``configured``: the
    configuration (by default ``LAKETIDE_CONFIG``'s)."""
    from laketide.redo.job import run
    from laketide.redo.params import validate

    spark = None
    try:
        config = configured or get_config()
        run_id = args.run_id or f"manual-{datetime.now(UTC):%Y%m%dT%H%M%S}"
        request = validate(config, args.stream, args.snapshot_id, args.at, args.start, args.end, args.dry_run,
                           run_id, args.user or getpass.getuser())
        if not request.dry_run:
            from laketide.lake.spark import build_session
            from laketide.redo.job import check_new_run

            check_new_run(config, request)

            spark = session or build_session(config, f"laketide-redo-{request.stream}")
        result = run(config, spark, request, timedelta(seconds=args.wait))
    except tuple(EXIT_CODES) as exc:  # by the nearest mapped class (a SchemaChangeError is a ConfigError: 2)
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc, EXIT_CODES) or 1
    finally:
        if spark is not None and session is None:
            spark.stop()
    print("\n".join(result.report))
    print(json.dumps(result.hours, sort_keys=True))
    return 0


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
