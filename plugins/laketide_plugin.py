"""laketide's Airflow plugin: the lakehouse view (partition board, writer, snapshot timeline with "redo from here",
table health, reported landing files, action history) in the UI's navigation, and the close DAG's timetable of a
replayed stream.

Wiring only: the FastAPI app and the page live in ``laketide.airflow.ui``."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from laketide.airflow.timetables import ReplayHours
from laketide.airflow.ui.app import app


class LaketidePlugin(AirflowPlugin):
    name = "laketide"
    fastapi_apps = [{"app": app, "url_prefix": "/laketide", "name": "laketide lakehouse view"}]
    # url_route: an entry of the UI's navigation that shows href in an iframe (href relative: the UI's base URL)
    # the close DAG's timetable of a replayed stream (a custom timetable is serialized only when registered)
    timetables = [ReplayHours]
    external_views = [{"name": "Lakehouse", "href": "laketide/", "destination": "nav", "url_route": "laketide"}]
