#!/usr/bin/env bash
# Model-checks the scheduler's protocol with spin (scheduler/model/sched.pml; see
# scheduler/model/README.md). Every run is an exhaustive search (-DCOLLAPSE, no bitstate).
#
#   scripts/check-sched-model.sh           the CI check (at most 3 minutes on 2 loaded cores)
#   scripts/check-sched-model.sh --long    the longer run at larger bounds (see README.md)
#   scripts/check-sched-model.sh --traces  the old variants only, each with its shortest counterexample
#
# Fails unless the fixed logic passes every configuration (no error, search complete, every
# probe of the model reached) and each old behaviour (-DOLD_...) of issue 54 breaks the
# property its bug breaks. Prints one line per variant.
#
# Environment: MODEL_JOBS (parallel builds and searches, default 2), MODEL_CFLAGS (default
# -O2), MODEL_MEMLIM (MB per search; default 3072, 20000 with --long), MODEL_KEEP=1 (keep the
# build directory, with each run's pan output and any counterexample trail).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
model="$root/scheduler/model/sched.pml"
mode=ci
case "${1:-}" in
  "") ;;
  --long) mode=long ;;
  --traces) mode=traces ;;
  -h | --help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
    ;;
  *)
    echo "usage: $0 [--long | --traces]" >&2
    exit 2
    ;;
esac

for tool in spin gcc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "check-sched-model: $tool not found (Debian: apt-get install spin gcc)" >&2
    exit 1
  fi
done
[[ -f $model ]] || {
  echo "check-sched-model: $model not found" >&2
  exit 1
}

jobs=${MODEL_JOBS:-2}
cflags=${MODEL_CFLAGS:--O2}
if [[ $mode == long ]]; then
  memlim=${MODEL_MEMLIM:-20000}
else
  memlim=${MODEL_MEMLIM:-3072}
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/check-sched-model.XXXXXX")
if [[ ${MODEL_KEEP:-0} == 1 ]]; then
  echo "check-sched-model: build directory $work (kept)"
else
  trap 'rm -rf "$work"' EXIT
fi

