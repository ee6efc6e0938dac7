"""laketide: exactly-once event streams into Apache Iceberg, orchestrated by Airflow."""

from __future__ import annotations

__version__ = "0.1.0"
