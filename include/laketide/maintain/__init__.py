"""Table maintenance out of the write path: compaction, manifests, expiry, orphans — for many tables.

* :mod:`laketide.maintain.plan`: every decision as a plain function (which hours to compact, which snapshots
  an expiry may remove and which writer markers it must keep, whether an orphan age is safe, whether a manual
  request is valid);
* :mod:`laketide.maintain.job`: the Spark application that runs Iceberg's procedures on several tables in one
  session, one table at a time, each action recorded;
* :mod:`laketide.maintain.record`: the maintenance record (an Iceberg table written with pyiceberg);
* :mod:`laketide.maintain.health`: a per-table health summary from metadata only (``make status``).

See docs/operations.md (Table maintenance).
"""
