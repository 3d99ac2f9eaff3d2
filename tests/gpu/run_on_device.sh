#!/bin/bash
# Runs on the GPU machine, from the bundle made by device_bundle.sh:
# the GPU tests, then the upload benchmark. Results go to $OUT.
#   .device/gpu/run_on_device.sh [gpu_upload_bench flags]
# SKIP_TESTS, SKIP_PYTHON, SKIP_BENCH, SKIP_TORCH (=1) leave out the GPU
# tests, the Python client test, the benchmark, the torch adapter compile;
# E2E_FLAGS are passed to e2e_upload_check.
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.sm --format=csv
df -h /dev/shm /tmp | cat
rc=0
for t in upload_layout_test upload_engine_test cuda_uploader_test cuda_uploader_server_test; do
  [ -x "$here/bin/$t" ] && [ -z "$SKIP_TESTS" ] || continue
  echo "=== $t"
  timeout 180 "$here/bin/$t" --gtest_brief=1 > "$out/test.tmp" 2>&1
  r=$?
  { echo "=== $t (exit $r)"; cat "$out/test.tmp"; } >> "$out/tests.log"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED|Failure" "$out/test.tmp" | head -20
  rm -f "$out/test.tmp"
  [ $r -eq 0 ] || rc=1
done
# The Python client with the machine's torch (its torch tests skip here).
if [ -x "$here/bin/dlcached" ] && [ -z "$SKIP_PYTHON" ]; then
  echo "=== python_client_test"
  DLCACHED="$here/bin/dlcached" DLCACHE_LIB="$here/lib/libdlcache_c.so" \
    PYTHONPATH="$PWD/client/python" timeout 240 \
    python3 tests/integration/python_client_test.py > "$out/python.log" 2>&1
  r=$?
  tail -n 30 "$out/python.log"
  [ $r -eq 0 ] || rc=1
fi
# End to end through a real dlcached on this machine.
if [ -x "$here/bin/dlcached" ] && [ -x "$here/bin/e2e_upload_check" ]; then
  echo "=== e2e_upload_check"
  e2e=$(mktemp -d /dev/shm/dlc_e2e.XXXXXX)
  mkdir -p "$e2e/src" "$e2e/arena"
  "$here/bin/dlcached" --source="$e2e/src" --socket="$e2e/d.sock" \
    --shm_dir="$e2e/arena" --arena_bytes=4GiB --metrics_address= \
    --keep_arena=false > "$out/dlcached_e2e.tmp" 2>&1 &
  srv=$!
  timeout 240 "$here/bin/e2e_upload_check" --socket="$e2e/d.sock" \
    --source="$e2e/src" ${E2E_FLAGS:-} 2>&1 | tee "$out/e2e_upload_check.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  kill $srv; wait $srv 2>/dev/null
  { echo "=== dlcached log"; cat "$out/dlcached_e2e.tmp"; } >> "$out/e2e_upload_check.log"
  rm -f "$out/dlcached_e2e.tmp"
  rm -rf "$e2e"
fi
# The arena and the source files both go to /dev/shm when it is large
# enough, else the arena to memfd and the files to /tmp.
[ -n "$SKIP_BENCH" ] && exit $rc
dir=/dev/shm
free_kb=$(df -k --output=avail /dev/shm | tail -1)
if [ "${free_kb:-0}" -lt 6000000 ]; then dir=memfd; fi
echo "=== gpu_upload_bench --dir=$dir"
timeout 420 "$here/bin/gpu_upload_bench" --dir=$dir --out="$out/gpu_benchmark_table.md" "$@" 2>&1 | tee "$out/gpu_upload_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
# The torch adapter compiles against this machine's torch (CUDA build).
if [ -d "$here/include/absl" ] && [ -z "$SKIP_TORCH" ]; then
  echo "=== torch adapter vs. the machine's torch"
  tdir=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
  abi=$(python3 -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  python3 -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
  pids=()
  for f in client/torch/tensors.cc client/torch/cache_dataset.cc; do
    timeout 200 g++ -std=c++20 -fsyntax-only -D_GLIBCXX_USE_CXX11_ABI=$abi \
      -I"$tdir/include" -I"$tdir/include/torch/csrc/api/include" \
      -I"$here/include" -Iclient/include -Iclient/cuda/include \
      -Iclient/torch/include -I. "$f" > "$out/torch_$(basename $f .cc).tmp" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    if wait ${pids[$i]}; then echo "compiles: ${i}"; else echo "FAILED: ${i}"; rc=1; fi
  done
  cat "$out"/torch_*.tmp > "$out/torch_compile.log"; rm -f "$out"/torch_*.tmp
  head -c 3000 "$out/torch_compile.log"
fi
exit $rc
