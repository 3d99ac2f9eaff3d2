#!/usr/bin/env bash
# ctest install_consumer: installs the build tree BUILD into a temporary
# prefix (`cmake --install`, every component), then configures and builds
# tests/install_consumer/ against it with find_package(dlcache), and runs
# what it built: consumer_cxx (dlcache::client) reads a file through the
# installed dlcached, consumer_c (dlcache::c) checks the C ABI's version.
#   run.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
# The guarded temp name scheme of tests/testing/temp_dir (dlc-PID-XXXXXX).
tmp="$(mktemp -d "${TMPDIR:-/tmp}/dlc-$$-XXXXXX")"
shm="$(mktemp -d "/dev/shm/dlc-$$-XXXXXX")"
server=""
cleanup() {
  if [[ -n "$server" ]]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$tmp" "$shm"
}
trap cleanup EXIT

prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
for f in bin/dlcached bin/dlcachectl lib/libdlcache_c.so \
         lib/libdlcache_client.a lib/libdlcache_c.a \
         include/dlcache/client.h include/dlcache/dlcache_c.h \
         include/dlcache/version.h lib/cmake/dlcache/dlcacheConfig.cmake \
         lib/cmake/dlcache/dlcacheConfigVersion.cmake; do
  [[ -e "$prefix/$f" ]] || { echo "not installed: $f" >&2; exit 1; }
done
"$prefix/bin/dlcached" --version
"$prefix/bin/dlcachectl" --version

cmake -S "$here" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" ||
  { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/build" >"$tmp/build.log" ||
  { cat "$tmp/build.log"; exit 1; }

mkdir -p "$tmp/src/d"
head -c 100000 /dev/urandom >"$tmp/src/d/a.bin"
"$prefix/bin/dlcached" --socket="$tmp/d.sock" --grpc_data_socket=none \
  --shm_dir="$shm/arena" --arena_bytes=16MiB --segment_bytes=16MiB \
  --chunk_size=1MiB --dataset=ds="$tmp/src" --metrics_address= \
  --keep_arena=false >"$tmp/dlcached.log" 2>&1 &
server=$!
# A client fails at once on a missing socket file: wait for it (the data
# socket comes up last), at most 30 s, and for the server not to have died.
for _ in $(seq 300); do
  [[ -S "$tmp/d.sock" ]] && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/dlcached.log"; exit 1; }
  sleep 0.1
done
[[ -S "$tmp/d.sock" ]] || { echo "dlcached did not serve" >&2; cat "$tmp/dlcached.log"; exit 1; }
"$tmp/build/consumer_cxx" "$tmp/d.sock" ds d/a.bin "$tmp/src/d/a.bin" ||
  { cat "$tmp/dlcached.log"; exit 1; }
LD_LIBRARY_PATH="$prefix/lib" "$tmp/build/consumer_c" "$tmp/nobody.sock"
echo "install_consumer: passed"
