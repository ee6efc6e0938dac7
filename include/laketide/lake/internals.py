"""Every use of a non-public Spark, PySpark or Iceberg API, behind one door with a version check.

The writer's default ("internal") commit path is fast because it reaches past the public APIs: Iceberg's
``FileRewriteCoordinator`` side channel hands back the data files of a write instead of committing them
(:func:`write_uncommitted`), the micro-batch's landing files are read from Spark's ``FileScanRDD`` over
py4j (:func:`batch_files`), resolved plan columns serve as a cache key (:func:`output_key`), and private
fields of Iceberg's JDBC catalog are reached by reflection (:class:`SqlitePool`). Each of these can break
with any upgrade of either jar. :func:`check` runs at writer start-up: it compares the running Spark and
Iceberg versions with the ones this module was written for (:data:`WRITTEN_FOR`) and looks up every class,
method and field used here; when anything differs it returns the reason, and the writer takes the public
commit path (``laketide.ingest.public_sink``) or, with ``commit_path: internal``, refuses to start.

PySpark itself offers no public way to reach the JVM: :func:`gateway` (PySpark's ``_jvm`` and
``_jsparkSession``, unchanged since PySpark 1.x) is the one private attribute the public path also uses,
to call Iceberg's public Java API.

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
import threading
from typing import TYPE_CHECKING, Any

from laketide.lake.commits import SourceFiles

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("laketide.lake.internals")
JDBC_CATALOG = "org.apache.iceberg.jdbc.JdbcCatalog"
UNCOMMITTED_FILE_SET = "rewritten-file-scan-task-set-id"
FILE_SCAN_RDD = "org.apache.spark.sql.execution.datasources.FileScanRDD"
LOGICAL_RDD = "org.apache.spark.sql.execution.LogicalRDD"

#: (Spark, Iceberg) major.minor versions this module was written and tested for
WRITTEN_FOR = ("3.5", "1.10")
#: the non-public classes used here, with the methods (m) and declared fields (f) used on each
USED: dict[str, tuple[tuple[str, str], ...]] = {
    "org.apache.iceberg.spark.FileRewriteCoordinator": (("m", "get"), ("m", "fetchNewFiles"), ("m", "clearRewrite")),
    FILE_SCAN_RDD: (("m", "filePartitions"),),
    "org.apache.spark.sql.execution.datasources.PartitionedFile": (
        ("m", "toPath"), ("m", "fileSize"), ("m", "modificationTime")),
    LOGICAL_RDD: (("m", "rdd"),),
    "org.apache.iceberg.spark.SparkCatalog": (("f", "icebergCatalog"),),
    JDBC_CATALOG: (("f", "connections"),),
    "org.apache.iceberg.jdbc.JdbcClientPool": (("f", "dbUrl"),),
    "org.apache.iceberg.ClientPoolImpl": (("f", "clients"), ("f", "currentSize")),
    "org.apache.iceberg.TableMetadata": (("m", "buildFrom"),),
    "org.apache.iceberg.TableMetadata$Builder": (("m", "setBranchSnapshot"),),
    "org.apache.iceberg.TableOperations": (("m", "commit"), ("m", "current")),
    "org.apache.iceberg.BaseTable": (("m", "operations"),),
}


def gateway(spark: SparkSession) -> tuple[Any, Any]:
    """PySpark's py4j view of the JVM and the Java SparkSession (no public accessor exists)."""
    return spark._jvm, spark._jsparkSession


def iceberg_table(spark: SparkSession, name: str) -> Any:
    """The Java Iceberg ``Table`` of ``name`` (``catalog.namespace.table``) through Spark's catalog: Iceberg's public
    Java API on it (schema, partition spec, expiry, transactions)."""
    jvm, session = gateway(spark)
    return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(session, name)


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def versions(spark: SparkSession) -> tuple[str, str]:
    """The running (Spark, Iceberg) versions; Iceberg's is '' when its jar is not on the class path."""
    jvm, _ = gateway(spark)
    try:
        iceberg = str(jvm.org.apache.iceberg.IcebergBuild.version())
    except Exception:  # py4j: the class is missing
        iceberg = ""
    return str(spark.version), iceberg


def check(spark: SparkSession, written_for: tuple[str, str] = WRITTEN_FOR) -> str | None:
    """None when this module can run on ``spark``: its Spark and Iceberg versions are the ones it was written
    for (same major.minor) and every class, method and field it uses is there; else the reason, one line."""
    running = versions(spark)
    reasons = [
        f"{what} {have or 'missing'} (written for {want}.x)"
        for what, have, want in zip(("Spark", "Iceberg"), running, written_for, strict=True)
        if _major_minor(have) != want
    ]
    jvm, _ = gateway(spark)
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    for class_name, members in USED.items():
        try:
            cls = jvm.java.lang.Class.forName(class_name, False, loader)
        except Exception:
            reasons.append(f"class {class_name} not found")
            continue
        methods = {str(m.getName()) for m in cls.getMethods()} | {str(m.getName()) for m in cls.getDeclaredMethods()}
        fields = {str(f.getName()) for f in cls.getDeclaredFields()}
        for kind, name in members:
            if name not in (methods if kind == "m" else fields):
                reasons.append(f"{class_name}.{name} not found")
    return "; ".join(reasons) or None


