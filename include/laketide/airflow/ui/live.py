"""The audit and rejects of the hours being written (the board's open and lagging hours), counted cheaply.

A closed hour's audit and rejects come from its verification (the status table). An hour being written has none
yet, so they are read now, for those hours alone: the audit records of the hour's landing files (a file's name
starts with its partition, the landing contract) whose data file is in ``data/``, and the rejects table's rows
of the hour (``close.hourscan.reject_counts``, as reconciliation counts them: the hour's partitions and the files
named by its audits, nothing else). No data file of the events table is read.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from pathlib import Path
from typing import Any

from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import TableNotFoundError
from laketide.ingest.landing import AUDIT_SUFFIX, DATA_SUFFIX, audit_dir, data_dir
from laketide.lake.hours import partition_key


def hour_audits(landing_path: str | Path, hour: datetime) -> dict[str, dict[str, Any]]:
    """The readable audit records of the data files named for ``hour`` that are in ``data/``, by data file name."""
    stamp = hour.strftime("%Y%m%dT%H")
    published = {p.name for p in data_dir(landing_path).glob(f"{stamp}-*{DATA_SUFFIX}")}
    audits: dict[str, dict[str, Any]] = {}
    for name in published:
        path = audit_dir(landing_path) / (name[: -len(DATA_SUFFIX)] + AUDIT_SUFFIX)
        try:
            record = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue  # no or no readable audit: reconciliation names the file
        if isinstance(record, dict) and isinstance(record.get("partitions"), dict):
            audits[name] = record
    return audits


def hour_counts(config: LaketideConfig, stream: StreamConfig,
                hours: Collection[datetime]) -> dict[datetime, tuple[int, int]]:
    """``(audit, rejects)`` of each of ``hours`` (hours being written) as they stand now."""
    from laketide.close.hourscan import reject_counts
    from laketide.close.view import pin

    if not hours:
        return {}
    audits: dict[str, dict[str, Any]] = {}
    for hour in hours:
        audits.update(hour_audits(stream.landing_path, hour))
    audit: dict[str, int] = {}
    for record in audits.values():
        for key, count in record["partitions"].items():
            audit[key] = audit.get(key, 0) + int(count)
    try:
        view = pin(config, stream)
    except TableNotFoundError:
        return {h: (audit.get(partition_key(h), 0), 0) for h in hours}
    rejects, _ = reject_counts(view.rejects, view.rejects_snapshot, audits, hours)
    return {h: (audit.get(partition_key(h), 0), rejects.get(partition_key(h), 0)) for h in hours}
