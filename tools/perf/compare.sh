#!/usr/bin/env bash
# Runs wharf-perf's scenario set against broker A (and optionally broker B) and prints a table:
# scenario, A, B, B/A. Each figure is the median of --runs runs, A and B alternating. It never starts or stops
# RabbitMQ unless --start-rabbitmq / --stop-rabbitmq is given, and it kills nothing: the only
# processes it starts are wharf-perf runs (waited for) and, when asked, `rabbitmq-server -detached`.
#
#   tools/perf/compare.sh --uri-a amqp://guest:guest@127.0.0.1:5672/%2f --pid-a 1234 \
#       [--uri-b amqp://guest:guest@127.0.0.1:5673/%2f --pid-b 5678] [--runs 3] [--time 10] \
#       [--only pub16,ttl] [--pubcon-rate N] [--start-rabbitmq] [--stop-rabbitmq] [--raw FILE]
#
# --pid-X is the broker's process id, for CPU per message (RabbitMQ:
# `rabbitmqctl eval 'os:getpid().'`). Scenarios (names for --only):
#   pub16 pub1k pub64k  persistent publish, confirms (window 256), one publisher, durable queue,
#                       no consumer, purged before and after
#   pub1k-x16 pub1k-x64 the same at 1 KiB with 16 or 64 publishers (one connection each),
#                       confirm window 64 each: rate and broker CPU per message
#   con16 con1k         consume with one ack per message, prefetch 256, from a durable queue
#                       pre-filled with --prefill persistent messages
#   pubcon1k            publish and consume at once, 1 KiB persistent, confirms 256, prefetch 256
#                       (as fast as possible, or at --pubcon-rate N msg/s)
#   pubcon1k-half       pubcon1k twice: as fast as possible (max_*), then with --rate at half of
#                       the rate that run published (half_*); p50/p99/p99.9 of both
#   pubcon1k-slow       pubcon1k with a consumer that falls behind (prefetch 8): publish and
#                       consume rates and the backlog left at the end (S-FLOW-1's case)
#   ttl                 100,000 messages, half TTL 100 ms, half 1 h, shuffled, into a queue with
#                       a dead-letter exchange; short ones dead-lettered 5 s after the last publish
#
# --backlog N fills the queue wharf-perf-backlog on each broker with N persistent 1 KiB messages
# before the first scenario (no consumer; they stay queued through every scenario) and drains and deletes
# it at the end: the issue's "broker holding 300,000 queued messages in another queue".
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
uri_a="amqp://guest:guest@127.0.0.1:5672/%2f"
uri_b=""
pid_a=""
pid_b=""
runs=3
time_s=10
prefill=200000
only=""
pubcon_rate=0
start_rabbitmq=0
stop_rabbitmq=0
raw=""
backlog=0
perf="${WHARF_PERF:-}"

usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --uri-a) uri_a="$2"; shift 2 ;;
    --uri-b) uri_b="$2"; shift 2 ;;
    --pid-a) pid_a="$2"; shift 2 ;;
    --pid-b) pid_b="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --time) time_s="$2"; shift 2 ;;
    --prefill) prefill="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --pubcon-rate) pubcon_rate="$2"; shift 2 ;;
    --backlog) backlog="$2"; shift 2 ;;
    --perf) perf="$2"; shift 2 ;;
    --raw) raw="$2"; shift 2 ;;
    --start-rabbitmq) start_rabbitmq=1; shift ;;
    --stop-rabbitmq) stop_rabbitmq=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done

if [ -z "$perf" ]; then
  (cd "$root" && cargo build --release -q -p wharf-perf)
  perf="${CARGO_TARGET_DIR:-$root/target}/release/wharf-perf"
fi
[ -x "$perf" ] || { echo "no wharf-perf binary at $perf" >&2; exit 1; }
[ -n "$raw" ] && : > "$raw"

if [ "$start_rabbitmq" = 1 ]; then
  # Loopback only; the Debian package's rabbitmq-env.conf may also set NODE_IP_ADDRESS.
  ERL_EPMD_ADDRESS=127.0.0.1 RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 rabbitmq-server -detached
  rabbitmqctl await_startup
  [ -n "$pid_a" ] || pid_a="$(rabbitmqctl eval 'os:getpid().' | tr -d '"')"
fi

wanted() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

# field JSON NAME [SUB]: a number from wharf-perf's JSON line (jq if present, else sed).
field() {
  if command -v jq > /dev/null; then
    jq -r "$2 // empty" <<< "$1"
  else
    sed -n "s/.*\"${3:-$2}\":\([-0-9.e+]*\).*/\1/p" <<< "$1"
  fi
}

