#include "common/fd_passing.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <cstring>

#include "gtest/gtest.h"

namespace dlcache {
namespace {

TEST(FdPassingTest, PassesReadOnlyFdThatCannotBeMappedWritable) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);

  UniqueFd mem(::memfd_create("t", MFD_CLOEXEC));
  ASSERT_TRUE(mem.valid());
  ASSERT_EQ(::ftruncate(mem.get(), 4096), 0);
  char* w = static_cast<char*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mem.get(), 0));
  ASSERT_NE(w, MAP_FAILED);
  std::strcpy(w, "hello");
  std::string proc = "/proc/self/fd/" + std::to_string(mem.get());
  UniqueFd ro(::open(proc.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(ro.valid());

  const char payload[] = "seg";
  int fds[] = {ro.get()};
  ASSERT_TRUE(SendWithFds(a.get(), payload, fds).ok());

  char buf[16];
  std::vector<UniqueFd> got;
  absl::StatusOr<size_t> n = RecvWithFds(b.get(), buf, &got);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, sizeof(payload));
  ASSERT_EQ(got.size(), 1u);

  void* rw = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
                    got[0].get(), 0);
  EXPECT_EQ(rw, MAP_FAILED) << "a read-only fd must not map writable";
  const char* r = static_cast<const char*>(
      ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, got[0].get(), 0));
  ASSERT_NE(r, MAP_FAILED);
  EXPECT_STREQ(r, "hello");
  ::munmap(const_cast<char*>(r), 4096);
  ::munmap(w, 4096);
}

TEST(FdPassingTest, RecvReportsPeerClose) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  a.reset();
  char buf[8];
  std::vector<UniqueFd> got;
  absl::StatusOr<size_t> n = RecvWithFds(b.get(), buf, &got);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

TEST(FdPassingTest, TooManyFdsIsInvalidArgument) {
  std::vector<int> fds(kMaxFdsPerMessage + 1, 0);
  EXPECT_EQ(SendWithFds(0, "x", fds).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FdPassingTest, ConnectToNobodyIsUnavailable) {
  EXPECT_EQ(
      ConnectUnix("/tmp/dlcache-no-such.sock", SOCK_STREAM).status().code(),
      absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dlcache
