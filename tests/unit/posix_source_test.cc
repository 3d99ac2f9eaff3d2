#include "server/source/posix_source.h"

#include <unistd.h>

#include <set>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

class PosixSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFileOrDie(dir_.path() + "/a.bin", "hello world");
    testing::WriteFileOrDie(dir_.path() + "/sub/deep/b.bin", "bee");
    testing::WriteFileOrDie(outside_.path() + "/secret", "secret");
    ASSERT_EQ(::symlink((outside_.path() + "/secret").c_str(),
                        (dir_.path() + "/escape").c_str()),
              0);
    auto s = PosixSource::Open(dir_.path());
    ASSERT_TRUE(s.ok());
    source_ = *std::move(s);
  }
  testing::TempDir dir_, outside_;
  std::unique_ptr<PosixSource> source_;
};

TEST_F(PosixSourceTest, StatAndRead) {
  auto info = source_->Stat("a.bin");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, 11u);
  EXPECT_GT(info->mtime_ns, 0);
  char buf[5];
  ASSERT_TRUE(source_->ReadAt("a.bin", 6, absl::MakeSpan(buf, 5)).ok());
  EXPECT_EQ(std::string(buf, 5), "world");
}

TEST_F(PosixSourceTest, ErrorsHaveCanonicalCodes) {
  EXPECT_EQ(source_->Stat("nope").status().code(), absl::StatusCode::kNotFound);
  // A directory is not a regular file (issue 9): refused, not "missing".
  EXPECT_EQ(source_->Stat("sub").status().code(),
            absl::StatusCode::kFailedPrecondition);
  char buf[20];
  EXPECT_EQ(source_->ReadAt("a.bin", 0, absl::MakeSpan(buf, 20)).code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(PosixSourceTest, SymlinkCannotLeaveTheRoot) {
  EXPECT_EQ(source_->Stat("escape").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PosixSourceTest, ListsRecursivelyWithoutFollowingSymlinks) {
  std::set<std::string> seen;
  ASSERT_TRUE(source_
                  ->List("",
                         [&](absl::string_view p, const FileInfo&) {
                           seen.insert(std::string(p));
                           return true;
                         })
                  .ok());
  EXPECT_EQ(seen, (std::set<std::string>{"a.bin", "sub/deep/b.bin"}));
  seen.clear();
  ASSERT_TRUE(source_
                  ->List("sub",
                         [&](absl::string_view p, const FileInfo&) {
                           seen.insert(std::string(p));
                           return true;
                         })
                  .ok());
  EXPECT_EQ(seen, (std::set<std::string>{"sub/deep/b.bin"}));
  EXPECT_EQ(source_
                ->List("missing",
                       [](absl::string_view, const FileInfo&) { return true; })
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(PosixSourceOpenTest, MissingRootIsFailedPrecondition) {
  EXPECT_EQ(PosixSource::Open("/nonexistent/dlcache").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dlcache
