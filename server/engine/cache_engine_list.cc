// CacheEngine: listing a dataset through the cache (kList): the kept
// listing of each source, paged, on the engine's listing threads.

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/engine/cache_engine.h"
#include "server/fill/listed_job.h"

namespace dlcache {

void CacheEngine::ListAsync(absl::string_view dataset,
                            absl::string_view prefix_in,
                            absl::string_view page_token, uint32_t max_entries,
                            size_t max_bytes, bool refresh, ListCallback done) {
  absl::StatusOr<uint32_t> ds = DatasetId(dataset);
  if (!ds.ok()) {
    done(ds.status());
    return;
  }
  absl::StatusOr<std::string> prefix = NormalizePrefix(prefix_in);
  if (!prefix.ok()) {
    done(prefix.status());
    return;
  }
  SourceListing* listing = listings_[*ds].get();
  if (listing == nullptr) {
    done(absl::FailedPreconditionError(absl::StrCat(
        "dataset '", dataset, "' has no source on this node to list")));
    return;
  }
  const uint32_t n =
      std::min(max_entries == 0 ? options_.list_page_entries : max_entries,
               options_.max_list_page_entries);
  // A walk of the source takes seconds for millions of files, and even a
  // kept listing's page is a copy of up to n names: on the listing
  // threads, never the caller's event loop. Concurrent pages of one
  // dataset share its one listing (and its one walk).
  auto shared_done = std::make_shared<ListCallback>(std::move(done));
  list_pool_.Schedule([listing, prefix = *std::move(prefix),
                       token = std::string(page_token), n, max_bytes, refresh,
                       shared_done] {
    ListResult out;
    out.entries.reserve(std::min<uint32_t>(n, 1u << 16));
    absl::StatusOr<std::string> next = listing->Page(
        prefix, token, n, max_bytes, refresh,
        [&](absl::string_view name, const FileInfo& info) {
          out.entries.push_back(ListEntry{std::string(name), info});
        });
    if (!next.ok()) {
      (*shared_done)(next.status());
      return;
    }
    out.next_page_token = *std::move(next);
    (*shared_done)(std::move(out));
  });
}

absl::StatusOr<ListResult> CacheEngine::List(absl::string_view dataset,
                                             absl::string_view prefix,
                                             absl::string_view page_token,
                                             uint32_t max_entries,
                                             size_t max_bytes, bool refresh) {
  absl::Notification done;
  absl::StatusOr<ListResult> result;
  ListAsync(dataset, prefix, page_token, max_entries, max_bytes, refresh,
            [&](absl::StatusOr<ListResult> r) {
              result = std::move(r);
              done.Notify();
            });
  done.WaitForNotification();
  return result;
}

void CacheEngine::InvalidateListing(absl::string_view dataset) {
  auto it = dataset_ids_.find(dataset);
  if (it == dataset_ids_.end()) return;
  if (SourceListing* l = listings_[it->second].get()) l->Invalidate();
}

size_t CacheEngine::listing_bytes() const {
  size_t total = 0;
  for (const auto& l : listings_) {
    if (l == nullptr) continue;
    if (std::shared_ptr<const SourceListing::Snapshot> s = l->current()) {
      total += s->bytes();
    }
  }
  return total;
}

}  // namespace dlcache
