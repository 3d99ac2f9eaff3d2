#!/bin/bash
# Runs on the GPU machine, from the repository root, with the bundle made
# by device_bundle.sh (carried as .device/gpu): every GPU check and the
# trainer-feed benchmark, logs into $OUT, a summary at the end.
#
#   bash .device/gpu/run_on_device.sh
#
# Steps (each with its own time limit; the whole run takes ~6-8 minutes):
#   1. GPU gtests: upload_layout_test upload_engine_test cuda_uploader_test
#      cuda_uploader_server_test cuda_c_api_test cuda_restart_test
#      cuda_feed_test feed_pipeline_test (GTESTS="a b" runs only those)
#                                                          -> gtests.log
#   2. Python: python_gpu_loader_test (GpuLoader: device bytes equal source
#      bytes for many sizes, epochs reshuffle, leases released after the
#      copies, GPU JPEG decode, CPU fallback) and python_client_test
#                                                          -> python_*.log
#   3. bench/trainer_feed.py (stock DataLoader vs dlcache vs GpuLoader vs
#      the pinned ceiling, ResNet-50 loop)  -> trainer_feed.log, trainer_feed.md
#   4. the LibTorch adapter compiled against the machine's torch, its test
#      driver and example loop (tests/gpu/torch_adapter_on_device.sh)
#   5. batch_breakdown and scaling_bench (tests/gpu/bench_on_device.sh)
# Opt-in (verified in earlier runs, slow): RUN_E2E=1 (e2e_upload_check
# against a real dlcached), RUN_UPLOAD_BENCH=1 (gpu_upload_bench, ~5 min),
# RUN_NUMA=1 (tests/gpu/numa_gpu_check.py: each GPU's PCI numa_node vs.
# dlcache's topology code, two ranks on one GPU through a --numa=auto
# dlcached; ~10 s)  -> numa_gpu_check.log
# RUN_TRAIN=1 (tests/gpu/train_resnet_on_device.py, issue 31: ResNet-50
# fed by torchvision's ImageFolder, dlcache.torch.ImageFolder and
# GpuLoader (x, y) on class-coloured JPEGs, accuracy and img/s in one run;
# GpuLoader's hit rate at 2x the arena with and without its plan;
# TRAIN_FLAGS are passed to it; ~5 min)  -> train_resnet.log, train_resnet.md
# RUN_MULTI_RANK=1 (bench/multi_rank_feed.py: 1..N ranks, one process per
# rank, each feeding its GPU through GpuLoader; NUMA placement on/off; the
# stock DataLoader per rank; MULTI_RANK_FLAGS are passed to it)
#   -> multi_rank_feed.log, multi_rank_feed.md
# RUN_CLUSTER=1 (bench/cluster_bench: 3 nodes on loopback, cluster vs
# independent caches, on this machine's quiet cores; CLUSTER_FLAGS are
# passed to it; with bin/base/cluster_bench (BASE_BINS) base and this build
# run alternately, CLUSTER_AB rounds of each, default 2)
#   -> cluster_bench.log, cluster_benchmark.md (+ _base, _N per round)
# RUN_PEER_HOP=1 (bench/peer_hop_bench, issue 11: one peer hop, owner
# write() vs sendfile, CPU per chunk by size; PEER_HOP_FLAGS are passed to
# it; ~40 s)  -> peer_hop_bench.log, peer_hop_benchmark.md
# RUN_SCALE=1 (bench/scale_bench, issue 17: SCALE_ITEMS files, default
# 10000,100000,1300000, generated under a temp dir on this machine's disk,
# the arena in /dev/shm; warm-up, RAM per item, restarts; SCALE_CPUS=0,1
# pins it with taskset like a small node; SCALE_FLAGS are passed to it;
# SCALE_TIMEOUT seconds, default 570; SCALE_AB=1 with bin/base/scale_bench
# runs the base first, then this build)
#   -> scale_bench.log, scale_benchmark.md (+ scale_bench_base.log, _base.md)
# RUN_TIER_INDEX=1 (bench/tier_index_bench, issue 17: the memory tier's
# index alone, heap B/item and ServeHits of 256 random keys at
# TIER_INDEX_ITEMS, default 100000,1000000,1300000; with bin/base/ from
# BASE_BINS, base and branch alternate, two rounds each; ~1-2 min;
# TIER_INDEX_FLAGS are passed to both, e.g. --names=imagenet)
#   -> tier_index.log
# RUN_PLAN_HIT=1 (bench/plan_hit_bench, issue 14: a warm 256-key batch with
# no plan, another session's plan, the reader's own plan (by key, by plan
# position) and a job plan (by key, by plan position); PLAN_HIT_FLAGS
# are passed to it; with bin/base/plan_hit_bench base and this build
# alternate, PLAN_HIT_AB rounds of each, default 2)
#   -> plan_hit_bench.log, plan_hit_bench[_base]_N.md
# RUN_EPOCH_PLAN=1 (bench/epoch_plan_bench, issue 14: EPOCH_PLAN_RUNS, a
# ';'-separated list of flag sets, default "--ranks=8"; each runs with
# bin/base/epoch_plan_bench first when it is there; 240 s each at most)
#   -> epoch_plan_bench.log, epoch_plan[_base]_N.md
# Leave out steps with SKIP_TESTS=1, SKIP_PYTHON=1, SKIP_BENCH=1,
# SKIP_TORCH=1, SKIP_HOTPATH=1;
# TRAINER_FEED_FLAGS are passed to trainer_feed.py.
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
rc=0
note() { echo "$*" | tee -a "$summary"; }
# Binaries get the bundle's libraries; Python only libdlcache_c.so's.
binenv() { LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
pyrun() {
  LD_LIBRARY_PATH="$here/pylib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  DLCACHED="$here/bin/dlcached.sh" DLCACHECTL="$here/bin/dlcachectl.sh" \
  DLCACHE_LIB="$here/pylib/libdlcache_c.so" \
  PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" "$@"
}
start=$(date +%s)
# On a machine with a GPU, tests that skip for want of one are failures.
have_gpu=0
nvidia-smi -L > /dev/null 2>&1 && have_gpu=1
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.total --format=csv
  nproc
  df -h /dev/shm /tmp | cat
  python3 -c 'import torch,sys;print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
  python3 -c 'import torchvision;print("torchvision", torchvision.__version__)' 2>&1 | tail -1
  python3 -c 'import PIL;print("PIL", PIL.__version__)' 2>&1 | tail -1
} 2>&1 | tee "$out/machine.txt"

