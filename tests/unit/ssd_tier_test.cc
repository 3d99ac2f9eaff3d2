#include "server/ssd/ssd_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/sync_point.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_chunk_backend.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

using ::dlcache::testing::FakeChunkBackend;
using ::dlcache::testing::RandomBytes;
using ::dlcache::testing::TempDir;

constexpr uint64_t kChunk = 64 << 10;
constexpr char kDs[] = "ds";

class SsdTierTest : public ::testing::Test {
 protected:
  SsdTierOptions Options() {
    SsdTierOptions o;
    o.dir = dir_.path() + "/ssd";
    o.capacity_bytes = 64 << 20;
    o.chunk_size = kChunk;
    o.data_file_bytes = 1 << 20;
    o.write_queue_depth = 256;
    o.min_free_bytes = 1 << 20;
    return o;
  }
  void Open(const SsdTierOptions& o) {
    tier_.reset();
    absl::StatusOr<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, &backend_);
    ASSERT_TRUE(t.ok()) << t.status();
    tier_ = *std::move(t);
  }
  void Open() { Open(Options()); }

  // Holds the thread that reaches sync point `point` (the writer before a
  // write, the recovery thread before its scan) until ReleaseWrites().
  void HoldAt(const char* point) {
    SyncPoint::Get()->SetCallback(point, HoldWrites());
  }
  // A callback that holds the writer until ReleaseWrites(). The
  // gate belongs to the fixture, not to a test's locals, and TearDown
  // opens it before the tier closes: a failed ASSERT that returns early
  // cannot leave the writer blocked (or waiting on a destroyed local), so
  // ~SsdTier's join always returns. The wait also has a deadline.
  std::function<void()> HoldWrites() {
    return [w = writing_, r = release_] {
      if (!w->HasBeenNotified()) w->Notify();
      r->WaitForNotificationWithTimeout(absl::Seconds(120));
    };
  }
  void ReleaseWrites() {
    if (!release_->HasBeenNotified()) release_->Notify();
  }
  // True once the writer is inside a held hook (within the deadline).
  bool AwaitWriting() {
    return writing_->WaitForNotificationWithTimeout(absl::Seconds(60));
  }
  void TearDown() override {
    ReleaseWrites();
    tier_.reset();
    SyncPoint::Get()->ClearAll();
  }

  static uint64_t Len(const FileInfo& info, uint32_t c) {
    return std::min<uint64_t>(kChunk, info.size - uint64_t{c} * kChunk);
  }
  absl::StatusOr<std::string> ReadChunk(absl::string_view path, uint32_t c,
                                        const FileInfo& info) {
    std::string buf(Len(info, c), '\0');
    uint64_t sum = 0;
    absl::Status s = tier_->ReadChunk(ChunkId{kDs, path, c}, info,
                                      absl::MakeSpan(buf), &sum, nullptr);
    if (!s.ok()) return s;
    EXPECT_EQ(sum, Checksum(buf.data(), buf.size()));
    return buf;
  }
  // Stats the file through the tier and reads all of it.
  std::string ReadFile(absl::string_view path) {
    absl::StatusOr<FileInfo> info = tier_->StatFile(kDs, path);
    EXPECT_TRUE(info.ok()) << info.status();
    if (!info.ok()) return "";
    std::string out;
    for (uint32_t c = 0; uint64_t{c} * kChunk < info->size; ++c) {
      absl::StatusOr<std::string> b = ReadChunk(path, c, *info);
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok()) return "";
      out += *b;
    }
    return out;
  }
  std::string Put(absl::string_view path, size_t size, uint64_t seed,
                  int64_t mtime = 1000) {
    std::string b = RandomBytes(size, seed);
    backend_.PutFile(kDs, path, b, mtime);
    return b;
  }
  std::string DataPath(uint32_t file) {
    return absl::StrFormat("%s/ssd/data/%010u.dat", dir_.path(), file);
  }
  void FlipByte(uint32_t file, uint64_t offset) {
    int fd = ::open(DataPath(file).c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, offset), 1);
    c ^= 0x5a;
    ASSERT_EQ(::pwrite(fd, &c, 1, offset), 1);
    ::close(fd);
  }

  TempDir dir_;
  FakeChunkBackend backend_{kChunk};
  std::unique_ptr<SsdTier> tier_;  // destroyed first: it uses backend_
  std::shared_ptr<absl::Notification> writing_ =
      std::make_shared<absl::Notification>();
  std::shared_ptr<absl::Notification> release_ =
      std::make_shared<absl::Notification>();
};

