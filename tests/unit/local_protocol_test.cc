// The local protocol codec (common/local_protocol) and frame I/O
// (common/frame_socket): round trips, every truncation and malformed case
// an error (never a crash or an out-of-bounds read), and the limits.

#include "common/local_protocol.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/frame_socket.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace dlcache::local {
namespace {

constexpr uint32_t kNoLimit = ~uint32_t{0};

std::vector<std::string> SomeKeys() {
  return {"train/a.jpg", "", "x/\xff\x01y", std::string(300, 'p')};
}

// Every strict prefix of a valid payload must fail to decode.
template <typename Decode>
void EveryTruncationFails(const std::string& payload, Decode decode) {
  for (size_t n = 0; n < payload.size(); ++n) {
    EXPECT_FALSE(decode(payload.substr(0, n)).ok()) << "prefix " << n;
  }
  // And trailing bytes too.
  EXPECT_FALSE(decode(payload + "z").ok());
}

TEST(LocalProtocolTest, HeaderRoundTrip) {
  FrameHeader h;
  h.length = 0x01020304;
  h.type = static_cast<uint16_t>(MsgType::kGetBatch);
  h.flags = 0;
  h.request_id = 0x1122334455667788ull;
  char buf[kHeaderSize];
  EncodeHeader(h, buf);
  FrameHeader back = DecodeHeader(buf);
  EXPECT_EQ(back.length, h.length);
  EXPECT_EQ(back.type, h.type);
  EXPECT_EQ(back.request_id, h.request_id);
  std::string frame = MakeFrame(MsgType::kRelease, 9, "abc");
  ASSERT_EQ(frame.size(), kHeaderSize + 3);
  FrameHeader f = DecodeHeader(frame.data());
  EXPECT_EQ(f.length, 3u);
  EXPECT_EQ(f.request_id, 9u);
  EXPECT_EQ(frame.substr(kHeaderSize), "abc");
}

TEST(LocalProtocolTest, HelloRoundTripAndErrors) {
  Hello h;
  h.client_name = "trainer-7";
  h.numa_node = 1;
  std::string p = EncodeHello(h);
  Hello back;
  ASSERT_TRUE(DecodeHello(p, &back).ok());
  EXPECT_EQ(back.client_name, "trainer-7");
  EXPECT_EQ(back.numa_node, 1);
  EveryTruncationFails(p, [](absl::string_view s) {
    Hello x;
    return DecodeHello(s, &x);
  });
  Hello bad = h;
  bad.magic = 0x12345678;
  absl::Status s = DecodeHello(EncodeHello(bad), &back);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_TRUE(absl::StrContains(s.message(), "magic")) << s;
  bad = h;
  bad.version = kVersion + 1;
  s = DecodeHello(EncodeHello(bad), &back);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_TRUE(absl::StrContains(s.message(), "version")) << s;

  HelloReply r;
  r.session_id = 42;
  r.arena_epoch = 7;
  r.chunk_size = 4 << 20;
  r.max_keys_per_batch = 16384;
  r.max_frame_bytes = 16 << 20;
  r.segment_sizes = {1 << 20, 2 << 20, 3};
  std::string rp = EncodeHelloReply(r);
  HelloReply rb;
  ASSERT_TRUE(DecodeHelloReply(rp, &rb).ok());
  EXPECT_EQ(rb.session_id, 42u);
  EXPECT_EQ(rb.arena_epoch, 7u);
  EXPECT_EQ(rb.chunk_size, 4u << 20);
  EXPECT_EQ(rb.max_keys_per_batch, 16384u);
  EXPECT_EQ(rb.segment_sizes, r.segment_sizes);
  EveryTruncationFails(rp, [](absl::string_view s) {
    HelloReply x;
    return DecodeHelloReply(s, &x);
  });
  // A segment count far past the payload.
  std::string huge = rp;
  const uint32_t many = 0x40000000;
  std::memcpy(huge.data() + rp.size() - 3 * 8 - 4, &many, 4);
  EXPECT_TRUE(absl::IsDataLoss(DecodeHelloReply(huge, &rb)));
}

// The NUMA node a client sends (docs/numa.md) sits at a fixed place in
// the version-1 hello that every client has always sent: clients that
// predate NUMA placement sent -1 there, which is "no preference".
TEST(LocalProtocolTest, HelloNumaNodeIsPartOfVersionOneWire) {
  const std::string old_client(
      "DLCL\x01\x00\x00\x00"  // magic, version 1, reserved
      "\x03\x00\x00\x00old"   // client_name
      "\xff\xff\xff\xff"      // numa_node -1
      "\x00\x00\x00\x00",     // flags
      23);
  Hello back;
  ASSERT_TRUE(DecodeHello(old_client, &back).ok());
  EXPECT_EQ(back.client_name, "old");
  EXPECT_EQ(back.numa_node, -1);
  Hello h;
  h.client_name = "old";
  EXPECT_EQ(EncodeHello(h), old_client);  // the default is -1
  h.numa_node = 1;
  std::string one = EncodeHello(h);
  ASSERT_EQ(one.size(), old_client.size());
  EXPECT_EQ(one.substr(15, 4), std::string("\x01\x00\x00\x00", 4));
}

TEST(LocalProtocolTest, SegmentsRoundTripAndLimit) {
  GetSegments g{3, 5};
  GetSegments gb;
  ASSERT_TRUE(DecodeGetSegments(EncodeGetSegments(g), &gb).ok());
  EXPECT_EQ(gb.first, 3u);
  EXPECT_EQ(gb.count, 5u);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeGetSegments(
      EncodeGetSegments({0, kMaxSegmentsPerFrame + 1}), &gb)));
  EveryTruncationFails(EncodeGetSegments(g), [](absl::string_view s) {
    GetSegments x;
    return DecodeGetSegments(s, &x);
  });
  SegmentsReply r;
  r.code = 11;
  r.message = "out of range";
  r.first = 2;
  r.count = 0;
  SegmentsReply rb;
  ASSERT_TRUE(DecodeSegmentsReply(EncodeSegmentsReply(r), &rb).ok());
  EXPECT_EQ(rb.code, 11);
  EXPECT_EQ(rb.message, "out of range");
  EveryTruncationFails(EncodeSegmentsReply(r), [](absl::string_view s) {
    SegmentsReply x;
    return DecodeSegmentsReply(s, &x);
  });
}

