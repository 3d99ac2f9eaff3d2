#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/batch_reader.h"
#include "bench/bench_runner.h"
#include "bench/dataset_gen.h"
#include "bench/page_cache_reader.h"
#include "bench/stats.h"
#include "bench/temp_dir.h"
#include "bench/touch.h"
#include "gtest/gtest.h"

namespace dlcache::bench {
namespace {

std::vector<char> Bytes(size_t n, uint64_t seed) {
  std::vector<char> v(n);
  FillFileBytes(seed, 7, absl::MakeSpan(v));
  return v;
}

// XOR of words, one byte at a time: the definition TouchBytes must match.
uint64_t SlowDigest(const char* p, size_t n) {
  uint64_t d = 0;
  for (size_t i = 0; i < n; ++i) {
    d ^= uint64_t{static_cast<unsigned char>(p[i])} << (8 * (i % 8));
  }
  return d;
}

TEST(TouchBytesTest, MatchesBytewiseDefinitionForAllTailLengths) {
  const std::vector<char> v = Bytes(200, 1);
  for (size_t n = 0; n <= v.size(); ++n) {
    EXPECT_EQ(TouchBytes(v.data(), n), SlowDigest(v.data(), n)) << n;
  }
}

TEST(TouchBytesTest, ChunkedDigestsXorToWholeDigest) {
  const std::vector<char> v = Bytes(3 * 4096 + 123, 2);
  const uint64_t whole = TouchBytes(v.data(), v.size());
  uint64_t pieces = 0;
  for (size_t off = 0; off < v.size(); off += 4096) {
    pieces ^=
        TouchBytes(v.data() + off, std::min<size_t>(4096, v.size() - off));
  }
  EXPECT_EQ(pieces, whole);
}

TEST(TouchBytesTest, SeesEveryByte) {
  std::vector<char> v = Bytes(1000, 3);
  const uint64_t before = TouchBytes(v.data(), v.size());
  for (size_t i : {0, 31, 32, 500, 991, 999}) {
    v[i] ^= 1;
    EXPECT_NE(TouchBytes(v.data(), v.size()), before) << i;
    v[i] ^= 1;
  }
}

TEST(TouchBytesTest, UnalignedStart) {
  const std::vector<char> v = Bytes(1000, 4);
  EXPECT_EQ(TouchBytes(v.data() + 3, 990), SlowDigest(v.data() + 3, 990));
}

TEST(LatencyRecorderTest, NearestRankPercentiles) {
  LatencyRecorder r;
  EXPECT_EQ(r.PercentileMicros(50), 0);
  for (int i = 100; i >= 1; --i) r.AddMicros(i);
  EXPECT_EQ(r.PercentileMicros(50), 50);
  EXPECT_EQ(r.PercentileMicros(99), 99);
  EXPECT_EQ(r.PercentileMicros(100), 100);
  EXPECT_EQ(r.PercentileMicros(0), 1);
  EXPECT_DOUBLE_EQ(r.MeanMicros(), 50.5);
  LatencyRecorder more;
  more.AddMicros(1000);
  r.Merge(more);
  EXPECT_EQ(r.count(), 101u);
  EXPECT_EQ(r.PercentileMicros(100), 1000);
}

TEST(PathResultTest, Rates) {
  PathResult p;
  p.items = 1000;
  p.bytes = 2'000'000'000;
  p.elapsed = absl::Seconds(2);
  EXPECT_DOUBLE_EQ(p.items_per_s(), 500);
  EXPECT_DOUBLE_EQ(p.gb_per_s(), 1);
  EXPECT_EQ(PathResult().items_per_s(), 0);
}

TEST(MarkdownTableTest, RendersAlignedTable) {
  MarkdownTable t({"name", "value"}, 1);
  t.AddRow({"a", "1"});
  t.AddRow({"longer", "12345"});
  EXPECT_EQ(t.Render(),
            "| name   | value |\n"
            "|:-------|------:|\n"
            "| a      |     1 |\n"
            "| longer | 12345 |\n");
}

TEST(FormatTest, Numbers) {
  EXPECT_EQ(FormatRate(0), "-");
  EXPECT_EQ(FormatRate(950), "950.0");
  EXPECT_EQ(FormatRate(12345), "12.3k");
  EXPECT_EQ(FormatRate(2.5e6), "2.50M");
  EXPECT_EQ(FormatFixed(3.14159, 2), "3.14");
  EXPECT_EQ(FormatRatio(3, 1), "3.00x");
  EXPECT_EQ(FormatRatio(25, 2), "12x");
  EXPECT_EQ(FormatRatio(1, 0), "-");
}

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ScopedTempDir>> d =
        ScopedTempDir::Create("/tmp", "bench-test-");
    ASSERT_TRUE(d.ok()) << d.status();
    dir_ = *std::move(d);
    spec_.small_files = 1100;  // two directories
    spec_.small_bytes = 5000;
    spec_.small_jitter = 400;
    spec_.large_files = 3;
    spec_.large_bytes = 70'000;
    spec_.seed = 9;
  }

