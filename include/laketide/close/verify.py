"""Great Expectations verification of one partition of one stream: the numbers add up and the rows are sound.

The partition's rows (``start <= event_time < end``, read with pyiceberg at a chosen snapshot of the events table)
are checked in memory that does not grow with the hour (``close.hourscan``): the row count from the data files'
manifest entries where that is exact (no delete files, the file's partition is the hour), else by reading;
null and range checks over Arrow record batches, one data file at a time; uniqueness of event ids on disk (DuckDB
under a memory limit). Great Expectations (1.x, ephemeral context) is the judge of record: it validates the
**hour's summary** (one row: the exact counts the scan found), never the rows themselves, against one expectation
per check, each naming in its ``meta`` the row-level check it stands for:

* ``expect_table_row_count_to_equal``: the lake rows must equal ``audit - rejects - duplicates removed``. ``audit``
  is ``inspection.Inspection.expected`` (the audit records of the files in ``data/`` or ingested), the one
  definition reconciliation uses too;
* ``expect_column_values_to_be_unique(<event id>)``: rows holding an id another row holds too must be 0;
* ``expect_column_values_to_not_be_null`` for every required field: rows with a null must be 0;
* ``expect_column_values_to_be_between(<event time>, start, end)``: values outside ``[start, end)`` must be 0.

Each is a GX ``expect_column_max_to_be_between`` on the summary's column (``rows``, ``duplicated_<id>``,
``null_<field>``, ``outside_<time>``), so the saved result's ``observed_value`` is the exact count; examples of
offending values come from the scan. The summary, the per-data-file figures and the examples are saved with it.

Besides, every landing file of the partition that is neither ingested nor pending is reported by name with
its reason (``inspection.inspect``: hidden name, empty, no audit, audit count differs, not one hour, changed or
deleted after ingest); a blocking one fails the verification with the file named in the message.

Both tables are read at pinned snapshots, the rejects table's holding the same batches as the events table's, and
the landing zone is listed after them (``close.view``): a batch between its two commits, or a file committed while
the hour is read, is pending, never a false count.

The full validation result is kept as JSON under ``close.results_dir/<stream>/``; :class:`Verification`
carries the counts, one line per failed expectation or reported file and where the result was saved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laketide.close.hourscan import (
    ID_MEMORY_LIMIT,
    DuplicateIds,
    Duplicates,
    exact_rows,
    plan,
    record_batches,
    reject_counts,
)
from laketide.close.merged_check import check_merged
from laketide.close.results import VerifiedPartition, balance
from laketide.close.view import pin
from laketide.config import LaketideConfig, StreamConfig
from laketide.ingest.inspection import event_time, inspect
from laketide.ingest.landing import read_audits
from laketide.lake.commits import duplicates_removed, source_positions
from laketide.lake.hours import HOUR, hour_start, partition_key
from laketide.lake.snapshots import id_text, lineage_summaries
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
    #: the names of the pending files (the first few of them are in the message)
    pending_names: list[str] = field(default_factory=list)

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
            names = ", ".join(self.pending_names[:EXAMPLES]) + (
                f" and {len(self.pending_names) - EXAMPLES} more" if len(self.pending_names) > EXAMPLES else "")
            parts.append(f"{self.pending_files} landed file(s) of the partition not ingested yet{': ' if names else ''}"
                         f"{names} "
                         "(the writer is behind)")
        parts.append(f"full result: {self.results_path}")
        return "; ".join(parts)

    def summary_json(self) -> str:
        """Compact JSON for ``StatusRecord.verification``."""
        return json.dumps({
            "success": self.success, "audit": self.audit, "lake": self.lake, "rejects": self.rejects,
            "missing": self.missing, "duplicates": self.duplicates, "pending_files": self.pending_files,
            "snapshot_id": id_text(self.snapshot_id),
            "failures": self.failures, "findings": self.findings, "results": str(self.results_path),
        }, separators=(",", ":"))


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


@dataclass
class HourScan:
    """What :func:`scan_hour` found in one partition: exact counts, a few examples, bounded in size."""

    rows: int = 0
    #: of ``rows``, those counted from manifest entries alone
    metadata_rows: int = 0
    nulls: dict[str, int] = field(default_factory=dict)
    #: event times outside ``[start, end)`` (0 unless a file is misplaced) and the first few of them
    outside: int = 0
    outside_examples: list[str] = field(default_factory=list)
    duplicates: Duplicates = field(default_factory=lambda: Duplicates(0, 0, {}, [], {}))
    source_files: set[str] = field(default_factory=set)
    #: one entry per data file read: path, rows, rows from metadata (or None), rows holding a duplicated id
    files: list[dict[str, Any]] = field(default_factory=list)


def scan_hour(table: Table, stream: StreamConfig, start: datetime, snapshot_id: int | None,
              memory_limit: int = ID_MEMORY_LIMIT) -> HourScan:
    """Count, check and collect the source files of the partition starting at ``start``, one data file at a
    time (see the module docstring): peak memory is one file's projected columns plus DuckDB's limit."""
    import pyarrow as pa
    import pyarrow.compute as pc

    required = [n for n, spec in stream.fields.items() if spec.required]
    found = HourScan(nulls=dict.fromkeys(required, 0))
    if snapshot_id is None:
        return found
    scan, tasks = plan(table, partition_filter(stream, start), _columns(stream), snapshot_id)
    with DuplicateIds(memory_limit) as ids:
        for part, task in enumerate(tasks):
            exact = exact_rows(table, stream.event_time_field, task, {start})
            read = 0
            for batch in record_batches(scan, task):
                read += batch.num_rows
                ids.add(batch.column(stream.event_id_field), part)
                for name in required:
                    found.nulls[name] += batch.column(name).null_count
                times = batch.column(stream.event_time_field)
                low, high = pa.scalar(start, times.type), pa.scalar(start + HOUR, times.type)
                outside = pc.or_kleene(pc.less(times, low), pc.greater_equal(times, high))
                n = pc.sum(outside).as_py() or 0
                if n:
                    found.outside += n
                    more = times.filter(outside).slice(0, EXAMPLES).to_pylist()
                    found.outside_examples = (found.outside_examples + [str(v) for v in more])[:EXAMPLES]
                found.source_files.update(v for v in pc.unique(batch.column(SOURCE_FILE)).to_pylist() if v)
            found.rows += exact[1] if exact is not None else read
            found.metadata_rows += exact[1] if exact is not None else 0
            found.files.append({"file": task.file.file_path, "rows": read,
                                "metadata_rows": exact[1] if exact is not None else None})
        found.duplicates = ids.result(EXAMPLES)
    for part, entry in enumerate(found.files):
        entry["duplicated"] = found.duplicates.per_part.get(part, 0)
    return found


def lake_rows(table: Table, stream: StreamConfig, start: datetime, snapshot_id: int | None) -> pa.Table:
    """The rows of the partition starting at ``start`` (event id, event time, required fields, source file), in
    memory: for tests and small tools only; the close's verification uses :func:`scan_hour`."""
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


