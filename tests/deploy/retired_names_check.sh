#!/usr/bin/env bash
# deploy/ must describe the code of today: the data path is no gRPC socket
# ("(gRPC)" next to the data socket) and there is no separate fd socket
# (dlcached.sock.fds) any more; segment fds travel on the data socket.
# Prints the offending lines and fails when any is left.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  hits="$(git -C "$root" grep -n 'sock.fds\|(gRPC)' -- deploy/)"
else
  hits="$(grep -rn 'sock.fds\|(gRPC)' "$root/deploy")"
fi
if [[ -n "$hits" ]]; then
  echo "retired socket names in deploy/:"
  echo "$hits"
  exit 1
fi
echo "deploy/: no retired socket names"
