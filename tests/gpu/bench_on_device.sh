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
if [ -x "$here/bin/batch_breakdown" ]; then
  binenv timeout 180 "$here/bin/batch_breakdown" --files=8192 --iterations=5000 \
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
