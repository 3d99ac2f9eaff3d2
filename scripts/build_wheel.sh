#!/usr/bin/env bash
# Writes dist/dlcache-<version>-py3-none-<platform>.whl from a build
# (scripts/build.sh first): the Python package with libdlcache_c.so and the
# C headers inside (docs/install.md). The library must be self-contained
# (client/CMakeLists.txt, DLCACHE_C_STATIC_DEPS): it may need only glibc,
# libstdc++ and libgcc_s at load time, so the wheel installs into any
# trainer image with that glibc or newer; the platform tag says which
# (manylinux_2_<minor>_<arch>, the newest GLIBC_ symbol version the library
# uses; the GLIBCXX_ one is printed too).
#
#   scripts/build_wheel.sh [--out DIR] [--no-relink]   (BUILD_DIR=build)
# A library that is not self-contained is re-linked first (the Abseil
# sources fetched, DLCACHE_C_STATIC_DEPS=ON); --no-relink fails instead.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
out=dist
relink=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --no-relink) relink=0; shift ;;
    *) echo "usage: $0 [--out DIR] [--no-relink]" >&2; exit 2 ;;
  esac
done
PY="${PYTHON:-python3}"

lib="$BUILD_DIR/client/libdlcache_c.so"
if [[ ! -e "$lib" ]]; then
  echo "no $lib: build first (scripts/build.sh)" >&2
  exit 1
fi
# What the library needs at load time: the C and C++ runtimes only.
allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)$'
needed() { readelf -d "$1" | awk '/\(NEEDED\)/ {gsub(/[][]/, "", $NF); print $NF}'; }
extra=$(needed "$lib" | grep -Ev "$allowed" || true)
if [[ -n "$extra" ]]; then
  echo "$lib is not self-contained: it needs" $extra >&2
  [[ $relink == 1 ]] || exit 1
  echo "re-linking it with its dependencies inside (DLCACHE_C_STATIC_DEPS=ON)" >&2
  scripts/fetch_absl_pic_sources.sh "$BUILD_DIR/_deps/abseil"
  cmake -S . -B "$BUILD_DIR" -DDLCACHE_C_STATIC_DEPS=ON >/dev/null
  cmake --build "$BUILD_DIR" --target dlcache_c_shared
  extra=$(needed "$lib" | grep -Ev "$allowed" || true)
  if [[ -n "$extra" ]]; then
    echo "$lib still needs" $extra >&2
    exit 1
  fi
fi
others=$(nm -D --defined-only "$lib" | awk '{print $NF}' | grep -v '^dlc_' || true)
if [[ -n "$others" ]]; then
  echo "$lib exports symbols other than dlc_*:" $others >&2
  exit 1
fi

glibc=$(objdump -T "$lib" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' |
        sort -t. -k1,1n -k2,2n | tail -1)
major=${glibc%%.*}
minor=${glibc#*.}; minor=${minor%%.*}
platform="manylinux_${major}_${minor}_$(uname -m)"
version=$(sed -n 's/^project(dlcache VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
pkg_version=$(sed -n 's/^version = "\(.*\)"/\1/p' client/python/pyproject.toml)
if [[ "$version" != "$pkg_version" ]]; then
  echo "version mismatch: CMakeLists.txt $version, pyproject.toml $pkg_version" >&2
  exit 1
fi

# The wheel carries the library without its debug info (the build keeps it).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
strip --strip-debug -o "$tmp/libdlcache_c.so" "$(readlink -f "$lib")"
"$PY" scripts/make_wheel.py --package client/python/dlcache \
  --lib "$tmp/libdlcache_c.so" --headers client/include/dlcache \
  --readme client/python/README.md \
  --version "$version" --platform "$platform" --out "$out"
glibcxx=$(objdump -T "$lib" | grep -o 'GLIBCXX_[0-9][0-9.]*' | sed 's/GLIBCXX_//' |
          sort -t. -k1,1n -k2,2n -k3,3n | tail -1)
echo "needs glibc >= $glibc (tag $platform), libstdc++ GLIBCXX_$glibcxx; loads with:" \
  $(needed "$lib" | tr '\n' ' ')
