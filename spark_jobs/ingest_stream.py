"""Spark job: the exactly-once writers of one laketide stream, or of a group of streams in one application
(landing zone -> Iceberg).

Submitted by the ``laketide_ingest_<group>`` DAG through ``SparkSubmitOperator``; runnable by hand:

    ./laketide submit ingest_stream.py --group web --mode continuous      (every stream of writer group 'web')
    ./laketide submit ingest_stream.py --stream clicks --mode incremental (one stream)

``--mode continuous`` runs micro-batches on each stream's trigger interval until stopped (SIGTERM, or a stream's
stop file ``<checkpoints>/<stream>.stop``, which stops that stream); ``--mode incremental`` processes what has
landed and exits. The streams of a group share the JVM and stop alone when they fail (``laketide.ingest.group``).
Exit codes (of the first stream that ended in an error, when the application ends): 0 done or stopped (a stop file;
SIGTERM/SIGINT, also to the whole process group: the JVM's end that comes with it is a stop), 2 bad arguments or
configuration (or ``commit_path: internal`` on a Spark or Iceberg the internal commit path was not written for),
3 checkpoint and table disagree, 4 another writer of the stream is running, 5 this writer lost the stream to
another one, 6 the catalog stayed unreachable, 7 the Spark JVM died (e.g. out of memory), 8 a disk the writer
writes to is full; 1 a stream failed or is held out, or anything else (an unexpected error: its traceback is in
the log). The process always exits once the writers are done: threads left behind by a JVM that died must not keep
it alive (Airflow would see a hung task).
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
    StreamFailedError,
    WriterBusyError,
    WriterFencedError,
    exit_code,
)

EXIT_CODES: dict[type[Exception], int] = {
    ConfigError: 2, CheckpointMismatchError: 3, WriterBusyError: 4, WriterFencedError: 5, CatalogUnavailableError: 6,
    StorageFullError: 8, StreamFailedError: 1,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--stream", help="one stream of the configuration")
    which.add_argument("--group", help="a writer group: the streams whose 'group' is this (or the stream so named)")
    parser.add_argument("--mode", choices=["continuous", "incremental"], default="continuous")
    args = parser.parse_args(argv)
    from laketide import logs

    logs.setup()
    try:
        config = get_config()
        streams = config.group(args.group) if args.group else [config.stream(args.stream)]
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from py4j.protocol import Py4JNetworkError

    from laketide.ingest.group import run_group

    try:
        run_group(config, streams, args.mode)
    except tuple(EXIT_CODES) as exc:  # by the nearest mapped class: a SchemaChangeError is a ConfigError (2)
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc, EXIT_CODES) or 1
    except (Py4JNetworkError, ConnectionError) as exc:
        print(f"error: the Spark JVM of the writer is gone ({type(exc).__name__}: {exc}); see the log above "
              "(OutOfMemoryError?). Nothing of an unfinished batch is committed; the writer replays it when it "
              "starts again: the batches that were in flight first, one stream at a time, and a stream whose batch "
              "was in flight at two such ends in a row is held out, its files named.", file=sys.stderr)
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
