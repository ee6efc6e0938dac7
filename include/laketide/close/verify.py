"""Great Expectations verification of one partition of one stream: the numbers add up and the rows are sound.

The lake rows of the partition (``start <= event_time < end``, read with pyiceberg at a chosen snapshot of
the events table) are validated by GX 1.x through an ephemeral context against a suite of real expectations:

* ``expect_table_row_count_to_equal(audit - rejects)``: what the producers reported equals lake rows +
  rejected lines attributed to the partition. ``audit`` is ``inspection.Inspection.expected`` (the audit
  records of the files in ``data/`` or ingested), the one definition reconciliation uses too;
* ``expect_column_values_to_be_unique(<event id>)``;
* ``expect_column_values_to_not_be_null`` for every required field;
* ``expect_column_values_to_be_between(<event time>, start, end, strict_max)``.

Besides, every landing file of the partition that is neither ingested nor pending is reported by name with
its reason (``inspection.inspect``: hidden name, empty, no audit, audit count differs, not one hour, changed or
deleted after ingest); a blocking one fails the verification with the file named in the message.

The full validation result is kept as JSON under ``close.results_dir/<stream>/``; :class:`Verification`
carries the counts, one line per failed expectation or reported file and where the result was saved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laketide.close.reconcile import event_time, lineage_summaries, reject_counts, source_positions
from laketide.close.results import balance
from laketide.config import LaketideConfig, StreamConfig
from laketide.errors import LaketideError
from laketide.ingest.inspection import inspect
from laketide.ingest.landing import read_audits
from laketide.lake.catalog import load_stream_table
from laketide.lake.commits import duplicates_removed
from laketide.lake.hours import HOUR, hour_start, partition_key
from laketide.logs import quiet_libraries

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from great_expectations.core import ExpectationSuite, ExpectationSuiteValidationResult
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table

SOURCE_FILE = "_source_file"
#: how many unexpected values a failure line quotes
EXAMPLES = 3


@dataclass(frozen=True)
class Verification:
    """The outcome of :func:`verify_partition`."""

    stream: str
    partition: datetime
    success: bool
    #: events producers reported for the partition (all published audit records)
    audit: int
    #: rows in the events table for the partition (at ``snapshot_id``)
    lake: int
    #: rejected lines attributed to the partition
    rejects: int
    #: published landing files of this partition the writer has not ingested yet
    pending_files: int
    snapshot_id: int | None
    #: one line per failed expectation, with observed vs expected values, then one per blocking reported file
    failures: list[str]
    #: where the full GX validation result JSON was saved
    results_path: Path
    #: every landing file of the partition reported by name: ``<file>: <reason>: <detail>``
    #: (``inspection.Finding.line``), blocking or not
    findings: list[str] = field(default_factory=list)
    #: rows removed or dropped as duplicate event ids (repair, ``dedupe_on_write``), still counted by the audit
    duplicates: int = 0

    @property
    def missing(self) -> int:
        """Reported events neither in the lake nor rejected (negative: more rows than reported)."""
        return self.audit - self.lake - self.rejects - self.duplicates

    def _balance(self) -> str:
        return balance(self.audit, self.lake, self.rejects, self.duplicates)

    def message(self) -> str:
        """One line for logs, alerts and the status record's reason; the numbers are always in it."""
        head = f"partition {partition_key(self.partition)} of {self.stream}"
        at = f"snapshot {self.snapshot_id}" if self.snapshot_id is not None else "no snapshot (empty table)"
        if self.success:
            notes = "".join(f"; note: landing file {line}" for line in self.findings)
            return f"{head} verified: {self._balance()} at {at}{notes}"
        parts = [f"{head} FAILED verification: {self._balance()} at {at}", *self.failures]
        if self.pending_files:
            parts.append(f"{self.pending_files} landed file(s) of the partition not ingested yet "
                         "(the writer is behind)")
        parts.append(f"full result: {self.results_path}")
        return "; ".join(parts)

    def summary_json(self) -> str:
        """Compact JSON for ``StatusRecord.verification``."""
        return json.dumps({
            "success": self.success, "audit": self.audit, "lake": self.lake, "rejects": self.rejects,
            "missing": self.missing, "duplicates": self.duplicates, "pending_files": self.pending_files,
            "snapshot_id": self.snapshot_id,
            "failures": self.failures, "findings": self.findings, "results": str(self.results_path),
        }, separators=(",", ":"))


def _snapshot(table: Table, name: str, snapshot_id: int | None) -> int | None:
    """The snapshot to read: the given one (checked) or the current one (None for a table without any)."""
    if snapshot_id is None:
        current = table.current_snapshot()
        return current.snapshot_id if current is not None else None
    if table.snapshot_by_id(snapshot_id) is None:
        raise LaketideError(f"snapshot {snapshot_id} is not in {name}: verify at an existing snapshot "
                            "(or none for the current one)")
    return snapshot_id