# 1. GPU gtests.
if [ -z "$SKIP_TESTS" ]; then
  : > "$out/gtests.log"
  for t in ${GTESTS:-upload_layout_test upload_engine_test cuda_uploader_test \
           cuda_uploader_server_test cuda_c_api_test cuda_restart_test \
           cuda_feed_test feed_pipeline_test}; do
    if [ ! -x "$here/bin/$t" ]; then note "MISSING $t (not in the bundle)"; rc=1; continue; fi
    echo "=== $t"
    DLCACHED="$here/bin/dlcached.sh" binenv timeout 180 "$here/bin/$t" \
      --gtest_brief=1 > "$out/test.tmp" 2>&1
    r=$?
    { echo "=== $t (exit $r)"; cat "$out/test.tmp"; } >> "$out/gtests.log"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|Failure" "$out/test.tmp" | head -20
    counts=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test" "$out/test.tmp" | sed -E 's/^\[  ([A-Z]+) *\] ([0-9]+) .*/\2 \1/' | tr '\n' ' ')
    # 77 (tests/testing/gtest_main.cc): every test skipped.
    if [ $r -eq 0 -o $r -eq 77 ] && [ $have_gpu -eq 1 ] && grep -q "no GPU:" "$out/test.tmp"; then
      note "FAIL $t: skipped its GPU tests on a GPU machine: $(grep -m1 -o 'no GPU:.*' "$out/test.tmp")"; rc=1
    elif [ $r -eq 0 ]; then note "ok   $t: $counts"
    elif [ $r -eq 77 ]; then note "SKIP $t (every test skipped): $counts"
    else note "FAIL $t (exit $r): $counts"; rc=1; fi
    rm -f "$out/test.tmp"
  done
