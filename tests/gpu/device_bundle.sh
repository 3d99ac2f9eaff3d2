#!/bin/bash
# Packs the GPU test and benchmark binaries built here, with the shared
# libraries they need beyond the C/C++ runtime, into a folder that the
# device tool carries to the GPU machine (which has no gRPC/absl/RocksDB).
# The CUDA runtime is linked statically; the driver's libcuda is dlopen'ed
# there.
#   tests/gpu/device_bundle.sh BUILD_DIR OUT_DIR    # also writes OUT_DIR.tar.gz
set -euo pipefail
build=${1:?build dir}
out=${2:?output dir}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
bins=(bench/gpu_upload_bench tests/gpu/upload_engine_test
      tests/gpu/cuda_uploader_test tests/gpu/cuda_uploader_server_test
      tests/gpu/upload_layout_test tests/gpu/cuda_c_api_test
      tests/gpu/cuda_restart_test tests/gpu/e2e_upload_check server/dlcached
      tests/gpu/cuda_feed_test tests/gpu/feed_pipeline_test
      client/dlcachectl bench/batch_breakdown bench/scaling_bench
      bench/cluster_bench bench/scale_bench bench/plan_hit_bench
      bench/tier_index_bench bench/peer_hop_bench bench/epoch_plan_bench)
# BASE_BINS=DIR: batch_breakdown, scaling_bench, tier_index_bench,
# cluster_bench, plan_hit_bench, epoch_plan_bench and scale_bench of an
# earlier build go into bin/base/ too, for an A/B in one run
# (bench_on_device.sh, RUN_TIER_INDEX, RUN_CLUSTER, RUN_PLAN_HIT,
# RUN_EPOCH_PLAN, RUN_SCALE with SCALE_AB); they need the same shared
# libraries.
if [ -n "${BASE_BINS:-}" ]; then
  mkdir -p "$out/bin/base"
  for b in batch_breakdown scaling_bench tier_index_bench cluster_bench \
      plan_hit_bench epoch_plan_bench scale_bench; do
    [ -x "$BASE_BINS/$b" ] || continue
    cp "$BASE_BINS/$b" "$out/bin/base/"
    strip --strip-all "$out/bin/base/$b"
  done
fi
for b in "${bins[@]}"; do
  [ -x "$build/$b" ] || { echo "skip $b (not built)"; continue; }
  cp "$build/$b" "$out/bin/"
  strip --strip-all "$out/bin/$(basename "$b")"
  ldd "$build/$b" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|\
      libgcc_s.so*|libstdc++.so*|libcuda.so*) ;;
      *) [ -e "$out/lib/$(basename "$lib")" ] || cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
# The C ABI library for the Python client (and the CUDA uploader's C ABI),
# with what it needs, in pylib/ of its own: Python processes (torch,
# torchvision, nvjpeg) get only these on LD_LIBRARY_PATH, not the server's
# Debian libraries in lib/ (which could shadow the machine's own).
mkdir -p "$out/pylib"
if [ -e "$build/client/libdlcache_c.so" ]; then
  cp -L "$build/client/libdlcache_c.so" "$out/pylib/libdlcache_c.so"
  # The SONAME that programs linked with -ldlcache_c ask for.
  ln -sf libdlcache_c.so "$out/pylib/libdlcache_c.so.0"
  ldd "$build/client/libdlcache_c.so" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|\
      libgcc_s.so*|libstdc++.so*) ;;
      *) [ -e "$out/pylib/$(basename "$lib")" ] || cp -L "$lib" "$out/pylib/" ;;
    esac
  done
fi
strip --strip-unneeded "$out"/lib/*.so* "$out"/pylib/*.so* 2>/dev/null || true
# dlcached and dlcachectl with their libraries, for callers that only take
# a binary path (the Python tests, bench/trainer_feed.py, the torch
# adapter's test driver).
for b in dlcached dlcachectl; do
  [ -x "$out/bin/$b" ] || continue
  cat > "$out/bin/$b.sh" <<WRAP
#!/bin/sh
here=\$(dirname "\$(readlink -f "\$0")")
LD_LIBRARY_PATH="\$here/../lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" \\
  exec "\$here/$b" "\$@"
WRAP
  chmod +x "$out/bin/$b.sh"
done
cp "$(dirname "$0")/run_on_device.sh" "$out/"
du -sh "$out"
# The same as one xz tarball (~47 MB; gzip's was 66 MB once the bundle had
# 21 binaries of ~8.5 MB each, and xz finds what they share), which is what
# to carry to the GPU machine: the device tool carries 64 MiB in all, shared
# by everything in one command. There:
#   tar -xJf .device/gpu.tar.xz -C .device && bash .device/gpu/run_on_device.sh
XZ_OPT="${XZ_OPT:--6 -T2}" tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
ls -la "$out.tar.xz"
