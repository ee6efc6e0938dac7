from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from laketide.jars import provision
from tests.helpers import JARS_DIR


@pytest.fixture(scope="session")
def jars() -> Path:
    """The real jars, provisioned once (idempotent)."""
    provision(JARS_DIR)
    return JARS_DIR


@pytest.fixture(scope="session")
def spark(jars: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One local SparkSession for in-process tests, wired to a throwaway SQLite catalog."""
    from laketide.spark import build_session
    from tests.helpers import load, write_config

    home = tmp_path_factory.mktemp("spark-home")
    config = load(write_config(home))
    session = build_session(config, "laketide-tests", master="local[2]")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