  absl::StatusOr<Dataset> Generate(const std::string& sub) {
    const std::string root = dir_->path() + "/" + sub;
    ::mkdir(root.c_str(), 0755);
    return GenerateDataset(root, spec_);
  }

  std::unique_ptr<ScopedTempDir> dir_;
  DatasetSpec spec_;
};

TEST_F(DatasetTest, FilesMatchSpecAndDigests) {
  absl::StatusOr<Dataset> ds = Generate("a");
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->files.size(), 1103u);
  EXPECT_EQ(ds->small_count, 1100u);
  uint64_t total = 0;
  std::set<uint64_t> sizes;
  for (uint32_t i = 0; i < ds->files.size(); ++i) {
    const DatasetFile& f = ds->files[i];
    EXPECT_EQ(f.large, i >= 1100);
    if (f.large) {
      EXPECT_EQ(f.size, 70'000u);
    } else {
      EXPECT_GE(f.size, 4600u);
      EXPECT_LE(f.size, 5400u);
      sizes.insert(f.size);
    }
    total += f.size;
    if (i % 97 == 0 || f.large) {
      std::ifstream in(ds->root + "/" + f.path, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), {});
      ASSERT_EQ(bytes.size(), f.size) << f.path;
      EXPECT_EQ(TouchBytes(bytes.data(), bytes.size()), f.digest) << f.path;
    }
  }
  EXPECT_GT(sizes.size(), 100u);  // sizes really vary
  EXPECT_EQ(ds->total_bytes, total);
  EXPECT_EQ(ds->max_file_bytes, 70'000u);
  EXPECT_EQ(ds->files[1050].path, "small/d001/f001050.bin");
}

TEST_F(DatasetTest, SameSpecSameBytesOtherSeedOtherBytes) {
  absl::StatusOr<Dataset> a = Generate("a");
  absl::StatusOr<Dataset> b = Generate("b");
  ASSERT_TRUE(a.ok() && b.ok());
  spec_.seed = 10;
  absl::StatusOr<Dataset> c = Generate("c");
  ASSERT_TRUE(c.ok());
  int differ = 0;
  for (size_t i = 0; i < a->files.size(); ++i) {
    EXPECT_EQ(a->files[i].size, b->files[i].size);
    EXPECT_EQ(a->files[i].digest, b->files[i].digest);
    if (a->files[i].digest != c->files[i].digest) ++differ;
  }
  EXPECT_EQ(differ, static_cast<int>(a->files.size()));
}

