#!/usr/bin/env bash
# Model-checks lock-core's lock protocol with spin (lock-core/model/lock.pml; see
# lock-core/model/README.md). Every run is an exhaustive search (-DCOLLAPSE, lossless; no bitstate
# and no hash compaction), so every verdict the CI relies on is exact.
#
#   scripts/check-model.sh           the CI check (a few minutes on 2 cores)
#   scripts/check-model.sh --long    the longer run at larger bounds (see README.md for its cost)
#   scripts/check-model.sh --traces  the old variants only, each with its shortest counterexample
#
# Fails unless the fixed logic passes every configuration (no error, search complete, every
# probe of the model reached) and each old behaviour (-DOLD_...) breaks the property the
# issue's trace breaks. Prints one line per variant.
#
# Environment: MODEL_JOBS (parallel builds and searches, default 2), MODEL_CFLAGS (default
# -O2), MODEL_MEMLIM (MB per search; default 3072, 20000 with --long), MODEL_KEEP=1 (keep the
# build directory, with each run's pan output and any counterexample trail).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
model="$root/lock-core/model/lock.pml"
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
    echo "check-model: $tool not found (Debian: apt-get install spin gcc)" >&2
    exit 1
  fi
done
[[ -f $model ]] || {
  echo "check-model: $model not found" >&2
  exit 1
}

jobs=${MODEL_JOBS:-2}
cflags=${MODEL_CFLAGS:--O2}
if [[ $mode == long ]]; then
  memlim=${MODEL_MEMLIM:-20000}
else
  memlim=${MODEL_MEMLIM:-3072}
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/check-model.XXXXXX")
if [[ ${MODEL_KEEP:-0} == 1 ]]; then
  echo "check-model: build directory $work (kept)"
else
  trap 'rm -rf "$work"' EXIT
fi

# name | expect | spin -D flags | for "fail": the assertion the counterexample must violate |
# extra gcc flags. The searches of the bug settings are tiny, their build is their cost: they
# skip pan's array bound checks (a third of the build time); the general runs (cfg6, cfg7),
# which go through every probe of the same code, keep them.
old_variants=(
  "OLD_QUEUED_SINCE (bug 1)|fail|-DCFG=1 -DOLD_QUEUED_SINCE|(holders<=1)|-DNOBOUNDCHECK"
  "OLD_NO_POST_RELEASE_CLEANUP (bug 2)|fail|-DCFG=2 -DOLD_NO_POST_RELEASE_CLEANUP|!(orphan)|-DNOBOUNDCHECK"
  "OLD_FOUND_IS_CERTAIN (bug 3)|fail|-DCFG=3 -DOLD_FOUND_IS_CERTAIN|!(orphan)|-DNOBOUNDCHECK"
  "OLD_UNMARKED_HANDOFF (bug 4)|fail|-DCFG=4 -DOLD_UNMARKED_HANDOFF|!(freed_with_live_waiter)|-DNOBOUNDCHECK"
  "OLD_LIST_TTL (bug 5)|fail|-DCFG=5 -DOLD_LIST_TTL|!(no_ttl)|-DNOBOUNDCHECK"
  "OLD_CLEANUP_REPLY_DEADLINE (cex7)|fail|-DCFG=8 -DOLD_CLEANUP_REPLY_DEADLINE|!(orphan)|-DNOBOUNDCHECK"
  "OLD_ACCEPT_MESSAGE (hand-off after a restart)|fail|-DCFG=9 -DOLD_ACCEPT_MESSAGE|(holders<=1)|-DNOBOUNDCHECK"
)
panflags="-m10000"
if [[ $mode == ci ]]; then
  variants=(
    "fixed cfg6 (2 clients, any 2 faults)|pass|-DCFG=6 -DPROBES"
    "fixed cfg7 (3 clients, any 2 faults)|pass|-DCFG=7 -DPROBES"
    "fixed cfg1 (bug 1 setting)|pass|-DCFG=1 -DPROBES||-DNOBOUNDCHECK"
    "fixed cfg2 (bug 2 setting)|pass|-DCFG=2 -DPROBES||-DNOBOUNDCHECK"
    "fixed cfg3 (bug 3 setting)|pass|-DCFG=3 -DPROBES||-DNOBOUNDCHECK"
    "fixed cfg4 (bug 4 setting)|pass|-DCFG=4 -DPROBES||-DNOBOUNDCHECK"
    "fixed cfg5 (bug 5 setting)|pass|-DCFG=5 -DPROBES||-DNOBOUNDCHECK"
    "fixed cfg8 (cex7 setting)|pass|-DCFG=8 -DPROBES||-DNOBOUNDCHECK"
    "fixed cfg9 (restart setting)|pass|-DCFG=9 -DPROBES||-DNOBOUNDCHECK"
    "${old_variants[@]}"
  )
elif [[ $mode == traces ]]; then
  # -DREACH with -i: iteratively shortened, the shortest counterexample within the bounds
  variants=("${old_variants[@]/%/ -DREACH}")
  panflags="-m200 -i"
else
  variants=(
    "fixed cfg6 long (2 clients, any 3 faults, TMAX=5)|pass|-DCFG=6 -DB_FAULTS=3 -DTMAX=5 -DPROBES"
    "fixed cfg7 long (3 clients, any 3 faults, TMAX=5)|pass|-DCFG=7 -DB_FAULTS=3 -DPROBES"
    "fixed cfg6 long (lease 4 > ticket 3, TMAX=6)|pass|-DCFG=6 -DL=4 -DTMAX=6 -DPROBES"
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
    local stats="states=${states:-?} depth=${depth:-?} search=${search}s build=${build}s"
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
          spin -t -k lock.pml.trail -T $flags "$model" 2>/dev/null | grep '^t=' >trace || true
        fi
      fi
    fi
  fi
  echo "$verdict" >verdict
  printf '%-4s  %-52s  %s\n' "$verdict" "$name" "$detail" >result
  return 0
}

echo "check-model: $mode run of $model, ${#variants[@]} variants, $jobs at a time"
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

echo "check-model: $( ((status == 0)) && echo passed || echo FAILED ) in $(($(date +%s) - start))s"
exit "$status"
