"""Spark job: the exactly-once writer of one laketide stream (landing zone -> Iceberg).

Submitted by the ``laketide_ingest_<stream>`` DAG through ``SparkSubmitOperator``; runnable by hand:

    laketide-submit ingest_stream.py --stream clicks --mode incremental    (or: make submit JOB=... ARGS=...)

``--mode continuous`` runs micro-batches on the stream's trigger interval until stopped (SIGTERM, or the
stop file ``<checkpoints>/<stream>.stop``); ``--mode incremental`` processes what has landed and exits.
Exit codes: 0 done, 2 bad arguments or configuration (or ``commit_path: internal`` on a Spark or Iceberg the
internal commit path was not written for), 3 checkpoint and table disagree, 4 another writer of
the stream is running, 5 this writer lost the stream to another one, 6 the catalog stayed unreachable,
7 the Spark JVM died (e.g. out of memory), 8 a disk the writer writes to is full; 1 anything else (an
unexpected error: its traceback is in the log). The process always exits once the writer is done: threads left
behind by a JVM that died must not keep it alive (Airflow would see a hung task).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from laketide.config import get_config
from laketide.errors import (
    CatalogUnavailableError,
    CheckpointMismatchError,
    ConfigError,
    StorageFullError,
    WriterBusyError,
    WriterFencedError,
)

EXIT_CODES: dict[type[Exception], int] = {
    ConfigError: 2, CheckpointMismatchError: 3, WriterBusyError: 4, WriterFencedError: 5, CatalogUnavailableError: 6,
    StorageFullError: 8,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", required=True, help="stream name from the configuration")
    parser.add_argument("--mode", choices=["continuous", "incremental"], default="continuous")
    args = parser.parse_args(argv)
    from laketide import logs

    logs.setup()
    try:
        config = get_config()
        stream = config.stream(args.stream)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from py4j.protocol import Py4JNetworkError

    from laketide.ingest.runner import run

    try:
        run(config, stream, args.mode)
    except tuple(EXIT_CODES) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CODES[type(exc)]
    except (Py4JNetworkError, ConnectionError) as exc:
        print(f"error: the Spark JVM of the writer is gone ({type(exc).__name__}: {exc}); see the log above "
              "(OutOfMemoryError?). Nothing of an unfinished batch is committed; the writer replays it when it "
              "starts again.", file=sys.stderr)
        return 7
    return 0


def exit_now(code: int) -> None:
    """Flush and leave at once: py4j threads of a dead JVM would otherwise keep the interpreter alive."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