def summary_columns(stream: StreamConfig) -> dict[str, tuple[str, str | None]]:
    """The hour summary's columns and, for each, the row-level check it stands for and its column."""
    columns: dict[str, tuple[str, str | None]] = {"rows": ("expect_table_row_count_to_equal", None)}
    if stream.upsert is None:  # an upsert stream's change log keeps a change landed twice: its merge folds it away
        columns[f"duplicated_{stream.event_id_field}"] = ("expect_column_values_to_be_unique", stream.event_id_field)
    columns.update({f"null_{name}": ("expect_column_values_to_not_be_null", name)
                    for name, spec in stream.fields.items() if spec.required})
    columns[f"outside_{stream.event_time_field}"] = ("expect_column_values_to_be_between", stream.event_time_field)
    return columns


def build_suite(stream: StreamConfig, start: datetime, expected_rows: int) -> ExpectationSuite:
    """The expectations one partition's summary must meet: ``expected_rows`` rows, and no row breaking a check."""
    quiet_libraries()  # before GX's import, which logs a line per function it does not register
    import great_expectations as gx
    import great_expectations.expectations as gxe

    expectations: list[Any] = []
    for column, (check, field_name) in summary_columns(stream).items():
        value = expected_rows if column == "rows" else 0
        meta: dict[str, Any] = {"check": check, "expected": value}
        if field_name is not None:
            meta["column"] = field_name
        if check == "expect_column_values_to_be_between":
            meta.update(min_value=start.isoformat(), max_value=(start + HOUR).isoformat(), strict_max=True)
        expectations.append(gxe.ExpectColumnMaxToBeBetween(column=column, min_value=value, max_value=value,
                                                           meta=meta))
    return gx.ExpectationSuite(name=f"laketide-{stream.name}-partition", expectations=expectations)


def summary_frame(found: HourScan, stream: StreamConfig) -> pd.DataFrame:
    """The one-row frame GX validates: the exact counts of :class:`HourScan`."""
    import pandas as pd

    values = {"rows": found.rows, f"duplicated_{stream.event_id_field}": found.duplicates.rows,
              **{f"null_{name}": n for name, n in found.nulls.items()},
              f"outside_{stream.event_time_field}": found.outside}
    return pd.DataFrame([values], columns=list(summary_columns(stream)), dtype="int64")


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


