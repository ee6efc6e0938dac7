# Airflow settings of laketide's own installation (sourced by scripts/run.sh; bench/bench_close_range.py uses the
# same): sized for a small machine (two cores), where Airflow's defaults are for a server. Every setting can be
# overridden from the environment.

# on a small machine the API server answers slowly while Spark starts: a task that gives up after Airflow's
# default 5 s fails before it ran (seen at the quickstart's first minutes on two cores)
export AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT=${AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT:-60}
export AIRFLOW__CORE__EXECUTOR=${AIRFLOW__CORE__EXECUTOR:-LocalExecutor}
export AIRFLOW__CORE__AUTH_MANAGER=${AIRFLOW__CORE__AUTH_MANAGER:-airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager}
export AIRFLOW__CORE__PARALLELISM=${AIRFLOW__CORE__PARALLELISM:-4}
export AIRFLOW__API__WORKERS=${AIRFLOW__API__WORKERS:-1}
export AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES=${AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES:-1}