fi

# 2. Python tests with the machine's torch.
if [ -z "$SKIP_PYTHON" ]; then
  for t in ${PYTESTS:-python_gpu_loader_test python_client_test}; do
    [ -f "tests/integration/$t.py" ] || continue
    echo "=== $t"
    pyrun timeout 300 python3 "tests/integration/$t.py" > "$out/$t.log" 2>&1
    r=$?
    tail -n 25 "$out/$t.log"
    line=$(grep -E "^(Ran|OK|FAILED)" "$out/$t.log" | tr '\n' ' ')
    # 77: every case passed or skipped, some skipped (listed in the log;
    # on a GPU machine the no-CUDA fallback cases skip).
    if [ $r -eq 0 -o $r -eq 77 ] && [ $have_gpu -eq 1 ] && grep -q "skipped 'no CUDA device" "$out/$t.log"; then
      note "FAIL $t: GPU tests skipped on a GPU machine: $line"; rc=1
    elif [ $r -eq 0 ]; then note "ok   $t: $line"
    elif [ $r -eq 77 ]; then note "ok   $t (some skipped): $line $(grep -A20 '^SKIPPED' "$out/$t.log" | grep '^  ' | tr '\n' ' ')"
    else note "FAIL $t (exit $r): $line"; rc=1; fi
  done
fi

# 3. The trainer-feed benchmark.
if [ -z "$SKIP_BENCH" ]; then
  echo "=== bench/trainer_feed.py"
  pyrun timeout 420 python3 bench/trainer_feed.py --out "$out/trainer_feed.md" \
    ${TRAINER_FEED_FLAGS:-} 2>&1 | tee "$out/trainer_feed.log"
  r=${PIPESTATUS[0]}
  if [ $r -eq 0 ]; then note "ok   trainer_feed.py (table: trainer_feed.md)"
  else note "FAIL trainer_feed.py (exit $r)"; rc=1; fi
fi

# Opt-in: NUMA topology of the GPUs and two ranks through dlcached.
if [ -n "$RUN_NUMA" ]; then
  echo "=== numa_gpu_check.py"
  pyrun timeout 120 python3 tests/gpu/numa_gpu_check.py 2>&1 | tee "$out/numa_gpu_check.log"
  r=${PIPESTATUS[0]}
  if [ $r -eq 0 ]; then note "ok   numa_gpu_check.py"
  elif [ $r -eq 77 ] && [ $have_gpu -eq 0 ]; then note "SKIP numa_gpu_check.py (no GPU)"
  else note "FAIL numa_gpu_check.py (exit $r)"; rc=1; fi
fi

if [ -n "$RUN_TRAIN" ]; then
  echo "=== train_resnet_on_device.py"
  pyrun timeout 540 python3 tests/gpu/train_resnet_on_device.py \
    --out "$out/train_resnet.md" ${TRAIN_FLAGS:-} 2>&1 | tee "$out/train_resnet.log"
  r=${PIPESTATUS[0]}
  if [ $r -eq 0 ]; then note "ok   train_resnet_on_device.py (table: train_resnet.md)"
  elif [ $r -eq 77 ] && [ $have_gpu -eq 0 ]; then note "SKIP train_resnet_on_device.py (no GPU)"
  else note "FAIL train_resnet_on_device.py (exit $r)"; rc=1; fi
fi

