#ifndef DLCACHE_TESTS_TESTING_PLAN_SERVER_FIXTURE_H_
#define DLCACHE_TESTS_TESTING_PLAN_SERVER_FIXTURE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlcache/client.h"
#include "gtest/gtest.h"
#include "server/plan/plan_registry.h"
#include "tests/testing/counting_source.h"
#include "tests/testing/test_server.h"

namespace dlcache::testing {

// An in-process server for the epoch plan tests: an arena of 64 chunks,
// dataset "ds" of 128 one-chunk files (twice the arena) whose source reads
// are counted. Owns the server; one client per Connect().
class PlanServerFixture : public ::testing::Test {
 protected:
  static constexpr uint64_t kChunk = 256 << 10;
  static constexpr uint64_t kArena = 16 << 20;  // 64 items
  static constexpr int kItems = 128;            // twice the arena

  // Starts the server (`edit` changes its config first) and writes the
  // files. A failed start fails the test (ASSERT).
  void Start(std::function<void(ServerConfig*)> edit = nullptr) {
    TestServer::Options o;
    o.arena_bytes = kArena;
    o.segment_bytes = kArena;
    o.chunk_size = kChunk;
    o.wrap_source = [this](const std::string&, std::shared_ptr<Source> in) {
      auto c = std::make_shared<CountingSource>(std::move(in));
      counting_ = c.get();
      return c;
    };
    o.edit_config = std::move(edit);
    auto s = TestServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    for (int i = 0; i < kItems; ++i) {
      keys_.push_back(absl::StrCat("f/", i));
      server_->WriteFile("ds", keys_.back(), std::string(kChunk, 'a' + i % 26));
    }
  }

  // A client of the server; null (and a failed expectation) if it fails.
  std::unique_ptr<Client> Connect() {
    ClientOptions o;
    o.socket_path = server_->socket_path();
    o.client_name = "epoch-plan-test";
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // The keys in epoch `epoch`'s shuffled order (the same for every call).
  std::vector<std::string> Order(int epoch) {
    std::vector<std::string> o = keys_;
    std::mt19937_64 rng(100 + epoch);
    std::shuffle(o.begin(), o.end(), rng);
    return o;
  }

  PlanRegistry& plans() { return *server_->server().plans(); }

  // Reads `order` in batches of kBatch by key, checking every byte.
  void ReadEpoch(Client& c, const std::vector<std::string>& order) {
    ReadInBatches(c, order, std::nullopt, 0);
  }
  // The same, each batch saying where it stands in epoch `epoch` of the
  // plan (its offset in `order`); `shift` misplaces them.
  void ReadEpochAt(Client& c, uint64_t epoch,
                   const std::vector<std::string>& order, size_t shift = 0) {
    ReadInBatches(c, order, epoch, shift);
  }

  static constexpr size_t kBatch = 8;

  std::unique_ptr<TestServer> server_;
  CountingSource* counting_ = nullptr;
  std::vector<std::string> keys_;

 private:
  void ReadInBatches(Client& c, const std::vector<std::string>& order,
                     std::optional<uint64_t> epoch, size_t shift) {
    for (size_t i = 0; i < order.size(); i += kBatch) {
      std::vector<std::string> part(
          order.begin() + i,
          order.begin() + std::min(order.size(), i + kBatch));
      absl::StatusOr<Batch> b =
          epoch.has_value()
              ? c.GetBatch("ds", part, PlanPosition{*epoch, i + shift})
              : c.GetBatch("ds", part);
      ASSERT_TRUE(b.ok()) << b.status();
      for (size_t j = 0; j < part.size(); ++j) {
        const Item& item = (*b)[j];
        ASSERT_TRUE(item.status().ok()) << item.status();
        const int n = std::stoi(part[j].substr(2));
        std::string got(item.size(), '\0');
        ASSERT_TRUE(
            item.CopyTo(absl::MakeSpan(reinterpret_cast<std::byte*>(got.data()),
                                       got.size()))
                .ok());
        ASSERT_EQ(got, std::string(kChunk, 'a' + n % 26)) << part[j];
      }
    }
  }
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_PLAN_SERVER_FIXTURE_H_
