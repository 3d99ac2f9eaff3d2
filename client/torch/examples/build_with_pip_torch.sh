#!/bin/bash
# Builds the adapter, the example and the adapter's test driver with g++
# against the libtorch inside a pip-installed torch (no CMake, no CUDA
# toolkit needed: the pip wheel carries the CUDA runtime it needs).
#
#   client/torch/examples/build_with_pip_torch.sh LIBDIR OUTDIR
#     LIBDIR: directory with libdlcache_c.so (a build's build/client) or
#             libdlcache_c.so.0 (the installed wheel's package directory:
#             python3 -c 'import dlcache,os;print(os.path.dirname(dlcache.__file__))');
#     OUTDIR: where binaries go
set -euo pipefail
lib=$(cd "${1:?dir with libdlcache_c.so}" && pwd)
out=${2:?output dir}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/../../.." && pwd)
py=${PYTHON:-python3}
tdir=$($py -c 'import torch,os;print(os.path.dirname(torch.__file__))')
abi=$($py -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
cuda_libs=""
[ -e "$tdir/lib/libtorch_cuda.so" ] && cuda_libs="-ltorch_cuda -lc10_cuda"
flags=(-std=c++17 -O2 -g -rdynamic -fno-omit-frame-pointer -D_GLIBCXX_USE_CXX11_ABI="$abi"
       -I"$tdir/include" -I"$tdir/include/torch/csrc/api/include"
       -I"$root/client/torch/include" -I"$root/client/include" -I"$root")
# The wheel carries the library under its soname only (no symlinks in a
# wheel); a build tree has both names.
dlc=-ldlcache_c
[ -e "$lib/libdlcache_c.so.0" ] && dlc=-l:libdlcache_c.so.0
srcs=(cache_dataset connection gpu_feed tensors epoch_order)
pids=()
for s in "${srcs[@]}"; do
  src="$root/client/torch/$s.cc"
  [ "$s" = epoch_order ] && src="$root/common/epoch_order.cc"
  g++ "${flags[@]}" -c "$src" -o "$out/$s.o" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
objs=("${srcs[@]/#/$out/}"); objs=("${objs[@]/%/.o}")
# --no-as-needed: nothing names a libtorch_cuda symbol, yet it must load
# for libtorch to see the GPU.
link=(-L"$tdir/lib" -Wl,-rpath,"$tdir/lib" -Wl,--no-as-needed -ltorch
      $cuda_libs -ltorch_cpu -lc10 -Wl,--as-needed
      -L"$lib" -Wl,-rpath,"$lib" "$dlc" -pthread)
g++ "${flags[@]}" "$root/client/torch/examples/train.cc" "${objs[@]}" \
  "${link[@]}" -o "$out/dlcache_torch_train" & a=$!
g++ "${flags[@]}" "$root/tests/gpu/torch_adapter_test.cc" "${objs[@]}" \
  "${link[@]}" -o "$out/torch_adapter_test" & b=$!
wait "$a"; wait "$b"
ls -la "$out/dlcache_torch_train" "$out/torch_adapter_test"
