#!/usr/bin/env bash
# Builds the dlcache image (deploy/docker/Dockerfile) without a registry and
# without a container daemon: the Debian 12 base comes from Debian's
# packages (mmdebstrap, using this machine's apt sources), then buildah runs
# the Dockerfile unchanged, with that base passed as BASE_IMAGE and
# RUNTIME_IMAGE (`buildah bud --isolation chroot --storage-driver vfs`).
# Users with a registry `docker build` the same file as it is.
#
# The result is a docker-archive tarball (`docker load`, `podman load`,
# `ctr -n k8s.io images import`) holding one image, tagged
# dlcache/dlcached:<project version> (CMakeLists.txt's project(VERSION)),
# the name deploy/k8s/ references.
#
# Usage: deploy/docker/build_image.sh [OPTIONS]
#   --output FILE       where the archive goes
#                       (default: $BUILD_DIR/image/dlcached-<version>.tar,
#                       BUILD_DIR defaults to build)
#   --base-tar FILE     use this mmdebstrap tarball instead of making one
#   --save-base-tar FILE  keep the mmdebstrap tarball made here (to pass as
#                       --base-tar to a later run while iterating)
#   --context DIR       build context (default: the repository root; its
#                       build dirs and .git are left out by
#                       Dockerfile.dockerignore)
#   --ccache-dir DIR    compile through this ccache directory (bind-mounted
#                       read-write). .ci/run passes the one its host build
#                       just filled: same compiler, same sources, and with
#                       CCACHE_BASEDIR the same relative paths, so objects are
#                       reused; ccache hashes source and header contents, so a
#                       hit is the object the build stage would have made.
#   --jobs N            parallel compile jobs in the build stage
#   --build-arg K=V     passed to buildah bud (e.g. WITH_CUDA=ON)
#   --keep-storage DIR  use DIR as buildah's storage (vfs) and leave it
#                       there; default: a temp dir removed on exit
#
# Env: DLCACHE_APT_SOURCES: apt sources file for the base (default: this
# machine's /etc/apt/sources.list.d/debian.sources, else
# /etc/apt/sources.list). TMPDIR: where the temp storage goes.
# Needs root (mmdebstrap and buildah in chroot isolation as root).
# Prints the image sizes (runtime and build stage) and the timings.
# Exit: 0 built, 1 failed, 2 usage, 77 mmdebstrap or buildah missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

die() { echo "build_image.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

version="$(sed -n 's/^project(dlcache VERSION \([0-9][0-9.]*\).*/\1/p' \
  "$repo/CMakeLists.txt")"
[[ -n "$version" ]] || die "no project(dlcache VERSION x.y.z) in CMakeLists.txt"
image="dlcache/dlcached:$version"
base_image="localhost/dlcache-base:bookworm"

build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" == /* ]] || build_dir="$repo/$build_dir"
output="$build_dir/image/dlcached-$version.tar"
args=("$@")
base_tar="" save_base_tar="" context="$repo" ccache_dir="" jobs=""
keep_storage="" build_args=()
while (( $# )); do
  case "$1" in
    --output) output="$2"; shift 2 ;;
    --base-tar) base_tar="$2"; shift 2 ;;
    --save-base-tar) save_base_tar="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --ccache-dir) ccache_dir="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --build-arg) build_args+=(--build-arg "$2"); shift 2 ;;
    --keep-storage) keep_storage="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "build_image.sh: unknown option $1" >&2; usage ;;
  esac
done

for tool in buildah mmdebstrap unshare; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    [[ "$tool" == mmdebstrap && -n "$base_tar" ]] && continue
    echo "build_image.sh: $tool not installed (scripts/install_deps.sh)" >&2
    exit 77
  fi
done
[[ "$(id -u)" == 0 ]] || die "run as root (mmdebstrap and buildah's chroot isolation)"
# Run in a private mount namespace: whatever a failed buildah step leaves
# mounted goes away with it, and /var/lib/containers (where buildah, as
# root, keeps its blob-info cache whatever --root says) can be covered by a
# temp dir below.
if [[ -z "${DLCACHE_BUILD_IMAGE_NS:-}" ]]; then
  DLCACHE_BUILD_IMAGE_NS=1 exec unshare --mount --propagation private -- \
    bash "${BASH_SOURCE[0]}" "${args[@]}"
fi
[[ -z "$base_tar" || -f "$base_tar" ]] || die "--base-tar $base_tar: no such file"
if [[ -n "$ccache_dir" ]]; then
  mkdir -p "$ccache_dir"
  ccache_dir="$(cd "$ccache_dir" && pwd)"
fi
mkdir -p "$(dirname "$output")"
output="$(cd "$(dirname "$output")" && pwd)/$(basename "$output")"

# All of buildah's state (images, layers, containers, its cache mounts and
# temp files) lives under one directory that is removed on exit, so nothing
# reaches the machine's global container storage.
if [[ -n "$keep_storage" ]]; then
  mkdir -p "$keep_storage"
  store="$(cd "$keep_storage" && pwd)"
else
  store="$(mktemp -d "${TMPDIR:-/var/tmp}/dlcache-image.XXXXXX")"
