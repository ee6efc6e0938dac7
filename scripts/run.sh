#!/usr/bin/env bash
# Run laketide on embedded defaults: Airflow standalone (SQLite, LocalExecutor) with the laketide DAGs,
# the SQLite Iceberg catalog and local warehouse under .laketide/, local Spark, and the bundled sample
# producer feeding the 'clicks' stream live. The ingest DAG starts the continuous writer by itself.
# Ctrl-C stops everything; state stays in .laketide/ (make clean removes it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

export PATH="$ROOT/.venv/bin:$PATH" TZ=UTC
export LAKETIDE_HOME=${LAKETIDE_HOME:-$ROOT/.laketide}
export AIRFLOW_HOME=${AIRFLOW_HOME:-$LAKETIDE_HOME/airflow}
export AIRFLOW__CORE__DAGS_FOLDER=$ROOT/dags
export AIRFLOW__CORE__PLUGINS_FOLDER=$ROOT/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW__API__PORT=${LAKETIDE_PORT:-8080}
export AIRFLOW_CONN_SPARK_DEFAULT=${AIRFLOW_CONN_SPARK_DEFAULT:-'{"conn_type": "spark", "host": "local[2]"}'}
LOGS=$LAKETIDE_HOME/logs
mkdir -p "$AIRFLOW_HOME" "$LOGS"

pids=()
descendants() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do echo "$child"; descendants "$child"; done
}
cleanup() {
  trap - INT TERM EXIT
  echo; echo "==> stopping laketide"
  # Airflow starts task processes in sessions of their own: collect the whole tree first
  local all=()
  for pid in "${pids[@]}"; do all+=("$pid" $(descendants "$pid")); done
  kill -TERM "${all[@]}" 2>/dev/null || true
  for _ in $(seq 1 30); do
    alive=0; for pid in "${all[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break; sleep 1
  done
  kill -KILL "${all[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

echo "==> sample producer: live events for stream 'clicks' (1% malformed, 2% late)"
setsid python -m laketide.producer --mode live --rate 20 --flush-seconds 10 \
  --malformed-ratio 0.01 --late-ratio 0.02 --late-by 5m >"$LOGS/producer.log" 2>&1 &
pids+=($!)

echo "==> Airflow standalone (first start migrates its database: about a minute)"
setsid airflow standalone >"$LOGS/airflow.log" 2>&1 &
pids+=($!)

url="http://localhost:$AIRFLOW__API__PORT"
for _ in $(seq 1 300); do
  if curl -fsS "$url/api/v2/monitor/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "${pids[1]}" 2>/dev/null; then
    echo "error: Airflow exited; see $LOGS/airflow.log" >&2; tail -20 "$LOGS/airflow.log" >&2; exit 1
  fi
  sleep 1
done
curl -fsS "$url/api/v2/monitor/health" >/dev/null || { echo "error: Airflow UI not up; see $LOGS/airflow.log" >&2; exit 1; }
password=$(python - "$AIRFLOW_HOME" <<'PY'
import json, pathlib, sys
path = pathlib.Path(sys.argv[1]) / "simple_auth_manager_passwords.json.generated"
print(json.loads(path.read_text()).get("admin", "?") if path.exists() else "(see airflow.log)")
PY
)

cat <<INFO

  laketide is running.

  Airflow UI     $url   login: admin / $password
  Writer DAG     laketide_ingest_clicks (continuous; trigger it with mode=incremental for a one-off run)
  Close DAG      laketide_close_clicks (hourly: sensor -> Great Expectations -> closed + Asset event)
                 laketide_example_downstream runs on every closed hour
  Iceberg tables laketide.lake.clicks (events), laketide.lake.clicks_rejects (bad lines + reason)
  Catalog        $LAKETIDE_HOME/catalog.db (SQLite)   warehouse: $LAKETIDE_HOME/warehouse
  Landing zone   $LAKETIDE_HOME/landing/clicks   (producer log: $LOGS/producer.log)
  Check counts   make reconcile      (per partition: audit == lake + rejects)
  Hour status    make status         (open / complete / empty / gap / closed ... per hour)
  Logs           $LOGS/airflow.log; writer logs in the Airflow UI (task 'writer')

  Ctrl-C stops everything.
INFO
wait -n "${pids[@]}"
