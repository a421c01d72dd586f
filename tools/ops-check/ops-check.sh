#!/usr/bin/env bash
# The evidence issue #15's "Done when" asks for, reproduced against a fresh wharf:
#
#  1. starts wharf (debug build, or release with PROFILE=release) on free loopback ports,
#     with a steady load from wharf-perf (one publisher with confirms, one consumer) and a
#     quorum queue fed by hand;
#  2. starts a real Prometheus (Debian's `prometheus`) scraping wharf's Prometheus listener
#     every second, then runs every panel query of RabbitMQ's "RabbitMQ-Overview" Grafana
#     dashboard (overview-panels.tsv, its variables filled in) and prints each result;
#  3. runs rabbitmqadmin v2's list queues, declare queue, publish message, get messages,
#     export definitions and show overview against the management API;
#  4. imports the RabbitMQ 3.10 export fixture (tests/ops/fixtures) and lists what came in.
#
# Everything listens on 127.0.0.1 only, in a temporary directory removed at the end; the
# processes it starts are stopped by their pids. Needs: cargo, python3, prometheus,
# rabbitmqadmin 2.x (RABBITMQADMIN, else ~/.cargo/bin, else PATH). The figures it prints are
# whatever the machine gives: it makes no performance claim.
#
# usage: tools/ops-check/ops-check.sh            (from the repository's root)
#        LOAD_SECONDS=40 PROFILE=release tools/ops-check/ops-check.sh
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/tools/ops-check"
PROFILE="${PROFILE:-debug}"
LOAD_SECONDS="${LOAD_SECONDS:-30}"
WORK="$(mktemp -d /tmp/wharf-ops-check.XXXXXX)"
PIDS=()

stop_all() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap stop_all EXIT

