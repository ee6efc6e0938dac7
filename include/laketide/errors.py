"""All laketide errors; each message names what is wrong and what to do."""

from __future__ import annotations


class LaketideError(Exception):
    """Base class of every laketide error."""


class ConfigError(LaketideError):
    """A setting is wrong or missing; the message names the key."""


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


class RequestError(LaketideError, ValueError):
    """A parameter of a manual operation (redo, backfill, repair) is refused before anything changes."""


class RedoBusyError(LaketideError):
    """A redo cannot hold its stream: another redo of the stream runs, or the writer did not stop in time."""
