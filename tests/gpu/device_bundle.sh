#!/bin/bash
# Packs the GPU test and benchmark binaries built here, with the shared
# libraries they need beyond the C/C++ runtime, into a folder that the
# device tool carries to the GPU machine (which has no gRPC/absl/RocksDB).
# The CUDA runtime is linked statically; the driver's libcuda is dlopen'ed
# there.
#   tests/gpu/device_bundle.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=${1:?build dir}
out=${2:?output dir}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
bins=(bench/gpu_upload_bench tests/gpu/upload_engine_test
      tests/gpu/cuda_uploader_test tests/gpu/cuda_uploader_server_test
      tests/gpu/upload_layout_test tests/gpu/e2e_upload_check
      server/dlcached)
for b in "${bins[@]}"; do
  [ -x "$build/$b" ] || { echo "skip $b (not built)"; continue; }
  cp "$build/$b" "$out/bin/"
  strip --strip-debug "$out/bin/$(basename "$b")"
  ldd "$build/$b" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|\
      libgcc_s.so*|libstdc++.so*|libcuda.so*) ;;
      *) [ -e "$out/lib/$(basename "$lib")" ] || cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
# The C ABI library for the Python client, and what it needs.
if [ -e "$build/client/libdlcache_c.so" ]; then
  cp -L "$build/client/libdlcache_c.so" "$out/lib/libdlcache_c.so"
  ldd "$build/client/libdlcache_c.so" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|\
      libgcc_s.so*|libstdc++.so*) ;;
      *) [ -e "$out/lib/$(basename "$lib")" ] || cp -L "$lib" "$out/lib/" ;;
    esac
  done
fi
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
# Abseil's headers, to compile the torch adapter against this machine's
# torch there (the GPU machine has no Abseil).
mkdir -p "$out/include"
cp -r /usr/include/absl "$out/include/"
cp "$(dirname "$0")/run_on_device.sh" "$out/"
du -sh "$out"
