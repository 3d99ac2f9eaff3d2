#!/usr/bin/env bash
# Checks the linkage of libdlcache_c.so (argument 1): it exports dlc_*
# symbols only (client/c_api/dlcache_c.map) and needs neither gRPC nor
# protobuf, at load time or as undefined symbols: the client's data path is
# the local protocol on a plain Unix socket, which is what makes it safe to
# use in fork()ed data-loader workers.
#
# With --self-contained (a build with DLCACHE_C_STATIC_DEPS, issue 30) it
# also checks that the library needs nothing at load time but the C/C++
# runtime (no libabsl_*, no libxxhash: a trainer image has neither) and
# needs no static TLS (DF_STATIC_TLS: a library dlopen()ed late, as by
# Python's ctypes, may then fail with "cannot allocate memory in static TLS
# block").
set -euo pipefail
lib="${1:?usage: client_c_shared_check.sh LIBDLCACHE_C_SO [--self-contained]}"
self_contained="${2:-}"
status=0

needed=$(readelf -d "$lib" | awk '/\(NEEDED\)/ {print $NF}')
if grep -Eiq 'grpc|protobuf|gpr|upb|address_sorting' <<<"$needed"; then
  echo "FAIL: $lib needs gRPC/protobuf libraries:"
  grep -Ei 'grpc|protobuf|gpr|upb|address_sorting' <<<"$needed"
  status=1
fi

undefined=$(nm -D --undefined-only "$lib" | awk '{print $NF}' |
            grep -Ei 'grpc|protobuf' || true)
if [[ -n "$undefined" ]]; then
  echo "FAIL: $lib refers to gRPC/protobuf symbols:"
  echo "$undefined" | head -20
  status=1
fi

exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' |
           grep -v '^dlc_' || true)
if [[ -n "$exported" ]]; then
  echo "FAIL: $lib exports symbols other than dlc_*:"
  echo "$exported" | head -20
  status=1
fi
if ! nm -D --defined-only "$lib" | grep -q ' dlc_get_batch$'; then
  echo "FAIL: $lib does not export dlc_get_batch"
  status=1
fi

if [[ "$self_contained" == --self-contained ]]; then
  extra=$(tr -d "[]" <<<"$needed" | grep -Ev '^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)$' || true)
  if [[ -n "$extra" ]]; then
    echo "FAIL: $lib is not self-contained; it needs:" $extra
    status=1
  fi
  if readelf -d "$lib" | grep -q 'STATIC_TLS'; then
    echo "FAIL: $lib needs static TLS (DF_STATIC_TLS): initial- or local-exec TLS in a linked object"
    status=1
  fi
fi

[[ $status -eq 0 ]] && echo "ok: $lib exports dlc_* only and needs no gRPC/protobuf${self_contained:+, self-contained}"
exit $status
