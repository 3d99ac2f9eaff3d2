#ifndef DLCACHE_SERVER_METRICS_PROMETHEUS_TEXT_H_
#define DLCACHE_SERVER_METRICS_PROMETHEUS_TEXT_H_

#include <string>

#include "dlcache/v1/admin.pb.h"

namespace dlcache {

// Renders Status and Stats in the Prometheus text exposition format
// (version 0.0.4): dlcache_hits_total{dataset="..."} etc. Pure.
std::string RenderPrometheus(const v1::StatusResponse& status,
                             const v1::StatsResponse& stats);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_METRICS_PROMETHEUS_TEXT_H_
