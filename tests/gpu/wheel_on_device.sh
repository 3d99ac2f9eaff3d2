#!/bin/bash
# Issue 30 on the GPU machine (Ubuntu 24.04, its stock python3 and torch,
# no build tools): the wheel made here installs with no build step and
# GpuLoader feeds the GPU through it. Run from the repository root:
#
#   bash tests/gpu/wheel_on_device.sh WHEEL BUNDLE_DIR
#     WHEEL:      dist/dlcache-*.whl (scripts/build_wheel.sh)
#     BUNDLE_DIR: the device bundle (tests/gpu/device_bundle.sh), for
#                 dlcached and dlcachectl only: the client comes from the
#                 wheel
#
# Steps, logs in $OUT (default /tmp/out), a summary at the end:
#   1. python3 -m venv --system-site-packages (the machine's torch), then
#      pip install --no-index --no-deps WHEEL; ldd of the installed
#      libdlcache_c.so.0 (only the C/C++ runtime)         -> wheel_install.log
#   2. with the venv's python and the *installed* package (the tests and
#      the bench run from a copy outside the checkout, without PYTHONPATH
#      or DLCACHE_LIB): python_gpu_loader_test (GpuLoader's bytes on the
#      GPU equal the source's) and python_list_test   -> wheel_python_*.log
#   3. bench/trainer_feed.py --skip=a,b,jpeg: GpuLoader (c) and the pinned
#      host->GPU ceiling (d) in one run              -> wheel_trainer_feed.*
#   4. the LibTorch adapter compiled against the machine's torch and the
#      wheel's library, its checks (--require_gpu)   -> wheel_torch_adapter.log
set -u
wheel=$(readlink -f "${1:?WHEEL}")
bundle=$(readlink -f "${2:?BUNDLE_DIR}")
root=$(pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
summary="$out/wheel_summary.txt"
: > "$summary"
rc=0
note() { echo "$*" | tee -a "$summary"; }
work=$(mktemp -d /tmp/dlc_wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT
# python_list_test runs a client as another uid (a reader the dataset's
# policy refuses): it must be able to import the venv's package.
chmod 755 "$work"

# 1. Install.
{
  date -u
  python3 --version
  python3 -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
  if python3 -m venv --system-site-packages "$work/v"; then
    env -u PYTHONPATH -u DLCACHE_LIB "$work/v/bin/pip" install --no-index \
      --no-deps --disable-pip-version-check "$wheel"
  else
    # Ubuntu's python3 without python3-venv has no ensurepip: a venv
    # without pip, filled by the machine's own pip (pip >= 22.3: --python).
    echo "venv with pip failed; a venv without pip, the system pip installs"
    rm -rf "$work/v"
    python3 -m venv --without-pip --system-site-packages "$work/v" &&
      env -u PYTHONPATH -u DLCACHE_LIB python3 -m pip --python "$work/v/bin/python" \
        install --no-index --no-deps --disable-pip-version-check "$wheel"
  fi
  # The machine's python3 may itself be a venv (the GPU machine's is
  # /opt/torch/.venv): a venv made from it sees the *base* interpreter's
  # site-packages, not torch's. A .pth file adds the parent venv's, as a
  # trainer image whose torch lives in a venv would be set up.
  parent=$(python3 -c 'import sys,sysconfig;print(sysconfig.get_paths()["purelib"] if sys.prefix!=sys.base_prefix else "")')
  if [ -n "$parent" ]; then
    site=$("$work/v/bin/python" -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')
    echo "$parent" > "$site/_parent_venv.pth"
    echo "python3 is a venv: $parent added to the new venv's path"
  fi
  "$work/v/bin/python" -c 'import torch;print("venv sees torch", torch.__version__)'
} > "$out/wheel_install.log" 2>&1
r=$?
py="$work/v/bin/python"
pkg=$(cd "$work" && env -u PYTHONPATH -u DLCACHE_LIB "$py" -c \
      'import dlcache,os;print(os.path.dirname(dlcache.__file__))' 2>>"$out/wheel_install.log")
lib="$pkg/libdlcache_c.so.0"
if [ $r -ne 0 ] || [ ! -e "$lib" ]; then
  note "FAIL wheel install (exit $r; see wheel_install.log)"
  tail -20 "$out/wheel_install.log"
  exit 1
fi
{ echo "=== ldd $lib"; ldd "$lib"; } >> "$out/wheel_install.log"
extra=$(ldd "$lib" | awk '{print $1}' |
        grep -Ev '^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|/lib64/ld-linux-x86-64\.so\.2)$' || true)
if [ -n "$extra" ]; then note "FAIL the installed library needs: $extra"; rc=1
else note "ok   wheel installed into $(python3 --version 2>&1) with torch; ldd: C/C++ runtime only"; fi

# 2. Tests, from a copy that has no client/python beside it (python_server
#    puts ../../client/python first on sys.path: absent, the venv's
#    package is imported).
mkdir -p "$work/t/tests" "$work/t/bench"
cp -r "$root/tests/integration" "$work/t/tests/"
cp "$root/bench/"*.py "$work/t/bench/"
cp -r "$root/deploy" "$work/t/" 2>/dev/null
run() {
  (cd "$work/t" && env -u PYTHONPATH -u DLCACHE_LIB \
     LD_LIBRARY_PATH= DLCACHED="$bundle/bin/dlcached.sh" \
     DLCACHECTL="$bundle/bin/dlcachectl.sh" "$@")
}
have_gpu=0
nvidia-smi -L > /dev/null 2>&1 && have_gpu=1
for t in python_gpu_loader_test python_list_test; do
  echo "=== $t (installed wheel)"
  run timeout 300 "$py" "tests/integration/$t.py" > "$out/wheel_$t.log" 2>&1
  r=$?
  tail -n 15 "$out/wheel_$t.log"
  line=$(grep -E "^(Ran|OK|FAILED)" "$out/wheel_$t.log" | tr '\n' ' ')
  # 77: some cases skipped. On a GPU machine only the no-device fallback
  # cases may ("a CUDA device is present"); any other skip fails.
  others=$(grep -E "\.\.\. skipped '" "$out/wheel_$t.log" | grep -v "skipped 'a CUDA device is present'" || true)
  if [ $r -eq 0 -o $r -eq 77 ] && [ $have_gpu -eq 1 ] && grep -q "skipped 'no CUDA device" "$out/wheel_$t.log"; then
    note "FAIL $t: GPU tests skipped on a GPU machine: $line"; rc=1
  elif [ $r -eq 0 ]; then note "ok   $t (wheel): $line"
  elif [ $r -eq 77 ] && [ -z "$others" ] && [ $have_gpu -eq 1 ]; then
    note "ok   $t (wheel; only the no-GPU fallback cases skipped): $line"
  else note "FAIL $t (wheel, exit $r): $line"; rc=1; fi
done

# 3. GpuLoader beside the pinned ceiling, one run.
echo "=== bench/trainer_feed.py (installed wheel)"
run timeout 420 "$py" bench/trainer_feed.py --skip=a,b,jpeg \
  --resnet-data= --out "$out/wheel_trainer_feed.md" \
  ${TRAINER_FEED_FLAGS:-} > "$out/wheel_trainer_feed.log" 2>&1
r=$?
tail -n 30 "$out/wheel_trainer_feed.log"
if [ $r -eq 0 ]; then note "ok   trainer_feed.py via the wheel (wheel_trainer_feed.md)"
else note "FAIL trainer_feed.py via the wheel (exit $r)"; rc=1; fi
# The library those runs loaded: the wheel's.
note "     library: $(run "$py" -c 'from dlcache import _lib; print(_lib.load()._dlcache_path)' 2>&1)"

# 4. The LibTorch adapter built against the machine's torch and the
#    wheel's library (tests/gpu/torch_adapter_on_device.sh over a bundle
#    whose pylib/ is the installed package directory). SKIP_TORCH=1: not.
if [ -z "${SKIP_TORCH:-}" ]; then
  mkdir -p "$work/wb"
  ln -s "$bundle/bin" "$work/wb/bin"
  ln -s "$pkg" "$work/wb/pylib"
  echo "=== LibTorch adapter over the wheel's library"
  SKIP_TORCH_EXAMPLE=1 bash tests/gpu/torch_adapter_on_device.sh "$work/wb" \
    "$out" > "$out/wheel_torch_adapter.log" 2>&1
  r=$?
  tail -n 15 "$out/wheel_torch_adapter.log"
  if [ $r -eq 0 ]; then note "ok   LibTorch adapter built and tested against the wheel's library"
  else note "FAIL LibTorch adapter over the wheel's library (exit $r)"; rc=1; fi
fi

echo; cat "$summary"
exit $rc