TEST_F(SsdTierTest, MissIsWrittenBehindThenServedFromSsd) {
  std::string bytes = Put("a/b.bin", 3 * kChunk + 100, 1);
  Open();
  EXPECT_EQ(ReadFile("a/b.bin"), bytes);
  EXPECT_EQ(backend_.reads(), 4u);
  tier_->Flush();
  SsdTierStats s = tier_->Stats();
  EXPECT_EQ(s.chunks, 4u);
  EXPECT_EQ(s.bytes, bytes.size());
  EXPECT_EQ(s.files, 1u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.writes, 4u);

  EXPECT_EQ(ReadFile("a/b.bin"), bytes);
  EXPECT_EQ(backend_.reads(), 4u);
  EXPECT_EQ(tier_->Stats().hits, 4u);
  EXPECT_EQ(tier_->Stats().hit_bytes, bytes.size());
}

// recover_in_background: Open returns before the accounting scan; reads
// are served from SSD during it, writes and Evict wait for it and are
// accounted exactly once after it.
TEST_F(SsdTierTest, BackgroundRecoveryServesReadsAndHoldsWritesUntilDone) {
  const std::string a = Put("keep/a", 2 * kChunk, 1);
  Put("keep/b", kChunk + 10, 2);
  const std::string fresh = Put("new", kChunk / 2, 3);
  Open();
  ReadFile("keep/a");
  ReadFile("keep/b");
  tier_->Flush();
  ASSERT_EQ(tier_->Stats().chunks, 4u);
  tier_.reset();

  // The scan is held by a gate the fixture owns (TearDown opens it).
  SsdTierOptions o = Options();
  o.recover_in_background = true;
  HoldAt("SsdTier::RecoveryScan:Start");
  Open(o);
  ASSERT_TRUE(AwaitWriting()) << "the recovery scan never started";
  SsdTierStats during = tier_->Stats();  // must not wait for the scan
  EXPECT_TRUE(during.recovering);
  EXPECT_EQ(during.chunks, 0u);
  const uint64_t reads = backend_.reads();
  EXPECT_EQ(ReadFile("keep/a"), a);
  EXPECT_EQ(backend_.reads(), reads) << "served from SSD while recovering";
  EXPECT_EQ(tier_->Stats().hits, 2u);
  // A miss is served from below; its copy waits for the scan.
  EXPECT_EQ(ReadFile("new"), fresh);
  EXPECT_EQ(backend_.reads(), reads + 1);
  EXPECT_EQ(tier_->Stats().writes, 0u);
  absl::StatusOr<SsdEvictResult> evicted;
  // An ASSERT below returns with the thread running: the guard opens the
  // gate and joins it (a joinable std::thread would std::terminate).
  testing::ThreadGuard threads;
  threads.OnStop([this] { ReleaseWrites(); });
  threads.Spawn([&] { evicted = tier_->Evict(kDs, "keep/b"); });
  EXPECT_FALSE(tier_->WaitRecovered(absl::ZeroDuration()));

  ReleaseWrites();
  ASSERT_TRUE(tier_->WaitRecovered(absl::Seconds(60)));
  threads.JoinAll();
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(evicted->chunks, 2u);  // keep/b is 2 chunks
  tier_->Flush();
  SsdTierStats after = tier_->Stats();
  EXPECT_FALSE(after.recovering);
  EXPECT_EQ(after.writes, 1u);
  EXPECT_EQ(after.chunks, 3u);  // keep/a's 2 + new's 1, each counted once
  EXPECT_EQ(after.bytes, 2 * kChunk + kChunk / 2);
  EXPECT_EQ(ReadFile("new"), fresh);
  EXPECT_EQ(backend_.reads(), reads + 1) << "new was written behind";
  // Restarting recounts the same from the index.
  tier_.reset();
  Open();
  EXPECT_EQ(tier_->Stats().chunks, 3u);
  EXPECT_EQ(tier_->Stats().bytes, 2 * kChunk + kChunk / 2);
}

TEST_F(SsdTierTest, ImmutableStatFileAnswersFromIndex) {
  Put("f", 10, 1);
  Open();
  ASSERT_TRUE(tier_->StatFile(kDs, "f").ok());
  ASSERT_TRUE(tier_->StatFile(kDs, "f").ok());
  EXPECT_EQ(backend_.stats(), 1u);
  EXPECT_TRUE(absl::IsNotFound(tier_->StatFile(kDs, "nope").status()));
}

TEST_F(SsdTierTest, RestartServesFromSsdWithoutTheLayerBelow) {
  std::vector<std::string> bytes;
  for (int i = 0; i < 8; ++i) {
    bytes.push_back(Put(absl::StrCat("d/f", i), (i + 1) * kChunk / 2 + 7, i));
  }
  Open();
  for (int i = 0; i < 8; ++i) ReadFile(absl::StrCat("d/f", i));
  tier_->Flush();
  const uint64_t chunks = tier_->Stats().chunks;
  tier_.reset();

  const uint64_t reads = backend_.reads(), stats = backend_.stats();
  Open();
  EXPECT_EQ(tier_->Stats().chunks, chunks);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(ReadFile(absl::StrCat("d/f", i)), bytes[i]);
  }
  EXPECT_EQ(backend_.reads(), reads);
  EXPECT_EQ(backend_.stats(), stats);
  EXPECT_EQ(tier_->Stats().hits, chunks);
}

