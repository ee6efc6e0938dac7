"""Spark job: repair of an hour range of one stream (see ``laketide.redo.repair``).

Submitted by the ``laketide_repair`` DAG through ``SparkSubmitOperator``; runnable by hand:

    spark-submit spark_jobs/repair.py --stream clicks --start 2026-11-22T03:00:00+00:00 \
        --end 2026-11-22T05:00:00+00:00 --dry-run

Exit codes: 0 done (or nothing to do, or a dry run), 1 an error (a commit that lost to a concurrent commit into
the same hours: run it again), 2 a bad request (nothing changed), 4 the committed result failed its check.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from laketide.redo.cli import main as run

    return run("repair", argv)


if __name__ == "__main__":
    sys.exit(main())
