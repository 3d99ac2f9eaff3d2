#!/bin/bash
# Runs on the GPU machine (from run_on_device.sh): the CPU-side hot-path
# benchmarks of issue 10 on its 16 cores, from the bundle's binaries:
#   batch_breakdown  one warm 256-key GetBatch, stage by stage
#   scaling_bench    one dlcached serving 1..14 client processes vs read()
#   bash tests/gpu/bench_on_device.sh BUNDLE_DIR OUT_DIR
set -uo pipefail
here=${1:?bundle dir}
out=${2:?out dir}
rc=0
binenv() { LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
# A/B (bin/base/ from device_bundle.sh's BASE_BINS): the earlier build and
# this one alternately on the same machine, so that the machine's own
# variation (p50 100-150 us between fresh machines) does not read as a
# change: batch_breakdown 3 times each, scaling_bench at 1/8/14 clients.
if [ -x "$here/bin/base/batch_breakdown" ]; then
  for round in 1 2 3; do
    for v in base new; do
      b="$here/bin/batch_breakdown"
      [ $v = base ] && b="$here/bin/base/batch_breakdown"
      binenv timeout 120 "$b" --files=8192 --iterations=5000 \
        --out="$out/ab_breakdown_${v}_$round.md" > /dev/null 2>&1 || rc=1
      echo "A/B round $round $v: $(grep -m1 'End to end p50' "$out/ab_breakdown_${v}_$round.md")"
    done
  done | tee "$out/ab_summary.txt"
  for v in base new; do
    b="$here/bin/scaling_bench"
    [ $v = base ] && b="$here/bin/base/scaling_bench"
    echo "=== A/B scaling_bench $v" | tee -a "$out/ab_summary.txt"
    binenv timeout 200 "$b" --clients=1,8,14 --event_loops=4 --seconds=3 \
      --files=16384 --out="$out/ab_scaling_$v.md" > /dev/null 2>&1 || rc=1
    grep -E '^\| *(1|8|14) \|' "$out/ab_scaling_$v.md" | tee -a "$out/ab_summary.txt"
  done
fi
if [ -x "$here/bin/batch_breakdown" ]; then
  binenv timeout 180 "$here/bin/batch_breakdown" --files=8192 --iterations=5000 \
    --lookup_threads=1,2,4,8,14 --reply_spin_us=150 \
    --out="$out/batch_breakdown.md" > "$out/batch_breakdown.log" 2>&1 || rc=1
  cat "$out/batch_breakdown.log"
fi
if [ -x "$here/bin/scaling_bench" ]; then
  binenv timeout 300 "$here/bin/scaling_bench" --clients=1,2,4,8,14 --event_loops=2,4,8 \
    --seconds=3 --files=16384 --out="$out/scaling_bench.md" \
    > "$out/scaling_bench.log" 2>&1 || rc=1
  cat "$out/scaling_bench.md" 2>/dev/null || tail -20 "$out/scaling_bench.log"
fi
exit $rc
