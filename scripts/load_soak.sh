#!/usr/bin/env bash
# Whole-suite runs of the README's test command beside CPU hogs, one after
# another, until RUNS of them passed or one failed (issue 33's "20
# consecutive runs on a 2-core machine with two CPU hogs"). Each run's log
# is kept; one summary line per run goes to stdout and to SUMMARY.
#   scripts/load_soak.sh [--runs N] [--hogs N] [--logs DIR]
# Defaults: 20 runs, 2 hogs, logs in /tmp/dlcache-soak. Run from the
# repository root after ./scripts/build.sh. Exit status: 0 when every run
# passed, else the failed run's.
set -uo pipefail
runs=20 hogs=2 logs=/tmp/dlcache-soak
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --hogs) hogs=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "load_soak.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
mkdir -p "$logs"
pids=()
for _ in $(seq "$hogs"); do ( while :; do :; done ) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
summary=$logs/SUMMARY
echo "$(date -u +%FT%TZ) $(nproc) cores, $hogs hogs, $runs runs, tree $(git rev-parse --short HEAD)" | tee -a "$summary"
for i in $(seq "$runs"); do
  start=$(date +%s)
  DLCACHE_REQUIRE_LABELS=1 DLCACHE_PROMTOOL_REQUIRED=1 ./scripts/test.sh \
    > "$logs/run_$i.log" 2>&1
  rc=$?
  line=$(grep -E "% tests passed" "$logs/run_$i.log")
  echo "run $i: rc $rc, $(( $(date +%s) - start )) s, load $(cut -d' ' -f1-3 /proc/loadavg): $line" | tee -a "$summary"
  if [ "$rc" -ne 0 ]; then
    grep -E "^\s+[0-9]+ - |\(Failed\)|\(Timeout\)" "$logs/run_$i.log" | tee -a "$summary"
    exit "$rc"
  fi
done