TEST_F(DatasetTest, RejectsBadSpecs) {
  spec_.small_files = 0;
  spec_.large_files = 0;
  EXPECT_EQ(Generate("x").status().code(), absl::StatusCode::kInvalidArgument);
  spec_.small_files = 1;
  spec_.small_jitter = spec_.small_bytes;
  EXPECT_EQ(Generate("y").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DatasetTest, WorkloadIsDeterministicWithDistinctKeysPerBatch) {
  absl::StatusOr<Dataset> ds = Generate("a");
  ASSERT_TRUE(ds.ok());
  Workload w1 = MakeWorkload(*ds, "w", 0, 1100, 64, 50, 5);
  Workload w2 = MakeWorkload(*ds, "w", 0, 1100, 64, 50, 5);
  Workload w3 = MakeWorkload(*ds, "w", 0, 1100, 64, 50, 6);
  ASSERT_EQ(w1.batches.size(), 50u);
  EXPECT_EQ(w1.batches, w2.batches);
  EXPECT_NE(w1.batches, w3.batches);
  for (size_t b = 0; b < w1.batches.size(); ++b) {
    const auto& batch = w1.batches[b];
    EXPECT_EQ(batch.size(), 64u);
    EXPECT_EQ(std::set<uint32_t>(batch.begin(), batch.end()).size(), 64u);
    for (uint32_t i : batch) EXPECT_LT(i, 1100u);
    EXPECT_EQ(w1.expected_digests[b], ds->ExpectedDigest(batch));
  }
  // A range of the large files only, with a batch larger than the range.
  Workload large = MakeWorkload(*ds, "l", 1100, 3, 16, 4, 5);
  for (const auto& batch : large.batches) {
    EXPECT_EQ(std::set<uint32_t>(batch.begin(), batch.end()),
              (std::set<uint32_t>{1100, 1101, 1102}));
  }
}

TEST_F(DatasetTest, PageCacheReaderDeliversExactBytes) {
  absl::StatusOr<Dataset> ds = Generate("a");
  ASSERT_TRUE(ds.ok());
  PageCacheReader reader(*ds);
  ASSERT_TRUE(WarmReader(reader, *ds, 100).ok());
  Workload w = MakeWorkload(*ds, "w", 0, ds->files.size(), 32, 8, 1);
  PathResult result;
  size_t cursor = 0;
  RunLimits limits;
  limits.max_batches = 10;  // wraps around the 8 batches
  ASSERT_TRUE(RunBatches(reader, w, limits, &cursor, &result).ok());
  EXPECT_EQ(result.batches, 10u);
  EXPECT_EQ(result.items, 320u);
  EXPECT_EQ(result.latency.count(), 10u);
  EXPECT_EQ(cursor, 2u);
  EXPECT_GT(result.elapsed, absl::ZeroDuration());

  // A file that shrank after generation is caught.
  ASSERT_EQ(::truncate((ds->root + "/" + ds->files[5].path).c_str(), 10), 0);
  const uint32_t five[] = {5};
  EXPECT_EQ(reader.ReadBatch(five).status().code(),
            absl::StatusCode::kDataLoss);
}

// Returns the right byte counts but corrupts one digest.
class LyingReader : public BatchReader {
 public:
  explicit LyingReader(const Dataset& ds) : ds_(ds) {}
  std::string name() const override { return "liar"; }
  absl::StatusOr<BatchResult> ReadBatch(
      absl::Span<const uint32_t> files) override {
    BatchResult r;
    r.digest = ds_.ExpectedDigest(files) + (++calls_ == 3 ? 1 : 0);
    for (uint32_t i : files) r.bytes += ds_.files[i].size;
    return r;
  }

 private:
  const Dataset& ds_;
  int calls_ = 0;
};

TEST_F(DatasetTest, RunnerRejectsWrongBytes) {
  absl::StatusOr<Dataset> ds = Generate("a");
  ASSERT_TRUE(ds.ok());
  {
    LyingReader liar(*ds);
    EXPECT_EQ(WarmReader(liar, *ds, 100).code(), absl::StatusCode::kDataLoss);
  }
  LyingReader liar(*ds);
  Workload w = MakeWorkload(*ds, "w", 0, 100, 8, 5, 1);
  PathResult result;
  size_t cursor = 0;
  RunLimits limits;
  limits.max_batches = 5;
  EXPECT_EQ(RunBatches(liar, w, limits, &cursor, &result).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(result.batches, 2u);  // the bad third batch is not counted
}

TEST(RunLimitsTest, DurationStopsTheRun) {
  class Instant : public BatchReader {
   public:
    std::string name() const override { return "instant"; }
    bool touches_bytes() const override { return false; }
    absl::StatusOr<BatchResult> ReadBatch(absl::Span<const uint32_t>) override {
      return BatchResult{};
    }
  } reader;
  Workload w;
  w.batches = {{0}};
  w.expected_digests = {0};
  PathResult result;
  size_t cursor = 0;
  RunLimits limits;
  limits.duration = absl::Milliseconds(20);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(RunBatches(reader, w, limits, &cursor, &result).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  EXPECT_GT(result.batches, 1u);
}

TEST(ScopedTempDirTest, RemovesItsTree) {
  std::string path;
  {
    absl::StatusOr<std::unique_ptr<ScopedTempDir>> d =
        ScopedTempDir::Create("/tmp", "bench-test-");
    ASSERT_TRUE(d.ok());
    path = (*d)->path();
    ::mkdir((path + "/sub").c_str(), 0755);
    std::ofstream(path + "/sub/f") << "x";
  }
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  EXPECT_FALSE(ScopedTempDir::Create("/nonexistent-dir", "x").ok());
}

}  // namespace
}  // namespace dlcache::bench
