#!/usr/bin/env bash
# Configures and builds dlcache into ./build (RelWithDebInfo).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"
# The Abseil files that the self-contained libdlcache_c.so compiles itself
# (client/CMakeLists.txt); without them (offline) the library links the
# shared Abseil and scripts/build_wheel.sh refuses to package it.
scripts/fetch_absl_pic_sources.sh "$BUILD_DIR/_deps/abseil" ||
  echo "warning: no Abseil sources: libdlcache_c.so will not be self-contained" >&2
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
