"""The catalog hook: laketide's Iceberg catalog from an Airflow connection, or from the YAML configuration.

The connection ``laketide_catalog`` (any id, through ``laketide_catalog_conn_id``) holds the catalog
database: a Postgres connection (host, port, schema = database, login, password) or a SQLite one (host =
the database file's absolute path), with ``{"warehouse": "...", "catalog_name": "..."}`` in its extra.
Without that connection the YAML configuration's ``catalog`` section is used. The operator passes the
resolved settings to the Spark job (``LAKETIDE__CATALOG__*``), so Spark and Airflow use the same catalog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from laketide.config import CatalogConfig, LaketideConfig, get_config
from laketide.lake.catalog import load_catalog

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

SCHEMES = {"postgres": "postgresql+psycopg2", "postgresql": "postgresql+psycopg2", "sqlite": "sqlite"}


def catalog_from_connection(conn: Any, fallback: CatalogConfig) -> CatalogConfig:
    """The catalog settings of an Airflow connection; what it leaves out comes from ``fallback``."""
    from laketide.errors import ConfigError

    extra = conn.extra_dejson or {}
    kind = (conn.conn_type or "").lower()
    if kind == "sqlite":
        if not conn.host or not str(conn.host).startswith("/"):
            raise ConfigError(f"connection {conn.conn_id!r}: a SQLite catalog needs the database's absolute path "
                              "as its host")
        uri = f"sqlite:///{conn.host}"
    elif kind in SCHEMES:
        auth = conn.login or ""
        if conn.password:
            auth += f":{conn.password}"
        uri = f"{SCHEMES[kind]}://{auth + '@' if auth else ''}{conn.host}:{conn.port or 5432}/{conn.schema}"
    else:
        raise ConfigError(f"connection {conn.conn_id!r} has type {conn.conn_type!r}: use a 'postgres' or "
                          "'sqlite' connection for the laketide catalog")
    return CatalogConfig(
        name=extra.get("catalog_name", fallback.name), uri=uri, warehouse=extra.get("warehouse", fallback.warehouse),
        retry_timeout=fallback.retry_timeout,
    )


class LaketideCatalogHook(BaseHook):
    """pyiceberg's catalog (one per process and setting) from the ``laketide_catalog`` connection, falling
    back to the YAML configuration.

    :param laketide_catalog_conn_id: the Airflow connection holding the catalog database
    :param config: the laketide configuration (default: the one in force)
    """

    conn_name_attr = "laketide_catalog_conn_id"
    default_conn_name = "laketide_catalog"
    hook_name = "laketide Iceberg catalog"

    def __init__(self, laketide_catalog_conn_id: str = default_conn_name, config: LaketideConfig | None = None) -> None:
        super().__init__()
        self.conn_id = laketide_catalog_conn_id
        self.config = config

    def catalog_config(self) -> CatalogConfig:
        """The catalog settings in force: the connection's when it exists, else the YAML's."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        config = self.config or get_config()
        try:
            conn = self.get_connection(self.conn_id)
        except AirflowNotFoundException:
            return config.catalog
        return catalog_from_connection(conn, config.catalog)

    def laketide_config(self) -> LaketideConfig:
        """The laketide configuration with the catalog settings in force."""
        config = self.config or get_config()
        return config.model_copy(update={"catalog": self.catalog_config()})

    def get_conn(self) -> SqlCatalog:
        return load_catalog(self.catalog_config())

    def spark_env(self) -> dict[str, str]:
        """Environment overrides that give a Spark job the same catalog (``laketide.config`` reads them)."""
        catalog = self.catalog_config()
        return {"LAKETIDE__CATALOG__NAME": catalog.name, "LAKETIDE__CATALOG__URI": catalog.uri,
                "LAKETIDE__CATALOG__WAREHOUSE": catalog.warehouse}


def catalog_kwargs(catalog: CatalogConfig) -> dict[str, str]:
    """``catalog`` as plain strings (a trigger's serialised kwargs); ``CatalogConfig(**...)`` reads them back."""
    return {"name": catalog.name, "uri": catalog.uri, "warehouse": catalog.warehouse,
            "retry_timeout": f"{catalog.retry_timeout.total_seconds():g}s"}


def airflow_config(path: str | None = None) -> LaketideConfig:
    """The laketide configuration as Airflow tasks use it: the file's, with the catalog of the
    ``laketide_catalog`` connection when there is one."""
    return LaketideCatalogHook(config=get_config(path)).laketide_config()
