#ifndef DLCACHE_SERVER_SOURCE_SOURCE_LISTING_H_
#define DLCACHE_SERVER_SOURCE_SOURCE_LISTING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/source.h"

namespace dlcache {

// One dataset's files as its source lists them, kept sorted by name so that
// clients list the dataset through the cache (issue 30; docs/listing.md)
// without a mount of the source: a page is a binary search and a copy of at
// most one page of entries, whatever the dataset's size.
//
// The listing is made on first use (one Source::List of the whole dataset)
// and kept until Invalidate() (warm-up, sync, revalidate: the cache engine
// calls it) or a Page() with refresh; the next Page() then lists the source
// again. Page tokens are names (the last one returned), so paging goes on
// correctly across a refresh: a name is neither repeated nor skipped unless
// it changed at the source meanwhile.
//
// Memory: the names back to back plus 20 bytes per file (a u32 name end,
// the size and the mtime): ~65 MB for ImageNet's 1.28M files (~30-byte
// names). While a refresh runs the old listing stays until the new one is
// complete (about twice that at the peak).
//
// Thread-safe. Page() blocks while the listing is made (the source's
// walk: seconds for millions of files); concurrent callers wait for the
// one walk rather than start their own.
class SourceListing {
 public:
  // An immutable listing: names sorted bytewise, unique.
  class Snapshot {
   public:
    size_t size() const { return sizes_.size(); }
    absl::string_view name(size_t i) const {
      const uint32_t begin = i == 0 ? 0 : name_end_[i - 1];
      return absl::string_view(names_).substr(begin, name_end_[i] - begin);
    }
    FileInfo info(size_t i) const { return FileInfo{sizes_[i], mtimes_[i]}; }
    // Heap bytes held.
    size_t bytes() const;
    absl::Time made() const { return made_; }

   private:
    friend class SourceListing;
    std::string names_;
    std::vector<uint32_t> name_end_;
    std::vector<uint64_t> sizes_;
    std::vector<int64_t> mtimes_;
    absl::Time made_;
  };

  // `source` must outlive this object.
  explicit SourceListing(Source* source);

  SourceListing(const SourceListing&) = delete;
  SourceListing& operator=(const SourceListing&) = delete;

  // Calls add(name, info) for the files under `prefix` (normalised, as
  // NormalizePrefix returns it: "" = all; else a directory or a file: the
  // name itself and everything below "prefix/") whose names sort after
  // `page_token` ("" = from the first), in name order, stopping after
  // max_entries of them or once the names added reach max_bytes (at least
  // one entry is added when there is one). Returns the next page's token:
  // the last name added, or "" when nothing under the prefix is left.
  // refresh: list the source again first (joining a walk already running
  // only if it started after this call). Blocks on the source when a walk
  // is needed. UNAVAILABLE / PERMISSION_DENIED / ... from the source's
  // List (a missing dataset root is an empty listing, not an error);
  // RESOURCE_EXHAUSTED past 4 GiB of names.
  absl::StatusOr<std::string> Page(
      absl::string_view prefix, absl::string_view page_token,
      size_t max_entries, size_t max_bytes, bool refresh,
      absl::FunctionRef<void(absl::string_view, const FileInfo&)> add);

  // The next Page() lists the source again (the current listing answers
  // nothing more). Never blocks on the source.
  void Invalidate();

  // The current listing (null before the first walk); for stats and tests.
  std::shared_ptr<const Snapshot> current() const;
  // Walks of the source done so far (successful or not).
  uint64_t walks() const;

  // Builds a listing from `source` (the whole dataset). Blocks.
  static absl::StatusOr<std::shared_ptr<const Snapshot>> Make(Source* source);

 private:
  // The current listing, walking the source first (or waiting for the walk
  // that runs) when there is none, it is stale, or refresh asks for one
  // that starts after this call.
  absl::StatusOr<std::shared_ptr<const Snapshot>> Get(bool refresh);

  Source* const source_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Snapshot> current_ ABSL_GUARDED_BY(mu_);
  bool stale_ ABSL_GUARDED_BY(mu_) = true;
  bool walking_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t walks_started_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t walks_done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_walk_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_SOURCE_LISTING_H_