TEST(LocalProtocolTest, GetBatchRoundTripWithAndWithoutRanges) {
  const std::vector<std::string> keys = SomeKeys();
  const std::vector<uint64_t> release = {5, 6, 7};
  for (bool ranges : {false, true}) {
    std::string p =
        EncodeGetBatch("imagenet", release, keys.size(), [&](size_t i) {
          Key k{keys[i]};
          if (ranges && i == 2) {
            k.first_chunk = 4;
            k.max_chunks = 2;
          }
          return k;
        });
    GetBatchRequest r;
    ASSERT_TRUE(DecodeGetBatch(p, kNoLimit, kNoLimit, &r).ok());
    EXPECT_EQ(r.dataset, "imagenet");
    EXPECT_EQ(r.release.ToVector(), release);
    ASSERT_EQ(r.keys.size(), keys.size());
    EXPECT_EQ(r.keys.has_ranges(), ranges);
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(r.keys.at(i).path, keys[i]);
    }
    EXPECT_EQ(r.keys.at(2).first_chunk, ranges ? 4u : 0u);
    EXPECT_EQ(r.keys.at(2).max_chunks, ranges ? 2u : 0u);
    EveryTruncationFails(p, [](absl::string_view s) {
      GetBatchRequest x;
      return DecodeGetBatch(s, kNoLimit, kNoLimit, &x);
    });
  }
}

TEST(LocalProtocolTest, RegisterPlanRoundTripAndErrors) {
  const std::vector<std::string> keys = SomeKeys();
  std::string p =
      EncodeRegisterPlan("imagenet", "job-7/rank-0", 3, 4096, kPlanReset,
                         keys.size(), [&](size_t i) { return Key{keys[i]}; });
  RegisterPlanRequest r;
  ASSERT_TRUE(DecodeRegisterPlan(p, kNoLimit, &r).ok());
  EXPECT_EQ(r.dataset, "imagenet");
  EXPECT_EQ(r.plan, "job-7/rank-0");
  EXPECT_EQ(r.epoch, 3u);
  EXPECT_EQ(r.offset, 4096u);
  EXPECT_EQ(r.flags, kPlanReset);
  ASSERT_EQ(r.keys.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(r.keys.at(i).path, keys[i]);
  }
  EveryTruncationFails(p, [](absl::string_view s) {
    RegisterPlanRequest x;
    return DecodeRegisterPlan(s, kNoLimit, &x);
  });
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeRegisterPlan(p, 3, &r)));
  std::string bad =
      EncodeRegisterPlan("d", "p", 0, 0, 4, 0, [](size_t) { return Key{}; });
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeRegisterPlan(bad, kNoLimit, &r)));
  // A registration without a job (an old client's) decodes with no job.
  EXPECT_EQ(r.job.world_size, 0u);
}

