// ItemDecoder (client/rpc/item_decoder) alone: a kBatch answer built with
// the shared codec, over memfd segments mapped as the client maps them.

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client/rpc/item_decoder.h"
#include "common/checksum.h"
#include "gtest/gtest.h"
#include "tests/unit/client_fake_server.h"

namespace dlcache {
namespace internal {
namespace {

using client_testing::FakeArena;

class ItemDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<UniqueFd> fds;
    std::vector<SegmentSpec> specs;
    for (int i = 0; i < arena_.segments(); ++i) {
      fds.emplace_back(::dup(arena_.read_only_fd(i)));
      specs.push_back({static_cast<uint32_t>(i), arena_.segment_size()});
    }
    absl::StatusOr<std::unique_ptr<SegmentMap>> map =
        SegmentMap::Map(specs, fds);
    ASSERT_TRUE(map.ok()) << map.status();
    map_ = *std::move(map);
  }

  // Writes `bytes` into segment 0 at `offset`; the handle pointing there.
  local::Handle Put(uint64_t offset, const std::string& bytes, uint64_t lease,
                    uint32_t index = 0) {
    std::memcpy(arena_.writable(0) + offset, bytes.data(), bytes.size());
    return local::Handle{
        0,    offset, bytes.size(), lease, Checksum(bytes.data(), bytes.size()),
        index};
  }

  local::BatchReply Decoded(const std::string& payload) {
    payload_ = payload;  // the reply views into it
    local::BatchReply reply;
    EXPECT_TRUE(local::DecodeBatchReply(payload_, &reply).ok());
    return reply;
  }

  FakeArena arena_{1, 1 << 20};
  std::unique_ptr<SegmentMap> map_;
  std::string payload_;
  // No owner: the leases of these items go nowhere when they die (with
  // one, they would go back to its ClientCore).
  const std::shared_ptr<const LeaseOwner> owner_;
};

TEST_F(ItemDecoderTest, ServedItemsPointIntoTheMappingAndKeepTheirLeases) {
  local::BatchReplyBuilder b;
  const local::Handle h1[] = {Put(0, "hello", 11, 0),
                              Put(4096, "world", 12, 1)};
  b.AddItem(/*file_size=*/10, /*chunk_count=*/2, /*hit=*/true, h1);
  b.AddError(static_cast<int32_t>(absl::StatusCode::kNotFound), "no such file");
  const local::BatchReply reply = Decoded(b.Finish());

  std::vector<uint64_t> rejected;
  std::vector<Item> items =
      ItemDecoder::Decode(reply, *map_, owner_, true, &rejected);
  ASSERT_EQ(items.size(), 2u);
  ASSERT_TRUE(items[0].ok()) << items[0].status();
  EXPECT_EQ(items[0].file_size(), 10u);
  EXPECT_EQ(items[0].chunk_count(), 2u);
  EXPECT_TRUE(items[0].hit());
  ASSERT_EQ(items[0].chunks().size(), 2u);
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(items[0].chunks()[1].data),
                  items[0].chunks()[1].size),
      "world");
  EXPECT_EQ(items[0].chunks()[1].index, 1u);
  EXPECT_EQ(items[1].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(items[1].status().message(), "no such file");
  EXPECT_TRUE(rejected.empty());
  EXPECT_EQ(ItemDecoder::LeasesOf(reply), (std::vector<uint64_t>{11, 12}));
}

TEST_F(ItemDecoderTest, AHandleOutsideTheMappingRefusesTheItemAndItsLeases) {
  local::BatchReplyBuilder b;
  local::Handle good = Put(0, "abc", 21);
  local::Handle outside{0, (1 << 20) - 2, 100, 22, 0, 1};
  local::Handle unknown_segment{7, 0, 10, 23, 0, 2};
  const local::Handle h1[] = {good, outside, unknown_segment};
  b.AddItem(300, 3, false, h1);
  const local::Handle h2[] = {Put(8192, "fine", 24)};
  b.AddItem(4, 1, false, h2);
  std::vector<uint64_t> rejected;
  std::vector<Item> items =
      ItemDecoder::Decode(Decoded(b.Finish()), *map_, owner_, true, &rejected);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(items[0].chunks().empty());
  // Every lease of the refused item goes back, the bad ones too.
  EXPECT_EQ(rejected, (std::vector<uint64_t>{21, 22, 23}));
  ASSERT_TRUE(items[1].ok()) << items[1].status();
  EXPECT_EQ(items[1].size(), 4u);
}

TEST_F(ItemDecoderTest, ChecksumsAreVerifiedOnlyWhenAsked) {
  local::Handle h = Put(0, "payload", 31);
  h.checksum ^= 1;  // the bytes in shared memory do not match
  local::BatchReplyBuilder b;
  const local::Handle hs[] = {h};
  b.AddItem(7, 1, true, hs);
  const std::string payload = b.Finish();

  std::vector<uint64_t> rejected;
  std::vector<Item> checked =
      ItemDecoder::Decode(Decoded(payload), *map_, owner_, true, &rejected);
  EXPECT_EQ(checked[0].status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(rejected, (std::vector<uint64_t>{31}));

  rejected.clear();
  std::vector<Item> trusted =
      ItemDecoder::Decode(Decoded(payload), *map_, owner_, false, &rejected);
  EXPECT_TRUE(trusted[0].ok()) << trusted[0].status();
  EXPECT_TRUE(rejected.empty());
}

}  // namespace
}  // namespace internal
}  // namespace dlcache