# name | expect | spin -D flags | for "fail": the assertion the counterexample must violate |
# extra gcc flags. Every CI search is small: its build is its cost, so CI builds without
# optimisation (-O0: 1-2 s of gcc instead of 20-50 s on a loaded machine, for a search at most
# twice as slow) and the bug settings skip pan's array bound checks; the general run keeps them.
old_variants=(
  "OLD_B1 (retry after the next slot)|fail|-DCFG=1 -DOLD_B1|!(lost_retry)|-O0 -DNOBOUNDCHECK"
  "OLD_A1 (failed claim retried and caught up)|fail|-DCFG=2 -DOLD_A1|!(after_success)|-O0 -DNOBOUNDCHECK"
  "OLD_S1 (resend answered Held disarms)|fail|-DCFG=3 -DOLD_S1|!(orphan)|-O0 -DNOBOUNDCHECK"
  "OLD_S2 (resend's error reply disarms)|fail|-DCFG=4 -DOLD_S2|!(orphan)|-O0 -DNOBOUNDCHECK"
  "OLD_R1 (take's lost reply)|fail|-DCFG=5 -DOLD_R1|!(lost_retry)|-O0 -DNOBOUNDCHECK"
  "OLD_M1 (uncounted attempt's retry)|fail|-DCFG=6 -DOLD_M1|!(over_max)|-O0 -DNOBOUNDCHECK"
  "OLD_U1 (buffer behind a run-now)|fail|-DCFG=7 -DOLD_U1|!(buffer_left)|-O0 -DNOBOUNDCHECK"
  "OLD_SHUT (buffered run after SIGTERM)|fail|-DCFG=8 -DOLD_SHUT|!(start_after_stop)|-O0 -DNOBOUNDCHECK"
  "OLD_F (F1/F2: backfill of a slot in flight)|fail|-DCFG=9 -DOLD_F|!(twice)|-O0 -DNOBOUNDCHECK"
  "F3_UNCLAIMED_BACKFILL (found: backfill first)|fail|-DCFG=13 -DF3_UNCLAIMED_BACKFILL|!(twice)|-O0 -DNOBOUNDCHECK"
  "F3 + HANDOVER_AS_BACKFILL (found: at shutdown)|fail|-DCFG=8 -DF3_UNCLAIMED_BACKFILL -DHANDOVER_AS_BACKFILL|!(twice)|-O0 -DNOBOUNDCHECK"
)
panflags="-m10000"
if [[ $mode == ci ]]; then
  variants=(
    "fixed cfg1 (B1 setting)|pass|-DCFG=1 -DPROBES||-O0 -DNOBOUNDCHECK"
    "fixed cfg2 (A1 setting)|pass|-DCFG=2 -DPROBES||-O0 -DNOBOUNDCHECK"
    "fixed cfg3 (S1 setting)|pass|-DCFG=3 -DPROBES||-O0 -DNOBOUNDCHECK"
    "fixed cfg4 (S2 setting)|pass|-DCFG=4 -DPROBES||-O0 -DNOBOUNDCHECK"
    "fixed cfg5 (R1 setting)|pass|-DCFG=5 -DPROBES||-O0 -DNOBOUNDCHECK"
    "fixed cfg6 (M1 setting)|pass|-DCFG=6 -DPROBES||-O0 -DNOBOUNDCHECK"
    "fixed cfg7 (U1 setting)|pass|-DCFG=7 -DPROBES||-O0 -DNOBOUNDCHECK"
    "fixed cfg8 (shutdown setting)|pass|-DCFG=8 -DPROBES||-O0 -DNOBOUNDCHECK"
    "fixed cfg9 (F1/F2 setting)|pass|-DCFG=9 -DPROBES||-O0 -DNOBOUNDCHECK"
    "fixed cfg13 (general: retries, pause, backfill; 1 fault)|pass|-DCFG=13 -DPROBES||-O0"
    "${old_variants[@]}"
  )
elif [[ $mode == traces ]]; then
  # -DREACH with -i: iteratively shortened, the shortest counterexample within the bounds
  variants=("${old_variants[@]/%/ -DREACH}")
  panflags="-m2000 -i"
else
  variants=(
    "fixed cfg10 long (Skip: retries, max runs, pause, backfill; any 1 fault)|pass|-DCFG=10 -DPROBES"
    "fixed cfg11 long (BufferOne: run-now, retries; any 1 fault)|pass|-DCFG=11 -DPROBES"
    "fixed cfg12 long (3 replicas, retries; any 1 fault)|pass|-DCFG=12 -DPROBES"
  )
fi