// A job registration carries the world size and the rank; its reply what
// the plan holds.
TEST(LocalProtocolTest, RegisterJobPlanRoundTripAndErrors) {
  const std::vector<std::string> keys = SomeKeys();
  const PlanJobFields job{8, 3};
  std::string p = EncodeRegisterPlan(
      "imagenet", "job/x", 5, 64, 0, keys.size(),
      [&](size_t i) { return Key{keys[i]}; }, &job);
  RegisterPlanRequest r;
  ASSERT_TRUE(DecodeRegisterPlan(p, kNoLimit, &r).ok());
  EXPECT_EQ(r.flags, kPlanJob);
  EXPECT_EQ(r.job.world_size, 8u);
  EXPECT_EQ(r.job.rank, 3u);
  EXPECT_EQ(r.epoch, 5u);
  EXPECT_EQ(r.offset, 64u);
  ASSERT_EQ(r.keys.size(), keys.size());
  EveryTruncationFails(p, [](absl::string_view s) {
    RegisterPlanRequest x;
    return DecodeRegisterPlan(s, kNoLimit, &x);
  });
  const PlanJobFields empty{0, 0};  // a world of none
  std::string bad = EncodeRegisterPlan(
      "d", "p", 0, 0, 0, 0, [](size_t) { return Key{}; }, &empty);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeRegisterPlan(bad, kNoLimit, &r)));

  RegisterPlanReply reply;
  ASSERT_TRUE(
      DecodeRegisterPlanReply(
          EncodeRegisterPlanReply(RegisterPlanReply{true, 9, 1234}), &reply)
          .ok());
  EXPECT_TRUE(reply.has_epoch);
  EXPECT_EQ(reply.epoch, 9u);
  EXPECT_EQ(reply.next_offset, 1234u);
  // An old server's empty reply is no answer to a job registration.
  EXPECT_FALSE(DecodeRegisterPlanReply("", &reply).ok());
}

// A GetBatch may end with its plan position; without it the request is
// the one of the first protocol, byte for byte (what an older server
// decodes).
TEST(LocalProtocolTest, GetBatchPlanPositionRoundTrip) {
  const std::vector<std::string> keys = SomeKeys();
  auto key_at = [&](size_t i) { return Key{keys[i]}; };
  const std::string plain =
      EncodeGetBatch("ds", std::vector<uint64_t>{1}, keys.size(), key_at);
  const PlanPositionFields at{3, 768};
  const std::string positioned =
      EncodeGetBatch("ds", std::vector<uint64_t>{1}, keys.size(), key_at, &at);
  ASSERT_EQ(positioned.size(), plain.size() + 16);
  EXPECT_EQ(positioned.substr(0, plain.size()), plain);
  GetBatchRequest r;
  ASSERT_TRUE(DecodeGetBatch(plain, kNoLimit, kNoLimit, &r).ok());
  EXPECT_FALSE(r.has_plan_position);
  ASSERT_TRUE(DecodeGetBatch(positioned, kNoLimit, kNoLimit, &r).ok());
  EXPECT_TRUE(r.has_plan_position);
  EXPECT_EQ(r.plan_position.epoch, 3u);
  EXPECT_EQ(r.plan_position.offset, 768u);
  EXPECT_EQ(r.keys.size(), keys.size());
  // Any other tail is malformed.
  for (size_t n = plain.size() + 1; n < positioned.size(); ++n) {
    EXPECT_FALSE(
        DecodeGetBatch(positioned.substr(0, n), kNoLimit, kNoLimit, &r).ok())
        << n;
  }
  EXPECT_FALSE(DecodeGetBatch(positioned + "z", kNoLimit, kNoLimit, &r).ok());
  // A plain request decoded after a positioned one has no position.
  ASSERT_TRUE(DecodeGetBatch(plain, kNoLimit, kNoLimit, &r).ok());
  EXPECT_FALSE(r.has_plan_position);

  // The features of a reader's registration reply; an old server's is
  // empty (none).
  uint32_t features = 99;
  ASSERT_TRUE(DecodeRegisterPlanFeatures(
                  EncodeRegisterPlanFeatures(kFeaturePlanPositions), &features)
                  .ok());
  EXPECT_EQ(features, kFeaturePlanPositions);
  ASSERT_TRUE(DecodeRegisterPlanFeatures("", &features).ok());
  EXPECT_EQ(features, 0u);
  EXPECT_FALSE(DecodeRegisterPlanFeatures("abc", &features).ok());
  EXPECT_FALSE(DecodeRegisterPlanFeatures("abcde", &features).ok());
}

