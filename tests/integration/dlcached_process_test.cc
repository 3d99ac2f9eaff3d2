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

struct RunResult {
  int exit_code;
  std::string output;
};

// Runs dlcached to completion (for start-up failures) and captures stderr.
// A dlcached that does not exit (a regression: it started serving) is
// killed after 60 s, which fails the test with exit code 124 or 137
// instead of hanging it.
RunResult RunDlcached(const std::string& args) {
  std::string cmd =
      absl::StrCat("timeout -k 5 60 ", DLCACHED_BINARY, " ", args, " 2>&1");
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) {
    out.append(buf.data(), n);
  }
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
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
  RunResult r = RunDlcached(Flags());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("no datasets"), std::string::npos) << r.output;
}

TEST_F(DlcachedProcessTest, MissingSourceDirIsClear) {
  RunResult r = RunDlcached(Flags() + "--source=/nonexistent/data");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("not a readable directory"), std::string::npos)
      << r.output;
}

TEST_F(DlcachedProcessTest, BadSizeFlagIsRejected) {
  RunResult r =
      RunDlcached(Flags() + "--source=" + data_.path() + " --arena_bytes=lots");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad size"), std::string::npos) << r.output;
}

TEST_F(DlcachedProcessTest, ArenaLargerThanShmFailsAtStartNotWithSigbus) {
  RunResult r = RunDlcached(Flags() + "--source=" + data_.path() +
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
  RunResult second = RunDlcached(Flags() + "--source=" + data_.path() +
                                 " --arena_bytes=16MiB");
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.output.find("another dlcached"), std::string::npos)
      << second.output;
  EXPECT_EQ(server.Stop(), 0);
}

TEST_F(DlcachedProcessTest, HelpDescribesTheFlags) {
  RunResult r = RunDlcached("--help");
  EXPECT_NE(r.output.find("--source"), std::string::npos);
  EXPECT_NE(r.output.find("--arena_bytes"), std::string::npos);
}

}  // namespace
}  // namespace dlcache
