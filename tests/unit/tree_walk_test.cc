#include "server/source/tree_walk.h"

#include <sys/stat.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

TreeEntry File(std::string name, uint64_t size) {
  return TreeEntry{std::move(name), S_IFREG | 0644, FileInfo{size, 7}};
}
TreeEntry Dir(std::string name) {
  return TreeEntry{std::move(name), S_IFDIR | 0755, {}};
}
TreeEntry Link(std::string name) {
  return TreeEntry{std::move(name), S_IFLNK | 0777, {}};
}

// A tree in memory: directory -> its entries, or -> the error reading it.
struct FakeTree {
  std::map<std::string, std::vector<TreeEntry>> dirs;
  absl::flat_hash_map<std::string, absl::Status> errors;
  std::vector<std::string> read;  // directories read, in order

  absl::Status ReadDir(const std::string& dir, std::vector<TreeEntry>* out) {
    read.push_back(dir);
    out->clear();
    if (auto e = errors.find(dir); e != errors.end()) return e->second;
    auto d = dirs.find(dir);
    if (d == dirs.end()) return absl::NotFoundError(dir);
    *out = d->second;
    return absl::OkStatus();
  }
};

struct Walked {
  absl::Status status;
  std::map<std::string, uint64_t> files;
};

Walked Walk(FakeTree& tree, const std::string& prefix, size_t stop_after = 0) {
  Walked w;
  w.status = WalkTree(
      "fake", prefix,
      [&](const std::string& dir, std::vector<TreeEntry>* out) {
        return tree.ReadDir(dir, out);
      },
      [&](absl::string_view path, const FileInfo& info) {
        w.files[std::string(path)] = info.size;
        return stop_after == 0 || w.files.size() < stop_after;
      });
  return w;
}

FakeTree ImageNetLike() {
  FakeTree t;
  t.dirs[""] = {Dir("train"), File("labels.txt", 3), Link("latest")};
  t.dirs["train"] = {Dir("n01"), Dir("n02")};
  t.dirs["train/n01"] = {File("a.jpg", 10), File("b.jpg", 11)};
  t.dirs["train/n02"] = {File("c.jpg", 12)};
  return t;
}

TEST(TreeWalkTest, ListsEveryRegularFileWithItsPathAndInfo) {
  FakeTree t = ImageNetLike();
  Walked w = Walk(t, "");
  EXPECT_TRUE(w.status.ok()) << w.status;
  EXPECT_EQ(w.files,
            (std::map<std::string, uint64_t>{{"labels.txt", 3},
                                             {"train/n01/a.jpg", 10},
                                             {"train/n01/b.jpg", 11},
                                             {"train/n02/c.jpg", 12}}));
}

TEST(TreeWalkTest, StartsAtThePrefix) {
  FakeTree t = ImageNetLike();
  Walked w = Walk(t, "train/n01");
  EXPECT_TRUE(w.status.ok()) << w.status;
  EXPECT_EQ(w.files.size(), 2u);
  EXPECT_EQ(w.files.count("train/n01/a.jpg"), 1u);
  EXPECT_EQ(t.read, std::vector<std::string>{"train/n01"});
}

TEST(TreeWalkTest, AMissingPrefixIsNotFound) {
  FakeTree t = ImageNetLike();
  Walked w = Walk(t, "val");
  EXPECT_EQ(w.status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(w.files.empty());
}

TEST(TreeWalkTest, ASubdirectoryThatVanishedIsSkipped) {
  FakeTree t = ImageNetLike();
  t.dirs.erase("train/n01");  // listed by its parent, gone when read
  Walked w = Walk(t, "");
  EXPECT_TRUE(w.status.ok()) << w.status;
  EXPECT_EQ(w.files.size(), 2u);
  EXPECT_EQ(w.files.count("train/n02/c.jpg"), 1u);
}

TEST(TreeWalkTest, UnavailableEndsTheWalk) {
  FakeTree t = ImageNetLike();
  t.errors["train/n02"] = absl::UnavailableError("server gone");
  Walked w = Walk(t, "");
  EXPECT_EQ(w.status.code(), absl::StatusCode::kUnavailable);
  // Depth first from the back: n02 is read before n01, and nothing after.
  EXPECT_EQ(t.read.back(), "train/n02");
  EXPECT_EQ(w.files.count("train/n01/a.jpg"), 0u);
}

TEST(TreeWalkTest, OtherErrorsAreReturnedAfterTheRestIsWalked) {
  FakeTree t = ImageNetLike();
  t.errors["train/n02"] = absl::PermissionDeniedError("no");
  Walked w = Walk(t, "");
  EXPECT_EQ(w.status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(w.files.count("train/n01/a.jpg"), 1u);
  EXPECT_EQ(w.files.count("train/n01/b.jpg"), 1u);
}

TEST(TreeWalkTest, FalseFromTheCallbackStops) {
  FakeTree t = ImageNetLike();
  Walked w = Walk(t, "", /*stop_after=*/1);
  EXPECT_TRUE(w.status.ok()) << w.status;
  EXPECT_EQ(w.files.size(), 1u);
  EXPECT_EQ(t.read, std::vector<std::string>{""});
}

}  // namespace
}  // namespace dlcache
