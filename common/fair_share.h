#ifndef DLCACHE_COMMON_FAIR_SHARE_H_
#define DLCACHE_COMMON_FAIR_SHARE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace dlcache {

// One pool of a resource shared by tenants (connections, bytes buffered
// for clients, leased arena bytes), split so that one tenant cannot take
// what the others need (issue 32). Tenants are named by an identity key
// (e.g. "uid 1000"); admins are told apart by the caller.
//
// With capacity C, admin_reserve R and headroom share h, the tenants' part
// is S = C - R. A non-admin identity X holding u_X, while n identities
// (X included) hold something, may take `amount` more when
//   total + amount <= S   and   u_X + amount <= max(S * h / 2,
//                                                   S * (1 - h) / n).
// So a tenant alone may hold S * (1 - h) (three quarters by default): the
// rest stays free for whoever comes next, who may then take up to its fair
// share of it; with n tenants active each may hold (S - S * h) / n, never
// less than S * h / 2. Admins may take anything up to C, so the last R
// units are theirs. Usage above a cap (left from when fewer were active) is
// kept, not taken back: the tenant just cannot grow until it is under.
// With bound_total off the first condition (total + amount <= S) is
// dropped: each identity has its cap, however much the others hold.
//
// Thread-safe; every call takes one mutex (a few map operations).
class FairShare {
 public:
  struct Options {
    uint64_t capacity = 0;
    uint64_t admin_reserve = 0;  // at most capacity
    double headroom = 0.25;      // in [0, 1)
    // false: the pool's total is not bounded, only each identity's cap
    // (usage the pool's owner takes back itself, e.g. look-ahead bytes,
    // which eviction may drop: a newcomer may take its share at once).
    bool bound_total = true;
  };
  explicit FairShare(Options options);

  // Takes `amount` for `identity` when the rule above allows it; false
  // (nothing taken) otherwise.
  bool TryTake(const std::string& identity, bool admin, uint64_t amount);
  // Takes it whatever the rule says (usage the caller cannot refuse, e.g.
  // bytes already received); the identity may then be over its cap.
  void Take(const std::string& identity, uint64_t amount);
  // Gives back what TryTake/Take took (at most what the identity holds).
  void Give(const std::string& identity, uint64_t amount);

  // Whether `identity` may take `amount` more now (TryTake without taking).
  bool Allows(const std::string& identity, bool admin, uint64_t amount) const;
  // What a non-admin identity may hold now (its cap, as above).
  uint64_t Cap(const std::string& identity) const;
  uint64_t held(const std::string& identity) const;
  uint64_t total() const;
  const Options& options() const { return options_; }

 private:
  bool AllowsLocked(const std::string& identity, bool admin,
                    uint64_t amount) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t CapLocked(const std::string& identity) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, uint64_t> held_ ABSL_GUARDED_BY(mu_);
  uint64_t total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_COMMON_FAIR_SHARE_H_
