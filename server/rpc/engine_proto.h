#ifndef DLCACHE_SERVER_RPC_ENGINE_PROTO_H_
#define DLCACHE_SERVER_RPC_ENGINE_PROTO_H_

#include <vector>

#include "dlcache/v1/admin.pb.h"
#include "server/engine/cache_engine.h"

namespace dlcache {

// The admin API's wire forms of CacheEngine's answers (Stats, Evict,
// RevalidateMemory). Pure; thread-compatible.
v1::StatsResponse StatsToProto(const std::vector<DatasetStats>& stats);
v1::EvictResponse EvictResultToProto(const EvictResult& r);
v1::RevalidateResponse RevalidateResultToProto(const RevalidateResult& r);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_ENGINE_PROTO_H_