// kGetFeatures / kFeatures: what a job client asks (a job registration's
// reply keeps the form old job clients check). The bits are distinct and
// the reply is exactly a u32; the request is empty.
TEST(LocalProtocolTest, FeaturesRoundTrip) {
  EXPECT_NE(kFeaturePlanPositions, kFeatureJobPlanPositions);
  EXPECT_TRUE(DecodeGetFeatures("").ok());
  EXPECT_EQ(DecodeGetFeatures("x").code(), absl::StatusCode::kInvalidArgument);
  const uint32_t both = kFeaturePlanPositions | kFeatureJobPlanPositions;
  const std::string reply = EncodeFeatures(both);
  EXPECT_EQ(reply.size(), 4u);
  uint32_t features = 0;
  ASSERT_TRUE(DecodeFeatures(reply, &features).ok());
  EXPECT_EQ(features, both);
  // The same bits as a reader's registration reply carries.
  ASSERT_TRUE(DecodeRegisterPlanFeatures(reply, &features).ok());
  EXPECT_EQ(features, both);
  for (absl::string_view bad : {"", "abc", "abcde"}) {
    EXPECT_EQ(DecodeFeatures(bad, &features).code(),
              absl::StatusCode::kDataLoss)
        << bad.size();
    EXPECT_EQ(features, 0u);
  }
  // A job registration's reply is unchanged (old job clients decode it
  // strictly): 20 bytes, with no room for features.
  const std::string job =
      EncodeRegisterPlanReply(RegisterPlanReply{true, 3, 9});
  EXPECT_EQ(job.size(), 20u);
  RegisterPlanReply r;
  EXPECT_FALSE(DecodeRegisterPlanReply(job + reply, &r).ok());
}

TEST(LocalProtocolTest, KeyAndReleaseLimitsNameTheirFlag) {
  const std::vector<std::string> keys = SomeKeys();
  std::string p = EncodeGetBatch("ds", std::vector<uint64_t>{1, 2}, keys.size(),
                                 [&](size_t i) { return Key{keys[i]}; });
  GetBatchRequest r;
  absl::Status s = DecodeGetBatch(p, 3, kNoLimit, &r);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_TRUE(absl::StrContains(s.message(), "max_keys_per_batch")) << s;
  EXPECT_TRUE(DecodeGetBatch(p, 4, kNoLimit, &r).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeGetBatch(p, 4, 1, &r)));
  // A key count claimed far past the payload is malformed, not a huge
  // allocation.
  std::string lying;
  Writer w(&lying);
  w.Bytes("ds");
  w.U32(0);
  w.U32(0x7fffffff);
  w.U32(0);
  EXPECT_TRUE(
      absl::IsInvalidArgument(DecodeGetBatch(lying, kNoLimit, kNoLimit, &r)));
  std::string lying_release;
  Writer w2(&lying_release);
  w2.Bytes("ds");
  w2.U32(0x7fffffff);
  EXPECT_FALSE(DecodeGetBatch(lying_release, kNoLimit, kNoLimit, &r).ok());
}

// keys: n, flags, path_end[n], [ranges], bytes paths.
std::string RawKeys(uint32_t n, uint32_t flags, std::vector<uint32_t> ends,
                    absl::string_view paths) {
  std::string out;
  Writer w(&out);
  w.U32(n);
  w.U32(flags);
  for (uint32_t e : ends) w.U32(e);
  w.Bytes(paths);
  return out;
}

