#!/usr/bin/env bash
# Checks the linkage of libdlcache_c.so (argument 1): it exports dlc_*
# symbols only (client/c_api/dlcache_c.map) and needs neither gRPC nor
# protobuf, at load time or as undefined symbols: the client's data path is
# the local protocol on a plain Unix socket, which is what makes it safe to
# use in fork()ed data-loader workers.
set -euo pipefail
lib="${1:?usage: client_c_shared_check.sh LIBDLCACHE_C_SO}"
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

[[ $status -eq 0 ]] && echo "ok: $lib exports dlc_* only and needs no gRPC/protobuf"
exit $status
