#ifndef DLCACHE_TESTS_TESTING_COUNTING_SOURCE_H_
#define DLCACHE_TESTS_TESTING_COUNTING_SOURCE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/backend/source.h"
#include "server/server_config.h"
#include "server/source/posix_source.h"

namespace dlcache::testing {

// Wraps a Source: counts calls and injects faults. Thread-safe.
class CountingSource : public Source {
 public:
  explicit CountingSource(std::shared_ptr<Source> inner)
      : inner_(std::move(inner)) {}

  absl::StatusOr<FileInfo> Stat(absl::string_view path) override {
    stats_.fetch_add(1);
    if (absl::Status f = fault(); !f.ok()) return f;
    return inner_->Stat(path);
  }
  absl::Status ReadAt(absl::string_view path, uint64_t offset,
                      absl::Span<char> dst) override {
    reads_.fetch_add(1);
    if (gate_ != nullptr) gate_->WaitForNotification();
    if (absl::Status f = fault(); !f.ok()) return f;
    return inner_->ReadAt(path, offset, dst);
  }
  absl::Status List(
      absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) override {
    lists_.fetch_add(1);
    if (absl::Status f = fault(); !f.ok()) return f;
    return inner_->List(prefix, fn);
  }
  std::string Describe() const override {
    return "counting:" + inner_->Describe();
  }

  // A ServerConfig::source_factory that opens each dataset's root as a
  // PosixSource wrapped in a CountingSource, stored in *out (the last one
  // made; *out must outlive the server).
  static std::function<
      absl::StatusOr<std::shared_ptr<Source>>(const DatasetConfig&)>
  PosixFactory(std::shared_ptr<CountingSource>* out) {
    return
        [out](
            const DatasetConfig& d) -> absl::StatusOr<std::shared_ptr<Source>> {
          auto posix = PosixSource::Open(d.source_root);
          if (!posix.ok()) return posix.status();
          *out = std::make_shared<CountingSource>(
              std::shared_ptr<Source>(*std::move(posix)));
          return *out;
        };
  }

  uint64_t reads() const { return reads_.load(); }
  uint64_t stats() const { return stats_.load(); }
  uint64_t lists() const { return lists_.load(); }
  // Every call fails with `s` until cleared with OkStatus().
  void set_fault(absl::Status s) {
    absl::MutexLock lock(&mu_);
    fault_ = std::move(s);
  }
  // ReadAt blocks until `gate` is notified (null = no gate). Set before use.
  void set_read_gate(absl::Notification* gate) { gate_ = gate; }

 private:
  absl::Status fault() {
    absl::MutexLock lock(&mu_);
    return fault_;
  }
  std::shared_ptr<Source> inner_;
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> stats_{0};
  std::atomic<uint64_t> lists_{0};
  absl::Mutex mu_;
  absl::Status fault_ ABSL_GUARDED_BY(mu_);
  absl::Notification* gate_ = nullptr;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_COUNTING_SOURCE_H_
