#ifndef DLCACHE_TESTS_TESTING_FAKE_CHUNK_BACKEND_H_
#define DLCACHE_TESTS_TESTING_FAKE_CHUNK_BACKEND_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "common/checksum.h"
#include "server/backend/chunk_backend.h"
#include "server/backend/source.h"

namespace dlcache::testing {

// An in-memory "layer below" for tier tests: files per dataset, held as
// strings the test can change at will. Counts calls and injects faults.
// source(dataset) views the same files as a Source (for Sync/Revalidate);
// its calls are counted separately. Thread-safe.
class FakeChunkBackend : public ChunkBackend {
 public:
  explicit FakeChunkBackend(uint64_t chunk_size) : chunk_size_(chunk_size) {}

  // Creates or replaces a file.
  void PutFile(absl::string_view dataset, absl::string_view path,
               std::string bytes, int64_t mtime_ns) {
    absl::MutexLock lock(&mu_);
    std::string key = Key(dataset, path);
    if (keep_versions_) {
      versions_[VersionKey(key, FileInfo{bytes.size(), mtime_ns})] = bytes;
    }
    files_[key] = File{std::move(bytes), mtime_ns};
  }
  // With versions kept, ReadChunk reads the version `info` names (as a
  // snapshotting source would), so a test can tell which version a tier
  // served. Set before the first PutFile.
  void set_keep_versions(bool keep) {
    absl::MutexLock lock(&mu_);
    keep_versions_ = keep;
  }
  // A file's metadata and bytes, read together.
  std::pair<FileInfo, std::string> Snapshot(absl::string_view dataset,
                                            absl::string_view path) const {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(Key(dataset, path));
    if (it == files_.end()) return {};
    return {FileInfo{it->second.bytes.size(), it->second.mtime_ns},
            it->second.bytes};
  }
  void RemoveFile(absl::string_view dataset, absl::string_view path) {
    absl::MutexLock lock(&mu_);
    files_.erase(Key(dataset, path));
  }
  std::string Bytes(absl::string_view dataset, absl::string_view path) const {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(Key(dataset, path));
    return it == files_.end() ? std::string() : it->second.bytes;
  }
  FileInfo Info(absl::string_view dataset, absl::string_view path) const {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(Key(dataset, path));
    if (it == files_.end()) return FileInfo{};
    return FileInfo{it->second.bytes.size(), it->second.mtime_ns};
  }

  // --- ChunkBackend ---
  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path) override {
    stats_.fetch_add(1);
    absl::MutexLock lock(&mu_);
    if (!fault_.ok()) return fault_;
    auto it = files_.find(Key(dataset, path));
    if (it == files_.end()) {
      return absl::NotFoundError(absl::StrCat("no file ", path));
    }
    return FileInfo{it->second.bytes.size(), it->second.mtime_ns};
  }
  absl::Status ReadChunk(const ChunkId& id, const FileInfo& info,
                         absl::Span<char> dst, uint64_t* checksum,
                         ChunkOrigin* origin) override {
    reads_.fetch_add(1);
    if (gate_ != nullptr) gate_->WaitForNotification();
    absl::MutexLock lock(&mu_);
    if (!fault_.ok()) return fault_;
    if (fail_reads_ > 0) {
      --fail_reads_;
      return absl::UnavailableError("injected read failure");
    }
    const uint64_t offset = uint64_t{id.chunk} * chunk_size_;
    absl::Status s;
    auto v = versions_.find(VersionKey(Key(id.dataset, id.path), info));
    if (keep_versions_ && v != versions_.end()) {
      if (offset > v->second.size() || dst.size() > v->second.size() - offset) {
        return absl::OutOfRangeError("beyond the version's end");
      }
      std::copy_n(v->second.data() + offset, dst.size(), dst.data());
    } else {
      s = ReadAtLocked(Key(id.dataset, id.path), offset, dst);
    }
    if (!s.ok()) return s;
    *checksum = Checksum(dst.data(), dst.size());
    if (origin != nullptr) *origin = ChunkOrigin::kLocal;
    return absl::OkStatus();
  }