TEST(LocalProtocolTest, MalformedKeysAreErrors) {
  KeysView v;
  auto decode = [&](const std::string& raw) {
    Reader r(raw);
    return DecodeKeys(r, kNoLimit, &v);
  };
  const std::string good = RawKeys(2, 0, {1, 3}, "abc");  // v views into it
  EXPECT_TRUE(decode(good).ok());
  EXPECT_EQ(v.at(0).path, "a");
  EXPECT_EQ(v.at(1).path, "bc");
  // Not monotonic.
  EXPECT_TRUE(absl::IsInvalidArgument(decode(RawKeys(2, 0, {2, 1}, "abc"))));
  // Past the paths.
  EXPECT_TRUE(absl::IsInvalidArgument(decode(RawKeys(2, 0, {1, 9}, "abc"))));
  // Short of the paths (bytes left over).
  EXPECT_TRUE(absl::IsInvalidArgument(decode(RawKeys(2, 0, {1, 2}, "abc"))));
  // Unknown flags.
  EXPECT_TRUE(absl::IsInvalidArgument(decode(RawKeys(1, 2, {1}, "a"))));
  // Ranges flagged but absent.
  EXPECT_FALSE(decode(RawKeys(1, 1, {1}, "a")).ok());
  // A path length larger than the payload.
  std::string raw = RawKeys(1, 0, {1}, "a");
  const uint32_t big = 0xffffff00u;
  std::memcpy(raw.data() + 12, &big, 4);
  EXPECT_FALSE(decode(raw).ok());
}

TEST(LocalProtocolTest, BatchReplyRoundTrip) {
  BatchReplyBuilder b(3);
  Handle h1{1, 4096, 9, 77, 0xabc, 0};
  Handle h2{2, 0, 1 << 20, 78, 0xdef, 0};
  Handle h3{2, 1 << 20, 5, 79, 0x123, 1};
  b.AddItem(9, 1, true, {h1});
  b.AddError(5, "no such file");
  b.AddItem((1 << 20) + 5, 2, false, {h2, h3});
  b.AddError(0, "");  // code 0 is not an error code: UNKNOWN
  std::string p = b.Finish();
  BatchReply r;
  ASSERT_TRUE(DecodeBatchReply(p, &r).ok());
  EXPECT_EQ(r.code(), 0);
  ASSERT_EQ(r.item_count(), 4u);
  ASSERT_EQ(r.handle_count(), 3u);
  ItemView i0 = r.item(0);
  EXPECT_EQ(i0.code, 0);
  EXPECT_TRUE(i0.hit);
  EXPECT_EQ(i0.file_size, 9u);
  EXPECT_EQ(i0.first_handle, 0u);
  EXPECT_EQ(i0.handle_count, 1u);
  EXPECT_EQ(r.handle(0).offset, 4096u);
  EXPECT_EQ(r.handle(0).lease, 77u);
  EXPECT_EQ(r.handle(0).checksum, 0xabcu);
  ItemView i1 = r.item(1);
  EXPECT_EQ(i1.code, 5);
  EXPECT_EQ(i1.message, "no such file");
  EXPECT_EQ(i1.handle_count, 0u);
  ItemView i2 = r.item(2);
  EXPECT_FALSE(i2.hit);
  EXPECT_EQ(i2.chunk_count, 2u);
  EXPECT_EQ(i2.first_handle, 1u);
  EXPECT_EQ(i2.handle_count, 2u);
  EXPECT_EQ(r.handle(2).index, 1u);
  EXPECT_EQ(r.item(3).code, static_cast<int32_t>(absl::StatusCode::kUnknown));
  EveryTruncationFails(p, [](absl::string_view s) {
    BatchReply x;
    return DecodeBatchReply(s, &x);
  });
  // The data server's one-buffer frame is MakeFrame of the same payload.
  EXPECT_EQ(b.FinishFrame(MsgType::kBatch, 42),
            MakeFrame(MsgType::kBatch, 42, p));
  // A whole-batch failure.
  std::string f = EncodeBatchFailure(7, "denied");
  ASSERT_TRUE(DecodeBatchReply(f, &r).ok());
  EXPECT_EQ(r.code(), 7);
  EXPECT_EQ(r.message(), "denied");
  EXPECT_EQ(r.item_count(), 0u);
  EveryTruncationFails(f, [](absl::string_view s) {
    BatchReply x;
    return DecodeBatchReply(s, &x);
  });
}

