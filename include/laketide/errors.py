"""All laketide errors; each message names what is wrong and what to do.

Every exception class of the package is defined here (the modules that raise one import it from here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class FailedCheck(Protocol):
    """What :class:`VerificationFailed` needs of a verification (``laketide.close.verify.Verification``): this module
    stays below every other, importing none of them."""

    @property
    def pending_files(self) -> int: ...

    def message(self) -> str: ...


def exit_code(exc: BaseException, codes: Mapping[type[Exception], int]) -> int | None:
    """The exit code a job gives ``exc``: that of the nearest class in its ancestry that ``codes`` maps (a
    ``SchemaChangeError`` is a ``ConfigError``: its code, unless it has one of its own); None when none is mapped
    (the job lets it go: a traceback, exit 1)."""
    for cls in type(exc).__mro__:
        if cls in codes:
            return codes[cls]
    return None


class LaketideError(Exception):
    """Base class of every laketide error."""


class ConfigError(LaketideError):
    """A setting is wrong or missing; the message names the key."""


class SchemaChangeError(ConfigError):
    """A stream's fields changed in a way its events table cannot follow without a rewrite (a field removed or
    renamed, a type narrowed or changed, a field made required): refused at writer start, the table untouched."""


class JarsError(LaketideError):
    """A jar needed by Spark is missing and cannot be provisioned."""


class CheckpointMismatchError(LaketideError):
    """The Spark checkpoint and the Iceberg table disagree; starting would duplicate or lose data."""


class WriterBusyError(LaketideError):
    """Another live writer holds the stream: a second one must not start."""


class WriterFencedError(LaketideError):
    """Another writer of the stream committed under this one: this one stops without committing."""


class CatalogUnavailableError(LaketideError):
    """The catalog stayed unreachable or busy for longer than ``catalog.retry_timeout``."""


class StreamFailedError(LaketideError):
    """A stream's writer stopped on an error of its own (its input, its tables): the message names the stream and
    the cause; the other streams of its application went on."""


class StorageFullError(LaketideError):
    """The writer could not write its files: the disk (warehouse, checkpoint or temporary folder) is full."""


class MainMovedError(LaketideError):
    """``main`` moved between the public commit path's staging write and its fast-forward: publish again (after
    a fence check)."""


# ---------------------------------------------------------------- lake


class TableNotFoundError(LaketideError):
    """The Iceberg table is not in the catalog."""


class DeployModeError(ConfigError):
    """The Spark connection asks for a deploy mode laketide's jobs cannot run in: the message names the setting to
    change. A retry cannot fix it."""


# ---------------------------------------------------------------- close


class VerificationFailed(LaketideError):
    """Counts do not add up: the partition stays unclosed. ``retryable`` when files are still pending."""

    def __init__(self, verification: FailedCheck) -> None:
        super().__init__(verification.message())
        self.verification = verification
        self.retryable = verification.pending_files > 0


class RangeError(LaketideError, ValueError):
    """A close-range param that is refused before anything is checked or recorded."""


class RangeNotDecided(LaketideError):
    """Hours of a range that are not complete or empty (yet) when the range's last hour is."""


class DoneMarkerError(LaketideError):
    """A done-marker action (marker file, HTTP POST, callable) failed; the hour it announces stays closed."""


class RunNoteError(LaketideError):
    """A close run's note could not be set through Airflow's REST API (the run itself is not affected)."""


class StatusRecordError(LaketideError, ValueError):
    """A status record holds a value the status table cannot take (unknown state, naive datetime, ...)."""


# ---------------------------------------------------------------- maintain


class MaintenanceRequestError(LaketideError, ValueError):
    """A maintenance request (DAG params, command line) names an unknown table or action."""


class UnsafeOrphanAgeError(LaketideError, ValueError):
    """remove_orphan_files was asked for an age below the safe floor."""


class GaveUp(LaketideError):
    """An action lost to concurrent commits and stopped without changing the table."""


# ---------------------------------------------------------------- redo (and other manual operations)


class RequestError(LaketideError, ValueError):
    """A parameter of a manual operation (redo, backfill, repair) is refused before anything changes."""


class RedoBusyError(LaketideError):
    """A redo cannot hold its stream: another redo of the stream runs, or the writer did not stop in time."""


class CheckpointFormatError(LaketideError):
    """An existing checkpoint file is not in the format the redo writes (another Spark version)."""


class ActionRequestError(RequestError):
    """A backfill or repair request (DAG params, command line) that is refused before anything changes."""


class ActionFailedError(LaketideError):
    """A backfill or repair committed, but the check of its result failed: the message says what to do."""
