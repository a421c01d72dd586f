#!/usr/bin/env bash
# Quorum-queue figures of a 3-node wharf cluster on loopback (issue #17): persistent 1 KiB
# publishes with confirms to a quorum queue from 1 and 16 publishers, publish and consume with
# acks, then failover: the leader SIGKILLed by its pid while a publisher with confirms runs,
# and the time from the kill to the first confirm on the new leader, found by the publisher
# itself (`wharf-perf failover`). Prints wharf-perf's reports; claims nothing by itself: run it
# on a quiet machine.
#
#   tools/perf/cluster.sh [--base-port 5800] [--time 10] [--size 1024] [--window 64]
#       [--bin-dir target/release] [--dir DIR] [--log LEVEL] [--probe SECONDS] [--json]
#       [--steps "1 16 consume failover"]
#
# --steps runs only the steps named (in this order whatever the list's): `1` and `16`
# publishers, `consume` (publish and consume), `failover`. Each step ends with the snapshot
# builds it started finished (a step's build ran into the next one's figures otherwise: a
# first snapshot of a deep queue takes seconds on every node at once). With --probe, the
# publish and consume step is probed too.
#
# --probe S adds, after each publishing run, what an entry of the quorum queues' group cost:
# entries committed (the leader's rabbitmq_raft_log_commit_index) and messages per entry, each
# node's CPU per message (from /proc/PID/stat) and, from `strace -c -f` on every node for S
# seconds in the middle of the run, fdatasync and sendto calls per entry committed meanwhile
# (strace slows the nodes: the run's rate is not a figure then). `--log info` keeps openraft's
# elections in DIR's node logs.
#
# It starts its own three nodes (release build unless --bin-dir names other binaries), on
# 127.0.0.1 ports BASE+1..3 (AMQP), BASE+11..13 (management), BASE+21..23 (Prometheus) and
# BASE+31..33 (cluster), data under DIR (a temporary directory by default, removed at the
# end), and stops them at the end by the pids it got when it started them, never by name.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
base=5800
time_s=10
size=1024
window=64
bin_dir=""
dir=""
json=""
log=warn
probe=0
steps="1 16 consume failover"

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; }
step() { case " $steps " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

while [ $# -gt 0 ]; do
  case "$1" in
    --base-port) base="$2"; shift 2 ;;
    --time) time_s="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --window) window="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --log) log="$2"; shift 2 ;;
    --probe) probe="$2"; shift 2 ;;
    --steps) steps=" $2 "; shift 2 ;;
    --json) json="--json"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done

if [ -z "$bin_dir" ]; then
  (cd "$root" && cargo build --release -q -p wharf -p wharf-perf)
  bin_dir="${CARGO_TARGET_DIR:-$root/target}/release"
fi
for b in wharf wharfctl wharf-perf; do
  [ -x "$bin_dir/$b" ] || { echo "no $b binary in $bin_dir" >&2; exit 1; }
done
keep_dir=1
if [ -z "$dir" ]; then
  dir="$(mktemp -d)"
  keep_dir=0
fi
mkdir -p "$dir"

pids=()
stop_nodes() {
  for pid in "${pids[@]}"; do
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
  done
  [ "$keep_dir" = 1 ] || rm -rf "$dir"
}
trap stop_nodes EXIT

# The nodes' log filter: `settled` below counts openraft's snapshot-build lines, which are at
# info; below info, those two targets are raised to it (without them the wait between steps
# saw no build and waited for none, and a step's deep-queue builds ran into the next step).
filter="$log"
case "$log" in
  off|error|warn) filter="$log,openraft::engine::handler::snapshot_handler=info,openraft::core::raft_core=info" ;;
esac
seeds="127.0.0.1:$((base + 31)),127.0.0.1:$((base + 32)),127.0.0.1:$((base + 33))"
for i in 1 2 3; do
  "$bin_dir/wharf" --bind 127.0.0.1 --port $((base + i)) --mgmt-port $((base + 10 + i)) \
    --prometheus-port $((base + 20 + i)) --data-dir "$dir/n$i" \
    --cluster-listen "127.0.0.1:$((base + 30 + i))" --cluster-seeds "$seeds" --log "$filter" \
    > "$dir/n$i.log" 2>&1 &
  pids[i]=$!
done
uri() { echo "amqp://guest:guest@127.0.0.1:$((base + $1))/%2f"; }

# leader: group 1's leader (the quorum queues' group) as node 1 sees it.
leader() {
  "$bin_dir/wharfctl" cluster_status --cluster "127.0.0.1:$((base + 31))" 2>/dev/null |
    awk '$1 == "group" && $2 == "1" { for (i = 1; i < NF; i += 2) if ($i == "leader") print $(i + 1) }'
}
lead=""
for _ in $(seq 300); do
  lead="$(leader || true)"
  case "$lead" in [123]) break ;; esac
  sleep 0.1
