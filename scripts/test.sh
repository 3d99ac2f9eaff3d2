#!/usr/bin/env bash
# Runs the whole test suite (GPU tests skip without a device).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-2}" "$@"
