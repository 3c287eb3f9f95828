#!/usr/bin/env bash
# Runs the daily_report example as replicas ("pods") in containers, plus Redis in a
# container, on one private Docker network, and checks from the pods' logs that
# every cron tick ran the report exactly once.
#
# Usage: scripts/daily-report-pods.sh [options]
#   --replicas N     pods to start (default 3)
#   --ticks N        ticks each pod runs before it exits (default 5)
#   --cron EXPR      six-field cron expression (default "*/2 * * * * *")
#   --binary PATH    use this daily_report binary instead of building it with cargo
#   --timeout SECS   how long the pods may take in all (default 120)
#   --keep           leave the containers and the network in place for a look
#
# Needs a Docker engine and redis-server on the host (the Redis image is built from it
# by build-redis-image.sh; the engine does not need to pull anything). Each pod runs
#   daily_report --instance pod-N --cron EXPR --ticks N   with REDIS_URL=redis://redis:6379/
# and prints, per tick, either "[pod-N] Starting daily report generation" or
# "[pod-N] Another instance is generating the report, skipping", optionally followed by
# "(tick SLOT)". The check groups the pods' lines into ticks by that slot, or, for lines
# without one, by their log timestamps (replicas fire a tick within milliseconds of each
# other; ticks are at least a second apart), and requires:
#   - exactly one "Starting" line in every tick;
#   - every other line of a tick is a "skipping" line, at most one line per pod per tick;
#   - every pod printed one line per tick it ran (N lines) and exited with status 0;
#   - in at least one tick all pods took part (they really contended).
# Exits non-zero, with the logs, when any of that fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
source "$here/lib.sh"

replicas=3
ticks=5
cron='*/2 * * * * *'
binary=
timeout_secs=120
keep=false
while (($#)); do
  case $1 in
    --replicas) replicas=$2; shift 2 ;;
    --ticks) ticks=$2; shift 2 ;;
    --cron) cron=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --timeout) timeout_secs=$2; shift 2 ;;
    --keep) keep=true; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

docker_answers || die "$(docker_absent_reason)"
cd "$here/.."

# 1. Images: Redis from the host's redis-server, the pod from the example binary.
redis_image=$("$here/build-redis-image.sh" | tail -n 1)
if [[ -z $binary ]]; then
  [[ -f examples/examples/daily_report.rs ]] || die "examples/examples/daily_report.rs does not exist yet"
  echo "building the daily_report example"
  # --workspace: the same feature set as `cargo test --workspace`, so CI reuses its build.
  binary=$(cargo build --workspace --locked --example daily_report --message-format=json-render-diagnostics |
    sed -n 's/.*"executable":"\([^"]*\/daily_report\)".*/\1/p' | tail -n 1)
  [[ -n $binary ]] || die "cargo did not report the daily_report executable"
fi
[[ -x $binary ]] || die "$binary is not an executable"
pod_image=distributed-lock/daily-report:local
build_rootfs_image "$pod_image" "daily-report-$(cat "$binary" "$here/lib.sh" | sha256sum | cut -c1-16)" \
  "$binary:/usr/bin/daily_report" -- \
  'ENTRYPOINT ["/usr/bin/daily_report"]' \
  'USER 65534:65534' \
  'WORKDIR /tmp'

