#include "server/metrics/prometheus_text.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/latency_histogram.h"

namespace dlcache {
namespace {

// Whether v is valid UTF-8 of printable characters only (no C0/C1
// controls, no DEL; newline aside, which the format escapes).
bool PrintableUtf8(const std::string& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  const size_t n = v.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    // Overlong forms, surrogates, beyond Unicode, C1 controls.
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff ||
        (cp >= 0x80 && cp <= 0x9f)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string Escape(const std::string& v) { return PrometheusLabelValue(v); }

// A sample value: integers (sizes, counts) with every digit, as
// Prometheus and people read them (StrCat of a double keeps six
// significant digits: 2.68435e+08); others with nine.
std::string Number(double value) {
  if (std::isfinite(value) && value == std::floor(value) &&
      std::fabs(value) < 9.0e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", value);
  return buf;
}

void Gauge(std::string* out, const char* name, const char* help, double value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name,
                  " gauge\n", name, " ", Number(value), "\n");
}

// Integer gauges print every digit (StrCat of a double keeps six).
void IntGauge(std::string* out, const char* name, const char* help,
              uint64_t value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name,
                  " gauge\n", name, " ", value, "\n");
}

void Counter(std::string* out, const char* name, const char* help,
             uint64_t value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name,
                  " counter\n", name, " ", value, "\n");
}

// Peer traffic, only on a multi-node server.
void Cluster(std::string* out, const v1::ClusterStatus& c) {
  Gauge(out, "dlcache_cluster_nodes", "Nodes in the current placement",
        c.nodes());
  Gauge(out, "dlcache_cluster_self_listed",
        "1 when --peers/--peer_dns list this node's --node_id",
        c.self_in_placement() ? 1 : 0);
  Counter(out, "dlcache_peer_local_reads_total",
          "Owned chunks read from this node's own tiers and source",
          c.local_reads());
  Counter(out, "dlcache_peer_reads_total", "Chunks fetched from their owner",
          c.peer_reads());
  Counter(out, "dlcache_peer_read_bytes_total",
          "Chunk bytes fetched from owners", c.peer_bytes());
  Counter(out, "dlcache_peer_fallbacks_total",
          "Chunks read locally because the owner failed or was skipped",
          c.fallbacks());
  Counter(out, "dlcache_peer_skipped_down_total",
          "Fallbacks because the owner was marked down", c.skipped_down());
  Counter(out, "dlcache_peer_stat_fallbacks_total",
          "File stats answered locally because the owner failed",
          c.stat_fallbacks());
  Counter(out, "dlcache_peer_served_fetches_total",
          "Chunk fetches this node answered for peers", c.served_fetches());
  Counter(out, "dlcache_peer_served_fetch_errors_total",
          "Chunk fetches from peers answered with an error",
          c.served_fetch_errors());
  Counter(out, "dlcache_peer_served_bytes_total", "Chunk bytes sent to peers",
          c.served_bytes());
  Counter(out, "dlcache_peer_served_stats_total",
          "File stats answered for peers", c.served_stats());
  Counter(out, "dlcache_peer_unauthenticated_total",
          "Peer calls refused for a missing or wrong token",
          c.unauthenticated());
  Gauge(out, "dlcache_peer_serving_in_flight",
        "Chunk fetches from peers being answered now", c.serving_in_flight());
}

// Epoch plans, only with --epoch_plans. Per-plan series are bounded by
// the node's plan limit (256).
void Plans(std::string* out, const v1::PlanStatus& p) {
  IntGauge(out, "dlcache_plans", "Epoch plans registered", p.plans());
  IntGauge(out, "dlcache_plan_positions",
           "Planned reads held over all epoch plans", p.planned_positions());
  Counter(out, "dlcache_plan_consumed_total",
          "Reads that advanced an epoch plan", p.consumed());
  Counter(out, "dlcache_plan_refusals_total",
          "Plan registrations refused by a limit", p.refusals());
  Counter(out, "dlcache_plan_progress_dropped_total",
          "Batches' plan progress dropped by the full progress queue",
          p.progress_dropped());
  Counter(out, "dlcache_plan_lookahead_cached_total",
          "Planned reads the look-ahead found cached (no fill)",
          p.lookahead_cached());
  Counter(out, "dlcache_plan_lookahead_issued_total",
          "Look-ahead fills of planned reads handed to the fill pool",
          p.lookahead_issued());
  Counter(out, "dlcache_plan_lookahead_skipped_total",
          "Look-ahead fills skipped: the consumers were there first",
          p.lookahead_skipped());
  Counter(out, "dlcache_plan_lookahead_failed_total",
          "Look-ahead fills that failed", p.lookahead_failed());
  IntGauge(out, "dlcache_plan_lookahead_in_flight",
           "Look-ahead fills running now", p.lookahead_in_flight());
  IntGauge(out, "dlcache_plan_memory_bytes",
           "Server memory the epoch plans' key lists take (estimated; "
           "--max_plan_bytes_per_uid per owner)",
           p.memory_bytes());
  IntGauge(out, "dlcache_plan_lookahead_bytes",
           "Arena bytes the plans' look-ahead holds, counted against each "
           "owner's share of the arena",
           p.lookahead_bytes());
  Counter(out, "dlcache_plan_lookahead_over_share_total",
          "Planned reads not filled: their plan's owner was over its share "
          "of the arena",
          p.lookahead_over_share());
  struct Family {
    const char* name;
    const char* help;
    uint64_t (*get)(const v1::PlanInfo&);
  };
  const Family families[] = {
      {"dlcache_plan_frontier", "Consumption frontier of a plan (position)",
       [](const v1::PlanInfo& i) { return i.frontier(); }},
      {"dlcache_plan_end", "One past the last planned position of a plan",
       [](const v1::PlanInfo& i) { return i.end(); }},
      {"dlcache_plan_sessions", "Sessions attached to a plan",
       [](const v1::PlanInfo& i) { return uint64_t{i.sessions()}; }},
      {"dlcache_plan_world_size",
       "World size of a job plan (one plan for a job's ranks); 0: one "
       "reader's plan",
       [](const v1::PlanInfo& i) { return uint64_t{i.world_size()}; }},
      {"dlcache_plan_ranks", "Ranks of a job plan attached on this node",
       [](const v1::PlanInfo& i) {
         return static_cast<uint64_t>(i.ranks_size());
       }},
  };
  for (const Family& f : families) {
    absl::StrAppend(out, "# HELP ", f.name, " ", f.help, "\n# TYPE ", f.name,
                    " gauge\n");
    for (const v1::PlanInfo& i : p.plan_list()) {
      absl::StrAppend(out, f.name, "{dataset=\"", Escape(i.dataset()),
                      "\",plan=\"", Escape(i.name()), "\",owner=\"",
                      Escape(i.owner()), "\"} ", f.get(i), "\n");
    }
  }
}

// The stall each job sees (issue 34): per dataset, plan and owner,
// bounded by the registry (256 series).
void Stalls(std::string* out, const v1::StallStatus& st) {
  Counter(out, "dlcache_stall_reports_total", "Loaders' stall reports counted",
          st.reports());
  Counter(
      out, "dlcache_stall_reports_dropped_total",
      "Loaders' stall reports refused (a dataset unknown or not readable by "
      "the caller, a bad plan name, implausible times)",
      st.dropped());
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    double (*get)(const v1::JobStall&);
  };
  const Family families[] = {
      {"dlcache_job_wait_seconds_total", "counter",
       "Seconds the job's training loop waited inside next() for a batch "
       "(reported by its loaders)",
       [](const v1::JobStall& j) { return j.wait_s(); }},
      {"dlcache_job_step_seconds_total", "counter",
       "Seconds the job's training loop spent between batches (its own "
       "work, reported by its loaders)",
       [](const v1::JobStall& j) { return j.step_s(); }},
      {"dlcache_job_batches_total", "counter",
       "Batches the job's loaders handed to the training loop",
       [](const v1::JobStall& j) { return static_cast<double>(j.batches()); }},
      {"dlcache_job_stall_ratio", "gauge",
       "Share of the job's loop time spent waiting for data since the "
       "server started: wait / (wait + step); for a window use "
       "rate(dlcache_job_wait_seconds_total) over the sum of both rates",
       [](const v1::JobStall& j) {
         const double total = j.wait_s() + j.step_s();
         return total > 0 ? j.wait_s() / total : 0.0;
       }},
  };
  for (const Family& f : families) {
    absl::StrAppend(out, "# HELP ", f.name, " ", f.help, "\n# TYPE ", f.name,
                    " ", f.type, "\n");
    for (const v1::JobStall& j : st.jobs()) {
      absl::StrAppend(out, f.name, "{dataset=\"", Escape(j.dataset()),
                      "\",plan=\"", Escape(j.plan()), "\",owner=\"",
                      Escape(j.owner()), "\"} ", Number(f.get(j)), "\n");
    }
  }
}

