"""
### laketide repair: remove duplicate event ids (re-sent data)

Manual. For the hours `[start, end)` of one stream, every event id held more than once keeps its
first-ingested row (smallest batch id, then landing file name); the hours are replaced by the kept rows in one
atomic commit, checked afterwards (each id once, the planned rows per hour). A second run finds nothing and
commits nothing. Use it when a producer re-sent files under new names and the close's unique-id expectation
failed.

* **validate**: every param is checked before Spark starts: a configured stream, whole UTC hours with an offset,
  start before end, inside the table, and hours the live writer has finished (its watermark past end +
  `allowed_lateness`). A bad request fails here, without retry, and changes nothing.
* **repair**: the Spark job (`spark_jobs/repair.py`). A dry run reports the rows per hour that would be removed
  and changes nothing. The commit's summary counts the removed rows per hour (`laketide.duplicates-removed`):
  verification and reconciliation count them with the lake, as the audit records still count the re-sent lines.
  Every touched hour is recorded `reopened` in the status table with the action (who, when,
  from which snapshot, rows before/after per hour); the close DAG verifies and closes it again.

Guide: docs/operations.md (Repair re-sent data).
"""

from __future__ import annotations

from laketide.airflow.actions import hour_range_action_dag

dag = hour_range_action_dag(
    "repair",
    description="Remove duplicate event ids from an hour range of a stream, keeping the first-ingested row",
    doc_md=__doc__,
    stream_help="the stream whose hours are repaired",
    dry_run_help="report the rows per hour that would be removed, change nothing",
)

if __name__ == "__main__":
    dag.test()
