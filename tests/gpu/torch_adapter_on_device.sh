#!/bin/bash
# Runs on the GPU machine (from run_on_device.sh, repository root): builds
# the LibTorch adapter, its test driver and the example training loop
# against the machine's own torch, carrying only libdlcache_c.so from the
# bundle, then runs the driver (GPU checks required) and the example on
# generated raw 3x224x224 samples.
#   bash tests/gpu/torch_adapter_on_device.sh BUNDLE_DIR OUT_DIR
# Exit 0 when everything passed.
set -uo pipefail
here=${1:?bundle dir}
out=${2:?out dir}
bdir=$(mktemp -d /tmp/dlc-torchbuild-XXXXXX)
rc=0
if ! timeout 400 bash client/torch/examples/build_with_pip_torch.sh \
    "$here/pylib" "$bdir" > "$out/torch_adapter_build.log" 2>&1; then
  echo "FAIL torch adapter build (see torch_adapter_build.log)"
  tail -20 "$out/torch_adapter_build.log"
  exit 1
fi
echo "ok   torch adapter built against $(python3 -c 'import torch;print("torch", torch.__version__)')"
LD_LIBRARY_PATH="$here/pylib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  DLCACHED="$here/bin/dlcached.sh" DLCACHECTL="$here/bin/dlcachectl.sh" \
  timeout 300 "$bdir/torch_adapter_test" --require_gpu \
  > "$out/torch_adapter_test.log" 2>&1
r=$?
grep -E "^(ok|FAIL|skip) |passed," "$out/torch_adapter_test.log"
if [ $r -ne 0 ]; then
  echo "FAIL torch_adapter_test (exit $r); the log's end:"
  tail -40 "$out/torch_adapter_test.log"
  rc=1
fi

[ -n "${SKIP_TORCH_EXAMPLE:-}" ] && { rm -rf "$bdir"; exit $rc; }
# The example on 4096 raw samples (617 MB), served by a real dlcached.
data=$(mktemp -d /tmp/dlc-torchdata-XXXXXX)
shm=$(mktemp -d /dev/shm/dlc-torchex-XXXXXX)
python3 - "$data" <<'PY'
import os, sys
root = sys.argv[1]
os.makedirs(root + "/src")
blob = os.urandom(150528 * 64)
with open(root + "/keys.txt", "w") as keys:
    for i in range(4096):
        name = "s%05d.raw" % i
        j = (i % 64) * 150528
        with open(root + "/src/" + name, "wb") as f:
            f.write(blob[j:j + 150528])
        keys.write(name + "\n")
PY
"$here/bin/dlcached.sh" --socket="$data/s.sock" --shm_dir="$shm" \
  --arena_bytes=2GiB --dataset=default="$data/src" --metrics_address= \
  --keep_arena=false > "$out/torch_example_dlcached.log" 2>&1 &
srv=$!
for _ in $(seq 1 300); do [ -S "$data/s.sock" ] && break; sleep 0.1; done
"$here/bin/dlcachectl.sh" --socket "$data/s.sock" warmup default > /dev/null 2>&1
for mode in "--no_train" ""; do
  LD_LIBRARY_PATH="$here/pylib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    timeout 300 "$bdir/dlcache_torch_train" --socket "$data/s.sock" \
    --keys "$data/keys.txt" --device cuda:0 --batch 256 --epochs 11 \
    --prefetch 3 $mode >> "$out/torch_example.log" 2>&1 || rc=1
done
cat "$out/torch_example.log"
kill "$srv"; wait "$srv"
rm -rf "$data" "$shm" "$bdir"
exit $rc
