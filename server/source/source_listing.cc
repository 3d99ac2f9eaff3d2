#include "server/source/source_listing.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/heap_trim.h"

namespace dlcache {

size_t SourceListing::Snapshot::bytes() const {
  return names_.capacity() + name_end_.capacity() * sizeof(uint32_t) +
         sizes_.capacity() * sizeof(uint64_t) +
         mtimes_.capacity() * sizeof(int64_t);
}

SourceListing::SourceListing(Source* source) : source_(source) {}

absl::StatusOr<std::shared_ptr<const SourceListing::Snapshot>>
SourceListing::Make(Source* source) {
  // Collected unsorted into one buffer (no string per file: 1.3M small
  // allocations would cost more than the names), then sorted by index.
  std::string names;
  std::vector<uint64_t> begin;
  std::vector<FileInfo> infos;
  absl::Status st =
      source->List("", [&](absl::string_view path, const FileInfo& info) {
        begin.push_back(names.size());
        names.append(path.data(), path.size());
        infos.push_back(info);
        return true;
      });
  if (st.code() == absl::StatusCode::kNotFound) {
    st = absl::OkStatus();  // no root (yet): nothing to list
    names.clear();
    begin.clear();
    infos.clear();
  }
  if (!st.ok()) return st;
  if (names.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the listing of ", source->Describe(), " holds ",
                     names.size(), " bytes of names; at most 4 GiB are kept"));
  }
  const size_t n = begin.size();
  begin.push_back(names.size());
  auto name_of = [&](uint32_t i) {
    return absl::string_view(names).substr(begin[i], begin[i + 1] - begin[i]);
  };
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return name_of(a) < name_of(b); });
  auto snap = std::make_shared<Snapshot>();
  snap->names_.reserve(names.size());
  snap->name_end_.reserve(n);
  snap->sizes_.reserve(n);
  snap->mtimes_.reserve(n);
  absl::string_view last;
  for (size_t k = 0; k < n; ++k) {
    const uint32_t i = order[k];
    absl::string_view name = name_of(i);
    // A source lists each file once; a duplicate would break paging.
    if (k > 0 && name == last) continue;
    snap->names_.append(name.data(), name.size());
    snap->name_end_.push_back(static_cast<uint32_t>(snap->names_.size()));
    snap->sizes_.push_back(infos[i].size);
    snap->mtimes_.push_back(infos[i].mtime_ns);
    last = name;
  }
  snap->made_ = absl::Now();
  return snap;
}

absl::StatusOr<std::shared_ptr<const SourceListing::Snapshot>>
SourceListing::Get(bool refresh) {
  absl::MutexLock lock(&mu_);
  if (!refresh && current_ != nullptr && !stale_) return current_;
  // The walk whose result answers this call: one that starts after now
  // for a refresh, else the one running (if any).
  const uint64_t need =
      refresh || !walking_ ? walks_started_ + 1 : walks_started_;
  while (walks_done_ < need) {
    if (walking_) {
      mu_.Await(absl::Condition(
          +[](bool* walking) { return !*walking; }, &walking_));
      continue;
    }
    walking_ = true;
    const uint64_t mine = ++walks_started_;
    stale_ = false;  // an Invalidate() from now on makes it stale again
    absl::StatusOr<std::shared_ptr<const Snapshot>> made;
    {
      mu_.Unlock();
      made = Make(source_);
      mu_.Lock();
    }
    std::shared_ptr<const Snapshot> old;
    if (made.ok()) {
      old = std::move(current_);
      current_ = *std::move(made);
      last_walk_ = absl::OkStatus();
    } else {
      last_walk_ = made.status();
      stale_ = true;
    }
    walks_done_ = mine;
    walking_ = false;
    // The walk's scratch (as large as the listing) and, unless a page
    // still holds it, the old listing are free now: give them back rather
    // than leave them resident in malloc's arenas (millions of files:
    // tens of MB).
    mu_.Unlock();
    old.reset();
    ReleaseFreeHeap();
    mu_.Lock();
  }
  if (!last_walk_.ok()) return last_walk_;
  return current_;
}

absl::StatusOr<std::string> SourceListing::Page(
    absl::string_view prefix, absl::string_view page_token, size_t max_entries,
    size_t max_bytes, bool refresh,
    absl::FunctionRef<void(absl::string_view, const FileInfo&)> add) {
  absl::StatusOr<std::shared_ptr<const Snapshot>> got = Get(refresh);
  if (!got.ok()) return got.status();
  const Snapshot& s = **got;
  const size_t n = s.size();
  // Index of the first name > key (names are sorted and unique).
  auto upper = [&](absl::string_view key) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (s.name(mid) <= key) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  };
  auto lower = [&](absl::string_view key) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (s.name(mid) < key) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  };
  // What the prefix covers: the file `prefix` itself, then the contiguous
  // run of names that start with "prefix/" (names such as "prefix-a" or
  // "prefix.b" sort between the two and are not covered).
  size_t exact = n;  // index of the file named `prefix`, n if none
  size_t run_begin = 0, run_end = n;
  if (!prefix.empty()) {
    const size_t at = lower(prefix);
    if (at < n && s.name(at) == prefix) exact = at;
    const std::string dir = absl::StrCat(prefix, "/");
    const std::string after = absl::StrCat(prefix, "0");  // '0' follows '/'
    run_begin = lower(dir);
    run_end = lower(after);
  }
  const size_t from = page_token.empty() ? 0 : upper(page_token);
  size_t added = 0;
  size_t bytes = 0;
  std::string last;
  auto take = [&](size_t i) {
    absl::string_view name = s.name(i);
    add(name, s.info(i));
    ++added;
    bytes += name.size();
    last.assign(name.data(), name.size());
  };
  auto full = [&] {
    return added >= std::max<size_t>(max_entries, 1) || bytes >= max_bytes;
  };
  if (exact < n && exact >= from) take(exact);
  size_t i = std::max(run_begin, from);
  for (; i < run_end && !full(); ++i) take(i);
  // Stopped with names left under the prefix: the next page starts after
  // the last one sent.
  return i < run_end ? last : std::string();
}

void SourceListing::Invalidate() {
  absl::MutexLock lock(&mu_);
  stale_ = true;
}

std::shared_ptr<const SourceListing::Snapshot> SourceListing::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

uint64_t SourceListing::walks() const {
  absl::MutexLock lock(&mu_);
  return walks_done_;
}

}  // namespace dlcache