def failure_line(outcome: dict[str, Any], audit: int, rejects: int, found: HourScan | None = None) -> str:
    """One line for a failed expectation (``ExpectationValidationResult.to_json_dict()``), named by the row-level
    check it stands for (its ``meta``), with the counts of ``found`` and examples of offending values."""
    config = outcome.get("expectation_config") or {}
    meta, kwargs = config.get("meta") or {}, config.get("kwargs") or {}
    kind = meta.get("check") or config.get("type", "expectation")
    column = meta.get("column") or kwargs.get("column")
    name = f"{kind}({column})" if column and kind != "expect_table_row_count_to_equal" else kind
    result = outcome.get("result") or {}
    info = outcome.get("exception_info") or {}
    if info.get("raised_exception"):
        return f"{name} raised: {info.get('exception_message')}"
    count, total = result.get("observed_value"), found.rows if found is not None else None
    if isinstance(count, float) and count.is_integer():
        count = int(count)
    if kind == "expect_table_row_count_to_equal":
        return (f"{name}: observed {count} rows, expected {meta.get('expected', kwargs.get('min_value'))} "
                f"(audit {audit} - rejects {rejects})")
    if kind == "expect_column_values_to_be_unique":
        examples = _examples({"partial_unexpected_list": found.duplicates.examples if found else []})
        return f"{name}: {count} of {total} rows hold a duplicated value{examples}, expected 0"
    if kind == "expect_column_values_to_not_be_null":
        return f"{name}: {count} of {total} rows are null, expected 0"
    if kind == "expect_column_values_to_be_between":
        examples = _examples({"partial_unexpected_list": found.outside_examples if found else []})
        return (f"{name}: {count} of {total} values outside [{meta.get('min_value')}, "
                f"{meta.get('max_value')}){examples}, expected 0")
    expected = {k: v for k, v in kwargs.items() if k not in ("batch_id", "column")}
    return f"{name}: observed {count}, expected {expected}"


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
    view = pin(config, stream, snapshot_id)  # both tables first, then the landing zone: one consistent view
    table, snapshot_id = view.events, view.events_snapshot

    audits = read_audits(stream.landing_path, hidden=True, archived={key})
    rejected, reject_files = reject_counts(view.rejects, view.rejects_snapshot, audits, {start})
    rejects = rejected[key]
    found = scan_hour(table, stream, start, snapshot_id, config.close.scan_memory)
    here = found.source_files
    ingested = source_positions(table, snapshot_id) if snapshot_id is not None else {}
    for name in here | reject_files:
        ingested.setdefault(name, None)
    landed = inspect(stream.landing_path, ingested, event_time=event_time(stream), hours={key}, files=here,
                     retention=stream.source_log_retention)
    audit = landed.expected().get(key, 0)
    pending = set(landed.pending_for(key))
    pending -= _ingested_elsewhere(table, pending, snapshot_id)
    findings = landed.findings_for(key)

    duplicates = duplicates_removed(lineage_summaries(table, snapshot_id)).get(key, 0)
    suite = build_suite(stream, start, audit - rejects - duplicates)
    result = validate(summary_frame(found, stream), suite, stream)
    payload = result.to_json_dict()
    failures = [failure_line(r, audit, rejects, found) for r in payload.get("results", []) if not r.get("success")]
    failures += [f"landing file {f.line()}" for f in findings if f.blocking]
    merged = check_merged(config, stream) if stream.upsert is not None else None  # the keyed table: its own check
    if merged is not None:
        failures += merged.failures()
    payload.setdefault("meta", {})["laketide"] = {
        "stream": stream.name, "table": stream.table, "partition": key, "snapshot_id": id_text(snapshot_id),
        "audit": audit, "lake": found.rows, "rejects": rejects, "duplicates": duplicates,
        "lake_rows_from_metadata": found.metadata_rows, "duplicated_ids": found.duplicates.ids,
        "examples": {"duplicated": found.duplicates.examples, "outside": found.outside_examples},
        "data_files": found.files,
        "pending_files": sorted(pending),
        "merged": None if merged is None else merged.line(),
        "findings": [{"file": f.file, "reason": str(f.reason), "detail": f.detail, "hours": list(f.hours),
                      "blocking": f.blocking} for f in findings],
    }
    return Verification(
        stream=stream.name, partition=start,
        success=bool(result.success) and not any(f.blocking for f in findings) and (merged is None or merged.ok),
        audit=audit, lake=found.rows, rejects=rejects, pending_files=len(pending), snapshot_id=snapshot_id,
        failures=failures, results_path=save_result(config, stream, start, payload),
        findings=[f.line() for f in findings], duplicates=duplicates, pending_names=sorted(pending),
    )


def verified_partition(verification: Verification) -> VerifiedPartition:
    """What the ``verify`` task hands on (its XCom) of a verification that passed."""
    from laketide.lake.hours import partition_key

    return VerifiedPartition(partition_key(verification.partition), verification.audit, verification.lake,
                             verification.rejects, verification.snapshot_id, str(verification.results_path),
                             verification.duplicates)