TEST_F(SsdTierTest, CorruptChunkIsDetectedDroppedAndRefetched) {
  std::string bytes = Put("x", 2 * kChunk, 3);
  Open();
  ReadFile("x");
  tier_->Flush();
  absl::StatusOr<SsdChunkMeta> m = tier_->Locate(ChunkId{kDs, "x", 1});
  ASSERT_TRUE(m.ok()) << m.status();
  FlipByte(m->data_file, m->offset + 1234);

  const uint64_t reads = backend_.reads();
  EXPECT_EQ(ReadFile("x"), bytes);
  EXPECT_EQ(backend_.reads(), reads + 1);  // only the bad chunk
  SsdTierStats s = tier_->Stats();
  EXPECT_EQ(s.corruptions, 1u);
  EXPECT_EQ(s.hits, 1u);
  // Written again from the good copy: the next read is a hit.
  tier_->Flush();
  EXPECT_EQ(ReadFile("x"), bytes);
  EXPECT_EQ(backend_.reads(), reads + 1);
  EXPECT_EQ(tier_->Stats().corruptions, 1u);
}

TEST_F(SsdTierTest, VerifyOnOpenDropsCorruptChunks) {
  std::string bytes = Put("x", 4 * kChunk, 3);
  Open();
  ReadFile("x");
  tier_->Flush();
  absl::StatusOr<SsdChunkMeta> m = tier_->Locate(ChunkId{kDs, "x", 2});
  ASSERT_TRUE(m.ok());
  tier_.reset();
  FlipByte(m->data_file, m->offset);

  SsdTierOptions o = Options();
  o.verify_on_open = true;
  Open(o);
  EXPECT_EQ(tier_->Stats().corruptions, 1u);
  EXPECT_EQ(tier_->Stats().chunks, 3u);
  EXPECT_TRUE(absl::IsNotFound(tier_->Locate(ChunkId{kDs, "x", 2}).status()));
  const uint64_t reads = backend_.reads();
  EXPECT_EQ(ReadFile("x"), bytes);
  EXPECT_EQ(backend_.reads(), reads + 1);
}

TEST_F(SsdTierTest, RevalidateDropsChangedFilesAndServesNewBytes) {
  Put("a/1", kChunk + 5, 1, /*mtime=*/100);
  std::string keep = Put("a/2", kChunk, 2, 100);
  Open();
  ReadFile("a/1");
  ReadFile("a/2");
  tier_->Flush();

  std::string fresh = Put("a/1", 3 * kChunk, 9, /*mtime=*/200);
  // Immutable policy: no source check until revalidation.
  EXPECT_EQ(tier_->StatFile(kDs, "a/1")->mtime_ns, 100);

  SsdRevalidateResult r;
  ASSERT_TRUE(
      tier_->Revalidate(kDs, "a", backend_.source(kDs), false, &r).ok());
  EXPECT_EQ(r.files_checked, 2u);
  EXPECT_EQ(r.files_changed, 1u);
  EXPECT_EQ(r.files_missing, 0u);
  EXPECT_EQ(r.chunks_dropped, 2u);

  absl::StatusOr<FileInfo> info = tier_->StatFile(kDs, "a/1");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->mtime_ns, 200);
  EXPECT_EQ(ReadFile("a/1"), fresh);
  EXPECT_EQ(ReadFile("a/2"), keep);
  // A read with the old metadata is never answered from SSD.
  const uint64_t hits = tier_->Stats().hits;
  absl::StatusOr<std::string> old =
      ReadChunk("a/1", 0, FileInfo{kChunk + 5, 100});
  EXPECT_EQ(tier_->Stats().hits, hits);
}

TEST_F(SsdTierTest, RevalidateForgetsVanishedFiles) {
  Put("gone", 10, 1);
  Put("here", 10, 2);
  Open();
  ReadFile("gone");
  ReadFile("here");
  tier_->Flush();
  backend_.RemoveFile(kDs, "gone");
  SsdRevalidateResult r;
  ASSERT_TRUE(tier_->Revalidate(kDs, "", backend_.source(kDs), false, &r).ok());
  EXPECT_EQ(r.files_checked, 2u);
  EXPECT_EQ(r.files_missing, 1u);
  EXPECT_EQ(r.chunks_dropped, 1u);
  EXPECT_TRUE(absl::IsNotFound(tier_->StatFile(kDs, "gone").status()));
  EXPECT_EQ(tier_->Stats().files, 1u);
}

