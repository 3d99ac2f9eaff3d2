#!/usr/bin/env bash
# Installs every package dlcache needs to build, test and benchmark
# (Debian 12). Idempotent.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential cmake ninja-build ccache pkg-config git \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libabsl-dev librocksdb-dev libgtest-dev libgmock-dev libbenchmark-dev \
  libxxhash-dev libtorch-dev libgflags-dev \
  redis-server python3 python3-yaml \
  python3-torch python3-numpy python3-pip python3-setuptools python3-wheel \
  python3-pil openssl clang-format clang libjpeg-dev
# cache.proto's CacheService from Python (tests/integration/
# python_grpc_handles_test.py generates its stubs with grpc_tools.protoc).
$SUDO apt-get install -y -q --no-install-recommends \
  python3-grpcio python3-grpc-tools
# Native NFS and CephFS sources (issue 12): the client libraries, and the
# servers the tests start on loopback: NFS-Ganesha with its VFS back end,
# and a one-node CephFS (monitor, memstore OSD, MDS; the ceph CLI comes
# with them). ~50 s to install; the cluster boots in ~7 s.
$SUDO apt-get install -y -q --no-install-recommends \
  libnfs-dev libcephfs-dev nfs-ganesha nfs-ganesha-vfs \
  ceph-mon ceph-osd ceph-mds
# Container image without a registry or a Docker engine (issue 15).
$SUDO apt-get install -y -q --no-install-recommends \
  mmdebstrap buildah tini uidmap
# promtool (Debian ships it in the prometheus package) checks the metrics
# scrape and the alert rules (ctest monitoring_check).
$SUDO apt-get install -y -q --no-install-recommends prometheus
# kubectl validates the Kubernetes manifests; Debian ships it as
# kubernetes-client (some images carry a newer kubectl already).
if ! command -v kubectl >/dev/null 2>&1; then
  $SUDO apt-get install -y -q --no-install-recommends kubernetes-client
fi