TEST(LocalProtocolTest, MalformedBatchRepliesAreDataLoss) {
  auto build = [](std::vector<uint32_t> first, uint32_t handles,
                  std::vector<std::pair<uint32_t, std::string>> errors) {
    std::string out;
    Writer w(&out);
    const uint32_t n = first.size();
    w.I32(0);
    w.Bytes("");
    w.U32(n);
    w.U32(handles);
    for (uint32_t i = 0; i < n; ++i) w.I32(0);
    for (uint32_t i = 0; i < n; ++i) w.U64(0);
    for (uint32_t i = 0; i < n; ++i) w.U64(0);
    for (uint32_t f : first) w.U32(f);
    for (uint32_t i = 0; i < n; ++i) w.U8(0);
    for (uint32_t j = 0; j < handles; ++j) w.U32(0);
    for (int c = 0; c < 4; ++c) {
      for (uint32_t j = 0; j < handles; ++j) w.U64(0);
    }
    for (uint32_t j = 0; j < handles; ++j) w.U32(0);
    w.U32(errors.size());
    for (auto& [item, msg] : errors) {
      w.U32(item);
      w.Bytes(msg);
    }
    return out;
  };
  BatchReply r;
  EXPECT_TRUE(DecodeBatchReply(build({0, 1}, 2, {}), &r).ok());
  EXPECT_TRUE(absl::IsDataLoss(DecodeBatchReply(build({1, 0}, 2, {}), &r)));
  EXPECT_TRUE(absl::IsDataLoss(DecodeBatchReply(build({0, 3}, 2, {}), &r)));
  EXPECT_TRUE(absl::IsDataLoss(DecodeBatchReply(build({}, 2, {}), &r)));
  EXPECT_TRUE(
      absl::IsDataLoss(DecodeBatchReply(build({0, 1}, 2, {{2, "x"}}), &r)));
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeBatchReply(build({0, 1}, 2, {{1, "x"}, {1, "y"}}), &r)));
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeBatchReply(build({0, 1}, 2, {{0, "x"}, {1, "y"}, {1, "z"}}), &r)));
}

TEST(LocalProtocolTest, ReleaseStatPrefetchErrorRoundTrips) {
  const std::vector<uint64_t> leases = {1, 2, 3, 1ull << 60};
  std::string rp = EncodeRelease(leases);
  ColumnView<uint64_t> got;
  ASSERT_TRUE(DecodeRelease(rp, 10, &got).ok());
  EXPECT_EQ(got.ToVector(), leases);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeRelease(rp, 3, &got)));
  EveryTruncationFails(rp, [](absl::string_view s) {
    ColumnView<uint64_t> x;
    return DecodeRelease(s, kNoLimit, &x);
  });
  uint32_t released = 0;
  ASSERT_TRUE(DecodeReleased(EncodeReleased(4), &released).ok());
  EXPECT_EQ(released, 4u);
  EXPECT_TRUE(absl::IsDataLoss(DecodeReleased("ab", &released)));

  const std::vector<std::string> keys = SomeKeys();
  std::string sp =
      EncodeStat("ds", keys.size(), [&](size_t i) { return Key{keys[i]}; });
  StatRequest sr;
  ASSERT_TRUE(DecodeStat(sp, kNoLimit, &sr).ok());
  EXPECT_EQ(sr.dataset, "ds");
  ASSERT_EQ(sr.keys.size(), keys.size());
  EXPECT_EQ(sr.keys.at(3).path, keys[3]);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeStat(sp, 2, &sr)));
  EveryTruncationFails(sp, [](absl::string_view s) {
    StatRequest x;
    return DecodeStat(s, kNoLimit, &x);
  });
  std::string pp = EncodePrefetch("ds", keys.size(), [&](size_t i) {
    return Key{keys[i], 1, 2};
  });
  ASSERT_TRUE(DecodePrefetch(pp, kNoLimit, &sr).ok());
  EXPECT_EQ(sr.keys.at(0).first_chunk, 1u);
  EXPECT_EQ(sr.keys.at(0).max_chunks, 2u);

  std::vector<FileStat> files(2);
  files[0].size = 10;
  files[0].mtime_ns = -5;
  files[0].chunk_count = 1;
  files[0].cached_chunks = 1;
  files[1].code = 5;
  files[1].message = "gone";
  std::string srp = EncodeStatReply(0, "", files);
  int32_t code;
  std::string message;
  std::vector<FileStat> back;
  ASSERT_TRUE(DecodeStatReply(srp, &code, &message, &back).ok());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].mtime_ns, -5);
  EXPECT_EQ(back[1].message, "gone");
  EveryTruncationFails(srp, [](absl::string_view s) {
    int32_t c;
    std::string m;
    std::vector<FileStat> f;
    return DecodeStatReply(s, &c, &m, &f);
  });
  // A file count far past the payload: an error, not a huge resize.
  std::string lying;
  Writer w(&lying);
  w.I32(0);
  w.Bytes("");
  w.U32(0xfffffff0u);
  EXPECT_TRUE(absl::IsDataLoss(DecodeStatReply(lying, &code, &message, &back)));

  uint32_t accepted = 0;
  ASSERT_TRUE(DecodePrefetchReply(EncodePrefetchReply(3), &accepted).ok());
  EXPECT_EQ(accepted, 3u);

  absl::Status e = DecodeError(
      EncodeError(absl::ResourceExhaustedError("--max_connections")));
  EXPECT_TRUE(absl::IsResourceExhausted(e));
  EXPECT_EQ(e.message(), "--max_connections");
  std::string odd;
  Writer(&odd).I32(99);
  Writer(&odd).Bytes("x");
  EXPECT_EQ(DecodeError(odd).code(), absl::StatusCode::kUnknown);
  EXPECT_TRUE(absl::IsDataLoss(DecodeError("\x01")));
}

