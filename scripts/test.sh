#!/usr/bin/env bash
# Runs the whole test suite (GPU tests skip without a device). Writes
# ctest's JUnit report to $BUILD_DIR/ctest_junit.xml. With
# DLCACHE_REQUIRE_LABELS=1 (CI) it then checks that every suite CI must run
# ran and passed (scripts/check_required_tests.sh, tests/required_labels.txt);
# the exit code is ctest's, or the check's when ctest passed.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
junit="$PWD/$BUILD_DIR/ctest_junit.xml"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-2}" \
  --output-junit "$junit" "$@"
rc=$?
if [ "${DLCACHE_REQUIRE_LABELS:-0}" = 1 ]; then
  if ! ./scripts/check_required_tests.sh "$BUILD_DIR" "$junit"; then
    [ "$rc" -eq 0 ] && rc=1
  fi
fi
exit $rc