  uint64_t reads() const { return reads_.load(); }
  uint64_t stats() const { return stats_.load(); }
  uint64_t source_reads() const { return source_reads_.load(); }
  // Every call (of both views) fails with `s` until OkStatus() is set.
  void set_fault(absl::Status s) {
    absl::MutexLock lock(&mu_);
    fault_ = std::move(s);
  }
  // The next `n` ReadChunk calls fail with UNAVAILABLE.
  void fail_next_reads(int n) {
    absl::MutexLock lock(&mu_);
    fail_reads_ = n;
  }
  // ReadChunk blocks until `gate` is notified; null = no gate.
  void set_read_gate(absl::Notification* gate) { gate_ = gate; }

  // The files of one dataset as a Source.
  Source* source(absl::string_view dataset) {
    absl::MutexLock lock(&mu_);
    auto& s = sources_[std::string(dataset)];
    if (s == nullptr) s = std::make_unique<View>(this, std::string(dataset));
    return s.get();
  }

 private:
  struct File {
    std::string bytes;
    int64_t mtime_ns = 0;
  };
  static std::string Key(absl::string_view dataset, absl::string_view path) {
    return absl::StrCat(dataset, "\n", path);
  }
  static std::string VersionKey(const std::string& key, const FileInfo& info) {
    return absl::StrCat(key, "\n", info.size, "\n", info.mtime_ns);
  }
  absl::Status ReadAtLocked(const std::string& key, uint64_t offset,
                            absl::Span<char> dst)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = files_.find(key);
    if (it == files_.end()) return absl::NotFoundError("file vanished");
    const std::string& b = it->second.bytes;
    if (offset > b.size() || dst.size() > b.size() - offset) {
      return absl::OutOfRangeError("file is shorter now");
    }
    std::copy_n(b.data() + offset, dst.size(), dst.data());
    return absl::OkStatus();
  }

  class View : public Source {
   public:
    View(FakeChunkBackend* owner, std::string dataset)
        : owner_(owner), dataset_(std::move(dataset)) {}
    absl::StatusOr<FileInfo> Stat(absl::string_view path) override {
      absl::MutexLock lock(&owner_->mu_);
      if (!owner_->fault_.ok()) return owner_->fault_;
      auto it = owner_->files_.find(Key(dataset_, path));
      if (it == owner_->files_.end()) return absl::NotFoundError("no file");
      return FileInfo{it->second.bytes.size(), it->second.mtime_ns};
    }
    absl::Status ReadAt(absl::string_view path, uint64_t offset,
                        absl::Span<char> dst) override {
      owner_->source_reads_.fetch_add(1);
      absl::MutexLock lock(&owner_->mu_);
      if (!owner_->fault_.ok()) return owner_->fault_;
      return owner_->ReadAtLocked(Key(dataset_, path), offset, dst);
    }
    absl::Status List(
        absl::string_view prefix,
        absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn)
        override {
      std::map<std::string, FileInfo> matched;
      {
        absl::MutexLock lock(&owner_->mu_);
        if (!owner_->fault_.ok()) return owner_->fault_;
        const std::string head = Key(dataset_, "");
        for (const auto& [key, f] : owner_->files_) {
          if (!absl::StartsWith(key, head)) continue;
          std::string path = key.substr(head.size());
          if (!prefix.empty() && path != prefix &&
              !absl::StartsWith(path, absl::StrCat(prefix, "/"))) {
            continue;
          }
          matched[path] = FileInfo{f.bytes.size(), f.mtime_ns};
        }
      }
      if (matched.empty() && !prefix.empty()) {
        return absl::NotFoundError(absl::StrCat("no such prefix ", prefix));
      }
      for (const auto& [path, info] : matched) {
        if (!fn(path, info)) break;
      }
      return absl::OkStatus();
    }
    std::string Describe() const override { return "fake:" + dataset_; }

   private:
    FakeChunkBackend* const owner_;
    const std::string dataset_;
  };

  const uint64_t chunk_size_;
  mutable absl::Mutex mu_;
  std::map<std::string, File> files_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<View>> sources_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> versions_ ABSL_GUARDED_BY(mu_);
  bool keep_versions_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fault_ ABSL_GUARDED_BY(mu_);
  int fail_reads_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> stats_{0};
  std::atomic<uint64_t> source_reads_{0};
  absl::Notification* gate_ = nullptr;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_FAKE_CHUNK_BACKEND_H_
