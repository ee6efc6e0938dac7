"""The one place that builds the Iceberg catalog, for pyiceberg and for Spark, from the same settings.

Spark uses Iceberg's JDBC catalog and Airflow uses pyiceberg's ``SqlCatalog``: both read and write the same
tables (``iceberg_tables``, ``iceberg_namespace_properties``) in the same database under the same catalog
name, so they see the same Iceberg tables.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from laketide.config import CatalogConfig, LaketideConfig, StreamConfig
from laketide.errors import ConfigError, TableNotFoundError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata

#: table properties of the streaming tables (events, rejects), set deliberately. They govern Iceberg's own
#: commit retries, i.e. the maintenance commits (rewrite_data_files, rewrite_manifests, expire_snapshots) that
#: race the live writer: a lost compare-and-swap is retried on the refreshed table (the writer's appends never
#: conflict with a rewrite, they only move the table on), up to 20 times within 10 minutes, then the action gives
#: up and is recorded as such. The writer's own commit does not use them: it is one fenced compare-and-swap per
#: attempt with its own back-off until ``catalog.retry_timeout`` (``laketide.ingest.sink.publish``), so it always wins
#: in the end.
COMMIT_RETRY_PROPERTIES = {
    "commit.retry.num-retries": "20",
    "commit.retry.min-wait-ms": "100",
    "commit.retry.max-wait-ms": "5000",
    "commit.retry.total-timeout-ms": "600000",
}

SQLITE_JDBC_PARAMS = "journal_mode=WAL&busy_timeout=30000"


def jdbc_properties(catalog: CatalogConfig) -> dict[str, str]:
    """Iceberg JDBC catalog properties (``uri``, ``jdbc.user``, ...) for the configured SQLAlchemy URI."""
    uri = catalog.uri
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///"):]
        if not path.startswith("/"):
            raise ConfigError(f"catalog.uri {uri!r}: the SQLite path must be absolute (sqlite:////abs/path.db)")
        return {"uri": f"jdbc:sqlite:{path}?{SQLITE_JDBC_PARAMS}", "jdbc.schema-version": "V1"}
    parts = urlsplit(uri)
    if not parts.scheme.startswith("postgresql") or not parts.hostname or not parts.path.strip("/"):
        raise ConfigError(f"catalog.uri {uri!r}: expected postgresql+psycopg2://user:password@host:port/db")
    props = {
        "uri": f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}/{parts.path.strip('/')}",
        "jdbc.schema-version": "V1",
    }
    if parts.username:
        props["jdbc.user"] = unquote(parts.username)
    if parts.password:
        props["jdbc.password"] = unquote(parts.password)
    return props


def pyiceberg_properties(catalog: CatalogConfig) -> dict[str, str]:
    """Properties for pyiceberg's SqlCatalog."""
    # the v1 schema (column iceberg_type) is what Iceberg's JDBC catalog uses with jdbc.schema-version=V1
    return {"uri": catalog.uri, "warehouse": catalog.warehouse, "schema_version": "v1"}


_CATALOGS: dict[tuple[str, str, str], SqlCatalog] = {}
_LOCK = threading.Lock()
#: catalogs built by this process (one per distinct setting: a trigger poll, a status write or a verification
#: reuses it instead of building an engine and checking the catalog schema again)
constructions = 0


def load_catalog(catalog: CatalogConfig) -> SqlCatalog:
    """pyiceberg's view of the shared catalog (no JVM), built once per process and setting."""
    global constructions
    key = (catalog.name, catalog.uri, catalog.warehouse)
    with _LOCK:
        cached = _CATALOGS.get(key)
        if cached is None:
            from pyiceberg.catalog.sql import SqlCatalog

            if catalog.uri.startswith("sqlite:///"):
                from pathlib import Path

                Path(catalog.uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
            cached = _CATALOGS[key] = SqlCatalog(catalog.name, **pyiceberg_properties(catalog))
            constructions += 1
    return cached


def table_or_create(catalog: SqlCatalog, name: str, schema: Schema, spec: PartitionSpec,
                    properties: dict[str, str]) -> Table:
    """The table ``name``, created (with its namespace) when missing.

    Loaded first: pyiceberg's ``create_table_if_not_exists`` writes a new metadata file before it finds that the
    table exists, so calling it for every status or maintenance record left one orphan ``00000-*.metadata.json``
    per record in the table's metadata folder (and tried a catalog insert that could only fail)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return catalog.load_table(name)
    except (NoSuchTableError, NoSuchNamespaceError):
        pass
    catalog.create_namespace_if_not_exists(name.split(".")[0])
    return catalog.create_table_if_not_exists(name, schema=schema, partition_spec=spec, properties=properties)


def load_stream_table(config: LaketideConfig, name: str, stream: StreamConfig) -> Table:
    """The table ``name`` (the events, rejects or merged table of ``stream``) through pyiceberg.

    :raises TableNotFoundError: naming the table and how its writer creates it
    """
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return load_catalog(config.catalog).load_table(name)
    except (NoSuchTableError, NoSuchNamespaceError):
        raise TableNotFoundError(
            f"table {name} of stream {stream.name!r} does not exist in catalog {config.catalog.name!r}: "
            f"run laketide_ingest_{stream.name}_once (or the writer DAG laketide_ingest_{stream.writer_group}) to "
            "create the tables, then try again"
        ) from None


def append_rows(table: Table, data: pa.Table, properties: dict[str, str] | None = None) -> None:
    """``table.append(data, snapshot_properties=properties)``, one commit, at a cost that does not grow with the
    table's history.

    pyiceberg 0.12's ``Transaction.table_metadata`` replays the staged updates and deep-copies the whole table
    metadata, every snapshot with its summary, at each read, and one append reads it about twenty times: on a
    status table of 150 snapshots an append took 0.47 s of CPU, most of it ``copy.deepcopy``. The transaction here
    computes it once per state of the transaction (the table's metadata and the staged updates, both replaced,
    never changed in place, when either moves on), as apache/iceberg-python#3302 proposed."""
    with _transaction_class()(table) as txn:
        txn.append(data, snapshot_properties=properties or {})


@functools.cache
def _transaction_class() -> type[Transaction]:
    from pyiceberg.table import Transaction

    class CachedTransaction(Transaction):
        _cached: tuple[object, object, TableMetadata] | None = None

        @property
        def table_metadata(self) -> TableMetadata:
            base, updates = self._table.metadata, self._updates
            cached = self._cached
            if cached is None or cached[0] is not base or cached[1] is not updates:
                cached = self._cached = (base, updates, super().table_metadata)
            return cached[2]

    return CachedTransaction
