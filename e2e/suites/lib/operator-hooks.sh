#!/usr/bin/env bash
# The node agent and the operator that e2e/suites/operator runs on this host (not the chart's release),
# started and stopped by the suite and restarted by its Rust tests (e2e/tests/tests/
# operator_faults.rs) through the same commands:
#   operator-hooks.sh start-agent        the agent (CRI lookup against node 1's containerd) on
#                                        127.0.0.1:$SPO_AGENT_PORT; waits for /healthz
#   operator-hooks.sh start-operator [S] the operator (admin kubeconfig, --agent-url, an orphan
#                                        sweep every S seconds, default 2); waits for /readyz
#                                        (leader and controller running)
#   operator-hooks.sh stop-operator      SIGTERM to the operator (SIGKILL after 5 s): none is up
#   operator-hooks.sh restart-operator   SIGKILL, gone, then start-operator (a crash mid-run)
#   operator-hooks.sh stop               SIGTERM to both (SIGKILL after 5 s)
# From the suite's environment: SPO_OPERATOR_WORK (the work dir: token, state, logs and the pid
# files agent.pid and operator.pid), SPO_AGENT_PORT, SPO_OPERATOR_METRICS_PORT, CARGO_TARGET_DIR,
# and the cluster's KUBECONFIG.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
work=${SPO_OPERATOR_WORK:?the work dir of e2e/suites/operator}
port=${SPO_AGENT_PORT:?}
metrics_port=${SPO_OPERATOR_METRICS_PORT:?}
target=${CARGO_TARGET_DIR:-$root/target}

# up URL SECONDS: until URL answers 2xx; fails naming it after SECONDS.
up() {
  local deadline=$((SECONDS + $2))
  until curl -sf "$1" >/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "$1 did not answer within $2 s" >&2; return 1; }
    sleep 0.2
  done
}

# stop_pid PIDFILE: SIGTERM, SIGKILL after 5 s.
stop_pid() {
  local pid _
  pid=$(cat "$1" 2>/dev/null) || return 0
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

# Started detached from the caller's pipes (a Rust test reads this script's output to its end).
start_agent() {
  "$target/debug/sandbox-agent" serve --lookup cri --cri-socket /run/containerd/containerd.sock \
    --runtime-root /run/containerd/runc/k8s.io --auth static --tls off --token-file "$work/token" \
    --listen "127.0.0.1:$port" --state-dir "$work/state" \
    --supervisor-binary "$target/debug/sandbox-supervisor" </dev/null >>"$work/agent.log" 2>&1 &
  echo $! >"$work/agent.pid"
  up "http://127.0.0.1:$port/healthz" 10
}

start_operator() {
  "$target/debug/sandbox-operator" --agent-url "http://127.0.0.1:$port" \
    --agent-token-file "$work/token" --namespace spo-operator \
    --metrics-addr "127.0.0.1:$metrics_port" --agent-grace-seconds 10 \
    --lease-duration-seconds 6 --orphan-sweep-seconds "${1:-2}" </dev/null >>"$work/operator.log" 2>&1 &
  echo $! >"$work/operator.pid"
  up "http://127.0.0.1:$metrics_port/readyz" 20
}

kill_operator() {
  local op
  op=$(cat "$work/operator.pid")
  kill -9 "$op" 2>/dev/null || true
  while kill -0 "$op" 2>/dev/null; do sleep 0.1; done
}

case ${1:-} in
  start-agent) start_agent ;;
  start-operator) start_operator "${2:-2}" ;;
  stop-operator) stop_pid "$work/operator.pid" ;;
  restart-operator) kill_operator; start_operator ;;
  stop) stop_pid "$work/operator.pid"; stop_pid "$work/agent.pid" ;;
  *) echo "usage: $0 start-agent|start-operator [SWEEP_SECONDS]|stop-operator|restart-operator|stop" >&2; exit 2 ;;
esac