# Builds and searches one variant in its own directory; writes its summary line to
# <dir>/result and its verdict (ok/FAIL) to <dir>/verdict. Never fails itself.
run_variant() {
  local i=$1 spec=$2
  local name expect flags want extra
  IFS='|' read -r name expect flags want extra <<<"$spec"
  local dir="$work/$i"
  mkdir -p "$dir"
  cd "$dir" || return 0
  local verdict=FAIL detail=""
  local t0 t1 t2
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086 # flags are words
  if ! spin -a $flags "$model" >spin.log 2>&1; then
    detail="spin -a failed: $(head -c 300 spin.log | tr '\n' ' ')"
  # shellcheck disable=SC2086 # flags are words
  elif ! gcc $cflags $extra -w -DSAFETY -DCOLLAPSE -DMEMLIM="$memlim" -o pan pan.c >gcc.log 2>&1; then
    detail="gcc failed: $(head -c 300 gcc.log | tr '\n' ' ')"
  else
    t1=$(date +%s.%N)
    # shellcheck disable=SC2086 # flags are words
    ./pan $panflags -n >pan.log 2>&1 || true
    t2=$(date +%s.%N)
    local errors states depth build search first
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.log | tail -1)
    states=$(awk '/states, stored/ { print $1; exit }' pan.log)
    depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' pan.log | tail -1)
    build=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    search=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }')
    first=$(grep -m1 'assertion violated' pan.log | sed 's/^pan:[0-9]*: //' || true)
    local mem
    mem=$(awk '/total actual memory usage/ { print $1; exit }' pan.log)
    local stats="states=${states:-?} depth=${depth:-?} mem=${mem:-?}MB search=${search}s build=${build}s"
    if [[ -z $errors ]]; then
      detail="no verdict from pan: $(tail -c 300 pan.log | tr '\n' ' ')"
    elif [[ $expect == pass ]]; then
      local missing
      missing=$(comm -23 <(grep -o 'PROBE([0-9]*, "[a-z_]*")' "$model" | sed 's/.*"\(.*\)")/\1/' | sort -u) \
        <(sed -n 's/^probe reached: //p' pan.log | sort -u) | tr '\n' ' ')
      echo "$missing" >probes-missing
      if [[ $errors != 0 ]]; then
        detail="$errors error(s): ${first:-$(grep -m1 '^pan:' pan.log)}; $stats"
      elif grep -q 'Search not completed\|reached -DMEMLIM bound\|out of memory\|max search depth too small' pan.log; then
        detail="search incomplete ($(grep -m1 'Search not completed\|MEMLIM\|out of memory\|depth too small' pan.log)); $stats"
      else
        verdict=ok
        detail="0 errors, complete; $stats"
      fi
    else
      if [[ $errors == 0 ]]; then
        detail="no error found: the model does not catch this old behaviour; $stats"
      elif [[ $first != *"$want"* ]]; then
        detail="caught, but by another property: $first (wanted $want); $stats"
      else
        verdict=ok
        detail="caught: $first; $stats"
        if [[ $mode == traces ]]; then
          # shellcheck disable=SC2086 # flags are words
          spin -t -k sched.pml.trail -T $flags "$model" 2>/dev/null | sed 's/^ *//' | grep '^t=' >trace || true
        fi
      fi
    fi
  fi
  echo "$verdict" >verdict
  printf '%-4s  %-52s  %s\n' "$verdict" "$name" "$detail" >result
  return 0
}

echo "check-sched-model: $mode run of $model, ${#variants[@]} variants, $jobs at a time"
start=$(date +%s)
running=0
for i in "${!variants[@]}"; do
  (run_variant "$i" "${variants[$i]}") &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

status=0
for i in "${!variants[@]}"; do
  if [[ -f $work/$i/result ]]; then
    cat "$work/$i/result"
    [[ -s $work/$i/trace ]] && sed 's/^/        /' "$work/$i/trace"
    [[ $(cat "$work/$i/verdict") == ok ]] || status=1
  else
    echo "FAIL  ${variants[$i]%%|*}  (no result)"
    status=1
  fi
done

# Every probe must be reached by some passing run of the fixed logic: the checks are not
# vacuous (the traces run has no fixed runs).
if [[ $mode != traces ]]; then
  declare -A reached=()
  for i in "${!variants[@]}"; do
    [[ -f $work/$i/pan.log ]] || continue
    while read -r p; do reached[$p]=1; done < <(sed -n 's/^probe reached: //p' "$work/$i/pan.log")
  done
  unreached=()
  while read -r p; do
    [[ -n ${reached[$p]:-} ]] || unreached+=("$p")
  done < <(grep -o 'PROBE([0-9]*, "[a-z_]*")' "$model" | sed 's/.*"\(.*\)")/\1/' | sort -u)
  if ((${#unreached[@]})); then
    echo "FAIL  probes never reached by the fixed runs: ${unreached[*]}"
    status=1
  else
    echo "ok    every probe of the model reached (${#reached[@]})"
  fi
fi

echo "check-sched-model: $( ((status == 0)) && echo passed || echo FAILED ) in $(($(date +%s) - start))s"
exit "$status"
