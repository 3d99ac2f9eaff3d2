// common/private_dir.h and common/atomic_file.h: the directories and files
// dlcached keeps cached bytes in are private, and no planted link is ever
// followed.
#include "common/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "common/atomic_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::string ReadAll(const std::string& path) {
  absl::StatusOr<std::string> s = ReadOwnFile(path, 1 << 20);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

class PrivateDirTest : public ::testing::Test {
 protected:
  testing::TempDir tmp_;
};

TEST_F(PrivateDirTest, CreatesDir0700WhateverTheUmask) {
  const mode_t old = ::umask(0);
  const std::string dir = tmp_.path() + "/a/b/shm";
  absl::StatusOr<UniqueFd> fd = EnsurePrivateDir(dir, {}, "--shm_dir");
  ::umask(old);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(ModeOf(dir), 0700);
  EXPECT_EQ(PrivateDirOptions{}.file_mode(), 0600);
}

TEST_F(PrivateDirTest, SharedGroupGives0750AndTheGroup) {
  const gid_t gid = ::getegid();  // a group this process surely is in
  PrivateDirOptions o{static_cast<int64_t>(gid)};
  const std::string dir = tmp_.path() + "/shm";
  ASSERT_TRUE(EnsurePrivateDir(dir, o, "--shm_dir").ok());
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750);
  EXPECT_EQ(st.st_gid, gid);
  EXPECT_EQ(o.file_mode(), 0640);
}

TEST_F(PrivateDirTest, TightensAnOlderWorldReadableDir) {
  const std::string dir = tmp_.path() + "/shm";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  ASSERT_TRUE(EnsurePrivateDir(dir, {}, "--shm_dir").ok());
  EXPECT_EQ(ModeOf(dir), 0700);
}

TEST_F(PrivateDirTest, OnlyTakesBitsAwayFromAnExistingDir) {
  // A dir its owner made read-only stays read-only for the owner: nothing
  // is granted, only group/other bits are removed.
  const std::string dir = tmp_.path() + "/ro";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0555), 0);
  ASSERT_TRUE(EnsurePrivateDir(dir, {}, "--ssd_dir").ok());
  EXPECT_EQ(ModeOf(dir), 0500);
}

TEST_F(PrivateDirTest, RefusesASymlink) {
  const std::string real = tmp_.path() + "/real";
  const std::string link = tmp_.path() + "/link";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  for (const std::string& p : {link, link + "/"}) {
    absl::StatusOr<UniqueFd> fd = EnsurePrivateDir(p, {}, "--shm_dir");
    ASSERT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition) << p;
    EXPECT_THAT(fd.status().message(), HasSubstr("is a symlink"));
    EXPECT_THAT(fd.status().message(), HasSubstr("--shm_dir"));
  }
}

TEST_F(PrivateDirTest, RefusesGroupOrWorldWritable) {
  for (mode_t mode : {0770, 0707, 0777, 02770, 01777}) {
    const std::string dir = tmp_.path() + "/w" + std::to_string(mode);
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    absl::StatusOr<UniqueFd> fd = EnsurePrivateDir(dir, {}, "--ssd_dir");
    ASSERT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition)
        << std::oct << mode;
    EXPECT_THAT(fd.status().message(), HasSubstr("world-writable"));
    EXPECT_EQ(ModeOf(dir), mode) << "a refused dir is left as it was";
  }
}

TEST_F(PrivateDirTest, RefusesAFile) {
  const std::string f = tmp_.path() + "/file";
  testing::WriteFileOrDie(f, "x");
  EXPECT_THAT(EnsurePrivateDir(f, {}, "--shm_dir").status().message(),
              HasSubstr("not a directory"));
}

TEST_F(PrivateDirTest, RefusesAnotherUidsDir) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root to make a directory owned by another uid";
  }
  const std::string dir = tmp_.path() + "/theirs";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  absl::StatusOr<UniqueFd> fd = EnsurePrivateDir(dir, {}, "--shm_dir");
  ASSERT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fd.status().message(), HasSubstr("owned by uid 65534"));
}

TEST_F(PrivateDirTest, AtomicWriteDoesNotFollowAPlantedTempLink) {
  const std::string victim = tmp_.path() + "/victim";
  const std::string path = tmp_.path() + "/manifest.pb";
  testing::WriteFileOrDie(victim, "precious");
  ASSERT_EQ(::symlink(victim.c_str(), (path + ".tmp").c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(path, "new bytes", 0600).ok());
  EXPECT_EQ(ReadAll(victim), "precious");
  EXPECT_EQ(ReadAll(path), "new bytes");
  EXPECT_EQ(ModeOf(path), 0600);
  EXPECT_NE(::access((path + ".tmp").c_str(), F_OK), 0);
}

TEST_F(PrivateDirTest, AtomicWriteReplacesALinkAtThePathItself) {
  const std::string victim = tmp_.path() + "/victim";
  const std::string path = tmp_.path() + "/manifest.pb";
  testing::WriteFileOrDie(victim, "precious");
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(path, "new", 0600).ok());
  EXPECT_EQ(ReadAll(victim), "precious");
  EXPECT_EQ(ReadAll(path), "new");
  struct stat st;
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST_F(PrivateDirTest, ReadOwnFileRefusesLinksAndFifos) {
  const std::string victim = tmp_.path() + "/victim";
  testing::WriteFileOrDie(victim, "x");
  const std::string link = tmp_.path() + "/link";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  EXPECT_EQ(ReadOwnFile(link, 100).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const std::string fifo = tmp_.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadOwnFile(fifo, 100).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadOwnFile(victim, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ReadOwnFile(tmp_.path() + "/none", 100).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dlcache
