// A trainer process for load_chaos_test: connects to dlcached with
// dlcache::Client (checksum verification on, reconnect on), reads random
// batches of the chaos dataset (tests/integration/chaos_dataset.h) in a loop
// and compares every byte it is served with the dataset's content. Each
// batch is kept until the next one has been checked and is then compared
// again, so bytes that change under a held item are caught too.
//
//   chaos_reader SOCKET NAME SEED
//
// It runs until its stdin reaches end of file (the test closes the pipe),
// then flushes its releases and prints one report line on stdout:
//   "report batches=B items=I bytes=N rechecked=R sessions=S tolerated=T"
// followed by " CODE=N" for each tolerated status code (e.g. UNAVAILABLE=3),
// and exits 0. On any difference, an unexpected error code or a Client
// that cannot connect within 30 s it prints a line starting with
// "chaos_reader NAME: " on stderr and exits 1 at once.
//
// Errors that a server being killed, restarted or evicting under load
// explains are tolerated and counted: a batch that fails as a whole with
// UNAVAILABLE or DEADLINE_EXCEEDED, items with UNAVAILABLE,
// DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED or CANCELLED. DATA_LOSS
// (the client's checksum check failed) and every other code are failures.
//
// Held items of a lost session are compared again too: that is only
// correct because the test runs dlcached with --keep_arena=false, so a
// restarted server never reuses the old arena files that those items map.

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dlcache/client.h"
#include "tests/integration/chaos_dataset.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

std::string g_name = "?";

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "chaos_reader %s: %s\n", g_name.c_str(),
               message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// True once the test closed our stdin.
bool StopRequested() {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char c;
  return ::read(STDIN_FILENO, &c, 1) <= 0;
}