TEST_F(SsdTierTest, RevalidateWithChecksumsFindsSameMetadataOtherBytes) {
  std::string old = Put("f", 2 * kChunk, 1, 100);
  Open();
  ReadFile("f");
  tier_->Flush();
  // Same size and mtime, other bytes: only the checksum tells.
  std::string fresh = Put("f", 2 * kChunk, 2, 100);
  SsdRevalidateResult plain;
  ASSERT_TRUE(
      tier_->Revalidate(kDs, "", backend_.source(kDs), false, &plain).ok());
  EXPECT_EQ(plain.files_changed, 0u);
  EXPECT_EQ(ReadFile("f"), old);

  SsdRevalidateResult r;
  ASSERT_TRUE(tier_->Revalidate(kDs, "", backend_.source(kDs), true, &r).ok());
  EXPECT_EQ(r.files_changed, 1u);
  EXPECT_EQ(r.chunks_dropped, 2u);
  ASSERT_EQ(r.content_changed.size(), 1u);
  EXPECT_EQ(r.content_changed[0], "f");
  EXPECT_EQ(ReadFile("f"), fresh);
}

TEST_F(SsdTierTest, RevalidateWithChecksumsDropsCorruptChunks) {
  std::string bytes = Put("f", 3 * kChunk, 1);
  Open();
  ReadFile("f");
  tier_->Flush();
  absl::StatusOr<SsdChunkMeta> m = tier_->Locate(ChunkId{kDs, "f", 0});
  ASSERT_TRUE(m.ok());
  FlipByte(m->data_file, m->offset + 10);
  SsdRevalidateResult r;
  ASSERT_TRUE(tier_->Revalidate(kDs, "", backend_.source(kDs), true, &r).ok());
  EXPECT_EQ(r.corrupt_dropped, 1u);
  EXPECT_EQ(r.files_changed, 0u);
  EXPECT_EQ(tier_->Stats().chunks, 2u);
  EXPECT_EQ(ReadFile("f"), bytes);
}

TEST_F(SsdTierTest, RevalidateFailsWhenTheSourceIsDown) {
  Put("f", 10, 1);
  Open();
  ReadFile("f");
  tier_->Flush();
  backend_.set_fault(absl::UnavailableError("nfs down"));
  SsdRevalidateResult r;
  EXPECT_TRUE(absl::IsUnavailable(
      tier_->Revalidate(kDs, "", backend_.source(kDs), false, &r)));
  backend_.set_fault(absl::OkStatus());
  EXPECT_EQ(tier_->Stats().chunks, 1u);
}

TEST_F(SsdTierTest, MutablePolicyChecksTheSourceOnEveryRead) {
  Put("f", kChunk, 1, 100);
  SsdTierOptions o = Options();
  o.immutable = false;
  Open(o);
  ReadFile("f");
  tier_->Flush();
  const uint64_t reads = backend_.reads();
  ReadFile("f");
  EXPECT_EQ(backend_.reads(), reads);  // hit, but stats were asked
  EXPECT_GE(backend_.stats(), 3u);

  std::string fresh = Put("f", kChunk, 2, 200);
  EXPECT_EQ(ReadFile("f"), fresh);
  EXPECT_EQ(backend_.reads(), reads + 1);
  backend_.RemoveFile(kDs, "f");
  EXPECT_TRUE(
      absl::IsNotFound(ReadChunk("f", 0, FileInfo{kChunk, 200}).status()));
  EXPECT_EQ(tier_->Stats().files, 0u);
}

TEST_F(SsdTierTest, SyncCopiesEverythingAndSkipsWhatIsCurrent) {
  std::vector<std::string> bytes;
  for (int i = 0; i < 20; ++i) {
    bytes.push_back(Put(absl::StrCat("train/", i), (i % 5) * kChunk + 33, i));
  }
  bytes.push_back(Put("train/big", 40 * kChunk, 99));  // 3 work items
  Put("val/0", kChunk, 100);
  Open();
  std::vector<JobProgress> seen;
  absl::Status s = tier_->Sync(kDs, "train", backend_.source(kDs), 4,
                               [&](const JobProgress& p) {
                                 seen.push_back(p);
                                 return true;
                               });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_FALSE(seen.empty());
  const JobProgress& last = seen.back();
  EXPECT_TRUE(last.done);
  EXPECT_TRUE(last.listing_done);
  EXPECT_EQ(last.files_total, 21u);
  EXPECT_EQ(last.files_done, 21u);
  EXPECT_EQ(last.files_failed, 0u);
  EXPECT_EQ(last.bytes_done, last.bytes_total);
  const uint64_t chunks = 4 * (0 + 1 + 2 + 3 + 4 + 5) + 40;
  EXPECT_EQ(last.chunks_written, chunks);
  EXPECT_EQ(backend_.reads(), chunks);
  EXPECT_EQ(tier_->Stats().chunks, chunks);

  // Everything is served from SSD, and a second sync reads nothing.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(ReadFile(absl::StrCat("train/", i)), bytes[i]);
  }
  EXPECT_EQ(ReadFile("train/big"), bytes[20]);
  EXPECT_EQ(backend_.reads(), chunks);
  seen.clear();
  ASSERT_TRUE(tier_
                  ->Sync(kDs, "train", backend_.source(kDs), 4,
                         [&](const JobProgress& p) {
                           seen.push_back(p);
                           return true;
                         })
                  .ok());
  EXPECT_EQ(seen.back().chunks_written, 0u);
  EXPECT_EQ(seen.back().chunks_skipped, chunks);
  EXPECT_EQ(seen.back().files_skipped, 21u);
  EXPECT_EQ(backend_.reads(), chunks);

  // A changed file is copied again, and only it.
  std::string fresh = Put("train/3", 2 * kChunk, 7, /*mtime=*/5000);
  ASSERT_TRUE(tier_->Sync(kDs, "train", backend_.source(kDs), 2, nullptr).ok());
  EXPECT_EQ(backend_.reads(), chunks + 2);
  EXPECT_EQ(ReadFile("train/3"), fresh);
}

