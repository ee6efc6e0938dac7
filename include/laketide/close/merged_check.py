"""An upsert stream's merged table against the fold of its change log, from Iceberg metadata and files (no JVM).

The merged table's newest merge names the change-log snapshot it applied through (``laketide.changelog-snapshot``,
see ``laketide.ingest.merge_sink``). At that snapshot the fold of the change log (each key's newest change by
sequence; on a tie a delete, then the greater event id) gives the live keys; the merged table must hold exactly
those keys, each once, each with the sequence value of its newest change. Both sides are streamed into an on-disk
DuckDB database (memory capped by ``close.scan_memory``, spilled beyond it), so a table of any size is checked in
bounded memory. Only the key, sequence, event id and operation columns are read.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from laketide.config.upsert import DELETE_OPERATIONS

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from laketide.config import LaketideConfig, StreamConfig

#: the merged table's summary property naming the change-log snapshot it applied through (merge_sink.APPLIED)
APPLIED = "laketide.changelog-snapshot"
EXAMPLES = 5


@dataclass
class MergedCheck:
    """What :func:`check_merged` found."""

    table: str
    #: the change-log snapshot the merged table applied through (None: nothing merged yet)
    applied: int | None
    live_keys: int = 0
    merged_rows: int = 0
    #: keys held more than once by the merged table
    duplicate_keys: int = 0
    #: keys live in the fold but absent, present but deleted in the fold, or held at another sequence
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    missing_count: int = 0
    extra_count: int = 0
    stale_count: int = 0

    @property
    def ok(self) -> bool:
        return not (self.duplicate_keys or self.missing_count or self.extra_count or self.stale_count)

    def failures(self) -> list[str]:
        """One line per problem (none when :attr:`ok`)."""
        at = f"change-log snapshot {self.applied}"
        out = []
        if self.duplicate_keys:
            out.append(f"merged table {self.table}: {self.duplicate_keys} key(s) held more than once")
        for what, count, keys in (("live in the change log but missing", self.missing_count, self.missing),
                                  ("deleted (or never inserted) in the change log but present", self.extra_count,
                                   self.extra),
                                  ("at another sequence than their newest change", self.stale_count, self.stale)):
            if count:
                out.append(f"merged table {self.table}: {count} key(s) {what} (the fold of the change log at {at}), "
                           f"e.g. {', '.join(keys)}")
        if out:
            out.append("rebuild it from the change log with a redo to the change log's current snapshot "
                       "(docs/operations.md, upsert streams)")
        return out

    def line(self) -> str:
        return (f"merged table {self.table}: {self.merged_rows} row(s), {self.live_keys} live key(s) in the fold of "
                f"the change log at snapshot {self.applied}: " + ("agrees" if self.ok else "DIFFERS"))


def applied_snapshot(merged: Table) -> int | None:
    """The change-log snapshot the newest merge into ``merged`` applied through."""
    snap = merged.current_snapshot()
    while snap is not None:
        summary = snap.summary
        value = None if summary is None else summary.additional_properties.get(APPLIED)
        if value is not None:
            return int(value)
        snap = None if snap.parent_snapshot_id is None else merged.snapshot_by_id(snap.parent_snapshot_id)
    return None


def check_merged(config: LaketideConfig, stream: StreamConfig) -> MergedCheck:
    """The merged table of upsert stream ``stream`` against the fold of its change log (see the module)."""
    import duckdb

    from laketide.lake.catalog import load_catalog, load_stream_table

    upsert = stream.upsert
    assert upsert is not None
    catalog = load_catalog(config.catalog)
    merged_table = load_stream_table(config, upsert.table, stream)  # dropped (a re-key): the writer builds it again
    applied = applied_snapshot(merged_table)
    result = MergedCheck(upsert.table, applied)
    keys = list(upsert.primary_key)
    seq, eid, op = upsert.sequence_field, stream.event_id_field, upsert.operation_field
    log_reader = None if applied is None else catalog.load_table(stream.table).scan(
        snapshot_id=applied, selected_fields=(*keys, seq, eid, op)).to_arrow_batch_reader()
    row_reader = merged_table.scan(selected_fields=(*keys, seq)).to_arrow_batch_reader()  # noqa: F841 (DuckDB reads it)
    with tempfile.TemporaryDirectory(prefix="laketide-merged-") as folder:
        con = duckdb.connect(str(Path(folder) / "fold.duckdb"))
        try:
            for setting in (f"memory_limit = '{max(64, config.close.scan_memory // 1024**2)}MiB'",
                            f"temp_directory = '{Path(folder) / 'spill'}'", "preserve_insertion_order = false",
                            "threads = 2"):
                con.execute(f"SET {setting}")
            k = ", ".join(f'"{c}"' for c in keys)
            key_text = " || '/' || ".join(f'CAST("{c}" AS VARCHAR)' for c in keys)
            deletes = ", ".join(f"'{o}'" for o in DELETE_OPERATIONS)
            con.execute(f'CREATE TABLE merged AS SELECT {k}, "{seq}" AS seq FROM row_reader')
            if log_reader is not None:
                con.execute(f'CREATE TABLE changes AS SELECT {k}, "{seq}" AS seq, "{eid}" AS eid, '
                            f'"{op}" IN ({deletes}) AS del FROM log_reader')
            else:
                con.execute(f'CREATE TABLE changes AS SELECT {k}, seq, NULL::VARCHAR AS eid, false AS del FROM merged '
                            "LIMIT 0")
            con.execute(f"CREATE TABLE fold AS SELECT {k}, seq FROM (SELECT *, row_number() OVER (PARTITION BY {k} "
                        "ORDER BY seq DESC, del DESC, eid DESC) AS n FROM changes) WHERE n = 1 AND NOT del")
            one = con.execute("SELECT count(*) FROM fold").fetchone()
            result.live_keys = int(one[0]) if one else 0
            one = con.execute("SELECT count(*) FROM merged").fetchone()
            result.merged_rows = int(one[0]) if one else 0
            one = con.execute(f"SELECT count(*) FROM (SELECT {k} FROM merged GROUP BY {k} HAVING count(*) > 1)"
                              ).fetchone()
            result.duplicate_keys = int(one[0]) if one else 0
            on = " AND ".join(f'f."{c}" = m."{c}"' for c in keys)
            f_key = key_text.replace('CAST("', 'CAST(f."')
            m_key = key_text.replace('CAST("', 'CAST(m."')
            for name, query in (
                ("missing", f"SELECT {f_key} FROM fold f ANTI JOIN merged m ON {on}"),
                ("extra", f"SELECT {m_key} FROM merged m ANTI JOIN fold f ON {on}"),
                ("stale", f"SELECT DISTINCT {f_key} FROM fold f JOIN merged m ON {on} WHERE f.seq IS DISTINCT FROM "
                          "m.seq"),
            ):
                one = con.execute(f"SELECT count(*) FROM ({query})").fetchone()
                setattr(result, f"{name}_count", int(one[0]) if one else 0)
                setattr(result, name, [str(r[0]) for r in con.execute(
                    f"SELECT * FROM ({query}) ORDER BY 1 LIMIT {EXAMPLES}").fetchall()])
        finally:
            con.close()
    return result