# fmt VALUE: whole numbers from 100 up, three significant digits below; n/a stays.
fmt() { awk -v x="$1" 'BEGIN { if (x == "" || x == "n/a") print "n/a"; else if (x + 0 >= 100) printf "%.0f\n", x; else printf "%.3g\n", x }'; }

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# pubcon URI RATE [--broker-pid PID]: one publish+consume run of 1 KiB (RATE 0: unpaced).
pubcon() {
  local uri="$1" rate="$2"
  shift 2
  "$perf" --uri "$uri" -x 1 -y 1 -s 1024 -f -c 256 -q 256 --durable --rate "$rate" \
    --queue wharf-perf-pubcon -z "$time_s" --purge-before --purge-after --json "$@"
}

# pubcon_lines PREFIX JSON: the "metric value" lines of one publish+consume run.
pubcon_lines() {
  echo "$1.pub_msg_s $(field "$2" .publish_msg_s publish_msg_s)"
  echo "$1.con_msg_s $(field "$2" .consume_msg_s consume_msg_s)"
  echo "$1.p50_ms $(field "$2" .latency.p50_ms p50_ms)"
  echo "$1.p99_ms $(field "$2" .latency.p99_ms p99_ms)"
  echo "$1.p999_ms $(field "$2" .latency.p999_ms p999_ms)"
  echo "$1.backlog $(awk -v p="$(field "$2" .published published)" -v c="$(field "$2" .consumed consumed)" 'BEGIN { print p - c }')"
}

# one URI PID SCENARIO: runs one scenario once and prints "metric value" lines.
one() {
  local uri="$1" pid="$2" scenario="$3" json pid_args=()
  [ -n "$pid" ] && pid_args=(--broker-pid "$pid")
  case "$scenario" in
    pub16|pub1k|pub64k)
      local size
      case "$scenario" in pub16) size=16 ;; pub1k) size=1024 ;; *) size=65536 ;; esac
      json="$("$perf" --uri "$uri" -x 1 -y 0 -s "$size" -f -c 256 --durable --queue wharf-perf-pub \
        -z "$time_s" --purge-before --purge-after --json "${pid_args[@]}")"
      echo "$scenario.msg_s $(field "$json" .publish_msg_s publish_msg_s)"
      echo "$scenario.mib_s $(field "$json" .publish_mib_s publish_mib_s)"
      if [ "$scenario" = pub1k ] && [ -n "$pid" ]; then
        echo "cpu1k.us_per_msg $(field "$json" .broker_cpu_us_per_msg broker_cpu_us_per_msg)"
      fi
      echo "$scenario.perf_cpu_cores $(field "$json" .perf_cpu_cores perf_cpu_cores)"
      ;;
    pub1k-x16|pub1k-x64)
      json="$("$perf" --uri "$uri" -x "${scenario#pub1k-x}" -y 0 -s 1024 -f -c 64 --durable \
        --queue wharf-perf-pubx -z "$time_s" --purge-before --purge-after --json "${pid_args[@]}")"
      echo "$scenario.msg_s $(field "$json" .publish_msg_s publish_msg_s)"
      echo "$scenario.perf_cpu_cores $(field "$json" .perf_cpu_cores perf_cpu_cores)"
      ;;
    con16|con1k)
      local size=16
      [ "$scenario" = con1k ] && size=1024
      "$perf" --uri "$uri" -x 1 -y 0 -s "$size" -f --durable --queue wharf-perf-con \
        -C "$prefill" --purge-before --json > /dev/null
      json="$("$perf" --uri "$uri" -x 0 -y 1 -q 256 --durable --queue wharf-perf-con \
        -D "$prefill" --purge-after --json "${pid_args[@]}")"
      echo "$scenario.msg_s $(field "$json" .consume_msg_s consume_msg_s)"
      echo "$scenario.mib_s $(field "$json" .consume_mib_s consume_mib_s)"
      echo "$scenario.perf_cpu_cores $(field "$json" .perf_cpu_cores perf_cpu_cores)"
      ;;
    pubcon1k)
      json="$(pubcon "$uri" "$pubcon_rate" "${pid_args[@]}")"
      pubcon_lines pubcon1k "$json"
      ;;
    pubcon1k-slow)
      json="$(pubcon "$uri" 0 -q 8 "${pid_args[@]}")"
      pubcon_lines pubcon1k-slow "$json"
      ;;
    pubcon1k-half)
      # The same run twice: first as fast as possible, then paced at half the rate it reached.
      local max half
      max="$(pubcon "$uri" 0 "${pid_args[@]}")"
      pubcon_lines pubcon1k-half.max "$max"
      half="$(awk -v r="$(field "$max" .publish_msg_s publish_msg_s)" 'BEGIN { printf "%d", r / 2 }')"
      if [ "$half" -gt 0 ]; then
        json="$(pubcon "$uri" "$half" "${pid_args[@]}")"
        echo "pubcon1k-half.half_target_msg_s $half"
        pubcon_lines pubcon1k-half.half "$json"
        if [ -n "$raw" ]; then echo "$uri pubcon1k-half.max $max" >> "$raw"; fi
      else
        json="$max"
      fi
      ;;
    ttl)
      json="$("$perf" ttl-mix --uri "$uri" --messages 100000 --short-ms 100 --long-ms 3600000 \
        --wait 5 --json)"
      echo "ttl.dead_lettered_of_50000 $(field "$json" .dead_lettered dead_lettered)"
      echo "ttl.settled_after_ms $(field "$json" '.settled_after_ms' settled_after_ms)"
      ;;
  esac
  if [ -n "$pid" ] && [ "$scenario" != ttl ]; then
    # Broker CPU per message does not depend on how much CPU other jobs left the broker, so it
    # compares brokers fairly on a busy machine.
    echo "$scenario.broker_us_msg $(field "$json" .broker_cpu_us_per_msg broker_cpu_us_per_msg)"
  fi
  [ -n "$raw" ] && echo "$uri $scenario $json" >> "$raw"
  return 0
}

