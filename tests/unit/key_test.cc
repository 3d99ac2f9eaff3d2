#include "common/key.h"

#include "gtest/gtest.h"

namespace dlcache {
namespace {

TEST(NormalizeKeyPathTest, FoldsSlashesAndDots) {
  EXPECT_EQ(*NormalizeKeyPath("a//b/./c/"), "a/b/c");
  EXPECT_EQ(*NormalizeKeyPath("./train/x.jpg"), "train/x.jpg");
  EXPECT_EQ(*NormalizeKeyPath("file"), "file");
}

TEST(NormalizeKeyPathTest, RejectsEscapes) {
  for (const char* bad :
       {"../etc/passwd", "a/../../b", "a/..", "/etc/passwd", "", ".", "//"}) {
    absl::StatusOr<std::string> r = NormalizeKeyPath(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(*NormalizeKeyPath("a/./"), "a");
}

TEST(NormalizeKeyPathTest, RejectsNulAndLongPaths) {
  std::string with_nul("a\0b", 3);
  EXPECT_EQ(NormalizeKeyPath(with_nul).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NormalizeKeyPath(std::string(5000, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NormalizeKeyPathTest, DotsInsideNamesAreFine) {
  EXPECT_EQ(*NormalizeKeyPath("a..b/..c/d.."), "a..b/..c/d..");
}

TEST(IsNormalKeyPathTest, AgreesWithNormalize) {
  for (const char* p :
       {"a",       "a/b.jpg", "a..b/c", "x/.y",
        "",        "/a",      "a/",     "a//b",
        "./a",     "a/./b",   "a/..",   "..",
        "a/../b",  ".",       ".a",     "...",
        "a/.",     "a/...",   ".../x",  "a/b/..",
        "a/.b./c", "../a",    "a/b//",  "class_1/img_00042.jpg"}) {
    absl::StatusOr<std::string> n = NormalizeKeyPath(p);
    bool normal = n.ok() && *n == p;
    EXPECT_EQ(IsNormalKeyPath(p), normal) << p;
  }
  EXPECT_FALSE(IsNormalKeyPath(std::string("a\0b", 3)));
}

TEST(NormalizePrefixTest, AllowsRoot) {
  EXPECT_EQ(*NormalizePrefix(""), "");
  EXPECT_EQ(*NormalizePrefix("train/"), "train");
  EXPECT_FALSE(NormalizePrefix("/").ok());  // absolute
}

TEST(ValidateDatasetNameTest, Rules) {
  EXPECT_TRUE(ValidateDatasetName("imagenet-1k_v2.0").ok());
  EXPECT_FALSE(ValidateDatasetName("").ok());
  EXPECT_FALSE(ValidateDatasetName(".hidden").ok());
  EXPECT_FALSE(ValidateDatasetName("a/b").ok());
  EXPECT_FALSE(ValidateDatasetName(std::string(129, 'a')).ok());
}

}  // namespace
}  // namespace dlcache
