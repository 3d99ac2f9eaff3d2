#include "common/dir_lock.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;

TEST(DirLockTest, SecondHolderIsRefusedWithTheFirstOnesPid) {
  testing::TempDir dir;
  absl::StatusOr<DirLock> first = DirLock::Acquire(dir.path(), "--shm_dir");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->held());
  absl::StatusOr<DirLock> second = DirLock::Acquire(dir.path(), "--shm_dir");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("another dlcached (pid ", ::getpid(),
                                     ") holds --shm_dir=", dir.path())));
  first->Release();
  EXPECT_TRUE(DirLock::Acquire(dir.path(), "--shm_dir").ok());
}

// A holder that dies without unlocking (kill -9, a crash) leaves the file
// but not the lock.
TEST(DirLockTest, ADeadHoldersFileDoesNotBlock) {
  testing::TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<DirLock> lock = DirLock::Acquire(dir.path(), "--ssd_dir");
    char c = lock.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();  // until the parent's SIGKILL
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  absl::StatusOr<DirLock> busy = DirLock::Acquire(dir.path(), "--ssd_dir");
  ASSERT_FALSE(busy.ok());
  EXPECT_THAT(busy.status().message(), HasSubstr(absl::StrCat("pid ", child)));
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(ready[0]);
  ::close(ready[1]);
  EXPECT_TRUE(DirLock::Acquire(dir.path(), "--ssd_dir").ok());
}

}  // namespace
}  // namespace dlcache
