"""One typed configuration for laketide: a YAML file plus environment overrides.

Where the file is: ``$LAKETIDE_CONFIG``, else ``conf/laketide.yaml`` at the repository root.
Where local state lives: ``$LAKETIDE_HOME``, else the file's ``home`` key, else ``.laketide`` at the
repository root. ``{home}`` inside any string value is replaced by that folder.

Environment overrides use ``LAKETIDE__`` plus the key path joined by double underscores, e.g.
``LAKETIDE__CATALOG__URI=postgresql+psycopg2://u:p@db:5432/lake`` or
``LAKETIDE__STREAMS__CLICKS__TRIGGER_INTERVAL=10s`` (streams are addressed by name).
A wrong or missing setting raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

from laketide.config.loading import DEFAULT_CONFIG, ENV_PREFIX, REPO_ROOT, config_path, get_config, load_config
from laketide.config.maintenance import MAINTENANCE_ACTIONS, ORPHAN_AGE_FLOOR, MaintenanceConfig, TablePolicy
from laketide.config.markers import MARKER_PLACEHOLDERS, DoneMarkersConfig, HttpMarker
from laketide.config.model import LaketideConfig, maintained_tables
from laketide.config.sections import (
    DEFAULT_RESOURCES,
    ApplicationKind,
    CatalogConfig,
    CloseConfig,
    ResourcesConfig,
    SparkConfig,
    WriterGroupConfig,
)
from laketide.config.streams import EXTRA_COLUMN, CommitPath, FieldSpec, FieldType, StreamConfig, UnknownFields
from laketide.config.values import (
    check_table_name,
    non_negative_duration,
    parse_duration,
    parse_size,
    positive_duration,
)
from laketide.errors import ConfigError

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_RESOURCES",
    "ENV_PREFIX",
    "EXTRA_COLUMN",
    "MAINTENANCE_ACTIONS",
    "MARKER_PLACEHOLDERS",
    "ORPHAN_AGE_FLOOR",
    "REPO_ROOT",
    "ApplicationKind",
    "CatalogConfig",
    "CloseConfig",
    "CommitPath",
    "ConfigError",
    "DoneMarkersConfig",
    "FieldSpec",
    "FieldType",
    "HttpMarker",
    "LaketideConfig",
    "MaintenanceConfig",
    "ResourcesConfig",
    "SparkConfig",
    "StreamConfig",
    "TablePolicy",
    "UnknownFields",
    "WriterGroupConfig",
    "check_table_name",
    "config_path",
    "get_config",
    "load_config",
    "maintained_tables",
    "non_negative_duration",
    "parse_duration",
    "parse_size",
    "positive_duration",
]