fi
vlc_made=0
cleanup() {
  local rc=$?
  if [[ -z "$keep_storage" ]]; then
    # vfs layers hold no mounts once the containers are gone; unmount any a
    # failed step left behind before removing the tree.
    "${bh[@]}" rm --all >/dev/null 2>&1 || true
    "${bh[@]}" umount --all >/dev/null 2>&1 || true
  fi
  if mountpoint -q /var/lib/containers; then umount /var/lib/containers || true; fi
  if (( vlc_made )); then rmdir /var/lib/containers 2>/dev/null || true; fi
  if [[ -z "$keep_storage" ]]; then rm -rf "$store"; fi
  exit "$rc"
}
bh=(buildah --root "$store/root" --runroot "$store/runroot" --storage-driver vfs)
trap cleanup EXIT
mkdir -p "$store/tmp" "$store/containers"
if [[ ! -d /var/lib/containers ]]; then
  mkdir /var/lib/containers
  vlc_made=1
fi
mount --bind "$store/containers" /var/lib/containers
# buildah keeps RUN --mount=type=cache directories and its temp files under
# TMPDIR.
export TMPDIR="$store/tmp"
# chroot isolation runs RUN steps without an OCI runtime or namespaces
# that a CI machine may not grant.
export BUILDAH_ISOLATION=chroot

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }
t_start="$(now)"

# --- 1. the Debian 12 base from Debian's packages -----------------------------
if [[ -z "$base_tar" ]]; then
  sources="${DLCACHE_APT_SOURCES:-}"
  if [[ -z "$sources" ]]; then
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
      if [[ -s "$f" ]]; then sources="$f"; break; fi
    done
  fi
  [[ -n "$sources" && -s "$sources" ]] ||
    die "no apt sources file (set DLCACHE_APT_SOURCES)"
  echo "== mmdebstrap bookworm (minbase, apt sources from $sources)"
  base_tar="$store/base.tar"
  # minbase: Priority required + apt (useradd and apt-get are in it), like
  # debian:bookworm; docs, man pages and translations left out, as
  # debian:bookworm-slim does. The merged-usr hook makes the /usr symlinks
  # itself, so the usrmerge package (and perl, ~50 MiB) stays out.
  mmdebstrap --variant=minbase --mode=root \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    bookworm "$base_tar" "$sources"
  if [[ -n "$save_base_tar" ]]; then
    mkdir -p "$(dirname "$save_base_tar")"
    cp "$base_tar" "$save_base_tar"
  fi
fi
t_base="$(now)"

echo "== buildah: $base_image from $(basename "$base_tar")"
ctr="$("${bh[@]}" from --pull=never scratch)"
"${bh[@]}" add "$ctr" "$base_tar" /
"${bh[@]}" config \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --cmd /bin/bash --os linux --arch "$(dpkg --print-architecture)" "$ctr"
"${bh[@]}" commit --rm --format docker "$ctr" "$base_image" >/dev/null
t_import="$(now)"

# --- 2. the Dockerfile, as it is -------------------------------------------------
# One bud, no --layers: with vfs every committed layer is a full copy of the
# file system, so each stage is committed once.
bud=("${bh[@]}" bud --isolation chroot --pull=never --format docker
     -f "$here/Dockerfile" --ignorefile "$here/Dockerfile.dockerignore"
     --build-arg "BASE_IMAGE=$base_image"
     --build-arg "RUNTIME_IMAGE=$base_image")
if [[ -n "$jobs" ]]; then bud+=(--build-arg "JOBS=$jobs"); fi
if [[ -n "$ccache_dir" ]]; then
  bud+=(--build-arg CCACHE_DIR=/ccache -v "$ccache_dir:/ccache")
fi
bud+=("${build_args[@]}")

# The docker.io/ name is what `docker load` and the kubelet call
# dlcache/dlcached:<version>; a bare name would be stored as localhost/...
echo "== buildah bud -> $image"
"${bud[@]}" -t "docker.io/$image" "$context" 2>&1 | tee "$store/bud.log" |
  while IFS= read -r line; do
    printf '%s\n' "$line"
    if [[ "$line" == *"STEP 1/"*" AS runtime"* ]]; then now >"$store/t_build"; fi
  done
t_runtime="$(now)"
t_build="$(cat "$store/t_build" 2>/dev/null || echo "$t_runtime")"

# --- 3. sizes and the archive ------------------------------------------------------
# Uncompressed root file system size, as a node's image store holds it.
du_bytes() { du -sxb "$1" | cut -f1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
image_bytes() {
  local c m n
  c="$("${bh[@]}" from --pull=never "$1")"
  m="$("${bh[@]}" mount "$c")"
  n="$(du_bytes "$m")"
  "${bh[@]}" umount "$c" >/dev/null
  "${bh[@]}" rm "$c" >/dev/null
  echo "$n"
}
runtime_size="$(image_bytes "docker.io/$image")"
base_size="$(image_bytes "$base_image")"
# The build stage reports its own size (the Dockerfile's last build step).
build_mib="$(sed -n 's/^build stage: \([0-9]*\) MiB.*/\1/p' "$store/bud.log" | tail -n 1)"

rm -f "$output"
"${bh[@]}" push --quiet "docker.io/$image" "docker-archive:$output:docker.io/$image"
t_end="$(now)"

cat <<EOF
== build_image.sh: $image -> $output
  runtime image:     $(mib "$runtime_size") ($runtime_size bytes, uncompressed)
  build stage:       ${build_mib:-?} MiB (with its build tree)
  base (mmdebstrap): $(mib "$base_size")
  archive:           $(mib "$(stat -c %s "$output")")
  time: base (mmdebstrap) $(elapsed "$t_start" "$t_base") s, import $(elapsed "$t_base" "$t_import") s,
        build stage $(elapsed "$t_import" "$t_build") s, runtime stage $(elapsed "$t_build" "$t_runtime") s,
        sizes and archive $(elapsed "$t_runtime" "$t_end") s, total $(elapsed "$t_start" "$t_end") s
EOF