done
case "$lead" in [123]) ;; *) echo "no leader of group 1 within 30 s; logs in $dir" >&2; keep_dir=1; exit 1 ;; esac
echo "group 1 led by node $lead ($(uri "$lead"), pid ${pids[$lead]})" >&2

perf="$bin_dir/wharf-perf"
queue=(--durable --queue-arg x-queue-type=quorum --queue wharf-perf-cluster)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
commit_index() {
  curl -s "http://127.0.0.1:$((base + 20 + lead))/metrics" |
    awk '$1 == "rabbitmq_raft_log_commit_index" { print $2 }'
}
# probed RUN...: RUN (a wharf-perf command) with --probe's figures after it.
probed() {
  if [ "$probe" = 0 ]; then "$@"; return; fi
  local out="$dir/probe.out" t0=() e0 e1 s0 s1 tracers=()
  for i in 1 2 3; do t0[i]=$(ticks "${pids[i]}"); done
  e0=$(commit_index)
  "$@" | tee "$out" &
  local run=$!
  sleep "$(( (time_s - probe) / 2 > 0 ? (time_s - probe) / 2 : 0 ))"
  s0=$(commit_index)
  for i in 1 2 3; do
    timeout "$probe" strace -c -f -p "${pids[i]}" -o "$dir/strace$i.txt" 2>/dev/null &
    tracers+=($!)
  done
  wait "${tracers[@]}" || true
  s1=$(commit_index)
  wait "$run"
  e1=$(commit_index)
  local msgs entries=$((e1 - e0)) during=$((s1 - s0))
  msgs=$(sed -n 's/^published \([0-9]*\) msgs.*/\1/p; s/.*"published":\([0-9]*\).*/\1/p' "$out" | head -1)
  echo "probe: $entries entries, $(awk -v m="${msgs:-0}" -v e="$entries" 'BEGIN { printf "%.1f", e ? m / e : 0 }') msgs/entry; $during entries during strace" >&2
  for i in 1 2 3; do
    local cpu=$(( $(ticks "${pids[i]}") - t0[i] ))
    awk -v node="$i" -v cpu="$cpu" -v hz="$(getconf CLK_TCK)" -v m="${msgs:-0}" -v e="$during" '
      $NF == "fdatasync" { f = $4 } $NF == "sendto" { s = $4 }
      END { printf "probe: node %s cpu %.1f us/msg, fdatasync %.2f/entry, sendto %.2f/entry\n",
              node, m ? cpu / hz * 1e6 / m : 0, e ? f / e : 0, e ? s / e : 0 }' \
      "$dir/strace$i.txt" >&2
  done
}
# builds: how many snapshot builds the nodes' logs show finished (openraft's info lines: only
# with --log info or more), for settled.
builds() { cat "$dir"/n[123].log | grep -c 'command done: BuildSnapshot' || true; }
started() { cat "$dir"/n[123].log | grep -c 'push snapshot building command' || true; }
# settled: waits (up to 60 s) until every snapshot build started has finished, and says how
# long that took, so one step's build does not fall into the next step's figures.
settled() {
  local t0=$SECONDS
  for _ in $(seq 600); do
    [ "$(builds)" -ge "$(started)" ] && break
    sleep 0.1
  done
  echo "snapshot builds: $(builds) finished so far; waited $((SECONDS - t0)) s for the last" >&2
}
for x in 1 16; do
  step "$x" || continue
  echo "== $x publisher(s), persistent $size B, confirms $window, quorum queue" >&2
  probed "$perf" --uri "$(uri "$lead")" -x "$x" -y 0 -s "$size" -f -c "$window" "${queue[@]}" \
    -z "$time_s" --purge-before --purge-after --broker-pid "${pids[$lead]}" $json
  settled
done
if step consume; then
  echo "== 1 publisher and 1 consumer (acks), persistent $size B, quorum queue" >&2
  probed "$perf" --uri "$(uri "$lead")" -x 1 -y 1 -s "$size" -f -c "$window" -q 256 "${queue[@]}" \
    -z "$time_s" --purge-before --purge-after --broker-pid "${pids[$lead]}" $json
  settled
fi
step failover || exit 0

echo "== failover: SIGKILL of the leader while a publisher with confirms runs" >&2
"$perf" failover --uri "$(uri 1)" --pid "${pids[1]}" --uri "$(uri 2)" --pid "${pids[2]}" \
  --uri "$(uri 3)" --pid "${pids[3]}" --size "$size" --warmup 3 $json