def _columns(stream: StreamConfig) -> tuple[str, ...]:
    """Event id, event time, every required field and the source file, in that order, once each."""
    names = [stream.event_id_field, stream.event_time_field]
    names += [n for n, spec in stream.fields.items() if spec.required]
    return (*dict.fromkeys(names), SOURCE_FILE)


def partition_filter(stream: StreamConfig, start: datetime) -> BooleanExpression:
    """pyiceberg row filter of the partition starting at ``start``: ``start <= event_time < start + 1h``.

    (Predicates built with keyword arguments: that is what mypy sees of pyiceberg's pydantic predicates.)
    """
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan, Reference
    from pyiceberg.expressions.literals import literal

    # string literals become timestamptz when bound; pyiceberg needs the explicit offset (+00:00) to parse them
    column = Reference(stream.event_time_field)
    return And(GreaterThanOrEqual(term=column, value=literal(start.isoformat())),
               LessThan(term=column, value=literal((start + HOUR).isoformat())))


def lake_rows(table: Table, stream: StreamConfig, start: datetime, snapshot_id: int | None) -> pa.Table:
    """The rows of the partition starting at ``start`` (event id, event time, required fields, source file)."""
    scan = table.scan(row_filter=partition_filter(stream, start), selected_fields=_columns(stream),
                      snapshot_id=snapshot_id)
    return scan.to_arrow()


def _ingested_elsewhere(table: Table, files: set[str], snapshot_id: int | None) -> set[str]:
    """Which of ``files`` have rows anywhere in the events table (files naming several partitions)."""
    from pyiceberg.expressions import In, Reference
    from pyiceberg.expressions.literals import literal

    if not files or snapshot_id is None:
        return set()
    row_filter = In(term=Reference(SOURCE_FILE), values={literal(f) for f in files})
    scan = table.scan(row_filter=row_filter, selected_fields=(SOURCE_FILE,), snapshot_id=snapshot_id)
    return set(scan.to_arrow()[SOURCE_FILE].to_pylist())


def build_suite(stream: StreamConfig, start: datetime, expected_rows: int) -> ExpectationSuite:
    """The expectations one partition must meet."""
    quiet_libraries()  # before GX's import, which logs a line per function it does not register
    import great_expectations as gx
    import great_expectations.expectations as gxe

    expectations: list[Any] = [
        gxe.ExpectTableRowCountToEqual(value=expected_rows),
        gxe.ExpectColumnValuesToBeUnique(column=stream.event_id_field),
    ]
    expectations += [gxe.ExpectColumnValuesToNotBeNull(column=name)
                     for name, spec in stream.fields.items() if spec.required]
    # aware UTC bounds: GX's pandas metric compares a tz-aware (DatetimeTZDtype) column vectorised against them
    expectations.append(gxe.ExpectColumnValuesToBeBetween(
        column=stream.event_time_field, min_value=start, max_value=start + HOUR, strict_max=True,
    ))
    return gx.ExpectationSuite(name=f"laketide-{stream.name}-partition", expectations=expectations)


def _frame(rows: pa.Table, stream: StreamConfig) -> pd.DataFrame:
    df = rows.to_pandas()
    times = df[stream.event_time_field]
    # Iceberg timestamptz arrives as datetime64[us, UTC] and is compared tz-aware as is. Deliberately: a naive
    # column would take GX's per-value path, where naive vs aware comparisons raise; localise it as UTC.
    if getattr(times.dt, "tz", None) is None:
        df[stream.event_time_field] = times.dt.tz_localize("UTC")
    return df


