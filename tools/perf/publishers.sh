#!/usr/bin/env bash
# Broker CPU per message against the number of publishers (issue 18, "many connections"): the
# same persistent 1 KiB publishes with confirms from 1, 16 and 64 publisher connections, each
# with the same confirm window, rounds alternating so that load drift hits every count alike.
# Prints, per count, the median broker CPU per message, its ratio to one publisher's (the goal:
# at most 1.25), and the median rate. CPU per message hardly depends on what other jobs leave
# the broker, so the ratio means something on a busy machine; the rates do not.
#
#   tools/perf/publishers.sh --uri amqp://guest:guest@127.0.0.1:5699/%2f --pid BROKER_PID \
#       [--counts "1 16 64"] [--window 64] [--runs 3] [--time 10] [--size 1024] [--raw FILE]
#
# It starts and kills nothing: the broker is already running (its pid from its start).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
uri="amqp://guest:guest@127.0.0.1:5672/%2f"
pid=""
counts="1 16 64"
window=64
runs=3
time_s=10
size=1024
raw=""
perf="${WHARF_PERF:-}"

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --uri) uri="$2"; shift 2 ;;
    --pid) pid="$2"; shift 2 ;;
    --counts) counts="$2"; shift 2 ;;
    --window) window="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --time) time_s="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --raw) raw="$2"; shift 2 ;;
    --perf) perf="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[ -n "$pid" ] || { echo "--pid BROKER_PID is required (CPU per message)" >&2; exit 2; }

if [ -z "$perf" ]; then
  (cd "$root" && cargo build --release -q -p wharf-perf)
  perf="${CARGO_TARGET_DIR:-$root/target}/release/wharf-perf"
fi
[ -x "$perf" ] || { echo "no wharf-perf binary at $perf" >&2; exit 1; }
[ -n "$raw" ] && : > "$raw"

# field JSON NAME: a number from wharf-perf's JSON line.
field() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" <<< "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
for round in $(seq "$runs"); do
  for x in $counts; do
    json="$("$perf" --uri "$uri" -x "$x" -y 0 -s "$size" -f -c "$window" --durable \
      --queue wharf-perf-publishers -z "$time_s" --purge-before --purge-after --json \
      --broker-pid "$pid")"
    [ -n "$raw" ] && echo "round $round x $x $json" >> "$raw"
    echo "$x $(field "$json" broker_cpu_us_per_msg) $(field "$json" publish_msg_s)" >> "$results"
    echo "round $round: $x publishers: $(field "$json" broker_cpu_us_per_msg) us/msg" >&2
  done
done

first="${counts%% *}"
base="$(awk -v x="$first" '$1 == x { print $2 }' "$results" | median)"
printf '%-11s %-12s %-10s %s\n' publishers broker_us_msg vs_first msg_s
for x in $counts; do
  us="$(awk -v x="$x" '$1 == x { print $2 }' "$results" | median)"
  rate="$(awk -v x="$x" '$1 == x { print $3 }' "$results" | median)"
  ratio="$(awk -v a="$us" -v b="$base" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')"
  printf '%-11s %-12s %-10s %s\n' "$x" "$us" "$ratio" "$rate"
done
