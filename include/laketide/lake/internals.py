"""Work-arounds that reach into non-public parts of Iceberg's Java classes (through py4j reflection).

Kept here, small and documented, so that an Iceberg upgrade has one place to check.

**Iceberg's JDBC catalog leaves a read transaction open on SQLite.** When it starts, ``JdbcCatalog``
checks its tables through ``DatabaseMetaData.getColumns``/``getTables`` and never closes those result sets
(Iceberg 1.10.2, ``updateSchemaIfRequired`` and ``atomicCreateTable``). On SQLite in WAL mode, a connection
with an unfinished statement keeps its read snapshot: that pooled connection then sees the catalog as it was
at start-up, and once any other process has written to the catalog (a status record, a lease heartbeat, a
second writer) every commit through it fails with ``SQLITE_BUSY_SNAPSHOT``, forever, whatever the busy
timeout: the writer crashed at every hourly close. :func:`reopen_sqlite_connections` closes the catalog
pool's idle connections once the catalog is initialised, so the pool opens clean ones.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from laketide.lake.commits import SourceFiles

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("laketide.lake.internals")
JDBC_CATALOG = "org.apache.iceberg.jdbc.JdbcCatalog"


def _field(owner: Any, class_name: str, name: str) -> Any:
    """Private field ``name`` declared by ``class_name``, a class of ``owner`` or one of its superclasses (Iceberg's
    classes live in Spark's jar class loader, so they are found from the object, not by name)."""
    cls = owner.getClass()
    while cls is not None and cls.getName() != class_name:
        cls = cls.getSuperclass()
    if cls is None:
        raise RuntimeError(f"{owner.getClass().getName()} is not a {class_name}")
    field = cls.getDeclaredField(name)
    field.setAccessible(True)
    return field


class SqlitePool:
    """The connection pool of Spark's Iceberg JDBC catalog ``catalog`` when it is on SQLite (else inert).

    :meth:`reopen` closes the pool's idle connections so that the next catalog call opens a clean one. The
    writer calls it before every commit attempt: a connection left in a read transaction (by the catalog's
    start-up, or any other unfinished statement) would otherwise fail every commit with
    ``SQLITE_BUSY_SNAPSHOT`` once another process has written to the catalog. Opening a SQLite connection
    costs well under a millisecond.
    """

    def __init__(self, spark: SparkSession, catalog: str) -> None:
        self.catalog = catalog
        self._pool: Any = None
        plugin = spark._jsparkSession.sessionState().catalogManager().catalog(catalog)
        iceberg = _field(plugin, "org.apache.iceberg.spark.SparkCatalog", "icebergCatalog").get(plugin)
        if iceberg is None or iceberg.getClass().getName() != JDBC_CATALOG:
            return
        pool = _field(iceberg, JDBC_CATALOG, "connections").get(iceberg)
        url = str(_field(pool, "org.apache.iceberg.jdbc.JdbcClientPool", "dbUrl").get(pool))
        if not url.startswith("jdbc:sqlite:"):
            return
        self._pool = pool
        self._clients = _field(pool, "org.apache.iceberg.ClientPoolImpl", "clients").get(pool)
        self._size = _field(pool, "org.apache.iceberg.ClientPoolImpl", "currentSize")

    def reopen(self) -> int:
        """Close the idle connections (none are borrowed between the writer's catalog calls); return how many."""
        if self._pool is None:
            return 0
        closed = 0
        while not self._clients.isEmpty():
            self._clients.removeFirst().close()
            closed += 1
        if closed:
            self._size.setInt(self._pool, max(0, self._size.getInt(self._pool) - closed))
        return closed


def reopen_sqlite_connections(spark: SparkSession, catalog: str) -> int:
    """Close the idle JDBC connections of Spark's Iceberg catalog ``catalog`` (SQLite only); return how many.

    Call it after the catalog's first use (it initialises lazily). Does nothing for a catalog that is not
    Iceberg's JDBC catalog on SQLite.
    """
    closed = SqlitePool(spark, catalog).reopen()
    if closed:
        log.info("catalog %s: reopened %d SQLite connection(s) left in a read transaction by the catalog's "
                 "start-up", catalog, closed)
    return closed


UNCOMMITTED_FILE_SET = "rewritten-file-scan-task-set-id"
FILE_SCAN_RDD = "org.apache.spark.sql.execution.datasources.FileScanRDD"
LOGICAL_RDD = "org.apache.spark.sql.execution.LogicalRDD"


def batch_files(batch: DataFrame) -> SourceFiles:
    """Names of the landing files a micro-batch reads (as ``_metadata.file_name``), from its plan, with the
    size and modification time Spark listed for each (the source position ``commits.summary_properties``
    records: a file changed after ingest is told by them).

    Spark lists them in the file scan it planned for the batch; reading them there costs no pass over the
    rows. Empty files are not in it (Spark's scan makes no split of them). Raises when the plan holds no
    file scan (a Spark whose plans differ from 3.5's)."""
    execution = batch._jdf.queryExecution()
    plan = execution.logical()
    # a foreachBatch micro-batch is an RDD Spark already planned: walk it rather than plan the batch again
    pending = [plan.rdd() if plan.getClass().getName() == LOGICAL_RDD else execution.toRdd()]
    stats: dict[str, tuple[int, int]] = {}  # name -> (size, modification ms)
    scans = 0
    while pending:
        rdd = pending.pop()
        if rdd.getClass().getName() == FILE_SCAN_RDD:
            scans += 1
            partitions = rdd.filePartitions()
            for i in range(partitions.size()):
                for f in partitions.apply(i).files():  # PartitionedFile: one split of a file
                    name = str(f.toPath().getName())
                    if name not in stats:
                        stats[name] = (int(f.fileSize()), int(f.modificationTime()))
        dependencies = rdd.dependencies().iterator()
        while dependencies.hasNext():
            pending.append(dependencies.next().rdd())
    if not scans:
        raise RuntimeError(
            f"no {FILE_SCAN_RDD} in the plan of the micro-batch: cannot name its landing files "
            "(laketide reads them from Spark 3.5's file scan; check the pyspark version in requirements.txt)"
        )
    return SourceFiles(stats)


class IcebergJvm:
    """Iceberg's Java classes the writer calls per batch, looked up once: through py4j, each lookup of a
    class by its dotted name costs a call per name part."""

    def __init__(self, spark: SparkSession, catalog: str) -> None:
        jvm: Any = spark._jvm
        self.session = spark._jsparkSession
        self.spark3util = jvm.org.apache.iceberg.spark.Spark3Util
        self.coordinator = jvm.org.apache.iceberg.spark.FileRewriteCoordinator.get()
        self.conversions = jvm.org.apache.iceberg.types.Conversions
        self.metadata = jvm.org.apache.iceberg.TableMetadata
        self.sqlite = SqlitePool(spark, catalog)
        self.integer = jvm.java.lang.Class.forName("java.lang.Integer")

    def table(self, name: str) -> Any:
        """The Java Iceberg table ``name`` (``catalog.namespace.table``), freshly loaded."""
        return self.spark3util.loadIcebergTable(self.session, name)


