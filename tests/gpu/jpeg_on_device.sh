#!/bin/bash
# Issue 37 on the GPU machine, one command: the JPEG pipeline check
# (tests/gpu/jpeg_pipeline_on_device.py), then the feed benchmark
# (bench/jpeg_pipeline_bench.py), with the device bundle of
# tests/gpu/device_bundle.sh. Run from the repository root:
#   tests/gpu/jpeg_on_device.sh [BUNDLE_DIR]        # default .device/gpu
# Outputs (logs, markdown tables, nvidia-smi utilisation samples with the
# JPEG engines' row) go to $OUT (default /tmp/jpeg_on_device). Limits:
# CHECK_TIMEOUT (default 150 s), BENCH_TIMEOUT (300 s); BENCH_ARGS are
# passed to the benchmark (e.g. --quick).
set -uo pipefail
b=${1:-.device/gpu}
out=${OUT:-/tmp/jpeg_on_device}
mkdir -p "$out"
export LD_LIBRARY_PATH=$b/pylib
export DLCACHED=$b/bin/dlcached.sh DLCACHECTL=$b/bin/dlcachectl.sh
export DLCACHE_LIB=$b/pylib/libdlcache_c.so
export PYTHONPATH=client/python:tests/integration
py=${PYTHON:-python3}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nproc; "$py" -c 'import torch, torchvision; print(torch.__version__,
torchvision.__version__)'; } > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

timeout "${CHECK_TIMEOUT:-150}" "$py" tests/gpu/jpeg_pipeline_on_device.py \
  --out "$out/jpeg_check.md" > "$out/jpeg_check.log" 2>&1
rc_check=$?
grep -E "^(OK|FAIL|INFO)|checks|SKIPPED" "$out/jpeg_check.log"

# GPU utilisation rows (GPU, JPEG engines) every 2 s during the benchmark.
( while true; do
    date +%T; nvidia-smi -q -d UTILIZATION | grep -iE "^ +(gpu|jpeg|decoder)"
    sleep 2
  done ) > "$out/utilization.log" 2>&1 &
sampler=$!
# shellcheck disable=SC2086
timeout "${BENCH_TIMEOUT:-300}" "$py" bench/jpeg_pipeline_bench.py \
  ${BENCH_ARGS:-} --out "$out/jpeg_bench.md" > "$out/jpeg_bench.log" 2>&1
rc_bench=$?
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
tail -n 45 "$out/jpeg_bench.log"
echo "JPEG engine utilisation samples (nonzero):"
grep -iE "jpeg +: +[1-9]" "$out/utilization.log" | sort | uniq -c | tail -5
echo "check rc $rc_check, bench rc $rc_bench (outputs in $out)"
[ "$rc_check" -eq 0 ] && [ "$rc_bench" -eq 0 ]
