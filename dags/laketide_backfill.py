"""
### laketide backfill: re-ingest an hour range from the landing zone

Manual. For the hours `[start, end)` of one stream, the landing files the writer ingested are read again and
parsed exactly as the writer does; the events table's hours and the rejects of those files are replaced, each
in one atomic commit (a run twice gives the same tables). Use it when an hour's rows are wrong but its landing
files are right: files fixed in place, rows lost or damaged in the table.

* **validate**: every param is checked before Spark starts: a configured stream, whole UTC hours with an offset,
  start before end, inside the table, and hours the live writer has finished (its watermark past end +
  `allowed_lateness`); an ingested file of the range missing from the landing zone refuses it. A bad request
  fails here, without retry, and changes nothing.
* **backfill**: the Spark job (`spark_jobs/backfill.py`). A dry run counts rows per hour before and after and
  changes nothing. Every touched hour is recorded `reopened` in the status table with the action (who, when,
  from which snapshot, rows before/after per hour); the close DAG verifies and closes it again.

Guide: docs/operations.md (Backfill an hour range).
"""

from __future__ import annotations

from laketide.airflow.actions import hour_range_action_dag

dag = hour_range_action_dag(
    "backfill",
    description="Re-ingest an hour range of a stream from its landing zone (atomic overwrite of those hours)",
    doc_md=__doc__,
    stream_help="the stream whose hours are re-ingested",
    dry_run_help="count rows per hour before and after, change nothing",
)

if __name__ == "__main__":
    dag.test()