TEST_F(SsdTierTest, SyncReportsErrorsAndCancels) {
  Put("a", kChunk, 1);
  Put("b", kChunk, 2);
  Open();
  EXPECT_TRUE(absl::IsNotFound(
      tier_->Sync(kDs, "nope", backend_.source(kDs), 1, nullptr)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      tier_->Sync(kDs, "../x", backend_.source(kDs), 1, nullptr)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      tier_->Sync("bad/name", "", backend_.source(kDs), 1, nullptr)));

  // The first progress says stop. The first read waits for it, so the sync
  // cannot finish before (progress comes from the calling thread).
  absl::Notification first_progress;
  backend_.set_read_gate(&first_progress);
  absl::Status s = tier_->Sync(
      kDs, "", backend_.source(kDs), 1,
      [&](const JobProgress& p) {
        if (!first_progress.HasBeenNotified()) first_progress.Notify();
        return p.done;
      },
      absl::ZeroDuration());
  backend_.set_read_gate(nullptr);
  EXPECT_TRUE(absl::IsCancelled(s)) << s;

  // A file the cancelled sync cannot have stored: one read to fail.
  Put("c", kChunk, 3);
  backend_.fail_next_reads(1);
  JobProgress last;
  ASSERT_TRUE(tier_
                  ->Sync(kDs, "", backend_.source(kDs), 1,
                         [&](const JobProgress& p) {
                           last = p;
                           return true;
                         })
                  .ok());
  EXPECT_EQ(last.files_failed, 1u);
  ASSERT_EQ(last.failures.size(), 1u);
  EXPECT_NE(last.failures[0].find("injected"), std::string::npos);
}

TEST_F(SsdTierTest, CapacityDropsOldestDataFilesFirst) {
  SsdTierOptions o = Options();
  o.capacity_bytes = 4 << 20;  // 4 data files of 1 MiB = 16 chunks each
  Open(o);
  std::vector<std::string> bytes;
  for (int i = 0; i < 10; ++i) {
    bytes.push_back(Put(absl::StrCat("f", i), 16 * kChunk, i));
  }
  for (int i = 0; i < 10; ++i) {
    ReadFile(absl::StrCat("f", i));
    tier_->Flush();
  }
  SsdTierStats s = tier_->Stats();
  EXPECT_LE(s.disk_bytes, o.capacity_bytes);
  EXPECT_GE(s.evicted_data_files, 6u);
  EXPECT_EQ(s.chunks * kChunk, s.bytes);
  // The newest files are there, the oldest are not.
  const uint64_t reads = backend_.reads();
  EXPECT_EQ(ReadFile("f9"), bytes[9]);
  EXPECT_EQ(backend_.reads(), reads);
  EXPECT_EQ(ReadFile("f0"), bytes[0]);
  EXPECT_EQ(backend_.reads(), reads + 16);
}

TEST_F(SsdTierTest, EvictDropsAPrefixOnly) {
  Put("a/x", kChunk, 1);
  Put("a/y/z", kChunk, 2);
  std::string ab = Put("ab", kChunk, 3);
  Open();
  ReadFile("a/x");
  ReadFile("a/y/z");
  ReadFile("ab");
  tier_->Flush();
  absl::StatusOr<SsdEvictResult> r = tier_->Evict(kDs, "a");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->files, 2u);
  EXPECT_EQ(r->chunks, 2u);
  EXPECT_EQ(r->bytes, 2 * kChunk);
  EXPECT_EQ(tier_->Stats().chunks, 1u);
  EXPECT_EQ(tier_->Stats().files, 1u);
  const uint64_t reads = backend_.reads();
  EXPECT_EQ(ReadFile("ab"), ab);
  EXPECT_EQ(backend_.reads(), reads);
  EXPECT_TRUE(absl::IsInvalidArgument(tier_->Evict(kDs, "/abs").status()));
}

TEST_F(SsdTierTest, EvictedSpaceIsReclaimedWhenADataFileEmpties) {
  Put("f", 20 * kChunk, 1);  // more than one data file
  Open();
  ReadFile("f");
  tier_->Flush();
  EXPECT_EQ(tier_->Stats().data_files, 2u);
  ASSERT_TRUE(tier_->Evict(kDs, "").ok());
  SsdTierStats s = tier_->Stats();
  EXPECT_EQ(s.chunks, 0u);
  EXPECT_EQ(s.bytes, 0u);
  EXPECT_EQ(s.data_files, 1u);  // the active one stays
}

