#!/usr/bin/env bash
# Fetches the source of the installed Abseil (Debian's libabsl-dev: the same
# version and the same Debian patches) into DEST (default
# build/_deps/abseil), for the few Abseil files that libdlcache_c.so must
# compile itself (client/CMakeLists.txt, DLCACHE_C_STATIC_DEPS): Debian's
# static archives are built for executables, and four of their objects use
# thread-locals in the local-exec model, which no shared library can
# contain. Uses apt-get with a private source list (nothing of the
# machine's apt configuration changes); needs Debian's package archive.
# Idempotent: does nothing when DEST already holds that version.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-${BUILD_DIR:-build}/_deps/abseil}"
version=$(dpkg-query -W -f='${source:Version}' libabsl-dev 2>/dev/null || true)
if [[ -z "$version" ]]; then
  echo "libabsl-dev is not installed (scripts/install_deps.sh)" >&2
  exit 1
fi
if [[ -f "$dest/VERSION" && "$(cat "$dest/VERSION")" == "$version" ]]; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/src"
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
cat >"$work/sources.list" <<LIST
deb-src http://deb.debian.org/debian $suite main
deb-src http://deb.debian.org/debian $suite-updates main
deb-src http://deb.debian.org/debian-security $suite-security main
LIST
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list"
          -o "Dir::Etc::SourceParts=/nonexistent"
          -o "Dir::State::Lists=$work/lists" -o APT::Sandbox::User=root -q)
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$work/src" &&
 apt-get "${apt_opts[@]}" source --download-only "abseil=$version" \
   >/dev/null 2>&1)
tar -C "$work/src" -xzf "$work"/src/abseil_*.orig.tar.gz
tar -C "$work/src" -xJf "$work"/src/abseil_*.debian.tar.xz
tree=$(find "$work/src" -maxdepth 1 -type d -name 'abseil-*' | head -1)
while read -r p; do
  [[ -z "$p" || "$p" == \#* ]] && continue
  patch -d "$tree" -p1 -s <"$work/src/debian/patches/$p"
done <"$work/src/debian/patches/series"
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
cp -r "$tree" "$dest"
echo "$version" >"$dest/VERSION"
echo "Abseil $version sources in $dest"