def validate(df: pd.DataFrame, suite: ExpectationSuite, stream: StreamConfig) -> ExpectationSuiteValidationResult:
    """Validate ``df`` with ``suite`` through an ephemeral GX context (pandas datasource, whole-frame batch)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # no tqdm bars in task logs
    asset = context.data_sources.add_pandas(f"laketide-{stream.name}").add_dataframe_asset(stream.table)
    batch = asset.add_batch_definition_whole_dataframe("partition").get_batch(batch_parameters={"dataframe": df})
    return batch.validate(suite, result_format="SUMMARY")


def _examples(result: dict[str, Any]) -> str:
    values = list(dict.fromkeys(str(v) for v in result.get("partial_unexpected_list") or []))
    return f" (e.g. {', '.join(values[:EXAMPLES])})" if values else ""


def failure_line(outcome: dict[str, Any], audit: int, rejects: int) -> str:
    """One line for a failed expectation (``ExpectationValidationResult.to_json_dict()``)."""
    config = outcome.get("expectation_config") or {}
    kind, kwargs = config.get("type", "expectation"), config.get("kwargs") or {}
    result = outcome.get("result") or {}
    name = f"{kind}({kwargs['column']})" if "column" in kwargs else kind
    info = outcome.get("exception_info") or {}
    if info.get("raised_exception"):
        return f"{name} raised: {info.get('exception_message')}"
    count, total = result.get("unexpected_count"), result.get("element_count")
    if kind == "expect_table_row_count_to_equal":
        return (f"{name}: observed {result.get('observed_value')} rows, expected {kwargs.get('value')} "
                f"(audit {audit} - rejects {rejects})")
    if kind == "expect_column_values_to_be_unique":
        return f"{name}: {count} of {total} rows hold a duplicated value{_examples(result)}, expected 0"
    if kind == "expect_column_values_to_not_be_null":
        return f"{name}: {count} of {total} rows are null, expected 0"
    if kind == "expect_column_values_to_be_between":
        return (f"{name}: {count} of {total} values outside [{kwargs.get('min_value')}, "
                f"{kwargs.get('max_value')}){_examples(result)}, expected 0")
    expected = {k: v for k, v in kwargs.items() if k not in ("batch_id", "column")}
    observed = result.get("observed_value", count)
    return f"{name}: observed {observed}, expected {expected}"


def save_result(config: LaketideConfig, stream: StreamConfig, start: datetime, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``results_dir/<stream>/<YYYYmmddTHH>-<utc now>.json`` (never overwrites)."""
    folder = config.close.results_dir / stream.name
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{start:%Y%m%dT%H}-{datetime.now(UTC):%Y%m%dT%H%M%S.%fZ}"
    text = json.dumps(payload, indent=2, default=str) + "\n"
    n = 0
    while True:
        path = folder / (f"{stem}.json" if n == 0 else f"{stem}-{n}.json")
        try:
            with open(path, "x", encoding="utf-8") as handle:
                handle.write(text)
            return path
        except FileExistsError:
            n += 1


def verify_partition(config: LaketideConfig, stream: StreamConfig, partition: datetime,
                     snapshot_id: int | None = None) -> Verification:
    """Validate one partition of ``stream`` with Great Expectations and keep the full result.

    :param partition: the partition's UTC hour start (timezone-aware)
    :param snapshot_id: the events-table snapshot to verify (default: the current one)
    :raises LaketideError: the events or rejects table does not exist, or the snapshot is unknown
    :raises ValueError: ``partition`` is naive or not an hour start
    """
    start = hour_start(partition)
    key = partition_key(start)
    table = load_stream_table(config, stream.table, stream)
    rejects_table = load_stream_table(config, stream.rejects_table, stream)
    snapshot_id = _snapshot(table, stream.table, snapshot_id)

    audits = read_audits(stream.landing_path, hidden=True)
    rejected, reject_files = reject_counts(rejects_table, audits)
    rejects = rejected[key]
    rows = lake_rows(table, stream, start, snapshot_id)
    here = set(rows[SOURCE_FILE].to_pylist()) - {None}
    ingested = source_positions(table, snapshot_id) if snapshot_id is not None else {}
    for name in here | reject_files:
        ingested.setdefault(name, None)
    landed = inspect(stream.landing_path, ingested, event_time=event_time(stream), hours={key}, files=here)
    audit = landed.expected().get(key, 0)
    pending = set(landed.pending_for(key))
    pending -= _ingested_elsewhere(table, pending, snapshot_id)
    findings = landed.findings_for(key)

    duplicates = duplicates_removed(lineage_summaries(table, snapshot_id)).get(key, 0)
    suite = build_suite(stream, start, audit - rejects - duplicates)
    result = validate(_frame(rows, stream), suite, stream)
    payload = result.to_json_dict()
    failures = [failure_line(r, audit, rejects) for r in payload.get("results", []) if not r.get("success")]
    failures += [f"landing file {f.line()}" for f in findings if f.blocking]
    payload.setdefault("meta", {})["laketide"] = {
        "stream": stream.name, "table": stream.table, "partition": key, "snapshot_id": snapshot_id,
        "audit": audit, "lake": rows.num_rows, "rejects": rejects, "duplicates": duplicates,
        "pending_files": sorted(pending),
        "findings": [{"file": f.file, "reason": str(f.reason), "detail": f.detail, "hours": list(f.hours),
                      "blocking": f.blocking} for f in findings],
    }
    return Verification(
        stream=stream.name, partition=start, success=bool(result.success) and not any(f.blocking for f in findings),
        audit=audit, lake=rows.num_rows, rejects=rejects, pending_files=len(pending), snapshot_id=snapshot_id,
        failures=failures, results_path=save_result(config, stream, start, payload),
        findings=[f.line() for f in findings], duplicates=duplicates,
    )