TEST_F(SsdTierTest, DemoteWritesOnceAndRefusesBadBytes) {
  std::string bytes = Put("f", kChunk, 1);
  Open();
  FileInfo info = backend_.Info(kDs, "f");
  const uint64_t sum = Checksum(bytes.data(), bytes.size());
  EXPECT_TRUE(tier_->Demote(ChunkId{kDs, "f", 0}, info, bytes, sum));
  tier_->Flush();
  EXPECT_FALSE(tier_->Demote(ChunkId{kDs, "f", 0}, info, bytes, sum));
  EXPECT_EQ(*ReadChunk("f", 0, info), bytes);
  EXPECT_EQ(backend_.reads(), 0u);

  std::string other = Put("g", kChunk, 2);
  EXPECT_TRUE(tier_->Demote(ChunkId{kDs, "g", 0}, backend_.Info(kDs, "g"),
                            other, sum /* wrong */));
  tier_->Flush();
  EXPECT_EQ(tier_->Stats().corruptions, 1u);
  EXPECT_TRUE(absl::IsNotFound(tier_->Locate(ChunkId{kDs, "g", 0}).status()));
}

TEST_F(SsdTierTest, FullWriteQueueDropsAndCounts) {
  SsdTierOptions o = Options();
  o.write_queue_depth = 2;
  HoldAt("SsdTier::WriteOne:Start");
  Open(o);
  std::vector<std::string> bytes;
  for (int i = 0; i < 5; ++i)
    bytes.push_back(Put(absl::StrCat("f", i), 100, i));
  auto demote = [&](int i) {
    return tier_->Demote(ChunkId{kDs, absl::StrCat("f", i), 0},
                         backend_.Info(kDs, absl::StrCat("f", i)), bytes[i],
                         Checksum(bytes[i].data(), bytes[i].size()));
  };
  EXPECT_TRUE(demote(0));
  ASSERT_TRUE(AwaitWriting());  // the writer holds f0, the queue is free
  EXPECT_TRUE(demote(1));
  EXPECT_FALSE(demote(2));
  EXPECT_FALSE(demote(3));
  EXPECT_EQ(tier_->Stats().write_drops, 2u);
  EXPECT_EQ(tier_->Stats().queued, 2u);
  ReleaseWrites();
  tier_->Flush();
  EXPECT_EQ(tier_->Stats().chunks, 2u);
  EXPECT_TRUE(demote(4));
  tier_->Flush();
  EXPECT_EQ(tier_->Stats().chunks, 3u);
}

// Issue 17: when the write-behind drains after 16 MiB, the index's
// memtable (RAM until later writes fill it) is flushed to a table file.
// The SSD index's memtable before and after a drain past 16 MiB of
// write-behind (Flush waits for the drain's work), with the memtable flush
// on drain `flush`; checks that what was written is still found.
class SsdTierMemtableTest : public SsdTierTest {
 protected:
  struct MemtableAtDrain {
    uint64_t before = 0;
    uint64_t after = 0;
  };
  MemtableAtDrain MemtableAcrossADrain(bool flush) {
    SsdTierOptions o = Options();
    // RocksDB's smallest: a 1 MiB memtable taking 128 KiB blocks; the
    // drain flushes it from 256 KiB on.
    o.index_memory.write_buffer_bytes = 1 << 20;
    o.flush_index_on_drain = flush;
    Open(o);
    // Long paths, so that a few hundred files' keys take several blocks.
    auto name = [](int i) { return absl::StrCat(std::string(600, 'p'), i); };
    auto demote = [&](int i) {
      const std::string bytes = Put(name(i), kChunk, i);
      return tier_->Demote(ChunkId{kDs, name(i), 0},
                           backend_.Info(kDs, name(i)), bytes,
                           Checksum(bytes.data(), bytes.size()));
    };
    MemtableAtDrain m;
    // Under 16 MiB written: the memtable keeps what it holds.
    constexpr int kUnder = (12 << 20) / static_cast<int>(kChunk);
    for (int i = 0; i < kUnder; ++i) EXPECT_TRUE(demote(i));
    tier_->Flush();
    m.before = tier_->Stats().index_memory.memtable_bytes;
    EXPECT_GE(m.before, 256u << 10);
    // Past 16 MiB: the queue drains.
    for (int i = kUnder; i < kUnder + (5 << 20) / static_cast<int>(kChunk);
         ++i) {
      EXPECT_TRUE(demote(i));
    }
    tier_->Flush();
    m.after = tier_->Stats().index_memory.memtable_bytes;
    EXPECT_EQ(tier_->Stats().write_errors, 0u);
    EXPECT_EQ(*ReadChunk(name(3), 0, backend_.Info(kDs, name(3))),
              RandomBytes(kChunk, 3));
    EXPECT_EQ(backend_.reads(), 0u);
    return m;
  }
};

