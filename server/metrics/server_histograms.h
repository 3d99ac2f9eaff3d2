#ifndef DLCACHE_SERVER_METRICS_SERVER_HISTOGRAMS_H_
#define DLCACHE_SERVER_METRICS_SERVER_HISTOGRAMS_H_

#include "common/latency_histogram.h"

namespace dlcache {

// The latency histograms one dlcached exports (AppendServerMetrics in
// server/metrics/prometheus_text.h renders them). Owned by CacheServer;
// the components that observe get pointers to single members
// (CacheEngine::Options, PeerRouter::Options, SsdAdminTargets).
// Thread-safe as LatencyHistogram is.
struct ServerHistograms {
  // dlcache_batch_duration_seconds: a GetBatch from the engine's call to
  // its answer (hits and fills; not the socket's round trip).
  LatencyHistogram batch{LatencyHistogram::kRequestBounds};
  // dlcache_fill_duration_seconds{tier="ssd"|"peer"|"source"}: one chunk's
  // read into its arena slot, by the tier that served it.
  LatencyHistogram fill_ssd{LatencyHistogram::kRequestBounds};
  LatencyHistogram fill_peer{LatencyHistogram::kRequestBounds};
  LatencyHistogram fill_source{LatencyHistogram::kRequestBounds};
  // dlcache_peer_fetch_duration_seconds: a chunk fetch from its owner,
  // answered or not.
  LatencyHistogram peer_fetch{LatencyHistogram::kRequestBounds};
  // dlcache_warmup_duration_seconds, dlcache_sync_duration_seconds: whole
  // jobs (dlcachectl warmup / sync).
  LatencyHistogram warmup{LatencyHistogram::kJobBounds};
  LatencyHistogram sync{LatencyHistogram::kJobBounds};
};

// How this dlcached started: dlcache_start_cold, and
// dlcache_start_readopted_chunks.
struct StartInfo {
  // A previous run's arena was there and could not be re-adopted (no or
  // a bad manifest: a crash or kill -9). False for a warm restart and for
  // a first start.
  bool cold = false;
  uint64_t readopted_chunks = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_METRICS_SERVER_HISTOGRAMS_H_
