#!/usr/bin/env bash
# Clang's lock analysis over the project's own code (issue 36): every
# translation unit of server/, client/ and common/ in the build's compile
# database is parsed (-fsyntax-only, no code generated) with
# -Wthread-safety as an error, so that ABSL_GUARDED_BY / LOCKS_REQUIRED
# are checked by the compiler. GCC builds the binaries; clang only reads.
#
#   scripts/check_thread_safety.sh [BUILD_DIR]     (default: build)
#
# Exits non-zero and prints the findings if any unit has one.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-${BUILD_DIR:-build}}"
CLANG="${CLANG:-clang++}"
JOBS="${JOBS:-$(nproc)}"
DB="$BUILD_DIR/compile_commands.json"
if [ ! -f "$DB" ]; then
  echo "check_thread_safety: no $DB (configure with scripts/build.sh first)" >&2
  exit 2
fi
command -v "$CLANG" >/dev/null || { echo "check_thread_safety: $CLANG not found" >&2; exit 2; }
ROOT="$PWD"
LIST="$(mktemp)"
trap 'rm -f "$LIST"' EXIT
# One line per unit: the directory, then the clang command (shell-quoted).
python3 - "$DB" "$ROOT" "$CLANG" > "$LIST" <<'PY'
import json, os, shlex, sys
db, root, clang = sys.argv[1], sys.argv[2], sys.argv[3]
seen = set()
for e in json.load(open(db)):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    rel = os.path.relpath(f, root)
    if not rel.startswith(("server/", "client/", "common/")):
        continue
    # Debian's libtorch 1.13 headers do not parse with clang 14; the
    # LibTorch adapter holds no lock of its own.
    if rel.startswith("client/torch/"):
        continue
    if not rel.endswith(".cc") or f in seen:
        continue
    seen.add(f)
    args = shlex.split(e["command"]) if "command" in e else e["arguments"]
    out = [clang]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith("-W") or a == "-w":
            continue
        out.append(a)
    out += ["-fsyntax-only", "-Wno-everything", "-Wthread-safety",
            "-Werror=thread-safety"]
    print(e["directory"] + "\t" + shlex.join(out))
PY
count=$(wc -l < "$LIST")
echo "check_thread_safety: $count units with $("$CLANG" --version | head -1)"
status=0
tr '\n' '\0' < "$LIST" | xargs -0 -P "$JOBS" -I{} bash -c '
  dir="${1%%$'"'"'\t'"'"'*}"; cmd="${1#*$'"'"'\t'"'"'}"
  cd "$dir" && eval "$cmd"' _ {} || status=$?
if [ "$status" != 0 ]; then
  echo "check_thread_safety: FAILED (see the errors above)" >&2
  exit 1
fi
echo "check_thread_safety: clean"
