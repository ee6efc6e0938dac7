"""``laketide``: the one command for people, from a plain shell in the checkout (``./laketide ...``).

    ./laketide status [--stream S] [--all]        every hour's state, the hours being written or not recorded, health
    ./laketide reconcile [--stream S]             audit == lake + rejects per hour (exit 1 only for a problem)
    ./laketide snapshots [--stream S] [--limit N] the events table's snapshot timeline (ids for a redo)
    ./laketide submit JOB [ARGS...]               run a Spark job by hand, exactly as Airflow submits it
    ./laketide redo --stream S (--snapshot-id ID | --at TIME) [--start H --end H] [--apply] [--wait S | --no-wait]
    ./laketide backfill --stream S --start H --end H [--apply] [--wait S | --no-wait]
    ./laketide repair --stream S --start H --end H [--apply] [--wait S | --no-wait]
    ./laketide close --stream S --start H --end H  close a range of past hours (laketide_close_<stream>)
    ./laketide archive [--stream S] [--dry-run]   move closed hours' landing files into the archive (once, for an
                                                  existing landing zone: each close archives its own hour)
    ./laketide airflow ARGS...                    any airflow command on the local installation

It finds what it needs by itself: the configuration (``$LAKETIDE_CONFIG``, else ``conf/laketide.yaml``), the
local state (``$LAKETIDE_HOME``, else the configuration's ``home``), and Airflow's home (``$AIRFLOW_HOME``, else
``<home>/airflow``, where ``make run`` keeps it). ``redo``, ``backfill`` and ``repair`` trigger their Airflow DAG
(so the run holds the writer, is recorded and shows in the UI) and are dry runs unless given ``--apply``; their
params are checked first, and a refused one changes nothing. A dry run waits for its run (``--wait``, bounded) and
prints what the run recorded: its plan or report, as the UI's history shows it (``laketide.runs``); ``--no-wait``
returns once the run is started. Exit codes: 0 done, 1 the run failed, 2 refused or bad input, 3 the run did not
end within the wait (it goes on).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

from laketide.config import LaketideConfig, get_config
from laketide.errors import LaketideError
from laketide.runs import DEFAULT_WAIT, airflow_command, airflow_env, follow, trigger


def _status(config: LaketideConfig, args: argparse.Namespace) -> int:
    from laketide.close import status

    code = status.main([*(["--stream", args.stream] if args.stream else []), *(["--all"] if args.all else [])])
    if code == 0 and not args.stream and not args.all:  # the overview: each table's health too
        from laketide.maintain.health import format_health, health

        tables = health(config)
        if tables:
            print(f"table health (last maintenance: {config.maintenance.record_table})")
            print("\n".join(format_health(tables)))
    return code


def _reconcile(config: LaketideConfig, args: argparse.Namespace) -> int:
    from laketide.close import reconcile

    flags = {"--stream": args.stream, "--start": args.start, "--end": args.end}
    return reconcile.main([part for flag, value in flags.items() if value for part in (flag, value)])


def _snapshots(config: LaketideConfig, args: argparse.Namespace) -> int:
    from laketide.lake.catalog import load_catalog
    from laketide.lake.timeline import format_timeline, timeline

    streams = [config.stream(args.stream)] if args.stream else config.streams
    for stream in streams:
        table = stream.rejects_table if args.rejects else stream.table
        print(f"stream {stream.name}: {table}, newest first (a redo returns to a snapshot id of this list: "
              f"./laketide redo --stream {stream.name} --snapshot-id ID)")
        print("\n".join(format_timeline(timeline(load_catalog(config.catalog), table, args.limit))))
    return 0


def _archive(config: LaketideConfig, args: argparse.Namespace) -> int:
    from laketide.close.archive import archive_closed

    for stream in [config.stream(args.stream)] if args.stream else config.streams:
        print(archive_closed(config, stream, dry_run=args.dry_run).line())
    return 0


def _submit(config: LaketideConfig, args: argparse.Namespace) -> int:
    from laketide.lake import submit

    options = [*(["--print"] if args.print else []), *(["--master", args.master] if args.master else [])]
    return submit.main([*options, args.job, *args.job_args])


def _wait(args: argparse.Namespace) -> float:
    """How long to wait for the run: ``--wait`` as given, none with ``--no-wait``, else a dry run waits."""
    if args.no_wait:
        return 0.0
    if args.wait is None:
        return 0.0 if args.apply else DEFAULT_WAIT
    if args.wait <= 0:
        raise LaketideError(f"--wait {args.wait:g}: give a number of seconds above 0 (or --no-wait)")
    return float(args.wait)


def _trigger_and_follow(config: LaketideConfig, args: argparse.Namespace, dag_id: str, stream: str,
                        conf: dict[str, Any], where: str) -> int:
    wait = _wait(args)
    code, run_id = trigger(config, dag_id, conf, where)
    return follow(config, dag_id, run_id, stream, wait) if code == 0 and wait else code


def _redo(config: LaketideConfig, args: argparse.Namespace) -> int:
    from laketide.redo.params import validate
    from laketide.redo.plan import plan_request

    wait = _wait(args)
    request = validate(config, args.stream, args.snapshot_id, args.at, args.start, args.end, not args.apply,
                       "cli", os.environ.get("USER", "unknown"))
    conf = {"stream": request.stream, "snapshot_id": str(request.snapshot_id), "at": None,
            "start": args.start, "end": args.end, "dry_run": request.dry_run}
    if not wait:  # the plan as the table is now (the run checks it again, logs and records it)
        print("\n".join(["the redo would do this:" if request.dry_run else "the redo will do this:",
                         *(f"  {line}" for line in plan_request(config, request).lines(request.hours))]))
    return _trigger_and_follow(config, args, "laketide_redo", request.stream, conf,
                               "its plan: the log of task 'validate'")


def _range_action(config: LaketideConfig, args: argparse.Namespace) -> int:
    from laketide.redo.overwrite import check_against_table, table_facts, validate_request

    _wait(args)
    request = validate_request(config, args.command, args.stream, args.start, args.end, not args.apply)
    check_against_table(request, table_facts(config, request.stream))
    conf = {"stream": request.stream.name, "start": request.start.isoformat(), "end": request.end.isoformat(),
            "dry_run": request.dry_run}
    return _trigger_and_follow(config, args, f"laketide_{args.command}", request.stream.name, conf,
                               f"its report: the log of task '{args.command}'")


def _close(config: LaketideConfig, args: argparse.Namespace) -> int:
    from laketide.close.closing import close_range
    from laketide.errors import RangeError

    try:
        close_range(args.start, args.end, datetime.now(UTC), config.close.max_range_hours)
    except RangeError as exc:
        raise LaketideError(str(exc)) from None
    stream = config.stream(args.stream)
    return trigger(config, f"laketide_close_{stream.name}", {"start": args.start, "end": args.end})[0]


def _airflow(config: LaketideConfig, args: argparse.Namespace) -> int:
    return subprocess.run(airflow_command(*args.airflow_args), env=airflow_env(config)).returncode


def _wait_options(command: argparse.ArgumentParser) -> None:
    wait = command.add_mutually_exclusive_group()
    wait.add_argument("--wait", type=float, metavar="SECONDS",
                      help=f"wait up to SECONDS for the run to end and print what it recorded (its plan or report; "
                           f"default: {DEFAULT_WAIT:.0f} for a dry run, no wait with --apply)")
    wait.add_argument("--no-wait", action="store_true", help="return once the run is started")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="laketide", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    status = commands.add_parser("status", help="every hour's state, the hours being written or with rows and no "
                                                 "recorded state (e.g. a replay's), table health")
    status.add_argument("--stream")
    status.add_argument("--all", action="store_true", help="every recorded state, not only the latest")
    status.set_defaults(run=_status)
    reconcile = commands.add_parser("reconcile", help="audit == lake + rejects, per hour")
    reconcile.add_argument("--stream")
    reconcile.add_argument("--start", help="first hour, e.g. 2026-11-22T03:00:00+00:00 (default: every hour)")
    reconcile.add_argument("--end", help="first hour after them (exclusive; default: the hour after --start)")
    reconcile.set_defaults(run=_reconcile)
    snapshots = commands.add_parser("snapshots", help="the snapshot timeline of a stream's events table")
    snapshots.add_argument("--stream")
    snapshots.add_argument("--limit", type=int, default=30)
    snapshots.add_argument("--rejects", action="store_true", help="the rejects table's instead")
    snapshots.set_defaults(run=_snapshots)
    submit = commands.add_parser("submit", help="run a Spark job by hand as Airflow does")
    submit.add_argument("--print", action="store_true", help="print the spark-submit command, run nothing")
    submit.add_argument("--master", help="Spark master (default: spark.master of the configuration)")
    submit.add_argument("job", help="a file of spark_jobs/, e.g. ingest_stream.py")
    submit.add_argument("job_args", nargs=argparse.REMAINDER, help="the job's own arguments")
    submit.set_defaults(run=_submit)
    redo = commands.add_parser("redo", help="trigger laketide_redo (a dry run unless --apply)")
    redo.add_argument("--stream", required=True)
    redo.add_argument("--snapshot-id", help="the snapshot to return to (./laketide snapshots lists them)")
    redo.add_argument("--at", help="or: the snapshot current at this time (ISO with offset)")
    redo.add_argument("--start", help="optional: the first hour the redo may change")
    redo.add_argument("--end", help="optional: the end of that range (exclusive)")
    redo.add_argument("--apply", action="store_true", help="change the tables (default: a dry run)")
    _wait_options(redo)
    redo.set_defaults(run=_redo)
    for kind, what in (("backfill", "re-ingest hours from the landing zone"),
                       ("repair", "remove duplicate event ids from hours")):
        action = commands.add_parser(kind, help=f"trigger laketide_{kind}: {what} (a dry run unless --apply)")
        action.add_argument("--stream", required=True)
        action.add_argument("--start", required=True, help="first hour, e.g. 2026-11-22T03:00:00+00:00")
        action.add_argument("--end", required=True, help="first hour after the range (exclusive)")
        action.add_argument("--apply", action="store_true", help="change the tables (default: a dry run)")
        _wait_options(action)
        action.set_defaults(run=_range_action)
    close = commands.add_parser("close", help="trigger laketide_close_<stream> for a range of past hours")
    close.add_argument("--stream", required=True)
    close.add_argument("--start", required=True, help="first hour, e.g. 2012-03-05T00:00:00+00:00")
    close.add_argument("--end", required=True, help="first hour after the range (exclusive), not in the future")
    close.set_defaults(run=_close)
    archive = commands.add_parser("archive", help="move the landing files of every closed hour into the archive "
                                                   "(each close does its own hour; this migrates an existing zone)")
    archive.add_argument("--stream")
    archive.add_argument("--dry-run", action="store_true", help="count what it would move, move nothing")
    archive.set_defaults(run=_archive)
    airflow = commands.add_parser("airflow", help="any airflow command, on the local installation (its home set)")
    airflow.add_argument("airflow_args", nargs=argparse.REMAINDER, help="e.g. dags list, backfill create ...")
    airflow.set_defaults(run=_airflow)
    return top


def main(argv: list[str] | None = None) -> int:
    import logging

    from laketide import logs

    logs.setup(logging.WARNING)
    args = parser().parse_args(argv)
    try:
        config = get_config()
        code: int = args.run(config, args)
        return code
    except LaketideError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
