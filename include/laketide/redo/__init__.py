"""Redo a stream from a snapshot: roll its tables back, re-ingest what landed since, resume exactly once.

* :mod:`laketide.redo.params`: validation of the params (reusable checks for any manual operation) and the
  resolution of the snapshot;
* :mod:`laketide.redo.plan`: what a redo changes, from metadata (the dry-run report);
* :mod:`laketide.redo.checkpoint`: the writer's checkpoint rebuilt at a table position;
* :mod:`laketide.redo.job`: the redo itself, in Spark (``spark_jobs/redo.py``, the ``laketide_redo`` DAG).

See docs/operations.md (Redo from a snapshot).
"""
