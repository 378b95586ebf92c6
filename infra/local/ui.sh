#!/usr/bin/env bash
# Local services for browsing runs: Prefect server + process worker, MLflow UI. Loopback only.
#
#   infra/local/ui.sh start    # (make ui)      Prefect http://127.0.0.1:4200, MLflow http://127.0.0.1:5000
#   infra/local/ui.sh stop     # (make ui-stop) stops exactly the processes `start` started
#   infra/local/ui.sh status
#   infra/local/ui.sh settings # the servers' origin and host restrictions (KEY=VALUE lines)
#
# Browser-facing restrictions (a page in the user's browser must not drive the local servers): Prefect answers CORS
# only for its own origin and requires its CSRF token on every write (a cross-origin `text/plain` POST, which CORS
# does not stop from being sent, gets 403; Prefect's client and UI fetch the token themselves); MLflow accepts only
# its own Host header (DNS rebinding) and CORS origin.
#
# start: Prefect server (SQLite in .rubricflow/prefect, analytics off) -> health -> work pool `rubricflow-local`
# (process) and the `judge-calls` concurrency limit if missing -> the prefect.yaml `*-local` deployments
# (python -m flows.serve --no-worker) -> a process worker for the pool (runs launched or scheduled from the UI
# execute in this checkout) -> MLflow UI on the project's SQLite store (created/migrated first, in one process)
# -> health -> prints the URLs.
# Each service runs in its own session (setsid); .rubricflow/run/<name>.pid holds "<pid> <start time>", and
# stop signals that process group only if the pid still belongs to the process started (no pid reuse mistakes).
# Logs: .rubricflow/run/<name>.log.
#
# Environment: RUBRICFLOW_ROOT (project dir, default: this checkout), RUBRICFLOW_PREFECT_PORT (4200),
# RUBRICFLOW_MLFLOW_PORT (5000), RUBRICFLOW_UI_TIMEOUT (health wait per service, s; default 240: a loaded
# 2-core machine needs far more than the ~9 s a quiet one does), RUBRICFLOW_UI_NO_DEPLOY=1 (skip deployments).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHECKOUT="$(cd "$HERE/../.." && pwd)"
ROOT="$(cd "${RUBRICFLOW_ROOT:-$CHECKOUT}" && pwd)"
VENV_BIN="${RUBRICFLOW_VENV_BIN:-$CHECKOUT/.venv/bin}"
STATE="$ROOT/.rubricflow"
RUN="$STATE/run"
PREFECT_PORT="${RUBRICFLOW_PREFECT_PORT:-4200}"
MLFLOW_PORT="${RUBRICFLOW_MLFLOW_PORT:-5000}"
TIMEOUT="${RUBRICFLOW_UI_TIMEOUT:-240}"

export RUBRICFLOW_ROOT="$ROOT"
export PREFECT_HOME="$STATE/prefect"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_API_URL="http://127.0.0.1:$PREFECT_PORT/api"
export PREFECT_WORKER_QUERY_SECONDS="${PREFECT_WORKER_QUERY_SECONDS:-5}"
export MLFLOW_TRACKING_URI="sqlite:///$STATE/mlflow/mlflow.db"
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
export MLFLOW_DISABLE_TELEMETRY=true
export DO_NOT_TRACK=1
PREFECT_ORIGINS="http://127.0.0.1:$PREFECT_PORT,http://localhost:$PREFECT_PORT"
export PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS="$PREFECT_ORIGINS"
export PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED=true
MLFLOW_ALLOWED_HOSTS="127.0.0.1:$MLFLOW_PORT,localhost:$MLFLOW_PORT"
MLFLOW_CORS_ORIGINS="http://127.0.0.1:$MLFLOW_PORT,http://localhost:$MLFLOW_PORT"