say() { printf '\n=== %s\n' "$*"; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_http() { # url, what
    for _ in $(seq 1 300); do
        if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "$2 did not answer at $1" >&2
    exit 1
}

find_rabbitmqadmin() {
    local c
    for c in "${RABBITMQADMIN:-}" "$HOME/.cargo/bin/rabbitmqadmin" "$(command -v rabbitmqadmin || true)"; do
        if [ -n "$c" ] && [ -x "$c" ] && "$c" --version 2>/dev/null | grep -q '^rabbitmqadmin 2\.'; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

command -v prometheus >/dev/null || { echo "no prometheus binary (apt-get install prometheus)" >&2; exit 1; }
ADMIN_BIN="$(find_rabbitmqadmin)" || { echo "no rabbitmqadmin 2.x (cargo install rabbitmqadmin --locked)" >&2; exit 1; }

say "build ($PROFILE)"
if [ "$PROFILE" = release ]; then
    (cd "$ROOT" && cargo build --release -p wharf -p wharf-perf --bins 2>&1 | tail -1)
else
    (cd "$ROOT" && cargo build -p wharf -p wharf-perf --bins 2>&1 | tail -1)
fi
BIN="$ROOT/target/$PROFILE"

AMQP_PORT="$(free_port)"; MGMT_PORT="$(free_port)"; PROM_PORT="$(free_port)"; PROMETHEUS_PORT="$(free_port)"
say "wharf on 127.0.0.1: amqp $AMQP_PORT, management $MGMT_PORT, prometheus $PROM_PORT"
"$BIN/wharf" --bind 127.0.0.1 --port "$AMQP_PORT" --mgmt-port "$MGMT_PORT" \
    --prometheus-port "$PROM_PORT" --data-dir "$WORK/data" --log warn >"$WORK/wharf.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PROM_PORT/metrics" wharf
"$BIN/wharf" --version 2>/dev/null || true

admin() {
    "$ADMIN_BIN" --non-interactive -H 127.0.0.1 -P "$MGMT_PORT" -u guest -p guest "$@"
}

say "load: wharf-perf, 1 publisher (confirms) and 1 consumer at 50 msg/s, still running while the queries and rabbitmqadmin run"
"$BIN/wharf-perf" --uri "amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2f" -x 1 -y 1 -c 10 \
    -s 200 --rate 50 --time "$((LOAD_SECONDS + 30))" --queue ops-check-load >"$WORK/perf.log" 2>&1 &
PERF=$!
PIDS+=("$PERF")
# A quorum queue with messages waiting, so the per-queue-type counters and the ready and
# unacknowledged panels have something to show besides the load's queue.
admin declare queue --name ops-check-quorum --type quorum --durable true >/dev/null
for i in $(seq 1 12); do
    admin publish message --routing-key ops-check-quorum --payload "quorum message $i" >/dev/null
done
admin get messages --queue ops-check-quorum --count 2 >/dev/null

say "prometheus on 127.0.0.1:$PROMETHEUS_PORT, scraping wharf every 1s"
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: wharf
    static_configs:
      - targets: ["127.0.0.1:$PROM_PORT"]
EOF
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PROMETHEUS_PORT/-/ready" prometheus
# Let the load run long enough for the rate() windows to fill.
sleep "$LOAD_SECONDS"

say "RabbitMQ-Overview: every panel query, evaluated by Prometheus now"
NODE="$(curl -fsS "http://127.0.0.1:$PROM_PORT/metrics" | sed -n 's/^rabbitmq_identity_info{.*rabbitmq_cluster="\([^"]*\)".*/\1/p')"
python3 - "$HERE/overview-panels.tsv" "http://127.0.0.1:$PROMETHEUS_PORT" "$NODE" <<'EOF'
import json, sys, urllib.parse, urllib.request
panels, prom, cluster = sys.argv[1], sys.argv[2], sys.argv[3]
fill = {"$rabbitmq_cluster": cluster, "$namespace": "", "$endpoint": "aggregated",
        "$__rate_interval": "1m", "$__range": "5m"}
empty = 0
total = 0
for line in open(panels):
    if line.startswith("#") or not line.strip():
        continue
    title, expr = line.rstrip("\n").split("\t", 1)
    for k, v in fill.items():
        expr = expr.replace(k, v)
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    answer = json.load(urllib.request.urlopen(url))
    result = answer["data"]["result"]
    total += 1
    if not result:
        empty += 1
        shown = "(no series)"
    else:
        shown = ", ".join(
            ("{" + ",".join(f"{k}={v}" for k, v in sorted(r["metric"].items())
                            if k in ("rabbitmq_node", "rabbitmq_version")) + "} " if r["metric"] else "")
            + r["value"][1]
            for r in result[:3])
    print(f"{title:48} {shown}")
print(f"\n{total} queries, {total - empty} with a series, {empty} without")
EOF

say "rabbitmqadmin $("$ADMIN_BIN" --version | cut -d' ' -f2): the issue's commands"
for cmd in "declare queue --name ops-check-jobs --durable true" \
           "list queues" \
           "publish message --routing-key ops-check-jobs --payload hello-from-rabbitmqadmin" \
           "get messages --queue ops-check-jobs --count 1" \
           "show overview"; do
    echo "\$ rabbitmqadmin $cmd"
    # shellcheck disable=SC2086 # the command's words are meant to split
    admin $cmd
done
echo "\$ rabbitmqadmin definitions export --stdout   (first lines)"
admin definitions export --stdout | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k: (len(v) if isinstance(v, list) else v) for k, v in d.items()})'

say "import RabbitMQ 3.10's export (tests/ops/fixtures/rabbitmq-3.10-definitions.json)"
echo "\$ rabbitmqadmin definitions import --file .../rabbitmq-3.10-definitions.json"
admin definitions import --file "$ROOT/tests/ops/fixtures/rabbitmq-3.10-definitions.json"
echo "\$ rabbitmqadmin list vhosts; --vhost wharf-import list queues; --vhost wharf-import list policies"
admin list vhosts
admin --vhost wharf-import list queues
admin --vhost wharf-import list policies
echo "warnings the import logged:"
grep -i warn "$WORK/wharf.log" | sed 's/^/  /' | head -20 || true

say "the load's own report"
wait "$PERF" || true
sed -n '1,12p' "$WORK/perf.log"

say "done"
