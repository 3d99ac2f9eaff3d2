#ifndef DLCACHE_SERVER_RPC_STATUS_REPORT_H_
#define DLCACHE_SERVER_RPC_STATUS_REPORT_H_

#include "dlcache/v1/admin.pb.h"
#include "server/engine/server_status.h"

namespace dlcache {

// The v1::StatusResponse of a report. Pure; thread-compatible.
v1::StatusResponse StatusReportToProto(const StatusReport& report);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_STATUS_REPORT_H_