bool Tolerated(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

struct Request {
  int file;
  uint32_t first_chunk;
  uint32_t max_chunks;
};

class Reader {
 public:
  Reader(std::unique_ptr<Client> client, uint64_t seed)
      : client_(std::move(client)), rng_(seed) {
    for (int i = 0; i < testing::kChaosFiles; ++i) {
      expected_.push_back(testing::RandomBytes(testing::ChaosFileSize(i),
                                               testing::ChaosFileSeed(i)));
    }
  }

  void Run() {
    while (!StopRequested()) {
      std::vector<Request> requests = PickBatch();
      std::vector<ItemRequest> items;
      for (const Request& r : requests) {
        items.push_back(
            {testing::ChaosFilePath(r.file), r.first_chunk, r.max_chunks});
      }
      absl::StatusOr<Batch> batch = client_->GetBatch("default", items);
      if (!batch.ok()) {
        const absl::StatusCode code = batch.status().code();
        if (code != absl::StatusCode::kUnavailable &&
            code != absl::StatusCode::kDeadlineExceeded) {
          Fail("GetBatch: " + batch.status().ToString());
        }
        Tolerate(code);
        continue;
      }
      if (batch->size() != requests.size()) Fail("wrong number of items");
      for (size_t i = 0; i < requests.size(); ++i) {
        const Item& item = (*batch)[i];
        if (!item.ok()) {
          if (!Tolerated(item.status().code())) {
            Fail(testing::ChaosFilePath(requests[i].file) + ": " +
                 item.status().ToString());
          }
          Tolerate(item.status().code());
          continue;
        }
        Check(requests[i], item, /*again=*/false);
        ++items_;
        bytes_ += item.size();
      }
      ++batches_;
      // The previous batch is still held: its bytes must not have changed.
      for (size_t i = 0; i < held_requests_.size(); ++i) {
        const Item& item = held_[i];
        if (!item.ok()) continue;
        Check(held_requests_[i], item, /*again=*/true);
        ++rechecked_;
      }
      held_ = std::move(*batch);
      held_requests_ = std::move(requests);
    }
    held_ = Batch();
    (void)client_->FlushReleases();  // the server may be gone: best effort
    std::string codes;
    for (const auto& [code, n] : tolerated_codes_) {
      codes += " " + absl::StatusCodeToString(code) + "=" + std::to_string(n);
    }
    std::printf(
        "report batches=%llu items=%llu bytes=%llu rechecked=%llu "
        "sessions=%llu tolerated=%llu%s\n",
        static_cast<unsigned long long>(batches_),
        static_cast<unsigned long long>(items_),
        static_cast<unsigned long long>(bytes_),
        static_cast<unsigned long long>(rechecked_),
        static_cast<unsigned long long>(client_->sessions_opened()),
        static_cast<unsigned long long>(tolerated_), codes.c_str());
    std::fflush(stdout);
  }

 private:
  void Tolerate(absl::StatusCode code) {
    ++tolerated_;
    ++tolerated_codes_[code];
  }

  // 1-8 distinct files; a quarter of the multi-chunk ones ask for a range.
  std::vector<Request> PickBatch() {
    const int n = 1 + rng_() % 8;
    std::vector<Request> out;
    while (static_cast<int>(out.size()) < n) {
      const int f = rng_() % testing::kChaosFiles;
      if (std::any_of(out.begin(), out.end(),
                      [f](const Request& r) { return r.file == f; })) {
        continue;
      }
      Request r{f, 0, 0};
      const uint32_t chunks = ChunkCount(f);
      if (chunks > 1 && rng_() % 4 == 0) {
        r.first_chunk = rng_() % chunks;
        r.max_chunks = rng_() % 3;  // 0 = to the end
      }
      out.push_back(r);
    }
    return out;
  }

  uint32_t ChunkCount(int f) const {
    const size_t size = testing::ChaosFileSize(f);
    return static_cast<uint32_t>((size + testing::kChaosChunkSize - 1) /
                                 testing::kChaosChunkSize);
  }

  void Check(const Request& r, const Item& item, bool again) {
    const std::string path = testing::ChaosFilePath(r.file);
    const std::string& want = expected_[r.file];
    const uint64_t chunk_size = client_->chunk_size();
    if (chunk_size != testing::kChaosChunkSize) {
      Fail("server chunk size " + std::to_string(chunk_size));
    }
    if (item.file_size() != want.size() ||
        item.chunk_count() != ChunkCount(r.file)) {
      Fail(path + ": size " + std::to_string(item.file_size()) + " / " +
           std::to_string(item.chunk_count()) + " chunks, want " +
           std::to_string(want.size()));
    }
    const uint32_t end =
        r.max_chunks == 0
            ? item.chunk_count()
            : std::min(item.chunk_count(), r.first_chunk + r.max_chunks);
    if (item.chunks().size() != end - r.first_chunk) {
      Fail(path + ": " + std::to_string(item.chunks().size()) +
           " chunks returned, want " + std::to_string(end - r.first_chunk));
    }
    uint32_t index = r.first_chunk;
    for (const ChunkView& c : item.chunks()) {
      const uint64_t offset = uint64_t{index} * chunk_size;
      const size_t size = std::min<uint64_t>(chunk_size, want.size() - offset);
      if (c.index != index || c.size != size) {
        Fail(path + ": chunk " + std::to_string(c.index) + " of " +
             std::to_string(c.size) + " bytes, want chunk " +
             std::to_string(index) + " of " + std::to_string(size));
      }
      if (std::memcmp(c.data, want.data() + offset, size) != 0) {
        size_t at = 0;
        const char* got = reinterpret_cast<const char*>(c.data);
        while (got[at] == want[offset + at]) ++at;
        Fail(path + ": byte " + std::to_string(offset + at) +
             (again ? " changed while the item was held" : " differs") +
             " (chunk " + std::to_string(index) + ", segment " +
             std::to_string(c.segment) + ", offset " +
             std::to_string(c.offset) + ", session " +
             std::to_string(client_->sessions_opened()) + ")");
      }
      ++index;
    }
  }

  std::unique_ptr<Client> client_;
  std::mt19937_64 rng_;
  std::vector<std::string> expected_;
  Batch held_;
  std::vector<Request> held_requests_;
  std::map<absl::StatusCode, uint64_t> tolerated_codes_;
  uint64_t batches_ = 0, items_ = 0, bytes_ = 0, rechecked_ = 0, tolerated_ = 0;
};

}  // namespace
}  // namespace dlcache

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SOCKET NAME SEED\n", argv[0]);
    return 2;
  }
  dlcache::g_name = argv[2];
  uint64_t seed;
  if (!absl::SimpleAtoi(argv[3], &seed)) return 2;

  dlcache::ClientOptions options;
  options.socket_path = argv[1];
  options.client_name = std::string("chaos-") + argv[2];
  options.verify_checksums = true;
  options.reconnect = true;
  options.reconnect_max_backoff = absl::Milliseconds(200);
  options.rpc_timeout = absl::Seconds(15);
  options.connect_timeout = absl::Seconds(15);
  // A reader started while the server restarts waits for it.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<dlcache::Client>> client;
  do {
    client = dlcache::Client::Connect(options);
  } while (!client.ok() &&
           client.status().code() == absl::StatusCode::kUnavailable &&
           absl::Now() < deadline && !dlcache::StopRequested());
  if (!client.ok()) {
    if (dlcache::StopRequested()) return 0;
    dlcache::Fail("Connect: " + client.status().ToString());
  }
  dlcache::Reader(*std::move(client), seed).Run();
  return 0;
}
