"""Every Spark job maps an error to its exit code by the nearest mapped class of the error's ancestry
(``laketide.errors.exit_code``): a subclass of a mapped error gets its parent's code, never a KeyError and exit 1."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from laketide import errors
from laketide.errors import exit_code

sys.path.insert(0, str(Path(__file__).parents[1] / "spark_jobs"))


def test_the_nearest_mapped_class_gives_the_code() -> None:
    class Special(errors.SchemaChangeError):
        pass

    codes: dict[type[Exception], int] = {errors.ConfigError: 2, errors.LaketideError: 9}
    assert exit_code(errors.SchemaChangeError("x"), codes) == 2  # its parent, ConfigError
    assert exit_code(Special("x"), codes) == 2  # two levels down
    assert exit_code(errors.SchemaChangeError("x"), {**codes, errors.SchemaChangeError: 5}) == 5  # its own first
    assert exit_code(errors.WriterBusyError("x"), codes) == 9  # only the base class is mapped
    assert exit_code(ValueError("x"), codes) is None  # not mapped: the job lets it go


@pytest.mark.parametrize(("job", "error", "code"), [
    ("ingest_stream", errors.SchemaChangeError, 2),
    ("ingest_stream", errors.DeployModeError, 2),
    ("ingest_stream", errors.CheckpointMismatchError, 3),
    ("ingest_stream", errors.StorageFullError, 8),
    ("redo", errors.SchemaChangeError, 2),
    ("redo", errors.ActionRequestError, 2),
    ("redo", errors.RedoBusyError, 4),
    ("maintain", errors.SchemaChangeError, 2),
    ("maintain", errors.MaintenanceRequestError, 2),
])
def test_each_job_maps_subclasses_of_its_errors(job: str, error: type[Exception], code: int) -> None:
    """The job catches ``tuple(EXIT_CODES)`` (isinstance): each error it catches must have a code."""
    table = __import__(job).EXIT_CODES
    assert isinstance(error("x"), tuple(table))
    assert exit_code(error("x"), table) == code
