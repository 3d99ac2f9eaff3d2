// Starts the real dlcached binary: configuration errors, start-up checks,
// clean shutdown.
#include "tests/testing/dlcached_process.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

using testing::CommandResult;

// Runs dlcached to completion (start-up failures); one that starts serving
// instead (a regression) is killed after 60 s (exit code 124/137).
CommandResult RunDlcached(const std::string& args) {
  return testing::RunDlcached(DLCACHED_BINARY, args);
}

class DlcachedProcessTest : public ::testing::Test {
 protected:
  std::string Flags() {
    return absl::StrCat("--socket=", tmp_.path(),
                        "/s.sock --shm_dir=", shm_.path(),
                        " --metrics_address= ");
  }
  testing::TempDir tmp_;
  testing::TempDir shm_{"/dev/shm"};
  testing::TempDir data_;
};

TEST_F(DlcachedProcessTest, NoDatasetIsAUsageError) {
  CommandResult r = RunDlcached(Flags());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("no datasets"), std::string::npos) << r.output;
}

TEST_F(DlcachedProcessTest, MissingSourceDirIsClear) {
  CommandResult r = RunDlcached(Flags() + "--source=/nonexistent/data");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("not a readable directory"), std::string::npos)
      << r.output;
}

TEST_F(DlcachedProcessTest, BadSizeFlagIsRejected) {
  CommandResult r =
      RunDlcached(Flags() + "--source=" + data_.path() + " --arena_bytes=lots");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad size"), std::string::npos) << r.output;
}

TEST_F(DlcachedProcessTest, BadAdmissionFlagsAreRejected) {
  const std::string base =
      Flags() + "--source=" + data_.path() + " --arena_bytes=16MiB ";
  CommandResult r = RunDlcached(base + "--eviction_policy=lru");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown policy 'lru'"), std::string::npos)
      << r.output;
  r = RunDlcached(base + "--eviction_policy=clock,imagenet=minio");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("no dataset named 'imagenet'"), std::string::npos)
      << r.output;
  r = RunDlcached(base + "--borrowed_share=1.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--borrowed_share=1.5 must be between 0 and 1"),
            std::string::npos)
      << r.output;
}

TEST_F(DlcachedProcessTest, ArenaLargerThanShmFailsAtStartNotWithSigbus) {
  CommandResult r = RunDlcached(Flags() + "--source=" + data_.path() +
                                " --arena_bytes=1000TiB");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("does not fit"), std::string::npos) << r.output;
}

TEST_F(DlcachedProcessTest, StartsStopsCleanlyAndRefusesASecondServer) {
  std::string sock = tmp_.path() + "/s.sock";
  testing::DlcachedProcess server(
      DLCACHED_BINARY, sock,
      {"--shm_dir=" + shm_.path(), "--source=" + data_.path(),
       "--arena_bytes=16MiB", "--segment_bytes=8MiB", "--metrics_address="});
  ASSERT_TRUE(server.Start().ok());
  CommandResult second = RunDlcached(Flags() + "--source=" + data_.path() +
                                     " --arena_bytes=16MiB");
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.output.find("another dlcached"), std::string::npos)
      << second.output;
  EXPECT_EQ(server.Stop(), 0);
}

TEST_F(DlcachedProcessTest, HelpDescribesTheFlags) {
  CommandResult r = RunDlcached("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;  // help is no failure
  EXPECT_NE(r.output.find("--source"), std::string::npos);
  EXPECT_NE(r.output.find("--arena_bytes"), std::string::npos);
  EXPECT_EQ(r.output.find("--flagfile ("), std::string::npos);  // absl's own
  CommandResult full = RunDlcached("--helpfull");
  EXPECT_EQ(full.exit_code, 0) << full.output;
  EXPECT_NE(full.output.find("--flagfile ("), std::string::npos);
  EXPECT_NE(full.output.find("--malloc_arenas ("), std::string::npos);
}

}  // namespace
}  // namespace dlcache
