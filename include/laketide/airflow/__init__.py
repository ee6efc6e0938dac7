"""Airflow pieces of laketide: operators (and, later, sensors and triggers). Importable outside dags/."""
