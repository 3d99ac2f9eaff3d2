// Fuzz target: the packed-key decoders of the local data protocol
// (common/local_protocol.h): DecodeGetBatch, DecodeKeys, DecodeBatchReply,
// DecodeRegisterPlan, plus the small Hello/Segments decoders. The first input
// byte picks the decoder, the rest is the payload. Whatever decodes OK is then
// read in full (every key, column value and handle), so a view that points past
// the payload shows up under AddressSanitizer. Built as a libFuzzer target
// with clang; with other compilers fuzz_replay_main.cc drives it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/local_protocol.h"

namespace lp = dlcache::local;

namespace {

volatile uint64_t sink;

void Touch(absl::string_view s) {
  uint64_t h = s.size();
  for (char c : s) h = h * 31 + static_cast<unsigned char>(c);
  sink = sink + h;
}

void TouchKeys(const lp::KeysView& keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    lp::Key k = keys.at(i);
    Touch(k.path);
    sink = sink + k.first_chunk + k.max_chunks;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view payload(reinterpret_cast<const char*>(data + 1),
                                  size - 1);
  switch (data[0] % 6) {
    case 0: {
      lp::GetBatchRequest req;
      if (lp::DecodeGetBatch(payload, 4096, 4096, &req).ok()) {
        Touch(req.dataset);
        for (size_t i = 0; i < req.release.size(); ++i) {
          sink = sink + req.release[i];
        }
        TouchKeys(req.keys);
      }
      break;
    }
    case 1: {
      lp::Reader in(payload);
      lp::KeysView keys;
      if (lp::DecodeKeys(in, 4096, &keys).ok()) TouchKeys(keys);
      break;
    }
    case 2: {
      lp::BatchReply reply;
      if (lp::DecodeBatchReply(payload, &reply).ok()) {
        Touch(reply.message());
        for (size_t i = 0; i < reply.item_count(); ++i) {
          lp::ItemView item = reply.item(i);
          Touch(item.message);
          // Every handle an item names must exist.
          if (uint64_t{item.first_handle} + item.handle_count >
              reply.handle_count()) {
            std::abort();
          }
          for (uint32_t j = 0; j < item.handle_count; ++j) {
            lp::Handle h = reply.handle(item.first_handle + j);
            sink = sink + h.segment + h.offset + h.length + h.lease;
          }
        }
      }
      break;
    }
    case 3: {
      lp::Hello hello;
      if (lp::DecodeHello(payload, &hello).ok()) {
        Touch(hello.client_name);
        sink = sink + static_cast<uint32_t>(hello.numa_node);
      }
      break;
    }
    case 4: {
      lp::HelloReply reply;
      if (lp::DecodeHelloReply(payload, &reply).ok()) Touch(reply.message);
      break;
    }
    default: {
      lp::SegmentsReply reply;
      lp::GetSegments get;
      if (lp::DecodeSegmentsReply(payload, &reply).ok()) Touch(reply.message);
      (void)lp::DecodeGetSegments(payload, &get);
      // Shares the case: a new selector value would remap the corpus.
      lp::RegisterPlanRequest plan;
      if (lp::DecodeRegisterPlan(payload, 4096, &plan).ok()) {
        Touch(plan.dataset);
        Touch(plan.plan);
        sink = sink + plan.epoch + plan.offset;
        TouchKeys(plan.keys);
      }
      // kList and kListReply (issue 30), in the same shared case.
      lp::ListRequest list;
      if (lp::DecodeList(payload, &list).ok()) {
        Touch(list.dataset);
        Touch(list.prefix);
        Touch(list.page_token);
        sink = sink + list.max_entries + list.flags;
      }
      lp::ListReply listed;
      if (lp::DecodeListReply(payload, &listed).ok()) {
        Touch(listed.message());
        Touch(listed.next_page_token());
        for (size_t i = 0; i < listed.size(); ++i) {
          lp::ListEntryView e = listed.entry(i);
          Touch(e.name);
          sink = sink + e.size + static_cast<uint64_t>(e.mtime_ns);
        }
      }
      // kStallReport (issue 34), in the same shared case.
      lp::StallReport stall;
      if (lp::DecodeStallReport(payload, &stall).ok()) {
        Touch(stall.dataset);
        Touch(stall.plan);
        sink = sink + stall.wait_ns + stall.step_ns + stall.batches;
      }
    }
  }
  return 0;
}

// Seeds: one well-formed payload per decoder, for
// tests/fuzz/corpus/local_protocol/.
extern "C" int LLVMFuzzerWriteSeeds(const char* dir_c) {
  const std::string dir = dir_c;
  bool all_ok = true;
  auto write = [&](const std::string& name, char which,
                   const std::string& payload) {
    std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
    out << which << payload;
    // Each seed must decode, or it only exercises the error paths.
    absl::Status s;
    switch (which) {
      case 0: {
        lp::GetBatchRequest r;
        s = lp::DecodeGetBatch(payload, 4096, 4096, &r);
        break;
      }
      case 1: {
        lp::Reader in(payload);
        lp::KeysView k;
        s = lp::DecodeKeys(in, 4096, &k);
        break;
      }
      case 2: {
        lp::BatchReply r;
        s = lp::DecodeBatchReply(payload, &r);
        break;
      }
      case 3: {
        lp::Hello h;
        s = lp::DecodeHello(payload, &h);
        break;
      }
      case 4: {
        lp::HelloReply h;
        s = lp::DecodeHelloReply(payload, &h);
        break;
      }
      default: {
        lp::SegmentsReply r;
        s = lp::DecodeSegmentsReply(payload, &r);
      }
    }
    if (!s.ok()) {
      std::fprintf(stderr, "seed %s does not decode: %s\n", name.c_str(),
                   s.ToString().c_str());
      all_ok = false;
    }
  };
  const std::vector<lp::Key> keys = {
      {"train/a.jpg", 0, 0}, {"train/b.jpg", 2, 3}, {"caf\xe9\n.bin", 0, 1}};
  const std::vector<uint64_t> release = {7, 9};
  write("get_batch", 0,
        lp::EncodeGetBatch("imagenet", release, keys.size(),
                           [&](size_t i) { return keys[i]; }));
  std::string packed;
  lp::EncodeKeys(
      keys.size(), [&](size_t i) { return keys[i]; }, &packed);
  write("keys", 1, packed);
  lp::BatchReplyBuilder b;
  lp::Handle h[2] = {{0, 4096, 100, 11, 42, 0}, {1, 0, 4096, 12, 43, 1}};
  b.AddItem(4196, 2, true, h);
  b.AddError(5, "not found: x");
  b.AddItem(0, 0, false, {});
  write("batch_reply", 2, b.Finish());
  write("batch_failure", 2, lp::EncodeBatchFailure(9, "closed session"));
  lp::Hello hello;
  hello.client_name = "trainer\n0";
  write("hello", 3, lp::EncodeHello(hello));
  // A client that names its GPU's NUMA node (docs/numa.md).
  hello.client_name = "rank1";
  hello.numa_node = 1;
  write("hello_numa_node", 3, lp::EncodeHello(hello));
  lp::HelloReply hr;
  hr.session_id = 3;
  hr.segment_sizes = {1 << 20, 1 << 20};
  write("hello_reply", 4, lp::EncodeHelloReply(hr));
  lp::SegmentsReply sr;
  sr.count = 2;
  write("segments_reply", 5, lp::EncodeSegmentsReply(sr));
  return all_ok ? 0 : 1;
}
