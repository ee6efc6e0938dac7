"""Spark job: table maintenance (compaction, manifests, expiry, orphans) for several tables in one session.

Submitted by the ``laketide_maintain*`` DAGs through ``SparkSubmitOperator``; runnable by hand:

    spark-submit spark_jobs/maintain.py --table all --actions default --dry-run false   (the default is a dry run)

``--table``: ``all`` or maintained tables (comma-separated); ``--actions``: ``default`` (each table's policy)
or any of rewrite_data_files, rewrite_manifests, expire_snapshots, remove_orphan_files. Every action is
recorded in ``maintenance.record_table``. Exit codes: 0 done (an action that gave up to the writer is recorded
and is not an error), 1 an action failed, 2 bad arguments or configuration.
"""

from __future__ import annotations

import argparse
import sys
import uuid

from laketide.config import get_config
from laketide.errors import ConfigError, MaintenanceRequestError, exit_code

#: errors of a request that no retry can fix, by the nearest mapped class (``laketide.errors.exit_code``)
EXIT_CODES: dict[type[Exception], int] = {ConfigError: 2, MaintenanceRequestError: 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", default="all", help="'all' or maintained tables, comma-separated")
    parser.add_argument("--actions", default="default", help="'default' or actions, comma-separated")
    parser.add_argument("--dry-run", nargs="?", const="true", default="true", choices=["true", "false"],
                        help="plan and count, change nothing (the default: pass --dry-run false to maintain)")
    parser.add_argument("--run-id", default=None, help="recorded with every action (default: a new id)")
    args = parser.parse_args(argv)
    from laketide import logs

    logs.setup()
    from laketide.maintain.plan import validate_request

    try:
        config = get_config()
        request = validate_request(config, args.table, args.actions, args.dry_run == "true")
    except tuple(EXIT_CODES) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc, EXIT_CODES) or 1
    from laketide.lake.spark import build_session
    from laketide.maintain.job import run

    spark = build_session(config, "laketide-maintain")
    try:
        records = run(config, spark, request, args.run_id or f"manual-{uuid.uuid4().hex[:12]}")
    finally:
        spark.stop()
    for rec in records:
        print(rec.line())
    return 1 if any(r.outcome == "failed" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