mkdir -p "$RUN" "$PREFECT_HOME" "$STATE/mlflow/artifacts"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
starttime() { awk '{ sub(/^.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null || true; }

# alive NAME -> 0 if the process recorded in NAME.pid is still the one we started
alive() {
  local f="$RUN/$1.pid" pid st
  [[ -f "$f" ]] || return 1
  read -r pid st < "$f" || return 1
  [[ -n "$pid" && -d "/proc/$pid" && "$(starttime "$pid")" == "$st" ]]
}

launch() {  # launch NAME CMD... : new session, log, pid file
  local name="$1"; shift
  if alive "$name"; then echo "$name: already running (pid $(cut -d' ' -f1 "$RUN/$name.pid"))"; return 0; fi
  (cd "$ROOT" && exec setsid "$@" > "$RUN/$name.log" 2>&1 < /dev/null) &
  local pid=$!
  sleep 0.2
  echo "$pid $(starttime "$pid")" > "$RUN/$name.pid"
}

wait_health() {  # wait_health NAME URL [ACCEPT]
  local name="$1" url="$2" accept="${3:-*/*}" t0
  t0=$(now)
  while ! curl -sf -o /dev/null -H "Accept: $accept" "$url"; do
    if ! alive "$name"; then
      echo "error: $name exited before $url answered; last log lines ($RUN/$name.log):" >&2
      tail -n 20 "$RUN/$name.log" >&2 || true
      return 1
    fi
    if (( $(awk -v a="$t0" -v b="$(now)" -v t="$TIMEOUT" 'BEGIN { print (b - a > t) }') )); then
      echo "error: $name not healthy at $url after ${TIMEOUT}s (log: $RUN/$name.log)" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "$name healthy in $(elapsed "$t0") s"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  local t0
  for spec in "prefect-server:$PREFECT_PORT" "mlflow:$MLFLOW_PORT"; do
    local name="${spec%%:*}" port="${spec##*:}"
    if ! alive "$name" && ! port_free "$port"; then
      echo "error: port $port ($name) is in use by a process this script did not start;" \
        "stop it or set RUBRICFLOW_PREFECT_PORT / RUBRICFLOW_MLFLOW_PORT" >&2
      return 1
    fi
  done

  t0=$(now)
  launch prefect-server "$VENV_BIN/prefect" server start --host 127.0.0.1 --port "$PREFECT_PORT"
  # Create/migrate the MLflow store in one process before the server (and flow runs) touch it: concurrent first
  # use of a fresh SQLite store by the server and a client raced in MLflow's migrations ("duplicate column").
  local tm; tm=$(now)
  "$VENV_BIN/python" -c "import mlflow, sys; mlflow.MlflowClient(sys.argv[1]).search_experiments(max_results=1)" \
    "$MLFLOW_TRACKING_URI" > "$RUN/mlflow-init.log" 2>&1 || { echo "error: MLflow store init failed:" >&2; tail -n 20 "$RUN/mlflow-init.log" >&2; return 1; }
  echo "mlflow store ready in $(elapsed "$tm") s"
  launch mlflow "$VENV_BIN/mlflow" server --backend-store-uri "$MLFLOW_TRACKING_URI" \
    --artifacts-destination "$STATE/mlflow/artifacts" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 \
    --allowed-hosts "$MLFLOW_ALLOWED_HOSTS" --cors-allowed-origins "$MLFLOW_CORS_ORIGINS"
  wait_health prefect-server "http://127.0.0.1:$PREFECT_PORT/api/health"

  if [[ "${RUBRICFLOW_UI_NO_DEPLOY:-0}" != 1 ]]; then
    local td; td=$(now)
    (cd "$ROOT" && "$VENV_BIN/python" -m flows.serve --no-worker)
    echo "deployments registered in $(elapsed "$td") s"
  fi
  launch prefect-worker "$VENV_BIN/prefect" worker start --pool rubricflow-local --type process
  wait_health mlflow "http://127.0.0.1:$MLFLOW_PORT/health"
  echo "all services up in $(elapsed "$t0") s"
  echo
  echo "  Prefect UI  http://127.0.0.1:$PREFECT_PORT      (API $PREFECT_API_URL; worker on pool rubricflow-local)"
  echo "  MLflow UI   http://127.0.0.1:$MLFLOW_PORT      (store $MLFLOW_TRACKING_URI)"
  echo "  logs        $RUN/*.log        stop with: make ui-stop"
}

stop_one() {
  local name="$1" f="$RUN/$1.pid" pid
  if ! alive "$name"; then
    [[ -f "$f" ]] && { echo "$name: not running (stale pid file removed)"; rm -f "$f"; }
    return 0
  fi
  read -r pid _ < "$f"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do alive "$name" || break; sleep 0.25; done
  if alive "$name"; then kill -KILL -- "-$pid" 2>/dev/null || true; fi
  rm -f "$f"
  echo "$name stopped (pid $pid)"
}

stop() {
  stop_one prefect-worker
  stop_one mlflow
  stop_one prefect-server
}

status() {
  for name in prefect-server prefect-worker mlflow; do
    if alive "$name"; then echo "$name: running (pid $(cut -d' ' -f1 "$RUN/$name.pid"))"; else echo "$name: stopped"; fi
  done
}

settings() {
  echo "PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS=$PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS"
  echo "PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED=$PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED"
  echo "MLFLOW_ALLOWED_HOSTS=$MLFLOW_ALLOWED_HOSTS"
  echo "MLFLOW_CORS_ORIGINS=$MLFLOW_CORS_ORIGINS"
}

case "${1:-}" in
  start) start ;;
  settings) settings ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status|settings" >&2; exit 2 ;;
esac