# medians FILE: prints "metric median" for every metric in FILE, in first-seen order.
medians() {
  awk '{ print $1 }' "$1" | awk '!seen[$0]++' | while read -r metric; do
    echo "$metric $(awk -v m="$metric" '$1 == m && $2 != "" { print $2 }' "$1" | median)"
  done
}

# Runs alternate between A and B (A, B, A, B, ...) so that a drift in the machine's load
# (other jobs on a shared machine) falls on both brokers alike.
# backlog URI: fills (or, with "delete", deletes) the standing backlog queue of one broker.
backlog_queue() {
  if [ "$2" = delete ]; then
    "$perf" --uri "$1" -x 0 -y 1 -q 1000 -A 100 --durable --queue wharf-perf-backlog \
      -D "$backlog" --delete-after --json > /dev/null
  else
    "$perf" --uri "$1" -x 1 -y 0 -s 1024 -f -c 256 --durable --queue wharf-perf-backlog \
      -C "$backlog" --purge-before --json > /dev/null
  fi
}
if [ "$backlog" -gt 0 ]; then
  backlog_queue "$uri_a" fill
  if [ -n "$uri_b" ]; then backlog_queue "$uri_b" fill; fi
fi

results_a="$(mktemp)"
results_b="$(mktemp)"
for scenario in pub16 pub1k pub64k pub1k-x16 pub1k-x64 con16 con1k pubcon1k pubcon1k-half pubcon1k-slow ttl; do
  wanted "$scenario" || continue
  for _ in $(seq "$runs"); do
    one "$uri_a" "$pid_a" "$scenario" >> "$results_a"
    if [ -n "$uri_b" ]; then one "$uri_b" "$pid_b" "$scenario" >> "$results_b"; fi
  done
done
a="$(medians "$results_a")"
b="$(medians "$results_b")"
rm -f "$results_a" "$results_b"
if [ "$backlog" -gt 0 ]; then
  backlog_queue "$uri_a" delete
  if [ -n "$uri_b" ]; then backlog_queue "$uri_b" delete; fi
fi

printf '%-28s %14s %14s %8s\n' scenario A B B/A
while read -r metric value_a; do
  value_b="$(awk -v m="$metric" '$1 == m { print $2 }' <<< "$b")"
  ratio=""
  if [ -n "$value_b" ] && [ "$value_b" != n/a ] && [ "$value_a" != n/a ]; then
    ratio="$(awk -v x="$value_a" -v y="$value_b" 'BEGIN { if (x + 0 != 0) printf "%.2f", y / x }')"
  fi
  [ -n "$value_b" ] && value_b="$(fmt "$value_b")"
  printf '%-28s %14s %14s %8s\n' "$metric" "$(fmt "$value_a")" "${value_b:--}" "${ratio:--}"
done <<< "$a"
echo "(medians of $runs runs; load average: $(cut -d' ' -f1-3 /proc/loadavg))"

if [ "$stop_rabbitmq" = 1 ]; then
  rabbitmqctl stop
fi