if [ -n "$RUN_MULTI_RANK" ]; then
  echo "=== bench/multi_rank_feed.py"
  pyrun timeout 540 python3 bench/multi_rank_feed.py --out "$out/multi_rank_feed.md" \
    $MULTI_RANK_FLAGS > "$out/multi_rank_feed.log" 2>&1
  r=$?
  tail -40 "$out/multi_rank_feed.log"
  if [ $r -eq 0 ]; then note "ok   multi_rank_feed.py"
  else note "FAIL multi_rank_feed.py (exit $r)"; rc=1; fi
fi

# Opt-in: the cluster benchmark (issue 11's peer hop) on quiet cores.
if [ -n "$RUN_CLUSTER" ] && [ -x "$here/bin/cluster_bench" ]; then
  echo "=== cluster_bench"
  if [ -x "$here/bin/base/cluster_bench" ]; then
    # Base and this build alternately (a base build does not know this
    # build's newer flags: --undefok lets it skip them).
    : > "$out/cluster_bench.log"
    for i in $(seq 1 "${CLUSTER_AB:-2}"); do
      for which in base this; do
        bin="$here/bin/cluster_bench"; md="cluster_benchmark_$i.md"
        [ $which = base ] && { bin="$here/bin/base/cluster_bench"; md="cluster_benchmark_base_$i.md"; }
        cdir=$(mktemp -d /tmp/dlc_cluster.XXXXXX)
        echo "--- $which round $i, load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/cluster_bench.log"
        binenv timeout 270 "$bin" --dir="$cdir" --out="$out/$md" \
          --undefok=write_row ${CLUSTER_FLAGS:-} >> "$out/cluster_bench.log" 2>&1
        r=$?
        rm -rf "$cdir"
        if [ $r -eq 0 ]; then note "ok   cluster_bench $which $i"; else note "FAIL cluster_bench $which $i ($r)"; rc=1; fi
      done
    done
    tail -60 "$out/cluster_bench.log"
  else
    cdir=$(mktemp -d /tmp/dlc_cluster.XXXXXX)
    binenv timeout 540 "$here/bin/cluster_bench" --dir="$cdir" \
      --out="$out/cluster_benchmark.md" ${CLUSTER_FLAGS:-} > "$out/cluster_bench.log" 2>&1
    r=$?
    rm -rf "$cdir"
    tail -30 "$out/cluster_bench.log"
    if [ $r -eq 0 ]; then note "ok   cluster_bench"; else note "FAIL cluster_bench ($r)"; rc=1; fi
  fi
fi

# Opt-in: one peer hop, owner write() vs sendfile (issue 11).
if [ -n "$RUN_PEER_HOP" ] && [ -x "$here/bin/peer_hop_bench" ]; then
  echo "=== peer_hop_bench"
  binenv timeout 240 "$here/bin/peer_hop_bench" \
    --out="$out/peer_hop_benchmark.md" ${PEER_HOP_FLAGS:-} > "$out/peer_hop_bench.log" 2>&1
  r=$?
  tail -30 "$out/peer_hop_bench.log"
  if [ $r -eq 0 ]; then note "ok   peer_hop_bench"; else note "FAIL peer_hop_bench ($r)"; rc=1; fi
fi

# Opt-in: the scale benchmark (issue 17): item counts up to ImageNet's.
if [ -n "$RUN_SCALE" ] && [ -x "$here/bin/scale_bench" ]; then
  pin=()
  [ -n "${SCALE_CPUS:-}" ] && pin=(taskset -c "$SCALE_CPUS")
  whiches=this
  [ -n "${SCALE_AB:-}" ] && [ -x "$here/bin/base/scale_bench" ] && whiches="base this"
  for which in $whiches; do
    bin="$here/bin/scale_bench"; sfx=""
    [ $which = base ] && { bin="$here/bin/base/scale_bench"; sfx="_base"; }
    echo "=== scale_bench $which ${SCALE_ITEMS:-10000,100000,1300000}, load $(cut -d' ' -f1-3 /proc/loadavg)"
    sdir=$(mktemp -d /tmp/dlc_scale.XXXXXX)
    binenv timeout "${SCALE_TIMEOUT:-570}" "${pin[@]}" "$bin" \
      --items="${SCALE_ITEMS:-10000,100000,1300000}" --dir="$sdir" \
      --dlcachectl="$here/bin/dlcachectl.sh" --log_info \
      --out="$out/scale_benchmark$sfx.md" ${SCALE_FLAGS:-} > "$out/scale_bench$sfx.log" 2>&1
    r=$?
    rm -rf "$sdir"
    grep -E "start-up|checked in|accounting recovered" "$out/scale_bench$sfx.log" | tail -20
    tail -12 "$out/scale_bench$sfx.log"
    if [ $r -eq 0 ]; then note "ok   scale_bench $which (table: scale_benchmark$sfx.md)"
    else note "FAIL scale_bench $which ($r)"; rc=1; fi
  done