TEST_F(SsdTierMemtableTest, DrainedWriteBehindFlushesTheIndexMemtable) {
  const MemtableAtDrain m = MemtableAcrossADrain(/*flush=*/true);
  EXPECT_LT(m.after, m.before / 2);
}

TEST_F(SsdTierMemtableTest, MemtableFlushOnDrainCanBeTurnedOff) {
  const MemtableAtDrain m = MemtableAcrossADrain(/*flush=*/false);
  EXPECT_GE(m.after, m.before);
}

TEST_F(SsdTierTest, WriteQueueIsBoundedInBytesToo) {
  SsdTierOptions o = Options();
  o.write_queue_bytes = 2 * kChunk;
  HoldAt("SsdTier::WriteOne:Start");
  Open(o);
  std::string big = Put("big", 3 * kChunk, 1);
  std::string small = Put("small", 100, 2);
  FileInfo big_info = backend_.Info(kDs, "big");
  auto demote_big = [&](uint32_t c) {
    absl::string_view b(big.data() + c * kChunk, kChunk);
    return tier_->Demote(ChunkId{kDs, "big", c}, big_info,
                         absl::MakeConstSpan(b.data(), b.size()),
                         Checksum(b.data(), b.size()));
  };
  EXPECT_TRUE(demote_big(0));
  ASSERT_TRUE(AwaitWriting());
  EXPECT_TRUE(demote_big(1));
  EXPECT_FALSE(demote_big(2));  // 3 chunks > 2 chunks of bytes
  EXPECT_EQ(tier_->Stats().queued_bytes, 2 * kChunk);
  EXPECT_FALSE(tier_->Demote(ChunkId{kDs, "small", 0},
                             backend_.Info(kDs, "small"), small,
                             Checksum(small.data(), small.size())));
  EXPECT_EQ(tier_->Stats().write_drops, 2u);
  ReleaseWrites();
  tier_->Flush();
  EXPECT_EQ(tier_->Stats().chunks, 2u);
  EXPECT_EQ(tier_->Stats().queued_bytes, 0u);
}

TEST_F(SsdTierTest, WriteBehindOfAnOutdatedVersionIsDropped) {
  // The fixture's gate: the tier may run the hook again after this body
  // returns (the last ReadFile below queues another write-behind).
  SsdTierOptions o = Options();
  HoldAt("SsdTier::WriteOne:Start");
  Put("f", kChunk, 1, 100);
  Open(o);
  FileInfo old_info = *tier_->StatFile(kDs, "f");
  ASSERT_TRUE(ReadChunk("f", 0, old_info).ok());  // queued, held
  std::string fresh = Put("f", kChunk, 2, 200);
  SsdRevalidateResult r;
  ASSERT_TRUE(tier_->Revalidate(kDs, "", backend_.source(kDs), false, &r).ok());
  EXPECT_EQ(r.files_changed, 1u);
  ReleaseWrites();
  tier_->Flush();
  EXPECT_EQ(tier_->Stats().stale_write_drops, 1u);
  EXPECT_EQ(tier_->Stats().chunks, 0u);
  EXPECT_EQ(ReadFile("f"), fresh);
}

TEST_F(SsdTierTest, CopyForANewerVersionReplacesTheRecordedOne) {
  std::string old = Put("f", kChunk, 1, 100);
  Open();
  ReadFile("f");
  tier_->Flush();
  // The memory tier above learnt of the new version (e.g. its own
  // revalidation) and reads with it; the layer below confirms it.
  std::string fresh = Put("f", kChunk, 2, 200);
  FileInfo info = backend_.Info(kDs, "f");
  EXPECT_EQ(*ReadChunk("f", 0, info), fresh);
  tier_->Flush();
  EXPECT_EQ(tier_->StatFile(kDs, "f")->mtime_ns, 200);
  const uint64_t reads = backend_.reads();
  EXPECT_EQ(*ReadChunk("f", 0, info), fresh);
  EXPECT_EQ(backend_.reads(), reads);
  EXPECT_EQ(tier_->Stats().chunks, 1u);
}

TEST_F(SsdTierTest, LayerBelowDownStillServesWhatIsOnSsd) {
  std::string bytes = Put("f", 2 * kChunk, 1);
  Open();
  ReadFile("f");
  tier_->Flush();
  backend_.set_fault(absl::UnavailableError("source down"));
  EXPECT_EQ(ReadFile("f"), bytes);
  EXPECT_TRUE(absl::IsUnavailable(tier_->StatFile(kDs, "other").status()));
  backend_.set_fault(absl::OkStatus());
}