TEST(FrameAssemblerTest, ByteByByteAndOverLimit) {
  std::string stream = MakeFrame(MsgType::kRelease, 1, "abc") +
                       MakeFrame(MsgType::kStat, 2, "") +
                       MakeFrame(MsgType::kPrefetch, 3, std::string(1000, 'x'));
  FrameAssembler a(4096);
  std::vector<std::pair<uint64_t, size_t>> got;
  for (char ch : stream) {
    a.Append(&ch, 1);
    FrameHeader h;
    std::string payload;
    absl::Status error;
    while (a.Next(&h, &payload, &error))
      got.emplace_back(h.request_id, payload.size());
    ASSERT_TRUE(error.ok());
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], std::make_pair(uint64_t{1}, size_t{3}));
  EXPECT_EQ(got[1], std::make_pair(uint64_t{2}, size_t{0}));
  EXPECT_EQ(got[2], std::make_pair(uint64_t{3}, size_t{1000}));
  EXPECT_EQ(a.buffered(), 0u);

  FrameAssembler small(100);
  std::string big = MakeFrame(MsgType::kGetBatch, 4, std::string(101, 'y'));
  small.Append(big.data(), kHeaderSize);  // the header alone says too much
  FrameHeader h;
  std::string payload;
  absl::Status error;
  EXPECT_FALSE(small.Next(&h, &payload, &error));
  EXPECT_TRUE(absl::IsInvalidArgument(error));
  EXPECT_TRUE(absl::StrContains(error.message(), "max_frame_bytes"));
}

TEST(FrameSocketTest, FramesAndFdsOverASocketPair) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  int pipefd[2];
  ASSERT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
  UniqueFd pr(pipefd[0]), pw(pipefd[1]);
  // A batch reply and then a segments reply with an fd, written before the
  // reader reads: one recvmsg may return both frames' bytes with the fd,
  // which belongs to the kSegments frame.
  ASSERT_TRUE(SendFrame(a.get(), MsgType::kBatch, 1, "batch").ok());
  const int fds[] = {pr.get()};
  ASSERT_TRUE(SendFrame(a.get(), MsgType::kSegments, 2, "segs", fds).ok());
  ASSERT_TRUE(SendFrame(a.get(), MsgType::kReleased, 3, "rel").ok());
  FrameReceiver r;
  absl::StatusOr<Frame> f1 = r.Next(b.get());
  ASSERT_TRUE(f1.ok()) << f1.status();
  EXPECT_EQ(f1->type(), MsgType::kBatch);
  EXPECT_EQ(f1->payload, "batch");
  EXPECT_TRUE(f1->fds.empty());
  absl::StatusOr<Frame> f2 = r.Next(b.get());
  ASSERT_TRUE(f2.ok());
  EXPECT_EQ(f2->type(), MsgType::kSegments);
  ASSERT_EQ(f2->fds.size(), 1u);
  ASSERT_EQ(::write(pw.get(), "q", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(f2->fds[0].get(), &c, 1), 1);
  EXPECT_EQ(c, 'q');
  absl::StatusOr<Frame> f3 = r.Next(b.get());
  ASSERT_TRUE(f3.ok());
  EXPECT_EQ(f3->header.request_id, 3u);
  EXPECT_TRUE(f3->fds.empty());

  // A frame over the receiver's limit, then EOF.
  FrameReceiver limited(8);
  ASSERT_TRUE(SendFrame(a.get(), MsgType::kBatch, 4, "123456789").ok());
  EXPECT_TRUE(absl::IsDataLoss(limited.Next(b.get()).status()));
  a = UniqueFd();
  FrameReceiver fresh;
  EXPECT_TRUE(absl::IsUnavailable(fresh.Next(b.get()).status()));
}

}  // namespace
}  // namespace dlcache::local

