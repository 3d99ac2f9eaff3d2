#ifndef DLCACHE_SERVER_SSD_SSD_INDEX_H_
#define DLCACHE_SERVER_SSD_SSD_INDEX_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "server/backend/source.h"

namespace rocksdb {
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace dlcache {

// How much memory RocksDB may use for the index (issue 17: these are the
// fixed costs next to the memory tier's per-item index).
struct SsdIndexMemoryOptions {
  // One memtable; at most two exist (one being flushed). Writes of the
  // write-behind and sync are ~100 bytes a chunk, so a few MiB hold tens
  // of thousands of chunks between flushes.
  // Smaller (4 MiB) saves no RAM at 100k items and slowed warm-up and
  // sync (more flushes and compactions; docs/scale_benchmark.md).
  uint64_t write_buffer_bytes = 16ull << 20;
  // Data blocks read back (lookups on SSD hits and misses, recovery); the
  // file system's page cache holds the SST files as well.
  uint64_t block_cache_bytes = 64ull << 20;
};

// RocksDB's own memory figures for the index now.
struct SsdIndexMemory {
  uint64_t memtable_bytes = 0;      // rocksdb.cur-size-all-mem-tables
  uint64_t block_cache_bytes = 0;   // rocksdb.block-cache-usage
  uint64_t table_reader_bytes = 0;  // rocksdb.estimate-table-readers-mem
};

// What the SSD tier knows about a source file. `version` changes whenever
// the recorded (size, mtime) changes, so chunks written for an older
// version can be recognised even if their entries outlived it.
struct SsdFileMeta {
  FileInfo info;
  uint64_t version = 0;
};

// Where one chunk lies in the data files, and what it was cut from.
struct SsdChunkMeta {
  uint32_t data_file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t checksum = 0;  // XXH3-64 of the bytes (common/checksum.h)
  FileInfo info;          // of the source file the chunk came from
  uint64_t version = 0;   // SsdFileMeta::version it was written under
};

// The SSD tier's metadata in RocksDB. Three key spaces, all sorted so that
// a dataset/path prefix is one contiguous range:
//   'F' dataset \0 path                     -> SsdFileMeta
//   'C' dataset \0 path \0 be32(chunk)      -> SsdChunkMeta
//   'D' be32(data file) dataset \0 path \0 be32(chunk) -> ""  (reverse map
//       used to drop a whole data file's entries)
//   'M' name                                -> counter (u64)
// Datasets ([A-Za-z0-9._-]) and normalised paths never contain NUL.
//
// Thread-safe (RocksDB is). Mutations go through Batch, applied atomically;
// keeping the three key spaces consistent is the caller's job (SsdTier
// serialises its mutations). Calls block on disk I/O.
class SsdIndex {
 public:
  struct Opened {
    std::unique_ptr<SsdIndex> index;
    // The DB was corrupt beyond repair and has been moved to `moved_to`;
    // this one is empty.
    bool reset = false;
    std::string moved_to;
  };
  // Opens (creating if needed) the DB in directory `path`. A corrupt DB is
  // repaired; if repair fails it is moved aside (path + ".corrupt-<time>")
  // and a fresh one created when `reset_if_corrupt`, else DATA_LOSS.
  // FAILED_PRECONDITION for other failures (permissions, lock held by
  // another process, ...).
  static absl::StatusOr<Opened> Open(
      const std::string& path, bool reset_if_corrupt,
      const SsdIndexMemoryOptions& memory = SsdIndexMemoryOptions());
  ~SsdIndex();
  SsdIndex(const SsdIndex&) = delete;
  SsdIndex& operator=(const SsdIndex&) = delete;

  // A file's meta and one of its chunks, read from one consistent view.
  struct Lookup {
    absl::optional<SsdFileMeta> file;
    absl::optional<SsdChunkMeta> chunk;
  };
  // UNAVAILABLE on I/O errors, DATA_LOSS for an undecodable value.
  absl::StatusOr<Lookup> Find(absl::string_view dataset, absl::string_view path,
                              uint32_t chunk) const;
  absl::StatusOr<absl::optional<SsdFileMeta>> GetFile(
      absl::string_view dataset, absl::string_view path) const;
  absl::StatusOr<absl::optional<SsdChunkMeta>> GetChunk(
      absl::string_view dataset, absl::string_view path, uint32_t chunk) const;
  // A named counter; 0 when never set.
  absl::StatusOr<uint64_t> GetCounter(absl::string_view name) const;
  // RocksDB's memory now (its properties; zeros for any it cannot tell).
  SsdIndexMemory MemoryUsage() const;

  // Mutations applied together by Commit. Not thread-safe.
  class Batch {
   public:
    Batch();
    ~Batch();
    void PutFile(absl::string_view dataset, absl::string_view path,
                 const SsdFileMeta& meta);
    void DeleteFile(absl::string_view dataset, absl::string_view path);
    // Also writes the reverse entry of meta.data_file.
    void PutChunk(absl::string_view dataset, absl::string_view path,
                  uint32_t chunk, const SsdChunkMeta& meta);
    // Deletes the chunk entry and its reverse entry in `data_file`.
    void DeleteChunk(absl::string_view dataset, absl::string_view path,
                     uint32_t chunk, uint32_t data_file);
    // Deletes only a reverse entry (one whose chunk moved elsewhere).
    void DeleteReverse(uint32_t data_file, absl::string_view dataset,
                       absl::string_view path, uint32_t chunk);
    void SetCounter(absl::string_view name, uint64_t value);
    size_t Count() const;

   private:
    friend class SsdIndex;
    std::unique_ptr<rocksdb::WriteBatch> batch_;
  };
  // RESOURCE_EXHAUSTED when the disk is full (RocksDB then refuses writes
  // until Resume), UNAVAILABLE for other write errors.
  absl::Status Commit(Batch& batch, bool sync = false);
  // Clears a background error (after disk-full) so writes may go on.
  absl::Status Resume();
  // Flushes the memtable and syncs the WAL (at shutdown). After a write
  // failed and no Resume succeeded since, it touches nothing and returns
  // UNAVAILABLE: RocksDB's WAL writer must not be used after an error (its
  // debug builds abort; seen with the SSD's file system turned read-only).
  absl::Status FlushAll();
  // Flushes the memtable to a table file if it holds at least `min_bytes`
  // (waits for the flush), so that its memory goes back; false when it
  // held less and nothing was done.
  absl::StatusOr<bool> FlushMemtable(uint64_t min_bytes);

  // Scans, in key order; fn returns false to stop. UNAVAILABLE or
  // DATA_LOSS on read errors.
  // Files at or under `prefix` ("" = the whole dataset).
  absl::Status ForEachFile(
      absl::string_view dataset, absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view path, const SsdFileMeta&)> fn)
      const;
  // Chunks of files at or under `prefix`.
  absl::Status ForEachChunk(
      absl::string_view dataset, absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view path, uint32_t chunk,
                             const SsdChunkMeta&)>
          fn) const;
  // Chunks of exactly one file, in chunk order.
  absl::Status ForEachChunkOfFile(
      absl::string_view dataset, absl::string_view path,
      absl::FunctionRef<bool(uint32_t chunk, const SsdChunkMeta&)> fn) const;
  // Every chunk of every dataset.
  absl::Status ForEachChunkEverywhere(
      absl::FunctionRef<bool(absl::string_view dataset, absl::string_view path,
                             uint32_t chunk, const SsdChunkMeta&)>
          fn) const;
  // Every chunk of every dataset with its file's entry (null when there
  // is none or it does not decode): one merged pass over the chunk and
  // file keys of one snapshot (both sort by dataset, then path), instead
  // of a lookup per chunk.
  absl::Status ForEachChunkWithFileEverywhere(
      absl::FunctionRef<bool(absl::string_view dataset, absl::string_view path,
                             uint32_t chunk, const SsdChunkMeta&,
                             const SsdFileMeta* file)>
          fn) const;
  // Every file of every dataset.
  absl::Status ForEachFileEverywhere(
      absl::FunctionRef<bool(absl::string_view dataset, absl::string_view path,
                             const SsdFileMeta&)>
          fn) const;
  // Reverse entries of one data file.
  absl::Status ForEachInDataFile(
      uint32_t data_file,
      absl::FunctionRef<bool(absl::string_view dataset, absl::string_view path,
                             uint32_t chunk)>
          fn) const;

 private:
  explicit SsdIndex(std::unique_ptr<rocksdb::DB> db);
  std::unique_ptr<rocksdb::DB> db_;
  // A Commit failed and no Resume succeeded since (see FlushAll).
  std::atomic<bool> write_failed_{false};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SSD_SSD_INDEX_H_
