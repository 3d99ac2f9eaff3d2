#!/usr/bin/env bash
# Fails when a C++ file differs from the repository's .clang-format
# (Debian 12's clang-format 14, as CI installs it). Fix with:
#   clang-format -i $(git ls-files '*.cc' '*.h')
set -euo pipefail
cd "$(dirname "$0")/.."
list() {
  if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git ls-files -z '*.cc' '*.h'
  else  # a plain copy of the tree: every source file outside build dirs
    find . -path './build*' -prune -o -path './.device' -prune -o \
      \( -name '*.cc' -o -name '*.h' \) -type f -print0
  fi
}
n=$(list | tr -cd '\0' | wc -c)
list | xargs -0 clang-format --dry-run -Werror
echo "format: $n files match .clang-format"
