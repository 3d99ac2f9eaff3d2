#include "common/tenant_identity.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

TEST(TenantIdentityTest, PodFromCgroupfsAndSystemdDrivers) {
  EXPECT_EQ(
      PodFromCgroupText("12:pids:/kubepods/burstable/"
                        "pod3f1c2a7e-1b2c-4d5e-8f90-123456789abc/0123abcd\n"
                        "0::/\n"),
      "pod3f1c2a7e-1b2c-4d5e-8f90-123456789abc");
  EXPECT_EQ(PodFromCgroupText("0::/kubepods.slice/kubepods-besteffort.slice/"
                              "kubepods-besteffort-pod3f1c2a7e_1b2c_4d5e_8f90_"
                              "123456789abc.slice/cri-containerd-0123.scope\n"),
            "pod3f1c2a7e-1b2c-4d5e-8f90-123456789abc");
  // Guaranteed pods sit right under kubepods.
  EXPECT_EQ(PodFromCgroupText("0::/kubepods/pod12345678-aaaa/ctr\n"),
            "pod12345678-aaaa");
}

TEST(TenantIdentityTest, NoPodOutsideKubepodsOrForOddNames) {
  EXPECT_EQ(PodFromCgroupText("0::/user.slice/user-1000.slice\n"), "");
  EXPECT_EQ(PodFromCgroupText("0::/pod12345678/x\n"), "");   // not kubepods
  EXPECT_EQ(PodFromCgroupText("0::/kubepods/pod12\n"), "");  // too short
  EXPECT_EQ(PodFromCgroupText("0::/kubepods/pod1234567\x1b[31mz\n"), "");
  EXPECT_EQ(PodFromCgroupText(""), "");
  EXPECT_EQ(PodFromCgroupText("garbage"), "");
}

TEST(TenantIdentityTest, UidAloneWithoutAVisiblePid) {
  EXPECT_EQ(TenantIdentity(1000, 0), "uid 1000");
  // This process: its real uid matches, and it is in no pod here (or in
  // one, which must then be named).
  const std::string me = TenantIdentity(::geteuid(), ::getpid());
  EXPECT_EQ(me.rfind(absl::StrCat("uid ", ::geteuid()), 0), 0u) << me;
  // Another uid's claim on this pid names no pod.
  EXPECT_EQ(TenantIdentity(::geteuid() + 12345, ::getpid()),
            absl::StrCat("uid ", ::geteuid() + 12345));
}

}  // namespace
}  // namespace dlcache
