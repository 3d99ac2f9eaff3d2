#!/usr/bin/env bash
# Validates deploy/: the Kubernetes manifests (kubectl client-side dry run,
# kustomize build, the field checks of tools/check_manifests.py and their
# self-test), the probes and warm-up command against a real dlcached
# (tools/smoke_probes.py), and the Dockerfile's agreement with them.
# Offline: kubectl's discovery is answered by tools/fake_kube_api.py on
# 127.0.0.1; dlcached listens on a temp Unix socket and 127.0.0.1 only.
#
# Env: DLCACHED, DLCACHECTL: built binaries (ctest sets them). When set and
# executable, their help must list the flags the manifests use, and the
# smoke run happens.
# Exit: 0 ok, 1 a check failed, 77 kubectl missing (the rest still ran).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8s="$here/k8s"
base="$k8s/base"
tools="$here/tools"

fail() { echo "validate.sh: FAIL: $*" >&2; exit 1; }

# A Python 3 with PyYAML: the one on PATH, else Debian's (python3-yaml).
py=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 &&
     "$candidate" -c 'import yaml' >/dev/null 2>&1; then
    py="$candidate"
    break
  fi
done
[[ -n "$py" ]] || fail "no python3 with PyYAML (apt-get install python3-yaml)"

tmp="$(mktemp -d)"
api_pid=""
cleanup() {
  if [[ -n "$api_pid" ]]; then kill "$api_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# The base's manifests and the examples, in a stable order (the overlays
# hold kustomizations and patches, not objects: they are checked built).
mapfile -t examples < <(find "$k8s/examples" -name '*.yaml' | sort)
mapfile -t manifests < <({ find "$base" -name '*.yaml' ! -name kustomization.yaml
                           printf '%s\n' "${examples[@]}"; } | sort)
(( ${#manifests[@]} > 0 )) || fail "no manifests under $k8s"
mapfile -t overlays < <(find "$k8s/overlays" -mindepth 1 -maxdepth 1 -type d | sort)
(( ${#overlays[@]} == 2 )) || fail "expected overlays single-node and cluster"


have_kubectl=1
command -v kubectl >/dev/null 2>&1 || have_kubectl=0

if (( have_kubectl )); then
  # --- 1. kubectl apply --dry-run=client against a loopback fake API ------
  "$py" "$tools/fake_kube_api.py" "$tmp/port" &
  api_pid=$!
  for _ in $(seq 100); do
    [[ -s "$tmp/port" ]] && break
    kill -0 "$api_pid" 2>/dev/null || fail "fake_kube_api.py exited"
    sleep 0.1
  done
  [[ -s "$tmp/port" ]] || fail "fake_kube_api.py did not start"
  cat >"$tmp/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: offline
    cluster: {server: "http://127.0.0.1:$(cat "$tmp/port")"}
users:
  - name: offline
    user: {}
contexts:
  - name: offline
    context: {cluster: offline, user: offline, namespace: default}
current-context: offline
EOF
  export KUBECONFIG="$tmp/kubeconfig" NO_PROXY=127.0.0.1 no_proxy=127.0.0.1
  kc=(kubectl --cache-dir "$tmp/cache" --request-timeout=20s)

  for m in "${manifests[@]}"; do
    echo "== kubectl apply --dry-run=client -f ${m#"$here"/}"
    "${kc[@]}" apply --dry-run=client --validate=false -f "$m" ||
      fail "kubectl rejected $m"
  done
  for k in "$base" "${overlays[@]}"; do
    echo "== kubectl apply --dry-run=client -k ${k#"$here"/}"
    "${kc[@]}" apply --dry-run=client --validate=false -k "$k" ||
      fail "kubectl rejected the kustomization $k"
  done

  # The dry run must be able to fail: a retired apiVersion is rejected.
  sed 's#^apiVersion: apps/v1$#apiVersion: extensions/v1beta1#' \
    "$base/daemonset.yaml" >"$tmp/bad.yaml"
  if "${kc[@]}" apply --dry-run=client --validate=false -f "$tmp/bad.yaml" \
      >/dev/null 2>&1; then
    fail "kubectl accepted a DaemonSet in extensions/v1beta1"
  fi

  # --- kustomize build (offline, no API server involved) -------------------
  echo "== kubectl kustomize k8s/base"
  kubectl kustomize "$base" >"$tmp/kustomized.yaml" || fail "kustomize failed"
  kustomized=(--kustomized "$tmp/kustomized.yaml")
  for o in "${overlays[@]}"; do
    echo "== kubectl kustomize ${o#"$here"/}"
    kubectl kustomize "$o" >"$tmp/overlay-$(basename "$o").yaml" ||
      fail "kustomize failed on $o"
  done
else
  echo "validate.sh: kubectl not found: skipping the dry run and kustomize" >&2
  kustomized=()
fi

# --- 2. field checks ---------------------------------------------------------
binaries=()
for pair in "dlcached:${DLCACHED:-}" "dlcachectl:${DLCACHECTL:-}"; do
  name="${pair%%:*}" path="${pair#*:}"
  if [[ -n "$path" ]]; then
    if [[ -x "$path" ]]; then
      binaries+=("--$name" "$path")
    else
      echo "validate.sh: $name $path not built: not checking its flags" >&2
    fi
  fi
done
echo "== check_manifests.py"
"$py" "$tools/check_manifests.py" --source-root "$here/.." \
  "${kustomized[@]}" "${binaries[@]}" \
  "${manifests[@]}" || fail "manifest checks"
if (( have_kubectl )); then
  for o in "${overlays[@]}"; do
    name="$(basename "$o")"
    echo "== check_manifests.py --overlay $name"
    "$py" "$tools/check_manifests.py" --source-root "$here/.." \
      --overlay "$name" "${binaries[@]}" \
      "$tmp/overlay-$name.yaml" "${examples[@]}" ||
      fail "overlay $name"
  done
fi
echo "== check_manifests.py --self-test"
"$py" "$tools/check_manifests.py" --self-test "${manifests[@]}" ||
  fail "the checks missed a known breakage"

# --- 3. the probes and the Job's command against a real dlcached -------------
if [[ -x "${DLCACHED:-}" && -x "${DLCACHECTL:-}" ]]; then
  echo "== smoke_probes.py"
  "$py" "$tools/smoke_probes.py" "$DLCACHED" "$DLCACHECTL" "${manifests[@]}" ||
    fail "probes against a real dlcached"
  # One node on day one: the single-node overlay's flagfile as shipped.
  if [[ -s "$tmp/overlay-single-node.yaml" ]]; then
    echo "== smoke_probes.py (overlay single-node)"
    "$py" "$tools/smoke_probes.py" "$DLCACHED" "$DLCACHECTL" \
      "$tmp/overlay-single-node.yaml" "${examples[@]}" ||
      fail "probes against a real dlcached (single-node overlay)"
  fi
else
  echo "validate.sh: DLCACHED/DLCACHECTL not built: probes not run" >&2
fi

# --- Dockerfile: provides what the manifests execute -------------------------
dockerfile="$here/docker/Dockerfile"
[[ -f "$dockerfile" ]] || fail "no $dockerfile"
for needle in /usr/bin/tini /usr/local/bin/dlcached /usr/local/bin/dlcachectl \
              "USER 10001"; do
  grep -qF -- "$needle" "$dockerfile" ||
    fail "Dockerfile does not mention $needle (used by the manifests)"
done
# build_image.sh passes its Debian base as these build arguments and tags
# the image as check_manifests.py expects the manifests to reference it
# (IMAGE_NAME:<project version>).
for needle in 'ARG BASE_IMAGE=' 'FROM ${BASE_IMAGE} AS build' \
              'ARG RUNTIME_IMAGE=' 'FROM ${RUNTIME_IMAGE} AS runtime'; do
  grep -qF -- "$needle" "$dockerfile" ||
    fail "Dockerfile lacks '$needle' (deploy/docker/build_image.sh sets it)"
done
image_name="$("$py" -c 'import sys; sys.path.insert(0, sys.argv[1]);
import check_manifests; print(check_manifests.IMAGE_NAME)' "$tools")"
grep -qF -- "image=\"$image_name:\$version\"" "$here/docker/build_image.sh" ||
  fail "build_image.sh does not tag $image_name:<version>, which the manifests use"
for exe in /usr/local/bin/dlcached /usr/bin/tini; do
  grep -qF -- "$exe" "$base/daemonset.yaml" ||
    fail "daemonset.yaml no longer runs $exe; update this check"
done

if (( ! have_kubectl )); then exit 77; fi
echo "validate.sh: OK"
