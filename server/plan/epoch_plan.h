#ifndef DLCACHE_SERVER_PLAN_EPOCH_PLAN_H_
#define DLCACHE_SERVER_PLAN_EPOCH_PLAN_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dlcache {

// One job's future reads of one dataset (issue 14): the files it will ask
// for, in order, epoch after epoch, and how far its consumers got.
//
// Positions number the planned reads 0, 1, 2, ... across epochs. The
// consumers (DataLoader workers: several sessions share a plan) are not
// told to report progress; Consume() is called with each path they ask
// for and marks that path's earliest outstanding position consumed. The
// frontier is one past the highest consumed position. Workers run a few
// batches out of order, so a position less than `skew` behind the frontier
// is still outstanding; one further behind was skipped and is forgotten.
// A request for a path whose next outstanding position lies more than
// `skew` ahead of the frontier (a restart at another place, a consumer
// that skipped much) does not count, unless `resync_after` such requests
// come in a row: then the plan follows the consumer there.
//
// Not thread-safe (PlanRegistry serialises calls).
class EpochPlan {
 public:
  static constexpr uint64_t kNever = UINT64_MAX;

  EpochPlan(uint64_t skew, uint32_t resync_after)
      : skew_(skew), resync_after_(resync_after) {}
  EpochPlan(const EpochPlan&) = delete;
  EpochPlan& operator=(const EpochPlan&) = delete;

  // Adds keys [offset, offset + paths.size()) of epoch `epoch`. Parts of
  // the epoch already added (another worker registering the same plan, a
  // resent chunk) are skipped, as is an epoch older than the newest one
  // added. A newer epoch starts after everything added so far (gaps in
  // `offset` are closed up). Returns the positions added.
  uint64_t Add(uint64_t epoch, uint64_t offset,
               absl::Span<const absl::string_view> paths);

  // A consumer asked for `path`. Returns true if that counted as progress
  // of the plan.
  bool Consume(absl::string_view path);

  // Positions from the frontier to the path's next outstanding use (0 =
  // the next one to be consumed); kNever if the plan has no further use of
  // it. `mentioned` (if set) tells whether the plan has the path at all.
  uint64_t NextUse(absl::string_view path, bool* mentioned = nullptr) const;

  // Positions added and not yet trimmed away, and the end of them.
  uint64_t live_positions() const { return order_.size(); }
  uint64_t end() const { return base_ + order_.size(); }
  uint64_t frontier() const { return frontier_; }
  // The path planned at position `pos` (base() <= pos < end()).
  absl::string_view At(uint64_t pos) const {
    return order_[pos - base_]->first;
  }
  uint64_t base() const { return base_; }

  // The look-ahead's memo of what is cached (so that a window of hits is
  // not asked of the tier position by position): `path` was cached whole
  // when the cache's removal generation was `generation` (non-zero).
  void NoteCached(absl::string_view path, uint64_t generation);
  // Whether the path at `pos` was noted cached at `generation`, i.e. with
  // nothing removed from the cache since (base() <= pos < end()).
  bool KnownCached(uint64_t pos, uint64_t generation) const {
    return generation != 0 &&
           order_[pos - base_]->second.cached_generation == generation;
  }

 private:
  struct KeyUses {
    std::vector<uint64_t> positions;  // ascending
    size_t trimmed = 0;               // positions before this are gone
    size_t next = 0;                  // first outstanding (>= trimmed)
    uint64_t cached_generation = 0;   // NoteCached; 0: not known
  };

  // First outstanding position of `k` at or after the frontier less skew.
  size_t FirstLive(const KeyUses& k) const;
  // Drops positions (and keys) the frontier left far behind.
  void Trim();

  const uint64_t skew_;
  const uint32_t resync_after_;
  using KeyMap = absl::node_hash_map<std::string, KeyUses>;
  KeyMap keys_;
  // Position base_ + i: its key's node (stable in a node_hash_map), so
  // trimming needs no second lookup.
  std::deque<KeyMap::value_type*> order_;
  uint64_t base_ = 0;
  uint64_t frontier_ = 0;
  uint32_t out_of_window_ = 0;  // consecutive
  bool has_epoch_ = false;
  uint64_t epoch_ = 0;        // newest epoch added
  uint64_t epoch_start_ = 0;  // its first position
  uint64_t epoch_added_ = 0;  // its keys added so far
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_PLAN_EPOCH_PLAN_H_