def output_key(df: DataFrame) -> str:
    """The resolved output columns of ``df`` with their ids (``value#0, ...``): a cache key for columns
    built on it (the micro-batches of one streaming query share them)."""
    return str(df._jdf.queryExecution().analyzed().output().toString())


def write_uncommitted(df: DataFrame, name: str, iceberg: IcebergJvm, file_set: str) -> tuple[Any, Any]:
    """Write ``df`` as data files of the Iceberg table ``name`` that no snapshot references, through Iceberg's
    compaction side channel (write option ``rewritten-file-scan-task-set-id``); return the Java table (loaded
    after the write) and the written DataFiles."""
    df.writeTo(name).option(UNCOMMITTED_FILE_SET, file_set).append()
    jtable = iceberg.table(name)
    try:
        written = iceberg.coordinator.fetchNewFiles(jtable, file_set)  # raises when the write handed back nothing
    finally:
        iceberg.coordinator.clearRewrite(jtable, file_set)
    return jtable, written


def current_metadata(table: Any) -> Any:
    """The Java table's current ``TableMetadata`` as last loaded (Iceberg core's ``TableOperations``)."""
    return table.operations().current()


def swap_main(metadata_class: Any, table: Any, base: Any, snapshot: Any) -> None:
    """Make ``snapshot`` the head of ``main`` in one compare-and-swap of the catalog pointer from exactly the
    metadata ``base`` (Iceberg core's ``TableOperations.commit``: no refresh, no internal retry)."""
    updated = metadata_class.buildFrom(base).setBranchSnapshot(snapshot, "main").build()
    table.operations().commit(base, updated)


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


_REOPENING = threading.Lock()


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
        #: the session to look the pool up again from, while a look-up failed (a catalog that could not start
        #: because the database was busy is started again by the next call: its pool is found then)
        self._spark: SparkSession | None = None
        self._lookups = 0
        try:
            self._find(spark, catalog)
        except Exception as exc:  # a catalog whose private fields differ (see check): work without the fix
            self._pool = None
            self._spark = spark
            log.warning("catalog %s: cannot reach the JDBC connection pool yet (%s); looked up again before the next "
                        "catalog call", catalog, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    def _find(self, spark: SparkSession, catalog: str) -> None:
        plugin = gateway(spark)[1].sessionState().catalogManager().catalog(catalog)
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
        if self._pool is None and self._spark is not None:
            self._lookups += 1
            try:
                self._find(self._spark, self.catalog)
                self._spark = None
                log.info("catalog %s: JDBC connection pool found", self.catalog)
            except Exception:  # still not there: the call that follows starts the catalog, or fails as it would
                if self._lookups >= 50:  # a catalog whose private fields differ: work without the fix
                    self._spark = None
                    log.warning("catalog %s: no JDBC connection pool after %d look-ups; SQLite connections left in "
                                "a read transaction are not renewed (prefer a PostgreSQL catalog)", self.catalog,
                                self._lookups)
        if self._pool is None:
            return 0
        closed = 0
        with _REOPENING:  # the streams of a writer application share the pool: one thread empties it at a time
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
        jvm, self.session = gateway(spark)
        self.spark3util = jvm.org.apache.iceberg.spark.Spark3Util
        self.coordinator = jvm.org.apache.iceberg.spark.FileRewriteCoordinator.get()
        self.conversions = jvm.org.apache.iceberg.types.Conversions
        self.metadata = jvm.org.apache.iceberg.TableMetadata
        self.sqlite = SqlitePool(spark, catalog)
        self.integer = jvm.java.lang.Class.forName("java.lang.Integer")

    def table(self, name: str) -> Any:
        """The Java Iceberg table ``name`` (``catalog.namespace.table``), freshly loaded."""
        return self.spark3util.loadIcebergTable(self.session, name)




def direct_executor(spark: SparkSession) -> Any | None:
    """An ``ExecutorService`` that runs each task in the calling thread: Guava's, as relocated inside Iceberg's
    runtime jar; None when the jar has none (callers then keep Iceberg's worker pool). Only the simulated history
    of ``laketide.dev.history`` uses it, and only for speed, so it is not in :data:`USED`: with Iceberg's worker
    pool, each commit's manifest write waits in 10 ms polls for a task that takes far less."""
    jvm, _ = gateway(spark)
    try:
        return jvm.org.apache.iceberg.relocated.com.google.common.util.concurrent.MoreExecutors \
            .newDirectExecutorService()
    except Exception:
        return None
