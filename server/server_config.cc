#include "server/server_config.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/key.h"
#include "server/tier/memory_tier.h"

namespace dlcache {
namespace {

// Issue 9: TCP ports are authenticated (mTLS and/or a token) unless the
// operator says --insecure_*; warm-up bounds are sane.
absl::Status ValidateAuthConfig(const ServerConfig& c) {
  if (absl::Status s = ValidateTlsConfig(c.tls); !s.ok()) return s;
  const bool peers = !c.peers.empty() || !c.peer_dns.empty();
  if (peers && c.peer_token.empty() && !c.tls.enabled() && !c.insecure_peers) {
    return absl::InvalidArgumentError(
        "the peer port would serve anyone who reaches it: give "
        "--peer_token_file and/or --tls_cert/--tls_key/--tls_ca (mTLS), or "
        "--insecure_peers to run it unauthenticated");
  }
  if (!c.admin_address.empty() && c.admin_token.empty() && !c.tls.enabled() &&
      !c.insecure_admin) {
    return absl::InvalidArgumentError(
        "the TCP admin port --admin_address would let anyone who reaches it "
        "warm, evict and sync: give --admin_token_file and/or "
        "--tls_cert/--tls_key/--tls_ca (mTLS), or --insecure_admin");
  }
  if (c.max_warmup_parallelism == 0 || c.max_concurrent_warmups == 0) {
    return absl::InvalidArgumentError(
        "--max_warmup_parallelism and --max_concurrent_warmups must be >= 1");
  }
  if (c.warmup_parallelism > c.max_warmup_parallelism) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--warmup_parallelism=", c.warmup_parallelism,
        " is over --max_warmup_parallelism=", c.max_warmup_parallelism));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateServerConfig(const ServerConfig& c) {
  if (c.datasets.empty()) {
    return absl::InvalidArgumentError(
        "no datasets: give --source=DIR or --dataset=NAME=DIR");
  }
  if (c.malloc_arenas < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--malloc_arenas=", c.malloc_arenas, " (0 = glibc's default)"));
  }
  if (c.datasets.size() > MemoryTier::kMaxDatasets) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.datasets.size(), " datasets; at most ",
                     MemoryTier::kMaxDatasets, " per server"));
  }
  for (size_t i = 0; i < c.datasets.size(); ++i) {
    if (absl::Status s = ValidateDatasetName(c.datasets[i].name); !s.ok()) {
      return s;
    }
    for (size_t j = 0; j < i; ++j) {
      if (c.datasets[j].name == c.datasets[i].name) {
        return absl::InvalidArgumentError(
            absl::StrCat("dataset '", c.datasets[i].name, "' given twice"));
      }
    }
  }
  if (c.chunk_size < 4096 || c.chunk_size % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--chunk_size=", c.chunk_size, " must be a multiple of 4 KiB"));
  }
  if (c.chunk_size > MemoryTier::kMaxChunkSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chunk_size=", c.chunk_size, " must be at most ",
                     MemoryTier::kMaxChunkSize, " (4 GiB - 4 KiB)"));
  }
  if (c.segment_bytes < c.chunk_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--segment_bytes=", c.segment_bytes,
                     " must be at least --chunk_size=", c.chunk_size));
  }
  if (c.socket_path.empty()) {
    return absl::InvalidArgumentError("--socket must not be empty");
  }
  if (absl::Status s = ValidateAuthConfig(c); !s.ok()) return s;
  if (!(c.session_lease_share > 0 && c.session_lease_share <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--session_lease_share=", c.session_lease_share, " must be in (0, 1]"));
  }
  if (c.max_leases_per_session == 0) {
    return absl::InvalidArgumentError(
        "--max_leases_per_session must be at least 1");
  }
  if (c.max_reply_queue_bytes < c.max_frame_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_reply_queue_bytes=", c.max_reply_queue_bytes,
        " must be at least --max_frame_bytes=", c.max_frame_bytes));
  }
  return absl::OkStatus();
}

}  // namespace dlcache
