#!/usr/bin/env bash
# One command from a fresh clone to a running, warmed cache:
# installs dependencies, builds, makes an example dataset (or uses $DATA_DIR),
# starts dlcached on it, warms it with a progress bar, prints status and
# stats, and keeps the server in the foreground (Ctrl-C stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

if [ "${SKIP_INSTALL:-0}" != 1 ]; then ./scripts/install_deps.sh; fi
./scripts/build.sh

DATA_DIR="${DATA_DIR:-$ROOT/example-data}"
RUN_DIR="${RUN_DIR:-$ROOT/.run}"
SOCKET="$RUN_DIR/dlcached.sock"
mkdir -p "$RUN_DIR"
if [ ! -d "$DATA_DIR" ]; then
  echo "== making an example dataset in $DATA_DIR (2000 files of ~110 KB, 8 of 6 MiB)"
  mkdir -p "$DATA_DIR/train" "$DATA_DIR/shards"
  for i in $(seq 0 1999); do
    head -c $((100000 + RANDOM % 20000)) /dev/urandom > "$DATA_DIR/train/img_$i.jpg"
  done
  for i in $(seq 0 7); do
    head -c $((6 * 1024 * 1024)) /dev/urandom > "$DATA_DIR/shards/shard_$i.tar"
  done
fi

echo "== starting dlcached on $DATA_DIR (socket $SOCKET)"
./build/server/dlcached --source="$DATA_DIR" --socket="$SOCKET" \
  --shm_dir="/dev/shm/dlcache-$(id -u)" --arena_bytes="${ARENA:-1GiB}" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT INT TERM

CTL=(./build/client/dlcachectl --socket="$SOCKET")
for _ in $(seq 1 100); do
  if "${CTL[@]}" status >/dev/null 2>&1; then break; fi
  if ! kill -0 $SERVER 2>/dev/null; then echo "dlcached failed to start"; exit 1; fi
  sleep 0.1
done

echo "== warming dataset 'default'"
"${CTL[@]}" warmup default
"${CTL[@]}" status
"${CTL[@]}" stats
echo "== dlcached is serving on $SOCKET; Ctrl-C stops it."
echo "   try: ${CTL[*]} stats    (in another shell)"
wait $SERVER
