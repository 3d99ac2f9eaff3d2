// SourceListing (issue 30) over a real PosixSource in a temporary
// directory: order, prefixes, paging, refresh and invalidation.
#include "server/source/source_listing.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/source/posix_source.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

class SourceListingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* f : {"b.bin", "a/x", "a/y/z", "a-b", "a.c", "c/1"}) {
      testing::WriteFileOrDie(dir_.Sub(f), f);
    }
    auto src = PosixSource::Open(dir_.path());
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = *std::move(src);
    listing_ = std::make_unique<SourceListing>(source_.get());
  }

  // Every name under `prefix`, in pages of `page` entries.
  std::vector<std::string> All(absl::string_view prefix, size_t page,
                               int* pages = nullptr) {
    std::vector<std::string> out;
    std::string token;
    int n = 0;
    do {
      size_t got = 0;
      absl::StatusOr<std::string> next = listing_->Page(
          prefix, token, page, 1 << 20, false,
          [&](absl::string_view name, const FileInfo& info) {
            out.emplace_back(name);
            EXPECT_EQ(info.size, name.size());  // each file holds its name
            ++got;
          });
      EXPECT_TRUE(next.ok()) << next.status();
      if (!next.ok()) break;
      EXPECT_LE(got, page);
      token = *next;
      ++n;
    } while (!token.empty());
    if (pages != nullptr) *pages = n;
    return out;
  }

  testing::TempDir dir_;
  std::unique_ptr<PosixSource> source_;
  std::unique_ptr<SourceListing> listing_;
};

TEST_F(SourceListingTest, ListsEverythingSortedInPages) {
  const std::vector<std::string> all = All("", 1000);
  EXPECT_EQ(all, (std::vector<std::string>{"a-b", "a.c", "a/x", "a/y/z",
                                           "b.bin", "c/1"}));
  int pages = 0;
  EXPECT_EQ(All("", 2, &pages), all);
  EXPECT_EQ(pages, static_cast<int>((all.size() + 1) / 2));
  EXPECT_EQ(All("", 1), all);
  EXPECT_EQ(listing_->walks(), 1u);  // one walk answered every page
}

TEST_F(SourceListingTest, PrefixIsADirectoryOrAFile) {
  EXPECT_EQ(All("a", 1000), (std::vector<std::string>{"a/x", "a/y/z"}));
  EXPECT_EQ(All("a", 1), (std::vector<std::string>{"a/x", "a/y/z"}));
  EXPECT_EQ(All("a/y", 1000), (std::vector<std::string>{"a/y/z"}));
  EXPECT_EQ(All("b.bin", 1000), (std::vector<std::string>{"b.bin"}));
  EXPECT_EQ(All("a-b", 1), (std::vector<std::string>{"a-b"}));
  EXPECT_TRUE(All("nothing", 1000).empty());
  EXPECT_TRUE(All("c/1/deeper", 1000).empty());
}

TEST_F(SourceListingTest, MaxBytesEndsAPageButNeverEmpty) {
  std::vector<std::string> got;
  absl::StatusOr<std::string> next = listing_->Page(
      "", "", 1000, 1, false,
      [&](absl::string_view name, const FileInfo&) { got.emplace_back(name); });
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(*next, got[0]);
}

TEST_F(SourceListingTest, KeptUntilInvalidatedOrRefreshed) {
  const std::vector<std::string> before = All("", 1000);
  testing::WriteFileOrDie(dir_.Sub("c/2"), "c/2");
  EXPECT_EQ(All("", 1000), before);  // the kept listing
  listing_->Invalidate();
  std::vector<std::string> after = All("", 1000);
  EXPECT_EQ(after.size(), before.size() + 1);
  EXPECT_EQ(listing_->walks(), 2u);

  ASSERT_EQ(::unlink(dir_.Sub("c/2").c_str()), 0);
  std::vector<std::string> refreshed;
  absl::StatusOr<std::string> next =
      listing_->Page("c", "", 1000, 1 << 20, /*refresh=*/true,
                     [&](absl::string_view name, const FileInfo&) {
                       refreshed.emplace_back(name);
                     });
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(refreshed, (std::vector<std::string>{"c/1"}));
  EXPECT_EQ(listing_->walks(), 3u);
}

TEST_F(SourceListingTest, PagingGoesOnAcrossARefresh) {
  std::vector<std::string> first;
  absl::StatusOr<std::string> token = listing_->Page(
      "", "", 2, 1 << 20, false, [&](absl::string_view name, const FileInfo&) {
        first.emplace_back(name);
      });
  ASSERT_TRUE(token.ok());
  ASSERT_FALSE(token->empty());
  // A new file before the token and one after it: only the later one
  // shows up in the rest of the pages.
  testing::WriteFileOrDie(dir_.Sub("0first"), "0first");
  testing::WriteFileOrDie(dir_.Sub("zlast"), "zlast");
  listing_->Invalidate();
  std::vector<std::string> rest;
  std::string t = *token;
  while (!t.empty()) {
    absl::StatusOr<std::string> next = listing_->Page(
        "", t, 2, 1 << 20, false, [&](absl::string_view name, const FileInfo&) {
          rest.emplace_back(name);
        });
    ASSERT_TRUE(next.ok());
    t = *next;
  }
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back(), "zlast");
  for (const std::string& n : rest) EXPECT_NE(n, "0first");
  for (const std::string& n : rest) EXPECT_GT(n, first.back());
}

TEST_F(SourceListingTest, ConcurrentCallersShareOneWalk) {
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] { EXPECT_FALSE(All("", 1000).empty()); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(listing_->walks(), 1u);
}

}  // namespace
}  // namespace dlcache
