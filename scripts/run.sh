#!/usr/bin/env bash
# Run laketide on embedded defaults: Airflow standalone (SQLite, LocalExecutor) with the laketide DAGs,
# the SQLite Iceberg catalog and local warehouse under .laketide/, local Spark, and the bundled sample
# producer feeding the 'clicks' stream live. The ingest DAG starts the continuous writer by itself.
#
# Ctrl-C (SIGINT), SIGTERM, SIGHUP, or the reader of its output going away (e.g. `| tee log` ended) stops
# everything it started: Airflow and all its processes, the Spark writers its tasks launched (they run in
# sessions of their own), and the producer; then it exits 0. State stays in .laketide/ (make clean removes it).
#
# Settings (environment):
#   LAKETIDE_HOME             local state folder (default .laketide/)
#   LAKETIDE_PORT             Airflow UI/API port (default 8080; with LAKETIDE_SERVE_LOGS=1 another port moves the log
#                             servers to port+1, +2)
#   LAKETIDE_STOP_GRACE       seconds processes get to stop after SIGTERM before SIGKILL (default 30)
#   LAKETIDE_AIRFLOW_COMMAND  one command that runs all of Airflow instead (e.g. "airflow standalone"); by default
#                             the components start one by one: the API server first, and the scheduler, the DAG
#                             processor and the triggerer once it answers, so that no task starts before it can
#                             reach the API server
#   LAKETIDE_SERVE_LOGS       1: the scheduler and the triggerer start their log servers too (default: not, as
#                             the API server reads every log from this machine's $AIRFLOW_HOME/logs)
#   AIRFLOW__CORE__PARALLELISM  task slots, i.e. LocalExecutor worker processes (default 4: the continuous writer
#                             holds one; Airflow's own default, 32, forks 32 workers of ~150 MB each at start)
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
# tasks reach the API server at its base URL (Airflow's default is port 8080 whatever the port), and the log
# servers of the scheduler and triggerer need free ports too: all follow LAKETIDE_PORT
export AIRFLOW__API__BASE_URL=${AIRFLOW__API__BASE_URL:-http://localhost:$AIRFLOW__API__PORT}
if [[ $AIRFLOW__API__PORT != 8080 ]]; then
  export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=${AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT:-$((AIRFLOW__API__PORT + 1))}
  export AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=${AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT:-$((AIRFLOW__API__PORT + 2))}
fi
# sized for a small machine (two cores), every setting overridable: scripts/airflow_env.sh
source "$ROOT/scripts/airflow_env.sh"
export AIRFLOW_CONN_SPARK_DEFAULT=${AIRFLOW_CONN_SPARK_DEFAULT:-'{"conn_type": "spark", "host": "local[2]"}'}
# close runs set their run notes through Airflow's REST API as the admin user (connection laketide_airflow_api):
# the simple auth manager keeps the admin's password in this file, and uses the one it finds there
if [[ -z ${AIRFLOW_CONN_LAKETIDE_AIRFLOW_API:-} ]]; then
  mkdir -p "$AIRFLOW_HOME"
  AIRFLOW_CONN_LAKETIDE_AIRFLOW_API=$(python - "$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated" \
    "$AIRFLOW__API__BASE_URL" <<'PY'
import json, pathlib, secrets, sys
path, url = pathlib.Path(sys.argv[1]), sys.argv[2]
users = json.loads(path.read_text() or "{}") if path.exists() else {}
if "admin" not in users:
    users["admin"] = secrets.token_urlsafe(12)
    path.write_text(json.dumps(users) + "\n")
print(json.dumps({"conn_type": "http", "host": url, "login": "admin", "password": users["admin"]}))
PY
  )
  export AIRFLOW_CONN_LAKETIDE_AIRFLOW_API
fi
GRACE=${LAKETIDE_STOP_GRACE:-30}
read -r -a AIRFLOW_COMMAND <<<"${LAKETIDE_AIRFLOW_COMMAND:-}"
LOGS=$LAKETIDE_HOME/logs
mkdir -p "$AIRFLOW_HOME" "$LOGS"

# Every process started here, and everything those start (whatever session or parent they end up with),
# carries this variable in its environment: that is how the stop finds them all. It is not exported, so this
# script and its own helpers do not carry it.
TOKEN="LAKETIDE_RUN_TOKEN=$$-$(date +%s%N)-$RANDOM"
pids=()

say() { { printf '%s\n' "$*"; } 2>/dev/null || true; }  # never fails, even when stdout is gone

ours() {
  # the live processes we started: our children, every process carrying the token, and their descendants
  local seeds
  seeds="${pids[*]} $(grep -lsxzF "$TOKEN" /proc/[0-9]*/environ 2>/dev/null | tr -dc '0-9\n' | tr '\n' ' ')"
  ps -eo pid=,ppid=,stat= 2>/dev/null | awk -v seeds="$seeds" -v self=$$ '
    BEGIN { n = split(seeds, s, " "); for (i = 1; i <= n; i++) keep[s[i]] = 1 }
    $3 !~ /^Z/ { pid[++count] = $1; ppid[count] = $2; alive[$1] = 1 }
    END {
      do {
        changed = 0
        for (i = 1; i <= count; i++)
          if (!(pid[i] in keep) && (ppid[i] in keep)) { keep[pid[i]] = 1; changed = 1 }
      } while (changed)
      for (p in keep) if ((p in alive) && p != self) print p
    }'
}

in_group() { [[ $(ps -o pgid= -p "$1" 2>/dev/null | tr -d ' ') == "$2" ]]; }  # is process $1 in group $2

api_pid=""  # the API server's process (and group), when it runs on its own
stopping=0
stop() {
  # stop everything we started, then exit with $1 (0 for a requested stop)
  local code=$1 left pid deadline others
  ((stopping)) && return 0
  stopping=1
  trap '' INT TERM HUP PIPE
  trap - EXIT
  set +e
  say ""
  say "==> stopping laketide (Airflow, its task processes and Spark writers, the producer)"
  declare -A signalled=()
  deadline=$((SECONDS + GRACE))
  # the API server last: a task's process reports its end to it, and would retry against a server gone until
  # it is killed; it gets the signal once nothing else is left, or after two thirds of the grace
  local later=$api_pid api_deadline=$((SECONDS + GRACE * 2 / 3))
  while left=$(ours); [[ -n $left ]] && ((SECONDS < deadline)); do
    if [[ -n $later ]]; then
      others=0
      for pid in $left; do in_group "$pid" "$later" || others=1; done
      ((others && SECONDS < api_deadline)) || later=""
    fi
    for pid in $left; do
      [[ -n $later ]] && in_group "$pid" "$later" && continue
      # signalled again every 20 s while it lives: a SIGTERM can be lost in Airflow's own handler (the DAG
      # processor's sys.exit raised while it forks runs in logging's at-fork hook, which swallows it)
      if [[ -z ${signalled[$pid]:-} ]] || ((SECONDS - signalled[$pid] >= 20)); then
        signalled[$pid]=$SECONDS
        kill -TERM -- "-$pid" 2>/dev/null  # the process group it leads, if any
        kill -TERM "$pid" 2>/dev/null
      fi
    done
    sleep 0.5
  done
  for _ in 1 2 3 4 5 6 7 8 9 10; do  # SIGKILL what is left (and whatever it started meanwhile)
    left=$(ours)
    [[ -z $left ]] && break
    say "    still running after ${GRACE}s, killing:"
    ps -o pid=,args= -p "$(echo $left | tr ' ' ,)" 2>/dev/null | cut -c1-160 | sed 's/^/      /' || true
    kill -KILL $left 2>/dev/null
    sleep 0.5
  done
  wait 2>/dev/null
  left=$(ours)
  if [[ -n $left ]]; then
    say "error: could not stop: $(echo $left)" >&2
    exit 1
  fi
  say "==> laketide stopped"
  exit "$code"
}
trap 'stop 0' INT TERM HUP
trap 'stop 0' PIPE  # the reader of our output went away (e.g. tee ended): stop too
trap 'stop $?' EXIT

if (exec 3<>"/dev/tcp/127.0.0.1/$AIRFLOW__API__PORT") 2>/dev/null; then
  say "error: port $AIRFLOW__API__PORT is already in use (another laketide or Airflow?); stop it, or set LAKETIDE_PORT" >&2
  left=$(grep -lsz '^LAKETIDE_RUN_TOKEN=' /proc/[0-9]*/environ 2>/dev/null | tr -dc '0-9\n' | tr '\n' ' ' || true)
  if [[ -n $left ]]; then
    say "       processes of an earlier run (was its run.sh killed with SIGKILL?): $left" >&2
  fi
  exit 1
fi

if [[ -p /dev/stdout ]]; then
  # Nothing is written while laketide runs: notice a closed pipe anyway (poll reports POLLERR on a pipe whose
  # reader is gone) and stop as if the write had failed.
  python3 -c '
import os, select, signal, sys
poll = select.poll()
poll.register(1, 0)  # no events asked: only POLLERR / POLLHUP wake it
poll.poll()
os.kill(int(sys.argv[1]), signal.SIGPIPE)
' $$ &
  pids+=($!)
fi

say "==> sample producers: live events for streams 'clicks' and 'orders', account changes for 'accounts' (1% malformed, 2% late)"
env "$TOKEN" setsid python -m laketide.dev.producer --stream clicks --mode live --rate 20 --flush-seconds 10 \
  --malformed-ratio 0.01 --late-ratio 0.02 --late-by 5m >"$LOGS/producer.log" 2>&1 &
producer=$!
pids+=("$producer")
env "$TOKEN" setsid python -m laketide.dev.producer --stream orders --mode live --rate 2 --flush-seconds 10 \
  --malformed-ratio 0.01 --late-ratio 0.02 --late-by 5m >"$LOGS/producer-orders.log" 2>&1 &
producer_orders=$!
pids+=("$producer_orders")
env "$TOKEN" setsid python -m laketide.dev.producer --stream accounts --mode live --rate 1 --flush-seconds 30 \
  --malformed-ratio 0.01 --late-ratio 0.02 --late-by 5m >"$LOGS/producer-accounts.log" 2>&1 &
producer_accounts=$!
pids+=("$producer_accounts")

url="http://localhost:$AIRFLOW__API__PORT"
airflow_pids=()
start_airflow() {  # start one Airflow component (or the whole LAKETIDE_AIRFLOW_COMMAND) in a session of its own
  local log=$1
  shift
  env "$TOKEN" setsid "$@" >>"$LOGS/$log" 2>&1 &
  pids+=($!)
  airflow_pids+=($!)
}
wait_for_api() {
  local _
  for _ in $(seq 1 300); do
    if curl -fsS "$url/api/v2/monitor/health" >/dev/null 2>&1; then return 0; fi
    for pid in "${airflow_pids[@]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        say "error: Airflow exited; see $LOGS/airflow.log" >&2; tail -20 "$LOGS/airflow.log" >&2 || true; exit 1
      fi
    done
    sleep 1
  done
  curl -fsS "$url/api/v2/monitor/health" >/dev/null || { say "error: Airflow UI not up; see $LOGS/airflow.log" >&2; exit 1; }
}

if ((${#AIRFLOW_COMMAND[@]})); then
  say "==> Airflow: ${AIRFLOW_COMMAND[*]}"
  start_airflow airflow.log "${AIRFLOW_COMMAND[@]}"
  wait_for_api
else
  say "==> Airflow (its database is migrated first: about a minute the first time)"
  env "$TOKEN" airflow db migrate >>"$LOGS/airflow.log" 2>&1 || {
    say "error: airflow db migrate failed; see $LOGS/airflow.log" >&2; tail -20 "$LOGS/airflow.log" >&2 || true; exit 1; }
  # the API server first: a task that starts before it answers fails its first try (httpx.ConnectError)
  start_airflow airflow.log airflow api-server
  api_pid=$!
  wait_for_api
  # every component runs on this machine and writes its logs under $AIRFLOW_HOME/logs, where the API server reads
  # them: the log servers the scheduler and the triggerer start (for workers on other machines) would hold about
  # 280 MB for nothing (LAKETIDE_SERVE_LOGS=1 starts them)
  skip_logs=(--skip-serve-logs)
  [[ ${LAKETIDE_SERVE_LOGS:-0} == 1 ]] && skip_logs=()
  start_airflow airflow-scheduler.log airflow scheduler "${skip_logs[@]}"
  start_airflow airflow-dag-processor.log airflow dag-processor
  start_airflow airflow-triggerer.log airflow triggerer "${skip_logs[@]}"
fi
password=$(python - "$AIRFLOW_HOME" <<'PY'
import json, pathlib, sys
path = pathlib.Path(sys.argv[1]) / "simple_auth_manager_passwords.json.generated"
print(json.loads(path.read_text()).get("admin", "?") if path.exists() else "(see airflow.log)")
PY
)

say "
  laketide is running.

  Airflow UI     $url   login: admin / $password
  Writer DAG     laketide_ingest_web: one application writes the three streams (laketide_ingest_<stream>_once:
                 a one-off run); its metrics: http://localhost:9108/metrics
  Close DAGs     laketide_close_clicks, laketide_close_orders, laketide_close_accounts (hourly: sensor -> Great
                 Expectations -> closed + Asset event partitioned by the hour; each run's note says what it closed)
                 laketide_example_downstream summarises each day once its 24 hours are closed;
                 laketide_example_changes reads each closed hour's account changes
  Maintenance    laketide_maintain_after_close (compaction of closed hours), laketide_maintain_daily (expiry,
                 orphans), laketide_maintain_thresholds (hourly); laketide_maintain: manual, with a form
  Iceberg tables laketide.lake.clicks, laketide.lake.orders (events); lake.<stream>_rejects (bad lines + reason);
                 lake.account_changes (every account change) and lake.accounts (one row per account: the upserts)
  Catalog        $LAKETIDE_HOME/catalog.db (SQLite)   warehouse: $LAKETIDE_HOME/warehouse
  Landing zones  $LAKETIDE_HOME/landing/<stream>   (producer logs: $LOGS/producer*.log)
  Check counts   ./laketide reconcile    (per hour: audit == lake + rejects)
  Hour status    ./laketide status       (every hour's state, the hours being written, table health)
  Snapshots      ./laketide snapshots    (the ids a redo returns to: ./laketide redo --stream clicks --snapshot-id ID)
  Logs           $LOGS/airflow.log; writer logs in the Airflow UI (task 'writer')

  Ctrl-C stops everything.
"
status=0
wait -n "$producer" "$producer_orders" "$producer_accounts" "${airflow_pids[@]}" || status=$?
# not a requested stop (that exits from the trap): the producer or an Airflow component ended by itself
if kill -0 "$producer" 2>/dev/null && kill -0 "$producer_orders" 2>/dev/null && kill -0 "$producer_accounts" 2>/dev/null; then
  say "error: Airflow exited ($status); see $LOGS/airflow*.log" >&2
else
  say "error: the producer exited ($status); see $LOGS/producer*.log" >&2
fi
exit 1