fi

# Opt-in: the memory tier's index alone (issue 17), base/branch A/B.
if [ -n "$RUN_TIER_INDEX" ] && [ -x "$here/bin/tier_index_bench" ]; then
  echo "=== tier_index_bench"
  r=0
  for round in 1 2; do
    for b in "$here/bin/base/tier_index_bench" "$here/bin/tier_index_bench"; do
      [ -x "$b" ] || continue
      echo "--- $b round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
      binenv timeout 200 "$b" \
        --items="${TIER_INDEX_ITEMS:-100000,1000000,1300000}" \
        ${TIER_INDEX_FLAGS:-} || r=1
    done
  done > "$out/tier_index.log" 2>&1
  grep -E "^---|^\| [0-9]" "$out/tier_index.log"
  if [ $r -eq 0 ]; then note "ok   tier_index_bench (tier_index.log)"
  else note "FAIL tier_index_bench"; rc=1; fi
fi

# Opt-in: what an epoch plan costs a warm hit (issue 14) on quiet cores.
if [ -n "$RUN_PLAN_HIT" ] && [ -x "$here/bin/plan_hit_bench" ]; then
  echo "=== plan_hit_bench"
  whiches=this
  [ -x "$here/bin/base/plan_hit_bench" ] && whiches="base this"
  : > "$out/plan_hit_bench.log"
  for i in $(seq 1 "${PLAN_HIT_AB:-2}"); do
    for which in $whiches; do
      bin="$here/bin/plan_hit_bench"; md="plan_hit_bench_$i.md"
      [ $which = base ] && { bin="$here/bin/base/plan_hit_bench"; md="plan_hit_bench_base_$i.md"; }
      pdir=$(mktemp -d /tmp/dlc_plan_hit.XXXXXX)
      echo "--- $which round $i, load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/plan_hit_bench.log"
      binenv timeout 200 "$bin" --dir="$pdir" --out="$out/$md" \
        ${PLAN_HIT_FLAGS:-} >> "$out/plan_hit_bench.log" 2>&1
      r=$?
      rm -rf "$pdir"
      if [ $r -eq 0 ]; then note "ok   plan_hit_bench $which $i"; else note "FAIL plan_hit_bench $which $i ($r)"; rc=1; fi
    done
  done
  grep -E "^---|^\| " "$out/plan_hit_bench.log" | tail -40
fi

# Opt-in: epoch plans' hit rates and epoch times (issue 14), base first.
if [ -n "$RUN_EPOCH_PLAN" ] && [ -x "$here/bin/epoch_plan_bench" ]; then
  echo "=== epoch_plan_bench"
  : > "$out/epoch_plan_bench.log"
  i=0
  IFS=';' read -r -a eruns <<< "${EPOCH_PLAN_RUNS:---ranks=8}"
  for flags in "${eruns[@]}"; do
    i=$((i + 1))
    for which in base this; do
      bin="$here/bin/epoch_plan_bench"; md="epoch_plan_$i.md"
      [ $which = base ] && { bin="$here/bin/base/epoch_plan_bench"; md="epoch_plan_base_$i.md"; }
      [ -x "$bin" ] || continue
      echo "--- $which run $i ($flags), load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/epoch_plan_bench.log"
      # shellcheck disable=SC2086
      binenv timeout 240 "$bin" --out="$out/$md" $flags >> "$out/epoch_plan_bench.log" 2>&1
      r=$?
      if [ $r -eq 0 ]; then note "ok   epoch_plan_bench $which $i"; else note "FAIL epoch_plan_bench $which $i ($r)"; rc=1; fi
    done
  done
  tail -60 "$out/epoch_plan_bench.log"
