#ifndef DLCACHE_SERVER_RPC_JOB_PROGRESS_PROTO_H_
#define DLCACHE_SERVER_RPC_JOB_PROGRESS_PROTO_H_

#include "dlcache/v1/admin.pb.h"
#include "server/fill/job_progress.h"
#include "server/fill/warmup_spec.h"

namespace dlcache {

// The wire forms of listed jobs, for the RPC code that carries them: the
// admin API (Warmup, Sync) and the peer service and client (WarmupShare).
// Pure; thread-compatible.
v1::JobProgress JobProgressToProto(const JobProgress& p);
// chunks_written/chunks_skipped are not on the wire and come back as 0.
JobProgress JobProgressFromProto(const v1::JobProgress& p);

WarmupSpec WarmupSpecFromProto(const v1::WarmupRequest& r);
v1::WarmupRequest WarmupSpecToProto(const WarmupSpec& spec);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_JOB_PROGRESS_PROTO_H_
