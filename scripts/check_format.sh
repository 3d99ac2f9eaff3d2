#!/usr/bin/env bash
# Fails when a C++ file differs from the repository's .clang-format
# (Debian 12's clang-format 14, as CI installs it). Fix with:
#   clang-format -i $(git ls-files '*.cc' '*.h')
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files -z '*.cc' '*.h' | xargs -0 clang-format --dry-run -Werror
echo "format: $(git ls-files '*.cc' '*.h' | wc -l) files match .clang-format"