fi

# Opt-in: end to end through a real dlcached.
if [ -n "$RUN_E2E" ] && [ -x "$here/bin/e2e_upload_check" ]; then
  echo "=== e2e_upload_check"
  e2e=$(mktemp -d /dev/shm/dlc_e2e.XXXXXX)
  mkdir -p "$e2e/src" "$e2e/arena"
  binenv "$here/bin/dlcached" --source="$e2e/src" --socket="$e2e/d.sock" \
    --shm_dir="$e2e/arena" --arena_bytes=4GiB --metrics_address= \
    --keep_arena=false > "$out/dlcached_e2e.log" 2>&1 &
  srv=$!
  binenv timeout 240 "$here/bin/e2e_upload_check" --socket="$e2e/d.sock" \
    --source="$e2e/src" ${E2E_FLAGS:-} 2>&1 | tee "$out/e2e_upload_check.log"
  r=${PIPESTATUS[0]}
  kill $srv; wait $srv 2>/dev/null
  rm -rf "$e2e"
  if [ $r -eq 0 ]; then note "ok   e2e_upload_check"; else note "FAIL e2e_upload_check ($r)"; rc=1; fi
fi

# Opt-in: the upload benchmark (arena and files in /dev/shm when it is
# large enough, else memfd and /tmp).
if [ -n "$RUN_UPLOAD_BENCH" ] && [ -x "$here/bin/gpu_upload_bench" ]; then
  dir=/dev/shm
  free_kb=$(df -k --output=avail /dev/shm | tail -1)
  if [ "${free_kb:-0}" -lt 6000000 ]; then dir=memfd; fi
  echo "=== gpu_upload_bench --dir=$dir"
  binenv timeout 420 "$here/bin/gpu_upload_bench" --dir=$dir \
    --out="$out/gpu_benchmark_table.md" 2>&1 | tee "$out/gpu_upload_bench.log"
  r=${PIPESTATUS[0]}
  if [ $r -eq 0 ]; then note "ok   gpu_upload_bench"; else note "FAIL gpu_upload_bench ($r)"; rc=1; fi
fi

# 4. The LibTorch adapter built here against this machine's torch, with
#    only libdlcache_c.so carried: its test driver and the example loop.
if [ -z "$SKIP_TORCH" ]; then
  echo "=== torch adapter vs. the machine's torch"
  bash tests/gpu/torch_adapter_on_device.sh "$here" "$out" > "$out/torch_adapter.log" 2>&1
  r=$?
  cat "$out/torch_adapter.log"
  if [ $r -eq 0 ]; then note "ok   torch adapter: $(grep -E 'passed,' "$out/torch_adapter.log" | tail -1)"
  else note "FAIL torch adapter (exit $r): $(grep -E 'FAIL|passed,' "$out/torch_adapter.log" | tr '\n' ' ')"; rc=1; fi
fi

# 5. CPU hot-path benchmarks on this machine's cores.
if [ -z "$SKIP_HOTPATH" ]; then
  echo "=== hot path: batch_breakdown, scaling_bench"
  if bash tests/gpu/bench_on_device.sh "$here" "$out"; then note "ok   hot-path benches"
  else note "FAIL hot-path benches"; rc=1; fi
fi

echo
echo "===== summary ($(( $(date +%s) - start )) s) ====="
cat "$summary"
[ -f "$out/trainer_feed.md" ] && { echo; cat "$out/trainer_feed.md"; }
exit $rc
