"""A stream's ``done_markers`` section: how consumers outside Airflow learn that an hour closed (or re-closed).

Three actions, any of them, fired by the close DAG's ``done_markers`` task after each close and re-close (see
``laketide.close.markers``): a ``_SUCCESS``-style JSON file written atomically, an HTTP POST of the same JSON, and
a user callable given the same record.
"""

from __future__ import annotations

import re
import string
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from laketide.config.values import _Strict, as_written, positive_duration

#: the placeholders of a marker file's path template
MARKER_PLACEHOLDERS = ("warehouse", "stream", "namespace", "table", "date", "hour", "year", "month", "day")
_CALLABLE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def template_fields(template: str) -> list[str]:
    """The placeholder names of ``template`` (``{date}`` -> ``date``).

    :raises ValueError: a malformed template (an unclosed brace, a format spec or conversion)
    """
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"{template!r} is not a valid path template ({exc}); write placeholders as "
                         "{date}, {hour}, ... and a literal brace as {{ or }}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(f"{template!r}: write placeholders plainly ({{{name}}}), without a format or conversion")
        names.append(name)
    return names


class HttpMarker(_Strict):
    """POST the close record as JSON to ``url``: each attempt waits at most ``timeout``; a failed attempt
    (unreachable, timeout, HTTP 5xx or 429) is retried after ``backoff``, doubled each time, ``attempts`` in all."""

    url: str
    timeout: timedelta = timedelta(seconds=10)
    attempts: int = Field(default=3, ge=1, le=20)
    backoff: timedelta = timedelta(seconds=2)
    #: extra request headers (e.g. an authorization token; an environment override keeps it out of the file)
    headers: dict[str, str] = {}

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", value):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value

    @field_validator("timeout", "backoff", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta:
        return positive_duration(value)

    @model_validator(mode="after")
    def _bounded(self) -> HttpMarker:
        if self.timeout > timedelta(minutes=5):
            raise ValueError(f"timeout: {as_written(self.timeout)} is longer than 5 minutes: the task would hang on a "
                             "silent endpoint; use e.g. '10s'")
        if self.backoff > timedelta(minutes=10):
            raise ValueError(f"backoff: {as_written(self.backoff)} is longer than 10 minutes; the task's own retries "
                             "(done_markers.retries, retry_delay) are there for longer outages")
        return self


class DoneMarkersConfig(_Strict):
    """What the close announces, per hour closed or re-closed, besides its Airflow Asset event."""

    #: the marker file's path: a template with {warehouse} (the catalog's local warehouse folder), {stream},
    #: {namespace}, {table}, {date} (2026-11-22), {hour} (03), {year}, {month}, {day}; absolute; it must name the
    #: hour, e.g. "{warehouse}/_done/{stream}/{date}/{hour}/_SUCCESS"
    file: str | None = None
    #: an HTTP POST of the same JSON (a URL alone, or a mapping with url, timeout, attempts, backoff, headers)
    http: HttpMarker | None = None
    #: ``package.module:function`` called with the same record (a dict)
    callable: str | None = None
    #: Airflow retries of the done_markers task when an action failed (every action runs again: consumers get the
    #: record at least once); after the last one the alert callback runs. The hour stays closed either way
    retries: int = Field(default=3, ge=0, le=50)
    retry_delay: timedelta = timedelta(minutes=2)

    @field_validator("http", mode="before")
    @classmethod
    def _http(cls, value: Any) -> Any:
        return {"url": value} if isinstance(value, str) else value

    @field_validator("retry_delay", mode="before")
    @classmethod
    def _delay(cls, value: Any) -> timedelta:
        return positive_duration(value)

    @field_validator("callable")
    @classmethod
    def _callable(cls, value: str | None) -> str | None:
        if value is not None and not _CALLABLE.fullmatch(value):
            raise ValueError(f"{value!r} must be 'package.module:function'")
        return value

    @field_validator("file")
    @classmethod
    def _file(cls, value: str | None) -> str | None:
        if value is None:
            return None
        names = template_fields(value)
        unknown = sorted(set(names) - set(MARKER_PLACEHOLDERS))
        if unknown:
            raise ValueError(f"{value!r}: unknown placeholder(s) {unknown}; use any of {list(MARKER_PLACEHOLDERS)}")
        if "hour" not in names or not ("date" in names or {"year", "month", "day"} <= set(names)):
            raise ValueError(f"{value!r} does not name the hour: every hour would write the same file; include "
                             "{date} (or {year}, {month}, {day}) and {hour}, e.g. "
                             "'{warehouse}/_done/{stream}/{date}/{hour}/_SUCCESS'")
        if not (value.startswith("/") or value.startswith("{warehouse}")):
            raise ValueError(f"{value!r} is a relative path: the close tasks run from other folders; start it with "
                             "'/' (any local folder, '{home}/...') or '{warehouse}/'")
        if value.endswith("/"):
            raise ValueError(f"{value!r} names a folder: end it with the marker's file name, e.g. '/_SUCCESS'")
        return value

    @model_validator(mode="after")
    def _some_action(self) -> DoneMarkersConfig:
        if self.file is None and self.http is None and self.callable is None:
            raise ValueError("no action: set file, http and/or callable (or remove done_markers)")
        return self

    def path(self, warehouse: Path | None, stream: str, table: str, hour: datetime) -> Path:
        """The marker file of ``hour`` (a UTC hour start) of ``stream`` (its events table ``namespace.table``).

        :raises ValueError: no file marker; the template uses {warehouse} but the warehouse is not a local folder
        """
        if self.file is None:
            raise ValueError("no file marker configured")
        if warehouse is None and "warehouse" in template_fields(self.file):
            raise ValueError(f"done_markers.file {self.file!r} uses {{warehouse}}, but the catalog's warehouse is not "
                             "a local folder: write markers to a local folder (an absolute path)")
        namespace, name = table.split(".")
        utc = hour.astimezone(UTC)
        values = {"warehouse": str(warehouse).rstrip("/") if warehouse else "", "stream": stream,
                  "namespace": namespace, "table": name, "date": utc.strftime("%Y-%m-%d"), "hour": utc.strftime("%H"),
                  "year": utc.strftime("%Y"), "month": utc.strftime("%m"), "day": utc.strftime("%d")}
        return Path(self.file.format(**values))
