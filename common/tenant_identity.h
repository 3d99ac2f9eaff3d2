#ifndef DLCACHE_COMMON_TENANT_IDENTITY_H_
#define DLCACHE_COMMON_TENANT_IDENTITY_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace dlcache {

// The tenant a local client belongs to, for per-tenant budgets (issue 32):
// "uid N", or "uid N pod P" when the client's process is in a Kubernetes
// pod's cgroup (so that pods running as the same uid, which is common,
// are told apart). Both come from the kernel (SO_PEERCRED, /proc), never
// from what the client says.

// The pod of a /proc/PID/cgroup text: "pod" + the pod's UID, from a
// kubepods path ("/kubepods/burstable/pod<uid>/<container>" with the
// cgroupfs driver, "kubepods-burstable-pod<uid with _>.slice" with the
// systemd one; '_' read as '-'); empty when there is none.
std::string PodFromCgroupText(absl::string_view text);

// "uid N" plus the pod of process `pid` (/proc/PID/cgroup, read only while
// /proc/PID/status still says effective uid N, so that a reused pid names
// no pod). pid 0 (a client in another pid namespace) has no pod. Blocks on
// /proc (small in-memory reads).
std::string TenantIdentity(uint32_t uid, int32_t pid);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_TENANT_IDENTITY_H_
