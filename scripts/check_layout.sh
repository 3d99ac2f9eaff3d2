#!/usr/bin/env bash
# The layout rules of issue 36, checked in CI: no server source file over
# 700 lines (split by concern, as RocksDB splits DBImpl), and the
# transports do not reach past the engine to the plan registry.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
long=$(wc -l server/*/*.cc server/*.cc | awk '$1 > 700 && $2 != "total"')
if [ -n "$long" ]; then
  echo "check_layout: server files over 700 lines (split them by concern):"
  echo "$long"
  status=1
fi
if grep -n 'PlanRegistry' server/rpc/*.cc; then
  echo "check_layout: server/rpc/ uses PlanRegistry; plans are the engine's"
  status=1
fi
[ "$status" = 0 ] && echo "check_layout: ok"
exit "$status"