void PerDataset(std::string* out, const v1::StatsResponse& stats,
                const char* name, const char* type, const char* help,
                const std::function<uint64_t(const v1::DatasetStats&)>& get) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type,
                  "\n");
  for (const v1::DatasetStats& d : stats.datasets()) {
    absl::StrAppend(out, name, "{dataset=\"", Escape(d.dataset()), "\"} ",
                    get(d), "\n");
  }
}

}  // namespace

std::string PrometheusLabelValue(const std::string& v) {
  if (PrintableUtf8(v)) {
    return absl::StrReplaceAll(v,
                               {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
  }
  return absl::StrCat("hex:", absl::BytesToHexString(v));
}

std::string RenderPrometheus(const v1::StatusResponse& status,
                             const v1::StatsResponse& stats) {
  std::string out;
  Gauge(&out, "dlcache_up", "1 when the server is serving",
        status.state() == "SERVING" ? 1 : 0);
  Gauge(&out, "dlcache_uptime_seconds", "Seconds since start",
        status.uptime_s());
  Gauge(&out, "dlcache_arena_bytes", "Shared-memory arena capacity",
        status.arena_bytes());
  Gauge(&out, "dlcache_arena_used_bytes", "Arena bytes in use",
        status.arena_used_bytes());
  Gauge(&out, "dlcache_leased_bytes_all", "Bytes pinned by client leases",
        status.leased_bytes());
  Gauge(&out, "dlcache_sessions", "Open client sessions", status.sessions());
  Gauge(&out, "dlcache_leases", "Outstanding leases", status.leases());
  using D = v1::DatasetStats;
  PerDataset(&out, stats, "dlcache_hits_total", "counter",
             "Chunks trainers' reads found in memory (warm-ups and look-ahead "
             "fills are not counted)",
             [](const D& d) { return d.hits(); });
  PerDataset(&out, stats, "dlcache_misses_total", "counter",
             "Chunks trainers' reads had to wait a fill for",
             [](const D& d) { return d.misses(); });
  PerDataset(&out, stats, "dlcache_warmup_fills_total", "counter",
             "Chunks warm-ups read into memory",
             [](const D& d) { return d.warmup_fills(); });
  PerDataset(&out, stats, "dlcache_lookahead_fills_total", "counter",
             "Chunks read into memory ahead of the reads (epoch plans' "
             "look-ahead, clients' prefetch)",
             [](const D& d) { return d.lookahead_fills(); });
  PerDataset(&out, stats, "dlcache_served_bytes_total", "counter",
             "Bytes handed to clients",
             [](const D& d) { return d.bytes_served(); });
  PerDataset(&out, stats, "dlcache_evictions_total", "counter",
             "Chunks evicted from memory",
             [](const D& d) { return d.evictions(); });
  PerDataset(&out, stats, "dlcache_source_reads_total", "counter",
             "Chunk reads from the source",
             [](const D& d) { return d.source_reads(); });
  PerDataset(&out, stats, "dlcache_source_bytes_total", "counter",
             "Bytes read from the source",
             [](const D& d) { return d.source_bytes(); });
  PerDataset(&out, stats, "dlcache_fill_errors_total", "counter",
             "Items whose fill failed",
             [](const D& d) { return d.fill_errors(); });
  PerDataset(&out, stats, "dlcache_cached_bytes", "gauge",
             "Bytes cached in memory",
             [](const D& d) { return d.cached_bytes(); });
  PerDataset(&out, stats, "dlcache_cached_chunks", "gauge",
             "Chunks cached in memory",
             [](const D& d) { return d.cached_chunks(); });
  PerDataset(&out, stats, "dlcache_leased_bytes", "gauge",
             "Bytes pinned by leases",
             [](const D& d) { return d.leased_bytes(); });
  if (status.cluster().enabled()) Cluster(&out, status.cluster());
  if (status.plans().enabled()) Plans(&out, status.plans());
  Stalls(&out, status.stalls());
  return out;
}

void AppendDataPathMetrics(const DataServer::Stats& s, const TierStats& t,
                           std::string* out) {
  IntGauge(out, "dlcache_data_connections", "Open local data connections",
           s.open_connections);
  Counter(out, "dlcache_data_connections_accepted_total",
          "Local data connections accepted", s.accepted);
  absl::StrAppend(out,
                  "# HELP dlcache_data_refusals_total Requests or connections "
                  "refused by a limit, by the flag that sets it\n"
                  "# TYPE dlcache_data_refusals_total counter\n");
  const std::pair<const char*, uint64_t> refusals[] = {
      {"max_connections", s.refused},
      {"max_keys_per_batch", s.keys_limit_refusals},
      {"max_release_per_request", s.release_limit_refusals},
      {"max_frame_bytes", s.reply_limit_refusals},
      {"session_leases", t.session_limit_refusals},
      {"tenant_connections", s.tenant_connection_refusals},
      {"tenant_leases", t.tenant_lease_refusals},
      {"client_hello_timeout", s.hello_timeouts},
      {"client_stall_timeout", s.stalled_closes},
  };
  for (const auto& [limit, n] : refusals) {
    absl::StrAppend(out, "dlcache_data_refusals_total{limit=\"", limit, "\"} ",
                    n, "\n");
  }
  Counter(out, "dlcache_data_list_refresh_throttles_total",
          "Listing refreshes answered from the current listing: the tenant "
          "had one walk the source less than 5 s before",
          s.list_refresh_throttles);
  Counter(out, "dlcache_data_tenant_throttles_total",
          "Times a data connection stopped being read because its tenant "
          "held its share of --max_client_buffer_bytes",
          s.tenant_buffer_throttles);
  IntGauge(out, "dlcache_data_client_buffer_bytes",
           "Bytes held for data clients in partial request frames and unsent "
           "replies",
           s.buffered_bytes);
  absl::StrAppend(
      out,
      "# HELP dlcache_numa_fills_total Fills that asked for a NUMA node the "
      "arena has segments on (docs/numa.md), by whether they got a slot "
      "there (local) or on another node (remote: that node was full)\n"
      "# TYPE dlcache_numa_fills_total counter\n",
      "dlcache_numa_fills_total{placement=\"local\"} ", t.numa_local_fills,
      "\n", "dlcache_numa_fills_total{placement=\"remote\"} ",
      t.numa_remote_fills, "\n");
  absl::StrAppend(
      out,
      "# HELP dlcache_readopt_unverified_chunks Chunks re-adopted from the "
      "previous server whose checksum is not checked yet "
      "(--readopt_verify=background)\n"
      "# TYPE dlcache_readopt_unverified_chunks gauge\n"
      "dlcache_readopt_unverified_chunks ",
      t.readopt_unverified, "\n",
      "# HELP dlcache_readopt_corrupt_chunks_total Re-adopted chunks dropped "
      "because their bytes failed their checksum\n"
      "# TYPE dlcache_readopt_corrupt_chunks_total counter\n"
      "dlcache_readopt_corrupt_chunks_total ",
      t.readopt_corrupt, "\n");
  // Admission and demotion (issue 11).
  uint64_t passthrough = 0, demotions = 0;
  for (const TierDatasetStats& d : t.datasets) {
    passthrough += d.passthrough;
    demotions += d.demotions;
  }
  IntGauge(out, "dlcache_borrowed_bytes",
           "Arena bytes held by chunks kept from peers (--borrowed_share)",
           t.borrowed_bytes);
  Counter(out, "dlcache_passthrough_total",
          "Misses served without being kept (a MinIO dataset that is full, "
          "a peer copy the borrowed share has no room for)",
          passthrough);
  Counter(out, "dlcache_demotions_total",
          "Evicted chunks queued for writing behind to the SSD tier",
          demotions);
  Counter(out, "dlcache_data_protocol_errors_total",
          "Connections closed for malformed frames", s.protocol_errors);
  Counter(out, "dlcache_data_slow_reader_disconnects_total",
          "Connections closed over --max_reply_queue_bytes", s.slow_readers);
  IntGauge(out, "dlcache_data_inflight_requests",
           "Batches and stats being served now", s.inflight_requests);
  Counter(out, "dlcache_data_frames_received_total",
          "Request frames read from clients", s.frames_received);
  Counter(out, "dlcache_data_frames_sent_total", "Reply frames sent to clients",
          s.frames_sent);
  Counter(out, "dlcache_data_bytes_received_total",
          "Bytes read from client sockets", s.bytes_received);
  Counter(out, "dlcache_data_bytes_sent_total",
          "Bytes written to client sockets", s.bytes_sent);
}

void AppendSsdMetrics(const SsdTierStats& s, std::string* out) {
  IntGauge(out, "dlcache_ssd_capacity_bytes", "SSD tier capacity",
           s.capacity_bytes);
  IntGauge(out, "dlcache_ssd_free_bytes", "Free bytes on the SSD file system",
           s.free_bytes);
  IntGauge(out, "dlcache_ssd_bytes", "Live chunk bytes on SSD", s.bytes);
  IntGauge(out, "dlcache_ssd_disk_bytes", "SSD data files, dead space included",
           s.disk_bytes);
  IntGauge(out, "dlcache_ssd_chunks", "Chunks on SSD", s.chunks);
  IntGauge(out, "dlcache_ssd_files", "Source files with SSD metadata", s.files);
  IntGauge(out, "dlcache_ssd_data_files", "SSD data files", s.data_files);
  Counter(out, "dlcache_ssd_hits_total", "Chunks served from SSD", s.hits);
  Counter(out, "dlcache_ssd_hit_bytes_total", "Bytes served from SSD",
          s.hit_bytes);
  Counter(out, "dlcache_ssd_misses_total",
          "Chunks the SSD tier read from the next layer", s.misses);
  Counter(out, "dlcache_ssd_corruptions_total",
          "SSD chunks that failed their checksum", s.corruptions);
  Counter(out, "dlcache_ssd_read_errors_total", "SSD reads that failed",
          s.read_errors);
  Counter(out, "dlcache_ssd_writes_total", "Chunks written to SSD", s.writes);
  Counter(out, "dlcache_ssd_write_bytes_total", "Bytes written to SSD",
          s.write_bytes);
  Counter(out, "dlcache_ssd_write_drops_total",
          "Write-behind copies dropped: queue full", s.write_drops);
  Counter(out, "dlcache_ssd_disk_full_drops_total",
          "Chunks not written: disk full", s.disk_full_drops);
  Counter(out, "dlcache_ssd_disk_full_events_total",
          "Times the SSD tier found the disk full", s.disk_full_events);
  Counter(out, "dlcache_ssd_low_space_evictions_total",
          "Data files dropped to keep the minimum free space",
          s.low_space_evictions);
  Counter(out, "dlcache_ssd_write_errors_total", "Other SSD write failures",
          s.write_errors);
  Counter(out, "dlcache_ssd_stale_write_drops_total",
          "Write-behind copies of an outdated file dropped",
          s.stale_write_drops);
  Counter(out, "dlcache_ssd_evicted_data_files_total",
          "SSD data files evicted for capacity", s.evicted_data_files);
  Counter(out, "dlcache_ssd_evicted_chunks_total",
          "SSD chunks evicted for capacity", s.evicted_chunks);
  IntGauge(out, "dlcache_ssd_queued", "Write-behind copies pending", s.queued);
  IntGauge(out, "dlcache_ssd_queued_bytes",
           "Bytes of write-behind copies pending", s.queued_bytes);
  IntGauge(out, "dlcache_ssd_disk_full", "1 while SSD writes are paused",
           s.disk_full ? 1 : 0);
  IntGauge(out, "dlcache_ssd_index_reset",
           "1 when the SSD tier started empty after a corrupt index",
           s.index_reset ? 1 : 0);
  IntGauge(out, "dlcache_ssd_recovering",
           "1 while the SSD tier rebuilds its accounting after a start",
           s.recovering ? 1 : 0);
}

void AppendServerMetrics(const ServerHistograms& h, const StartInfo& start,
                         std::string* out) {
  struct Family {
    const char* name;
    const char* help;
    std::vector<std::pair<const char*, const LatencyHistogram*>> series;
  };
  const Family families[] = {
      {"dlcache_batch_duration_seconds",
       "GetBatch time in the server, from the request to its answer",
       {{"", &h.batch}}},
      {"dlcache_fill_duration_seconds",
       "Time to read one chunk into memory, by the tier that served it",
       {{"tier=\"ssd\"", &h.fill_ssd},
        {"tier=\"peer\"", &h.fill_peer},
        {"tier=\"source\"", &h.fill_source}}},
      {"dlcache_peer_fetch_duration_seconds",
       "Chunk fetches from their owner, answered or not",
       {{"", &h.peer_fetch}}},
      {"dlcache_warmup_duration_seconds",
       "Warm-ups, start to end",
       {{"", &h.warmup}}},
      {"dlcache_sync_duration_seconds",
       "Syncs to the SSD tier, start to end",
       {{"", &h.sync}}},
  };
  for (const Family& f : families) {
    absl::StrAppend(out, "# HELP ", f.name, " ", f.help, "\n# TYPE ", f.name,
                    " histogram\n");
    for (const auto& [labels, histogram] : f.series) {
      histogram->Take().AppendPrometheus(f.name, labels, out);
    }
  }
  IntGauge(out, "dlcache_start_cold",
           "1 when this start found a previous run's arena it could not "
           "re-adopt (a crash or kill -9): the cache restarted cold",
           start.cold ? 1 : 0);
  IntGauge(out, "dlcache_start_readopted_chunks",
           "Chunks re-adopted from the previous run's arena at start",
           start.readopted_chunks);
}

}  // namespace dlcache
