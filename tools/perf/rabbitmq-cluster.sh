#!/usr/bin/env bash
# A 3-node RabbitMQ cluster on loopback, the baseline for wharf's 3-node figures (issue #17):
# the same replication work (a quorum queue on three members, one disk) as
# `tools/perf/cluster.sh`. Needs rabbitmq-server installed (`apt-get install rabbitmq-server`).
#
#   tools/perf/rabbitmq-cluster.sh start [--base-port 5900] [--dir DIR]
#   tools/perf/rabbitmq-cluster.sh stop  [--base-port 5900] [--dir DIR]
#
# Nodes r1@localhost, r2@localhost, r3@localhost: AMQP on 127.0.0.1 ports BASE+1..3,
# Erlang distribution on BASE+11..13, epmd on 127.0.0.1 only; data under DIR
# (/tmp/wharf-rabbitmq-cluster by default, removed by `stop`). r2 and r3 join r1. `start`
# prints each node's AMQP URL and OS pid (for CPU figures). `stop` stops each node with
# `rabbitmqctl stop`, never by process name.
set -euo pipefail

cmd="${1:-}"
shift || true
base=5900
dir=/tmp/wharf-rabbitmq-cluster
while [ $# -gt 0 ]; do
  case "$1" in
    --base-port) base="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

export ERL_EPMD_ADDRESS=127.0.0.1
node_env() {
  local i=$1
  echo RABBITMQ_NODENAME="r$i@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT=$((base + i)) RABBITMQ_DIST_PORT=$((base + 10 + i)) \
    RABBITMQ_MNESIA_BASE="$dir/r$i/mnesia" RABBITMQ_LOG_BASE="$dir/r$i/log" \
    RABBITMQ_PID_FILE="$dir/r$i/pid" RABBITMQ_ENABLED_PLUGINS_FILE="$dir/r$i/plugins" \
    RABBITMQ_ENABLED_PLUGINS=""
}
ctl() {
  local i=$1
  shift
  env $(node_env "$i") rabbitmqctl -q -n "r$i@localhost" "$@"
}

case "$cmd" in
  start)
    for i in 1 2 3; do
      mkdir -p "$dir/r$i/log"
      echo "[]." > "$dir/r$i/plugins"
      # rabbitmq-server runs as the rabbitmq user when started by root.
      if id rabbitmq >/dev/null 2>&1; then chown -R rabbitmq:rabbitmq "$dir"; fi
      env $(node_env "$i") rabbitmq-server -detached
    done
    # await_startup fails until the node has registered with epmd: ask again.
    for i in 1 2 3; do
      for _ in $(seq 120); do ctl "$i" await_startup >/dev/null 2>&1 && break; sleep 1; done
    done
    for i in 2 3; do
      ctl "$i" stop_app
      ctl "$i" reset
      ctl "$i" join_cluster r1@localhost
      ctl "$i" start_app
    done
    ctl 1 cluster_status | grep -A4 -i "running nodes" || true
    for i in 1 2 3; do
      pid=$(ctl "$i" eval 'list_to_integer(os:getpid()).')
      echo "r$i amqp://guest:guest@127.0.0.1:$((base + i))/%2f pid $pid"
    done
    ;;
  stop)
    for i in 3 2 1; do
      ctl "$i" stop >/dev/null 2>&1 || true
    done
    rm -rf "$dir"
    ;;
  *)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
