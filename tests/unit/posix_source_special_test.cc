// PosixSource serves regular files only: FIFOs, devices, sockets and
// directories are refused at once (never opened blocking), and listings
// skip them.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/source/posix_source.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;

class PosixSourceSpecialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFileOrDie(dir_.path() + "/ok.bin", "regular");
    ASSERT_EQ(::mkfifo((dir_.path() + "/fifo").c_str(), 0644), 0);
    ASSERT_EQ(::mkdir((dir_.path() + "/dir").c_str(), 0755), 0);
    testing::WriteFileOrDie(dir_.path() + "/dir/inner.bin", "inner");
    // A bound Unix socket leaves a socket file.
    sock_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string sp = dir_.path() + "/sock";
    ASSERT_LT(sp.size(), sizeof(addr.sun_path));
    std::copy(sp.begin(), sp.end(), addr.sun_path);
    ASSERT_EQ(
        ::bind(sock_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
        0);
    // A character device like /dev/null, where this process may make one.
    has_device_ = ::mknod((dir_.path() + "/null").c_str(), S_IFCHR | 0666,
                          makedev(1, 3)) == 0;
    ASSERT_EQ(::symlink("ok.bin", (dir_.path() + "/link").c_str()), 0);
    auto s = PosixSource::Open(dir_.path());
    ASSERT_TRUE(s.ok()) << s.status();
    source_ = *std::move(s);
  }

  // The character device is CharacterDeviceRefusedAtOnce's (it can skip).
  std::vector<std::pair<std::string, std::string>> Specials() const {
    return {{"fifo", "fifo"}, {"sock", "socket"}, {"dir", "directory"}};
  }

  testing::TempDir dir_;
  UniqueFd sock_;
  bool has_device_ = false;
  std::unique_ptr<PosixSource> source_;
};

TEST_F(PosixSourceSpecialTest, StatAndReadRefuseAtOnce) {
  for (const auto& [name, kind] : Specials()) {
    const absl::Time start = absl::Now();
    absl::StatusOr<FileInfo> info = source_->Stat(name);
    ASSERT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition)
        << name << ": " << info.status();
    EXPECT_THAT(info.status().message(),
                HasSubstr("not a regular file: " + kind));
    char buf[4];
    absl::Status r = source_->ReadAt(name, 0, absl::MakeSpan(buf));
    EXPECT_EQ(r.code(), absl::StatusCode::kFailedPrecondition) << name << r;
    // "At once": a blocking open of a FIFO without a writer never returns.
    EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << name;
  }
  absl::StatusOr<FileInfo> ok = source_->Stat("ok.bin");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->size, 7u);
}

// Its own test so that a host where mknod is refused reports the case
// Skipped instead of passing without it.
TEST_F(PosixSourceSpecialTest, CharacterDeviceRefusedAtOnce) {
  if (!has_device_) {
    GTEST_SKIP() << "mknod of a character device is not permitted here";
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<FileInfo> info = source_->Stat("null");
  ASSERT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition)
      << info.status();
  EXPECT_THAT(info.status().message(),
              HasSubstr("not a regular file: character device"));
  char buf[4];
  EXPECT_EQ(source_->ReadAt("null", 0, absl::MakeSpan(buf)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(PosixSourceSpecialTest, SymlinkIsNotFollowed) {
  EXPECT_EQ(source_->Stat("link").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PosixSourceSpecialTest, ListingSkipsAndCounts) {
  std::set<std::string> seen;
  absl::Status s = source_->List("", [&](absl::string_view p, const FileInfo&) {
    seen.insert(std::string(p));
    return true;
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(seen, (std::set<std::string>{"ok.bin", "dir/inner.bin"}));
  // fifo, socket, symlink (+ device)
  EXPECT_EQ(source_->skipped_entries(), has_device_ ? 4u : 3u);
  // A prefix naming a special file fails clearly.
  EXPECT_EQ(source_
                ->List("fifo",
                       [](absl::string_view, const FileInfo&) { return true; })
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(PosixSourceSpecialTest, ReadPastTheLargestOffsetIsOutOfRange) {
  char buf[8];
  EXPECT_EQ(
      source_->ReadAt("ok.bin", UINT64_MAX - 2, absl::MakeSpan(buf)).code(),
      absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace dlcache
