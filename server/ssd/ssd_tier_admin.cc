// SsdTier: administration (Sync, Revalidate, Evict).
#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/checksum.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/fill/listed_job.h"
#include "server/ssd/ssd_tier.h"
#include "server/ssd/ssd_tier_util.h"

namespace dlcache {
namespace {

// Sync hands out work in runs of this many chunks, so one large file is
// still read in parallel.
constexpr uint32_t kSyncItemChunks = 16;
// Deletions are committed in batches of about this many files.
constexpr size_t kFilesPerBatch = 256;

}  // namespace

using ssd_internal::SameInfo;

absl::Status SsdTier::Sync(absl::string_view dataset,
                           absl::string_view prefix_in, Source* source,
                           uint32_t parallelism, const JobProgressFn& progress,
                           absl::Duration period) {
  if (absl::Status s = ValidateDatasetName(dataset); !s.ok()) return s;
  absl::StatusOr<std::string> prefix = NormalizePrefix(prefix_in);
  if (!prefix.ok()) return prefix.status();
  if (source == nullptr) return absl::InvalidArgumentError("no source");

  ListedJobOptions job;
  job.parallelism = parallelism;
  job.period = period;
  job.clock = clock_;
  ListedJobCallbacks cb;
  cb.list =
      [&](absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) {
        return source->List(*prefix, fn);
      };
  cb.plan = [&](absl::string_view path, const FileInfo& info) {
    ListedFilePlan plan;
    // The listing is the truth: record it first, so older chunks go and
    // the stores of the parts are not refused as stale.
    absl::StatusOr<uint64_t> rec = RecordFile(dataset, path, info);
    if (!rec.ok()) {
      plan.status = rec.status();
      return plan;
    }
    if (!ChunkCountFits(info)) {
      plan.status = absl::OutOfRangeError(
          absl::StrCat("file of ", info.size,
                       " bytes has more chunks than a 32-bit index names"));
      return plan;
    }
    plan.bytes = info.size;
    plan.parts = (ChunkCount(info) + kSyncItemChunks - 1) / kSyncItemChunks;
    return plan;
  };
  cb.run_part = [&](const ListedFile& f, uint32_t part,
                    const std::atomic<bool>& cancelled) {
    ListedPartResult r;
    r.skipped = true;  // until a chunk is written
    const uint32_t begin = part * kSyncItemChunks;
    const uint32_t end = std::min(ChunkCount(f.info), begin + kSyncItemChunks);
    std::string buf;
    for (uint32_t c = begin; c < end && !cancelled.load(); ++c) {
      const uint64_t len = ChunkLength(f.info, c);
      absl::StatusOr<SsdIndex::Lookup> l = index_->Find(dataset, f.path, c);
      if (l.ok() && Current(*l, f.info, len)) {
        ++r.chunks_skipped;
        r.bytes += len;
        continue;
      }
      buf.resize(len);
      uint64_t sum = 0;
      absl::Status s =
          next_->ReadChunk(ChunkId{dataset, f.path, c}, f.info,
                           absl::MakeSpan(buf), &sum, /*origin=*/nullptr);
      Stored stored = Stored::kFailed;
      if (s.ok()) {
        {
          absl::MutexLock lock(&mu_);
          stored = StoreLocked(dataset, f.path, c, f.info, buf, sum,
                               /*replace=*/false, /*seen_version=*/0, &s);
        }
        store_->SyncSealed();
      }
      if (stored == Stored::kWritten) {
        ++r.chunks_written;
        r.skipped = false;
      } else if (stored == Stored::kAlreadyThere) {
        ++r.chunks_skipped;
      } else {
        r.status = stored == Stored::kStale
                       ? absl::AbortedError("file changed during sync")
                       : s;
        return r;
      }
      r.bytes += len;
    }
    return r;
  };
  JobProgress last;
  absl::Status s = RunListedJob(job, cb, progress, &last);
  if (!s.ok()) return s;
  DLC_LOG(INFO) << "ssd tier: synced " << LogEscape(dataset) << "/"
                << LogEscape(*prefix) << ": " << last.files_done << " files, "
                << last.chunks_written << " chunks written, "
                << last.chunks_skipped << " current, " << last.files_failed
                << " files failed";
  return absl::OkStatus();
}

absl::Status SsdTier::Revalidate(absl::string_view dataset,
                                 absl::string_view prefix_in, Source* source,
                                 bool verify_checksums,
                                 SsdRevalidateResult* out) {
  if (absl::Status s = ValidateDatasetName(dataset); !s.ok()) return s;
  absl::StatusOr<std::string> prefix = NormalizePrefix(prefix_in);
  if (!prefix.ok()) return prefix.status();
  if (source == nullptr) return absl::InvalidArgumentError("no source");

  // One listing instead of a stat per file: on NFS that is the difference
  // between seconds and hours for millions of files.
  absl::flat_hash_map<std::string, FileInfo> listed;
  absl::Status ls =
      source->List(*prefix, [&](absl::string_view path, const FileInfo& info) {
        listed.emplace(std::string(path), info);
        return true;
      });
  if (!ls.ok() && !absl::IsNotFound(ls)) return ls;

  std::vector<std::pair<std::string, SsdFileMeta>> known;
  absl::Status scan = index_->ForEachFile(
      dataset, *prefix, [&](absl::string_view path, const SsdFileMeta& m) {
        known.emplace_back(std::string(path), m);
        return true;
      });
  if (!scan.ok()) return scan;

  std::string ssd_buf, src_buf;
  for (const auto& [path, meta] : known) {
    ++out->files_checked;
    auto it = listed.find(path);
    if (it == listed.end()) {
      absl::MutexLock lock(&mu_);
      uint64_t chunks = 0, bytes = 0;
      if (absl::Status s =
              DropFileLocked(dataset, path, /*forget=*/true, &chunks, &bytes);
          !s.ok()) {
        return s;
      }
      ++out->files_missing;
      out->chunks_dropped += chunks;
      continue;
    }
    if (!SameInfo(it->second, meta.info)) {
      uint64_t dropped = 0;
      absl::StatusOr<uint64_t> rec =
          RecordFile(dataset, path, it->second, &dropped);
      if (!rec.ok()) return rec.status();
      ++out->files_changed;
      out->chunks_dropped += dropped;
      continue;
    }
    if (!verify_checksums) continue;

    std::vector<std::pair<uint32_t, SsdChunkMeta>> chunks;
    absl::Status cs = index_->ForEachChunkOfFile(
        dataset, path, [&](uint32_t c, const SsdChunkMeta& m) {
          chunks.emplace_back(c, m);
          return true;
        });
    if (!cs.ok()) return cs;
    bool changed = false;
    for (const auto& [c, m] : chunks) {
      if (m.version != meta.version || !SameInfo(m.info, meta.info) ||
          m.length != ChunkLength(meta.info, c)) {
        DropChunkIfSame(dataset, path, c, m);
        ++out->chunks_dropped;
        continue;
      }
      ssd_buf.resize(m.length);
      absl::Status rs =
          store_->Read(m.data_file, m.offset, absl::MakeSpan(ssd_buf));
      if (!rs.ok() || Checksum(ssd_buf.data(), ssd_buf.size()) != m.checksum) {
        counters_.corruptions.fetch_add(1);
        DropChunkIfSame(dataset, path, c, m);
        ++out->corrupt_dropped;
        ++out->chunks_dropped;
        continue;
      }
      src_buf.resize(m.length);
      absl::Status ss = source->ReadAt(path, uint64_t{c} * options_.chunk_size,
                                       absl::MakeSpan(src_buf));
      if (absl::IsUnavailable(ss)) return ss;
      if (!ss.ok() || Checksum(src_buf.data(), src_buf.size()) != m.checksum) {
        changed = true;
        break;
      }
    }
    if (changed) {
      // Same size and mtime, other bytes: forget the file so the next stat
      // records it afresh and its chunks are read again.
      absl::MutexLock lock(&mu_);
      uint64_t n = 0, bytes = 0;
      if (absl::Status s =
              DropFileLocked(dataset, path, /*forget=*/true, &n, &bytes);
          !s.ok()) {
        return s;
      }
      ++out->files_changed;
      out->chunks_dropped += n;
      out->content_changed.push_back(path);
    }
  }

  // Chunks left without a current file record (a crash between writes
  // cannot make them, but a bug could): they would never be served.
  std::vector<std::tuple<std::string, uint32_t, SsdChunkMeta>> orphans;
  std::string last_path;
  absl::optional<SsdFileMeta> last_meta;
  bool first = true;
  absl::Status os = index_->ForEachChunk(
      dataset, *prefix,
      [&](absl::string_view path, uint32_t c, const SsdChunkMeta& m) {
        if (first || path != last_path) {
          first = false;
          last_path = std::string(path);
          absl::StatusOr<absl::optional<SsdFileMeta>> f =
              index_->GetFile(dataset, path);
          last_meta = f.ok() ? *f : absl::nullopt;
        }
        if (!last_meta.has_value() || last_meta->version != m.version) {
          orphans.emplace_back(std::string(path), c, m);
        }
        return true;
      });
  if (!os.ok()) return os;
  absl::MutexLock lock(&mu_);
  for (const auto& [path, c, m] : orphans) {
    DropChunkLocked(dataset, path, c, m);
    ++out->chunks_dropped;
  }
  ReclaimEmptyLocked();
  return absl::OkStatus();
}

absl::StatusOr<SsdEvictResult> SsdTier::Evict(absl::string_view dataset,
                                              absl::string_view prefix_in) {
  if (absl::Status s = ValidateDatasetName(dataset); !s.ok()) return s;
  absl::StatusOr<std::string> prefix = NormalizePrefix(prefix_in);
  if (!prefix.ok()) return prefix.status();
  std::vector<std::string> paths;
  absl::Status scan = index_->ForEachFile(
      dataset, *prefix, [&](absl::string_view path, const SsdFileMeta&) {
        paths.emplace_back(path);
        return true;
      });
  if (!scan.ok()) return scan;
  SsdEvictResult result;
  for (size_t i = 0; i < paths.size();) {
    // The lock is let go between groups so that reads and writes go on.
    absl::MutexLock lock(&mu_);
    // One index write per group, not one per file.
    SsdIndex::Batch batch;
    Delta delta;
    uint64_t chunks = 0, bytes = 0, files = 0;
    for (size_t n = 0; n < kFilesPerBatch && i < paths.size(); ++n, ++i) {
      if (absl::Status s = AddFileDropLocked(dataset, paths[i], /*forget=*/true,
                                             &batch, &delta, &chunks, &bytes);
          !s.ok()) {
        return s;
      }
      ++files;
    }
    if (absl::Status s = CommitLocked(batch, delta); !s.ok()) return s;
    result.chunks += chunks;
    result.bytes += bytes;
    result.files += files;
  }
  std::vector<std::tuple<std::string, uint32_t, SsdChunkMeta>> orphans;
  absl::Status os = index_->ForEachChunk(
      dataset, *prefix,
      [&](absl::string_view path, uint32_t c, const SsdChunkMeta& m) {
        orphans.emplace_back(std::string(path), c, m);
        return true;
      });
  if (!os.ok()) return os;
  absl::MutexLock lock(&mu_);
  for (const auto& [path, c, m] : orphans) {
    DropChunkLocked(dataset, path, c, m);
    ++result.chunks;
    result.bytes += m.length;
  }
  ReclaimEmptyLocked();
  return result;
}

}  // namespace dlcache
