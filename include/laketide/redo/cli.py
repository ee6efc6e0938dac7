"""The command line of the backfill and repair Spark jobs (``spark_jobs/backfill.py``, ``spark_jobs/repair.py``):
every param is checked (configuration, landing zone, table metadata) before the Spark session starts.

A dry run is the default (as in the DAG forms and the redo job): ``--dry-run false`` changes the tables.
Exit codes: 0 done (or nothing to do, or a dry run), 1 an error (e.g. a commit that lost to a concurrent commit
into the same hours: run it again), 2 a bad request (nothing changed), 4 the committed result failed its check.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from laketide.redo.overwrite import Kind

if TYPE_CHECKING:
    from laketide.config import LaketideConfig

#: exit codes of the jobs a retry cannot fix, with what they mean (the DAGs fail at once on them)
FATAL_EXIT_CODES = {2: "bad request (nothing changed)", 4: "the committed result failed its check"}

DESCRIPTIONS = {
    "backfill": "Re-ingest the hours [start, end) of a stream from its landing zone (atomic overwrite of those "
                "hours in the events and rejects tables).",
    "repair": "Remove duplicate event ids from the hours [start, end) of a stream, keeping the first-ingested row "
              "(one atomic commit).",
}


def arguments(kind: Kind, argv: list[str] | None = None) -> argparse.Namespace:
    """The job's command line, parsed (a dry run unless ``--dry-run false``)."""
    parser = argparse.ArgumentParser(prog=f"{kind}.py", description=DESCRIPTIONS[kind])
    parser.add_argument("--stream", required=True, help="a configured stream")
    parser.add_argument("--start", required=True, help="first hour, e.g. 2026-11-22T03:00:00+00:00")
    parser.add_argument("--end", required=True, help="first hour after the range (exclusive)")
    parser.add_argument("--dry-run", nargs="?", const="true", default="true", choices=["true", "false"],
                        help="plan and count, change nothing (the default: pass --dry-run false to change the tables)")
    parser.add_argument("--requested-by", default=None, help="who asked (recorded with the action)")
    parser.add_argument("--run-id", default=None, help="recorded in the status table (default: none)")
    return parser.parse_args(argv)


def main(kind: Kind, argv: list[str] | None = None) -> int:
    args = arguments(kind, argv)
    from laketide import logs

    logs.setup()

    from laketide.config import get_config
    from laketide.errors import ActionFailedError, ActionRequestError, ConfigError
    from laketide.redo.overwrite import check_against_table, record_outcome, table_facts, validate_request

    try:
        config = get_config()
        request = validate_request(config, kind, args.stream, args.start, args.end, args.dry_run == "true",
                                   args.requested_by)
        check_against_table(request, table_facts(config, request.stream))
        plan: Any = None
        if kind == "backfill":
            from laketide.redo.backfill import prepare

            plan = prepare(config, request)
    except (ConfigError, ActionRequestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # the plan first: what a reader of the task's log sees before Spark's start-up lines
    for line in plan_lines(request, plan):
        print(line, flush=True)

    from laketide.lake.spark import build_session

    spark = build_session(config, f"laketide-{kind}-{request.stream.name}")
    try:
        if kind == "backfill":
            from laketide.redo.backfill import backfill

            outcome = backfill(spark, config, request, plan)
        else:
            from laketide.redo.repair import repair

            outcome = repair(spark, config, request)
    except ActionRequestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ActionFailedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4
    finally:
        spark.stop()
    record_outcome(config, outcome, args.run_id)
    from laketide.redo import actions

    actions.record(config, actions.from_outcome(outcome, args.run_id))  # dry runs too
    for line in outcome.lines():
        print(line)
    print(json.dumps(outcome.as_dict(), sort_keys=True))
    return 0


def plan_lines(request: Any, plan: Any = None) -> list[str]:
    """What the job is about to do, before Spark starts: the request, and for a backfill its landing files."""
    head = f"{'DRY RUN: ' if request.dry_run else ''}{request.describe()} requested by {request.requested_by}"
    lines = [head, f"  hours: {len(request.hours)} ({request.start.isoformat()} to {request.end.isoformat()})"]
    if plan is not None:
        shown = ", ".join(plan.files[:5]) + (", ..." if len(plan.files) > 5 else "")
        lines.append(f"  landing files to re-read: {len(plan.files)}" + (f" ({shown})" if shown else ""))
        if plan.pending:
            lines.append(f"  landing files of the range not ingested yet (left to the writer): {len(plan.pending)}")
    return lines


def check_params(config: LaketideConfig, kind: Kind, params: dict[str, Any],
                 requested_by: str | None = None) -> dict[str, str]:
    """The DAGs' validation task: every check of the job (configuration, landing zone, table metadata; no
    Spark), then the job's arguments as strings.

    :raises ActionRequestError: the request is refused; nothing was changed
    """
    from laketide.redo.overwrite import check_against_table, table_facts, validate_request

    request = validate_request(config, kind, params.get("stream"), params.get("start"), params.get("end"),
                               params.get("dry_run", True), requested_by)
    check_against_table(request, table_facts(config, request.stream))
    if kind == "backfill":
        from laketide.redo.backfill import prepare

        prepare(config, request)
    return {"stream": request.stream.name, "start": request.start.isoformat(), "end": request.end.isoformat(),
            "dry_run": "true" if request.dry_run else "false", "requested_by": request.requested_by}


def job_args(task_id: str = "validate") -> list[str]:
    """The job's arguments, templated from the validation task's result (strings checked there)."""
    args: list[str] = []
    for name in ("stream", "start", "end", "dry_run", "requested_by"):
        args += ["--" + name.replace("_", "-"), "{{ ti.xcom_pull(task_ids='" + task_id + "')['" + name + "'] }}"]
    return [*args, "--run-id", "{{ run_id }}"]
