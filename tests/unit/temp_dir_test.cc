// tests/testing/temp_dir: a test process's directories go away however the
// process ends (issue 18: a test killed by ctest must leave nothing in /tmp
// or /dev/shm).
#include "tests/testing/temp_dir.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dlcache::testing {
namespace {

// Waits until `path` is gone; false after `timeout`.
bool AwaitGone(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (std::filesystem::exists(path)) {
    if (absl::Now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(TempDirTest, RemovedOnDestruction) {
  std::string path;
  {
    TempDir dir;
    path = dir.path();
    WriteFileOrDie(dir.Sub("a/b"), "x");
    EXPECT_TRUE(std::filesystem::exists(dir.Sub("a/b")));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(TempDirTest, AKilledProcessLeavesNoDirectory) {
  TempDir root;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Two directories under one parent, one with a file, then a kill that
    // runs no destructor.
    auto* a = new TempDir(root.path());
    auto* b = new TempDir(root.path());
    WriteFileOrDie(b->Sub("data"), "bytes");
    const std::string paths = absl::StrCat(a->path(), "\n", b->path(), "\n");
    (void)!::write(fds[1], paths.data(), paths.size());
    ::kill(::getpid(), SIGKILL);
    ::_exit(1);
  }
  ::close(fds[1]);
  std::string paths;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) {
    paths.append(buf, n);
  }
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const size_t nl = paths.find('\n');
  ASSERT_NE(nl, std::string::npos) << paths;
  const std::string a = paths.substr(0, nl);
  const std::string b = paths.substr(nl + 1, paths.size() - nl - 2);
  EXPECT_TRUE(
      absl::StartsWith(a, root.path() + "/dlc-" + std::to_string(child)))
      << a;
  EXPECT_TRUE(AwaitGone(a, absl::Seconds(20))) << a;
  EXPECT_TRUE(AwaitGone(b, absl::Seconds(20))) << b;
}

TEST(TempDirTest, TheFirstDirectoryOfAProcessSweepsThoseOfDeadProcesses) {
  TempDir root;
  // A pid that is not running: a reaped child's.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = absl::StrCat(root.path(), "/dlc-", child, "-abc");
  const std::string alive =
      absl::StrCat(root.path(), "/dlc-", ::getppid(), "-abc");
  const std::string other = root.path() + "/not-ours";
  for (const std::string& d : {dead, alive, other}) {
    std::filesystem::create_directories(d + "/sub");
  }
  TempDir first(root.path());
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(alive));
  EXPECT_TRUE(std::filesystem::exists(other));
}

}  // namespace
}  // namespace dlcache::testing
