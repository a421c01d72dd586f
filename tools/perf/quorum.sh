#!/usr/bin/env bash
# Quorum-queue figures of wharf against RabbitMQ on this machine (issue #17), in alternated
# rounds: each round runs wharf on one node, RabbitMQ on one node, a 3-node RabbitMQ cluster
# (tools/perf/rabbitmq-cluster.sh) and a 3-node wharf cluster (tools/perf/cluster.sh), each
# with the same three steps: persistent publishes with confirms from 1 and from 16
# publishers, then 1 publisher and 1 consumer with acks (prefetch 256). Prints each step's
# median over the rounds with every round's figure, the broker's CPU per message (the leader's
# in a cluster) and the client's cores; keeps every wharf-perf report (JSON) in OUT.
#
#   tools/perf/quorum.sh [--rounds 3] [--time 10] [--size 1024] [--window 64]
#       [--bin-dir target/release] [--out DIR] [--no-rabbitmq]
#
# Run it on a quiet machine: nothing else may run during a measurement. Ports: 5701 (wharf),
# 5702 (RabbitMQ), 5901..5903 (RabbitMQ cluster), 5801..5833 (wharf cluster), on 127.0.0.1.
# Processes are stopped by the pids they were started with (RabbitMQ with rabbitmqctl).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
rounds=3
time_s=10
size=1024
window=64
bin_dir=""
out=""
rabbit=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --time) time_s="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --window) window="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-rabbitmq) rabbit=0; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$bin_dir" ]; then
  (cd "$root" && cargo build --release -q -p wharf -p wharf-perf)
  bin_dir="${CARGO_TARGET_DIR:-$root/target}/release"
fi
if [ "$rabbit" = 1 ] && ! command -v rabbitmq-server >/dev/null; then
  echo "rabbitmq-server is not installed: RabbitMQ is left out (--no-rabbitmq)" >&2
  rabbit=0
fi
out="${out:-$(mktemp -d)}"
mkdir -p "$out"
perf="$bin_dir/wharf-perf"

# steps URI PID PREFIX QUEUE: the three steps against one broker, reports in PREFIX-*.json.
steps() {
  local uri=$1 pid=$2 prefix=$3 queue=$4
  local q=(--durable --queue-arg x-queue-type=quorum --queue "$queue" --purge-before --purge-after
    --broker-pid "$pid" -s "$size" -f -c "$window" -z "$time_s" --json)
  "$perf" --uri "$uri" -x 1 -y 0 "${q[@]}" > "$prefix-x1.json"
  "$perf" --uri "$uri" -x 16 -y 0 "${q[@]}" > "$prefix-x16.json"
  "$perf" --uri "$uri" -x 1 -y 1 -q 256 "${q[@]}" > "$prefix-pc.json"
}

# Each system starts with the disk written back: the one before it leaves up to gigabytes of
# dirty pages (and deleted files) behind, whose writeback would slow the next one's fsyncs.
settle() { sync; }

for r in $(seq "$rounds"); do
  d="$out/round-$r"
  mkdir -p "$d"
  echo "round $r" >&2
  data="$(mktemp -d)"
  settle
  "$bin_dir/wharf" --bind 127.0.0.1 --port 5701 --mgmt-port 5711 --prometheus-port 5721 \
    --data-dir "$data" --log warn > "$d/wharf.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "wharf listening" "$d/wharf.log" && break; sleep 0.1; done
  steps amqp://guest:guest@127.0.0.1:5701/%2f "$pid" "$d/wharf1" wharf-perf-q
  kill -TERM "$pid"
  wait "$pid" || true
  rm -rf "$data"
  if [ "$rabbit" = 1 ]; then
    settle
    ERL_EPMD_ADDRESS=127.0.0.1 RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=5702 \
      rabbitmq-server -detached
    # await_startup fails until the node has registered with epmd: ask again.
    for _ in $(seq 120); do rabbitmqctl -q await_startup >/dev/null 2>&1 && break; sleep 1; done
    rpid=$(rabbitmqctl -q eval 'list_to_integer(os:getpid()).')
    steps amqp://guest:guest@127.0.0.1:5702/%2f "$rpid" "$d/rabbit1" wharf-perf-q
    rabbitmqctl -q delete_queue wharf-perf-q >/dev/null 2>&1 || true
    rabbitmqctl -q stop
    settle
    "$here/rabbitmq-cluster.sh" start > "$d/rabbit3.txt" 2>&1
    rpid=$(awk '$1 == "r1" { print $4 }' "$d/rabbit3.txt")
    steps amqp://guest:guest@127.0.0.1:5901/%2f "$rpid" "$d/rabbit3" wharf-perf-q
    "$here/rabbitmq-cluster.sh" stop
  fi
  settle
  # A failed step (its error in wharf3.err) leaves its report and the later ones missing: the
  # summary says so instead of the whole comparison stopping.
  "$here/cluster.sh" --time "$time_s" --size "$size" --window "$window" --bin-dir "$bin_dir" \
    --json > "$d/wharf3.json" 2> "$d/wharf3.err" || echo "round $r: the wharf cluster run failed (see $d/wharf3.err)" >&2
  # cluster.sh prints its four reports one after the other: split them like the others.
  jq -c . "$d/wharf3.json" | {
    for step in x1 x16 pc failover; do
      read -r a || break
      echo "$a" > "$d/wharf3-$step.json"
    done
  }
done

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
systems=(wharf1 wharf3)
[ "$rabbit" = 1 ] && systems=(wharf1 rabbit1 rabbit3 wharf3)
printf '%-8s %-4s %10s  %-30s %12s %12s %10s %10s\n' system step "msg/s" rounds "broker us/m" "client cores" "p50 ms" "p99 ms"
for s in "${systems[@]}"; do
  for step in x1 x16 pc; do
    files=()
    for f in "$out"/round-*/"$s-$step.json"; do [ -f "$f" ] && files+=("$f"); done
    [ ${#files[@]} -gt 0 ] || { printf '%-8s %-4s %10s  (no round completed)\n' "$s" "$step" -; continue; }
    rates=$(jq -r '.publish_msg_s' "${files[@]}")
    printf '%-8s %-4s %10.0f  %-30s %12.1f %12.2f %10s %10s\n' "$s" "$step" \
      "$(echo "$rates" | median)" "$(echo "$rates" | awk '{ printf "%.0f ", $1 }')" \
      "$(jq -r '.broker_cpu_us_per_msg' "${files[@]}" | median)" \
      "$(jq -r '.perf_cpu_cores' "${files[@]}" | median)" \
      "$(jq -r '.latency.p50_ms // "-"' "${files[@]}" | median)" \
      "$(jq -r '.latency.p99_ms // "-"' "${files[@]}" | median)"
  done
done
echo "failover (ms): $(cat "$out"/round-*/wharf3-failover.json 2>/dev/null | jq -r '.kill_to_first_confirm_ms' | awk '{ printf "%.0f ", $1 }')"
echo "reports in $out" >&2