# 2. One network, Redis on it as "redis", the pods beside it.
run=dl-pods-$$
network=$run-net
containers=()
cleanup() {
  if [[ $keep == true ]]; then
    echo "kept: network $network, containers ${containers[*]}"
    return
  fi
  ((${#containers[@]})) && docker rm -f "${containers[@]}" >/dev/null 2>&1
  docker network rm "$network" >/dev/null 2>&1 || true
}
trap cleanup EXIT

docker network create "$network" >/dev/null
redis=$run-redis
containers+=("$redis")
docker run -d --name "$redis" --network "$network" --network-alias redis "$redis_image" >/dev/null
for _ in $(seq 1 100); do
  docker logs "$redis" 2>&1 | grep -q 'Ready to accept connections' && break
  sleep 0.1
done
docker logs "$redis" 2>&1 | grep -q 'Ready to accept connections' || {
  docker logs "$redis" >&2 2>&1
  die "Redis did not become ready in its container"
}

pods=()
for i in $(seq 1 "$replicas"); do
  pod=$run-pod-$i
  docker create --name "$pod" --network "$network" -e REDIS_URL=redis://redis:6379/ "$pod_image" \
    --instance "pod-$i" --cron "$cron" --ticks "$ticks" >/dev/null
  pods+=("$pod")
  containers+=("$pod")
done
echo "starting ${replicas} pods (cron \"$cron\", $ticks ticks each) and Redis on network $network"
docker start "${pods[@]}" >/dev/null

# 3. Wait for every pod to exit, within the deadline.
if ! statuses=$(timeout "$timeout_secs" docker wait "${pods[@]}"); then
  for pod in "${pods[@]}"; do docker logs "$pod" 2>&1 | sed "s/^/$pod | /" >&2; done
  die "the pods did not all exit within ${timeout_secs}s"
fi

# 4. The check, on the pods' timestamped logs.
logs=$(for pod in "${pods[@]}"; do docker logs -t "$pod" 2>&1; done)
exit_codes=$(echo "$statuses" | tr '\n' ' ')
echo "$logs" | sort | awk -v replicas="$replicas" -v ticks="$ticks" -v exit_codes="$exit_codes" '
  # "2026-10-27T10:20:30.123456789Z [pod-2] Starting daily report generation"
  function seconds(ts,   d, t) {
    split(ts, d, "T"); split(d[2], t, ":"); sub(/Z$/, "", t[3])
    return substr(d[1], 9, 2) * 86400 + t[1] * 3600 + t[2] * 60 + t[3]
  }
  {
    if ($0 ~ /\] Starting daily report generation/) kind = "run"
    else if ($0 ~ /\] Another instance is generating the report, skipping/) kind = "skip"
    else { other++; next }
    match($0, /\[pod-[0-9]+\]/); pod = substr($0, RSTART + 1, RLENGTH - 2)
    if (match($0, /\(tick [^)]*\)/)) {
      # The line names its cron slot: group by that.
      tick = substr($0, RSTART + 6, RLENGTH - 7)
      if (!(tick in index_of)) { n++; index_of[tick] = n; label[n] = tick }
      i = index_of[tick]
    } else {
      # No slot in the line: group by log timestamp.
      t = seconds($1)
      if (n == 0 || t - first[n] > 0.5) { n++; first[n] = t; label[n] = substr($1, 12, 12) }
      i = n
    }
    if (seen[i, pod]++) bad[i] = bad[i] sprintf(" %s twice;", pod)
    if (kind == "run") runs[i]++; else skips[i]++
    who[i] = who[i] sprintf(" %s:%s", pod, kind)
    lines[pod]++
    members[i]++
  }
  END {
    fail = 0
    printf "%-14s %4s %5s  %s\n", "tick", "runs", "skips", "pods"
    for (i = 1; i <= n; i++) {
      printf "%-14s %4d %5d %s\n", label[i], runs[i], skips[i], who[i]
      if (runs[i] != 1) { printf "FAIL: tick at %s ran the report %d times\n", label[i], runs[i]; fail = 1 }
      if (bad[i] != "") { printf "FAIL: tick at %s:%s\n", label[i], bad[i]; fail = 1 }
      if (members[i] == replicas) full++
    }
    for (p = 1; p <= replicas; p++) {
      pod = "pod-" p
      if (lines[pod] != ticks) { printf "FAIL: %s printed %d tick lines, expected %d\n", pod, lines[pod], ticks; fail = 1 }
    }
    if (full < 1) { print "FAIL: no tick had all pods taking part"; fail = 1 }
    split(exit_codes, codes, " ")
    for (c in codes) if (codes[c] != 0) { printf "FAIL: a pod exited with status %s\n", codes[c]; fail = 1 }
    if (n == 0) { print "FAIL: no tick lines in the logs"; fail = 1 }
    if (fail) exit 1
    printf "OK: %d ticks, each run by exactly one of %d pods (%d with all pods taking part)\n", n, replicas, full
  }
' || {
  echo "--- pod logs ---" >&2
  echo "$logs" >&2
  die "the daily_report pods did not run the report exactly once per tick"
}
