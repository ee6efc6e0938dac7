"""The lakehouse view in the Airflow UI: a FastAPI app (``app``) with a light page (plain HTML and a little JS in
``static/``) and its JSON API; the data functions behind it (``board``, ``writer``, ``panels``) are plain functions
over the status, action and maintenance records and Iceberg metadata (pyiceberg, no Spark).
``plugins/laketide_plugin.py`` registers it with Airflow."""