// Issue 30: kList and kListReply.
namespace dlcache::local {
namespace {

TEST(LocalProtocolListTest, RequestRoundTripsAndRefusesUnknownFlags) {
  ListRequest req;
  req.dataset = "ds";
  req.prefix = "train";
  req.page_token = "train/a";
  req.max_entries = 7;
  req.flags = kListRefresh;
  ListRequest got;
  const std::string payload = EncodeList(req);  // got views into it
  ASSERT_TRUE(DecodeList(payload, &got).ok());
  EXPECT_EQ(got.dataset, "ds");
  EXPECT_EQ(got.prefix, "train");
  EXPECT_EQ(got.page_token, "train/a");
  EXPECT_EQ(got.max_entries, 7u);
  EXPECT_EQ(got.flags, kListRefresh);
  req.flags = 2;
  EXPECT_EQ(DecodeList(EncodeList(req), &got).code(),
            absl::StatusCode::kInvalidArgument);
  std::string cut = EncodeList(req);
  cut.pop_back();
  EXPECT_EQ(DecodeList(cut, &got).code(), absl::StatusCode::kInvalidArgument);
}

TEST(LocalProtocolListTest, ReplyRoundTripsEntriesAndToken) {
  ListReplyBuilder b;
  b.Add("a", 1, 10);
  b.Add("b/c", 1u << 30, -5);
  b.Add("", 0, 0);
  ListReply r;
  const std::string payload = b.Finish("b/c");  // r views into it
  ASSERT_TRUE(DecodeListReply(payload, &r).ok());
  EXPECT_EQ(r.code(), 0);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r.entry(0).name, "a");
  EXPECT_EQ(r.entry(0).size, 1u);
  EXPECT_EQ(r.entry(0).mtime_ns, 10);
  EXPECT_EQ(r.entry(1).name, "b/c");
  EXPECT_EQ(r.entry(1).size, 1u << 30);
  EXPECT_EQ(r.entry(1).mtime_ns, -5);
  EXPECT_EQ(r.entry(2).name, "");
  EXPECT_EQ(r.next_page_token(), "b/c");

  const std::string empty = ListReplyBuilder().Finish("");
  ASSERT_TRUE(DecodeListReply(empty, &r).ok());
  EXPECT_EQ(r.size(), 0u);
  EXPECT_EQ(r.next_page_token(), "");

  const std::string failure = EncodeListFailure(7, "not a reader");
  ASSERT_TRUE(DecodeListReply(failure, &r).ok());
  EXPECT_EQ(r.code(), 7);
  EXPECT_EQ(r.message(), "not a reader");
}

TEST(LocalProtocolListTest, MalformedReplyIsDataLoss) {
  ListReplyBuilder b;
  b.Add("abc", 1, 1);
  std::string p = b.Finish("");
  ListReply r;
  const std::string cut = p.substr(0, p.size() - 1);
  EXPECT_EQ(DecodeListReply(cut, &r).code(), absl::StatusCode::kDataLoss);
  // name_end past the names.
  std::string bad = p;
  const uint32_t huge = 1000;
  std::memcpy(&bad[4 + 4 + 4], &huge, 4);
  EXPECT_EQ(DecodeListReply(bad, &r).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(r.size(), 0u);
}

TEST(LocalProtocolStallTest, ReportRoundTripsAndRefusesMalformed) {
  StallReport in;
  in.dataset = "ds";
  in.plan = "job/a";
  in.wait_ns = 123456789;
  in.step_ns = 987654321;
  in.batches = 42;
  const std::string payload = EncodeStallReport(in);  // got views into it
  StallReport got;
  ASSERT_TRUE(DecodeStallReport(payload, &got).ok());
  EXPECT_EQ(got.dataset, "ds");
  EXPECT_EQ(got.plan, "job/a");
  EXPECT_EQ(got.wait_ns, 123456789u);
  EXPECT_EQ(got.step_ns, 987654321u);
  EXPECT_EQ(got.batches, 42u);
  std::string cut = payload;
  cut.pop_back();
  EXPECT_EQ(DecodeStallReport(cut, &got).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeStallReport(payload + "x", &got).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_NE(kFeatureStallReports & (kFeaturePlanPositions |
                                    kFeatureJobPlanPositions | kFeatureList),
            kFeatureStallReports);
}

}  // namespace
}  // namespace dlcache::local