TEST_F(SsdTierTest, OpenRejectsBadOptionsAndUnusableDirs) {
  auto open = [&](const SsdTierOptions& o) {
    return SsdTier::Open(o, &backend_).status();
  };
  SsdTierOptions o = Options();
  o.dir = "";
  EXPECT_TRUE(absl::IsInvalidArgument(open(o)));
  o = Options();
  o.data_file_bytes = kChunk - 1;
  EXPECT_TRUE(absl::IsInvalidArgument(open(o)));
  o = Options();
  o.capacity_bytes = o.data_file_bytes - 1;
  EXPECT_TRUE(absl::IsInvalidArgument(open(o)));
  o = Options();
  o.write_queue_depth = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(open(o)));
  o = Options();
  o.min_free_bytes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(open(o)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(SsdTier::Open(Options(), nullptr).status()));

  testing::WriteFileOrDie(dir_.path() + "/file", "x");
  o = Options();
  o.dir = dir_.path() + "/file/ssd";
  EXPECT_TRUE(absl::IsFailedPrecondition(open(o)));

  // The RocksDB lock keeps a second tier off a directory in use.
  Open();
  EXPECT_TRUE(absl::IsFailedPrecondition(open(Options())));
}

TEST_F(SsdTierTest, DefaultCapacityIsMostOfTheFreeSpace) {
  SsdTierOptions o = Options();
  o.capacity_bytes = 0;
  Open(o);
  // Exact figures need a file system of known size (the fault test).
  EXPECT_GE(tier_->Stats().capacity_bytes, o.data_file_bytes);
}

TEST_F(SsdTierTest, TruncatedDataFileEntriesAreDroppedAtOpen) {
  std::string bytes = Put("f", 8 * kChunk, 1);
  Open();
  ReadFile("f");
  tier_->Flush();
  absl::StatusOr<SsdChunkMeta> m = tier_->Locate(ChunkId{kDs, "f", 5});
  ASSERT_TRUE(m.ok());
  tier_.reset();
  // As if a crash lost the tail of the file.
  ASSERT_EQ(::truncate(DataPath(m->data_file).c_str(), m->offset + 10), 0);
  Open();
  EXPECT_EQ(tier_->Stats().chunks, 5u);
  const uint64_t reads = backend_.reads();
  EXPECT_EQ(ReadFile("f"), bytes);
  EXPECT_EQ(backend_.reads(), reads + 3);
}

TEST_F(SsdTierTest, ConcurrentReadersNeverSeeStaleOrBadBytes) {
  constexpr int kFiles = 16;
  backend_.set_keep_versions(true);
  for (int i = 0; i < kFiles; ++i) Put(absl::StrCat("f", i), 3 * kChunk, i);
  SsdTierOptions o = Options();
  o.capacity_bytes = 2 << 20;  // forces eviction while reading
  Open(o);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::atomic<uint64_t> served{0};
  // Stops and joins the readers also when an ASSERT below returns early.
  testing::ThreadGuard readers;
  readers.OnStop([&] { stop = true; });
  for (int t = 0; t < 4; ++t) {
    readers.Spawn([&, t] {
      for (int n = 0; !stop.load(); ++n) {
        std::string path = absl::StrCat("f", (n * 7 + t) % kFiles);
        // Whatever serves a read of version `info` must give its bytes.
        auto [info, want] = backend_.Snapshot(kDs, path);
        for (uint32_t c = 0; c < 3; ++c) {
          std::string buf(Len(info, c), '\0');
          uint64_t sum = 0;
          absl::Status s = tier_->ReadChunk(ChunkId{kDs, path, c}, info,
                                            absl::MakeSpan(buf), &sum, nullptr);
          if (!s.ok()) {
            ++bad;
            continue;
          }
          ++served;
          if (Checksum(buf.data(), buf.size()) != sum ||
              buf != want.substr(c * kChunk, buf.size())) {
            ++bad;
          }
        }
      }
    });
  }
  // At least 30 rounds of changes, and on until the readers have been
  // served from the SSD while files change under them: on a loaded machine
  // the 30 rounds can be over before the write-behind thread has run once,
  // and then no read raced a revalidation at all.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int round = 0;
       round < 30 || (tier_->Stats().hits == 0 && absl::Now() < deadline);
       ++round) {
    const int i = round % kFiles;
    Put(absl::StrCat("f", i), 3 * kChunk, 1000 + round, 2000 + round);
    SsdRevalidateResult r;
    ASSERT_TRUE(
        tier_->Revalidate(kDs, "", backend_.source(kDs), false, &r).ok());
    if (round % 5 == 0) {
      ASSERT_TRUE(tier_->Evict(kDs, "f1").ok());
    }
  }
  readers.JoinAll();  // sets stop, joins
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(served.load(), 0u);
  tier_->Flush();
  SsdTierStats s = tier_->Stats();
  EXPECT_LE(s.disk_bytes, o.capacity_bytes);
  EXPECT_EQ(s.corruptions, 0u);
  EXPECT_GT(s.hits, 0u);
  // After the last revalidation every file reads as its current version.
  for (int i = 0; i < kFiles; ++i) {
    std::string path = absl::StrCat("f", i);
    EXPECT_EQ(ReadFile(path), backend_.Bytes(kDs, path));
  }
}

}  // namespace
}  // namespace dlcache
