#include "server/ssd/ssd_index.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace dlcache {
namespace {

constexpr char kFileTag = 'F';
constexpr char kChunkTag = 'C';
constexpr char kReverseTag = 'D';
constexpr char kCounterTag = 'M';
// First byte of every value: lets a later format change be recognised.
constexpr char kValueFormat = 1;
constexpr size_t kFileValueSize = 1 + 8 + 8 + 8;
constexpr size_t kChunkValueSize = 1 + 4 + 8 + 8 + 8 + 8 + 8 + 8;

void PutBe32(std::string* out, uint32_t v) {
  // Big-endian so that chunk order is key order.
  char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
               static_cast<char>(v >> 8), static_cast<char>(v)};
  out->append(b, 4);
}
uint32_t GetBe32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) |
         (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}
void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetLe(const char* p, int bytes) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{u[i]} << (8 * i);
  return v;
}

std::string FileKey(absl::string_view dataset, absl::string_view path) {
  std::string k;
  k.reserve(2 + dataset.size() + path.size());
  k.push_back(kFileTag);
  k.append(dataset.data(), dataset.size());
  k.push_back('\0');
  k.append(path.data(), path.size());
  return k;
}
// 'C' dataset \0 path \0, the prefix of all chunk keys of one file.
std::string ChunkKeyPrefix(absl::string_view dataset, absl::string_view path) {
  std::string k;
  k.reserve(7 + dataset.size() + path.size());
  k.push_back(kChunkTag);
  k.append(dataset.data(), dataset.size());
  k.push_back('\0');
  k.append(path.data(), path.size());
  k.push_back('\0');
  return k;
}
std::string ChunkKey(absl::string_view dataset, absl::string_view path,
                     uint32_t chunk) {
  std::string k = ChunkKeyPrefix(dataset, path);
  PutBe32(&k, chunk);
  return k;
}
std::string ReverseKey(uint32_t data_file, absl::string_view dataset,
                       absl::string_view path, uint32_t chunk) {
  std::string k;
  k.push_back(kReverseTag);
  PutBe32(&k, data_file);
  k.append(dataset.data(), dataset.size());
  k.push_back('\0');
  k.append(path.data(), path.size());
  k.push_back('\0');
  PutBe32(&k, chunk);
  return k;
}
std::string CounterKey(absl::string_view name) {
  return absl::StrCat(absl::string_view(&kCounterTag, 1), name);
}

std::string EncodeFile(const SsdFileMeta& m) {
  std::string v;
  v.reserve(kFileValueSize);
  v.push_back(kValueFormat);
  PutLe(&v, m.info.size, 8);
  PutLe(&v, static_cast<uint64_t>(m.info.mtime_ns), 8);
  PutLe(&v, m.version, 8);
  return v;
}
bool DecodeFile(absl::string_view v, SsdFileMeta* m) {
  if (v.size() != kFileValueSize || v[0] != kValueFormat) return false;
  const char* p = v.data() + 1;
  m->info.size = GetLe(p, 8);
  m->info.mtime_ns = static_cast<int64_t>(GetLe(p + 8, 8));
  m->version = GetLe(p + 16, 8);
  return true;
}
std::string EncodeChunk(const SsdChunkMeta& m) {
  std::string v;
  v.reserve(kChunkValueSize);
  v.push_back(kValueFormat);
  PutLe(&v, m.data_file, 4);
  PutLe(&v, m.offset, 8);
  PutLe(&v, m.length, 8);
  PutLe(&v, m.checksum, 8);
  PutLe(&v, m.info.size, 8);
  PutLe(&v, static_cast<uint64_t>(m.info.mtime_ns), 8);
  PutLe(&v, m.version, 8);
  return v;
}
bool DecodeChunk(absl::string_view v, SsdChunkMeta* m) {
  if (v.size() != kChunkValueSize || v[0] != kValueFormat) return false;
  const char* p = v.data() + 1;
  m->data_file = static_cast<uint32_t>(GetLe(p, 4));
  m->offset = GetLe(p + 4, 8);
  m->length = GetLe(p + 12, 8);
  m->checksum = GetLe(p + 20, 8);
  m->info.size = GetLe(p + 28, 8);
  m->info.mtime_ns = static_cast<int64_t>(GetLe(p + 36, 8));
  m->version = GetLe(p + 44, 8);
  return true;
}

// Splits "dataset \0 path \0 be32" (a chunk key without its tag).
bool SplitChunkRest(absl::string_view rest, absl::string_view* dataset,
                    absl::string_view* path, uint32_t* chunk) {
  size_t nul = rest.find('\0');
  if (nul == absl::string_view::npos || rest.size() < nul + 1 + 5) return false;
  *dataset = rest.substr(0, nul);
  *path = rest.substr(nul + 1, rest.size() - nul - 1 - 5);
  if (rest[rest.size() - 5] != '\0') return false;
  *chunk = GetBe32(rest.data() + rest.size() - 4);
  return true;
}

bool UnderPrefix(absl::string_view path, absl::string_view prefix) {
  if (prefix.empty() || path == prefix) return true;
  return absl::StartsWith(path, prefix) && path.size() > prefix.size() &&
         path[prefix.size()] == '/';
}

absl::string_view View(const rocksdb::Slice& s) {
  return absl::string_view(s.data(), s.size());
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("ssd index: ", what, ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsIOError()) return absl::UnavailableError(msg);
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

// RocksDB's warnings and errors, into dlcached's log. By default RocksDB
// writes an info LOG file into the index directory, on the SSD tier's own
// disk: once that disk is full an append to it fails, and the next one (at
// the latest in DB::Close at shutdown) trips an assertion in RocksDB's
// WritableFileWriter and aborts dlcached (issue 33: exit 134 on SIGTERM
// after the SSD's file system filled up). The info chatter is dropped.
class RocksLogger : public rocksdb::Logger {
 public:
  RocksLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof(line), format, ap);
    DLC_LOG(WARNING) << "ssd index (rocksdb): " << line;
  }
};

rocksdb::Options MakeOptions(const SsdIndexMemoryOptions& memory) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.info_log = std::make_shared<RocksLogger>();
  // The index is small next to the data (~100 bytes a chunk); keep its
  // memory use modest, it shares the node with the arena.
  o.write_buffer_size = std::max<uint64_t>(memory.write_buffer_bytes, 1 << 20);
  o.max_write_buffer_number = 2;
  o.max_open_files = 512;
  o.IncreaseParallelism(2);
  // The index is small; preallocating WAL and MANIFEST space (MiBs) would
  // only take room the data files and other users of the disk need.
  o.allow_fallocate = false;
  // The WAL holds what the memtable does; SsdTier flushes explicitly when
  // the disk has room, and a flush on a full disk must not be forced.
  o.avoid_flush_during_shutdown = true;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = rocksdb::NewLRUCache(memory.block_cache_bytes);
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

absl::StatusOr<std::unique_ptr<rocksdb::DB>> OpenDb(
    const std::string& path, const SsdIndexMemoryOptions& memory,
    rocksdb::Status* raw) {
  rocksdb::DB* db = nullptr;
  *raw = rocksdb::DB::Open(MakeOptions(memory), path, &db);
  if (!raw->ok()) return FromRocks(*raw, absl::StrCat("open ", path));
  return std::unique_ptr<rocksdb::DB>(db);
}

}  // namespace

SsdIndex::SsdIndex(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}

SsdIndex::~SsdIndex() {
  if (db_ != nullptr) {
    rocksdb::Status s = db_->Close();
    if (!s.ok()) {
      DLC_LOG(WARNING) << "ssd index: close: " << s.ToString();
    }
  }
}

absl::StatusOr<SsdIndex::Opened> SsdIndex::Open(
    const std::string& path, bool reset_if_corrupt,
    const SsdIndexMemoryOptions& memory) {
  Opened out;
  rocksdb::Status raw;
  absl::StatusOr<std::unique_ptr<rocksdb::DB>> db = OpenDb(path, memory, &raw);
  if (!db.ok() && raw.IsCorruption()) {
    DLC_LOG(ERROR) << "ssd index " << path << " is corrupt (" << raw.ToString()
                   << "); trying to repair it";
    rocksdb::Status repaired = rocksdb::RepairDB(path, MakeOptions(memory));
    if (repaired.ok()) db = OpenDb(path, memory, &raw);
    if (!db.ok() && raw.IsCorruption()) {
      if (!reset_if_corrupt) {
        return absl::DataLossError(absl::StrCat(
            "ssd index ", path, " is corrupt beyond repair: ", raw.ToString()));
      }
      out.moved_to = absl::StrCat(path, ".corrupt-", std::time(nullptr));
      if (std::rename(path.c_str(), out.moved_to.c_str()) != 0) {
        return absl::DataLossError(
            absl::StrCat("ssd index ", path,
                         " is corrupt beyond repair and cannot be "
                         "moved aside: ",
                         raw.ToString()));
      }
      DLC_LOG(ERROR) << "ssd index " << path
                     << " is corrupt beyond repair; moved it to "
                     << out.moved_to << " and starting with an empty SSD tier";
      out.reset = true;
      db = OpenDb(path, memory, &raw);
    }
  }
  if (!db.ok()) {
    return absl::FailedPreconditionError(db.status().message());
  }
  out.index.reset(new SsdIndex(*std::move(db)));
  return out;
}

absl::StatusOr<SsdIndex::Lookup> SsdIndex::Find(absl::string_view dataset,
                                                absl::string_view path,
                                                uint32_t chunk) const {
  std::string fk = FileKey(dataset, path);
  std::string ck = ChunkKey(dataset, path, chunk);
  std::vector<rocksdb::Slice> keys = {fk, ck};
  std::vector<std::string> values;
  // MultiGet reads both keys from one implicit snapshot, so a file's meta
  // and its chunk are never seen from different commits.
  std::vector<rocksdb::Status> st =
      db_->MultiGet(rocksdb::ReadOptions(), keys, &values);
  Lookup out;
  for (int i = 0; i < 2; ++i) {
    if (st[i].IsNotFound()) continue;
    if (!st[i].ok()) return FromRocks(st[i], "get");
    if (i == 0) {
      SsdFileMeta m;
      if (!DecodeFile(values[0], &m)) {
        return absl::DataLossError("ssd index: undecodable file entry");
      }
      out.file = m;
    } else {
      SsdChunkMeta m;
      if (!DecodeChunk(values[1], &m)) {
        return absl::DataLossError("ssd index: undecodable chunk entry");
      }
      out.chunk = m;
    }
  }
  return out;
}

absl::StatusOr<absl::optional<SsdFileMeta>> SsdIndex::GetFile(
    absl::string_view dataset, absl::string_view path) const {
  std::string v;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), FileKey(dataset, path), &v);
  if (s.IsNotFound()) return absl::optional<SsdFileMeta>();
  if (!s.ok()) return FromRocks(s, "get");
  SsdFileMeta m;
  if (!DecodeFile(v, &m)) {
    return absl::DataLossError("ssd index: undecodable file entry");
  }
  return absl::optional<SsdFileMeta>(m);
}

absl::StatusOr<absl::optional<SsdChunkMeta>> SsdIndex::GetChunk(
    absl::string_view dataset, absl::string_view path, uint32_t chunk) const {
  std::string v;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), ChunkKey(dataset, path, chunk), &v);
  if (s.IsNotFound()) return absl::optional<SsdChunkMeta>();
  if (!s.ok()) return FromRocks(s, "get");
  SsdChunkMeta m;
  if (!DecodeChunk(v, &m)) {
    return absl::DataLossError("ssd index: undecodable chunk entry");
  }
  return absl::optional<SsdChunkMeta>(m);
}

absl::StatusOr<uint64_t> SsdIndex::GetCounter(absl::string_view name) const {
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), CounterKey(name), &v);
  if (s.IsNotFound()) return uint64_t{0};
  if (!s.ok()) return FromRocks(s, "get");
  if (v.size() != 8) return absl::DataLossError("ssd index: bad counter");
  return GetLe(v.data(), 8);
}

SsdIndexMemory SsdIndex::MemoryUsage() const {
  SsdIndexMemory m;
  auto get = [this](const std::string& name, uint64_t* out) {
    if (!db_->GetIntProperty(name, out)) *out = 0;
  };
  get(rocksdb::DB::Properties::kCurSizeAllMemTables, &m.memtable_bytes);
  get(rocksdb::DB::Properties::kBlockCacheUsage, &m.block_cache_bytes);
  get(rocksdb::DB::Properties::kEstimateTableReadersMem, &m.table_reader_bytes);
  return m;
}

SsdIndex::Batch::Batch() : batch_(std::make_unique<rocksdb::WriteBatch>()) {}
SsdIndex::Batch::~Batch() = default;

void SsdIndex::Batch::PutFile(absl::string_view dataset, absl::string_view path,
                              const SsdFileMeta& meta) {
  batch_->Put(FileKey(dataset, path), EncodeFile(meta));
}
void SsdIndex::Batch::DeleteFile(absl::string_view dataset,
                                 absl::string_view path) {
  batch_->Delete(FileKey(dataset, path));
}
void SsdIndex::Batch::PutChunk(absl::string_view dataset,
                               absl::string_view path, uint32_t chunk,
                               const SsdChunkMeta& meta) {
  batch_->Put(ChunkKey(dataset, path, chunk), EncodeChunk(meta));
  batch_->Put(ReverseKey(meta.data_file, dataset, path, chunk), "");
}
void SsdIndex::Batch::DeleteChunk(absl::string_view dataset,
                                  absl::string_view path, uint32_t chunk,
                                  uint32_t data_file) {
  batch_->Delete(ChunkKey(dataset, path, chunk));
  batch_->Delete(ReverseKey(data_file, dataset, path, chunk));
}
void SsdIndex::Batch::DeleteReverse(uint32_t data_file,
                                    absl::string_view dataset,
                                    absl::string_view path, uint32_t chunk) {
  batch_->Delete(ReverseKey(data_file, dataset, path, chunk));
}
void SsdIndex::Batch::SetCounter(absl::string_view name, uint64_t value) {
  std::string v;
  PutLe(&v, value, 8);
  batch_->Put(CounterKey(name), v);
}
size_t SsdIndex::Batch::Count() const { return batch_->Count(); }

absl::Status SsdIndex::Commit(Batch& batch, bool sync) {
  if (batch.Count() == 0) return absl::OkStatus();
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  absl::Status s = FromRocks(db_->Write(wo, batch.batch_.get()), "write");
  if (!s.ok()) write_failed_.store(true, std::memory_order_relaxed);
  return s;
}

absl::Status SsdIndex::Resume() {
  absl::Status s = FromRocks(db_->Resume(), "resume");
  // A successful Resume starts a new WAL: syncing it is safe again.
  if (s.ok()) write_failed_.store(false, std::memory_order_relaxed);
  return s;
}

absl::Status SsdIndex::FlushAll() {
  if (write_failed_.load(std::memory_order_relaxed)) {
    return absl::UnavailableError(
        "index writes failed earlier (a read-only or failing file "
        "system?): its log is not synced");
  }
  absl::Status s = FromRocks(db_->FlushWAL(/*sync=*/true), "sync wal");
  if (!s.ok()) return s;
  return FromRocks(db_->Flush(rocksdb::FlushOptions()), "flush");
}

absl::StatusOr<bool> SsdIndex::FlushMemtable(uint64_t min_bytes) {
  if (MemoryUsage().memtable_bytes < min_bytes) return false;
  absl::Status s = FromRocks(db_->Flush(rocksdb::FlushOptions()), "flush");
  if (!s.ok()) return s;
  return true;
}

absl::Status SsdIndex::ForEachFile(
    absl::string_view dataset, absl::string_view prefix,
    absl::FunctionRef<bool(absl::string_view, const SsdFileMeta&)> fn) const {
  const std::string start = FileKey(dataset, prefix);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  const size_t path_at = 2 + dataset.size();
  for (it->Seek(start); it->Valid(); it->Next()) {
    absl::string_view key = View(it->key());
    if (!absl::StartsWith(key, start)) break;
    absl::string_view path = key.substr(path_at);
    if (!UnderPrefix(path, prefix)) continue;
    SsdFileMeta m;
    if (!DecodeFile(View(it->value()), &m)) continue;
    if (!fn(path, m)) break;
  }
  return FromRocks(it->status(), "scan");
}

absl::Status SsdIndex::ForEachChunk(
    absl::string_view dataset, absl::string_view prefix,
    absl::FunctionRef<bool(absl::string_view, uint32_t, const SsdChunkMeta&)>
        fn) const {
  // Without the trailing NUL of ChunkKeyPrefix: "a/b" must also reach
  // "a/b/c"; UnderPrefix rejects "a/bc".
  std::string start = ChunkKeyPrefix(dataset, prefix);
  start.pop_back();
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(start); it->Valid(); it->Next()) {
    absl::string_view key = View(it->key());
    if (!absl::StartsWith(key, start)) break;
    absl::string_view ds, path;
    uint32_t chunk = 0;
    if (!SplitChunkRest(key.substr(1), &ds, &path, &chunk)) continue;
    if (!UnderPrefix(path, prefix)) continue;
    SsdChunkMeta m;
    if (!DecodeChunk(View(it->value()), &m)) continue;
    if (!fn(path, chunk, m)) break;
  }
  return FromRocks(it->status(), "scan");
}

absl::Status SsdIndex::ForEachChunkOfFile(
    absl::string_view dataset, absl::string_view path,
    absl::FunctionRef<bool(uint32_t, const SsdChunkMeta&)> fn) const {
  const std::string start = ChunkKeyPrefix(dataset, path);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(start); it->Valid(); it->Next()) {
    absl::string_view key = View(it->key());
    if (!absl::StartsWith(key, start)) break;
    if (key.size() != start.size() + 4) continue;
    SsdChunkMeta m;
    if (!DecodeChunk(View(it->value()), &m)) m = SsdChunkMeta();
    if (!fn(GetBe32(key.data() + start.size()), m)) break;
  }
  return FromRocks(it->status(), "scan");
}

absl::Status SsdIndex::ForEachChunkEverywhere(
    absl::FunctionRef<bool(absl::string_view, absl::string_view, uint32_t,
                           const SsdChunkMeta&)>
        fn) const {
  const std::string start(1, kChunkTag);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(start); it->Valid(); it->Next()) {
    absl::string_view key = View(it->key());
    if (key.empty() || key[0] != kChunkTag) break;
    absl::string_view ds, path;
    uint32_t chunk = 0;
    if (!SplitChunkRest(key.substr(1), &ds, &path, &chunk)) continue;
    SsdChunkMeta m;
    // An undecodable value cannot be served: pass it with length 0 so the
    // caller drops it.
    if (!DecodeChunk(View(it->value()), &m)) m = SsdChunkMeta();
    if (!fn(ds, path, chunk, m)) break;
  }
  return FromRocks(it->status(), "scan");
}

absl::Status SsdIndex::ForEachChunkWithFileEverywhere(
    absl::FunctionRef<bool(absl::string_view, absl::string_view, uint32_t,
                           const SsdChunkMeta&, const SsdFileMeta*)>
        fn) const {
  rocksdb::ReadOptions ro;
  ro.snapshot = db_->GetSnapshot();
  std::unique_ptr<rocksdb::Iterator> chunks(db_->NewIterator(ro));
  std::unique_ptr<rocksdb::Iterator> files(db_->NewIterator(ro));
  files->Seek(std::string(1, kFileTag));
  // The file key's rest is "dataset \0 path"; a chunk key's starts with
  // the same bytes and then \0: both orders agree (no \0 in either name).
  auto file_rest = [&]() -> absl::optional<absl::string_view> {
    if (!files->Valid()) return absl::nullopt;
    absl::string_view key = View(files->key());
    if (key.empty() || key[0] != kFileTag) return absl::nullopt;
    return key.substr(1);
  };
  SsdFileMeta file;
  bool decoded = false;  // `file` was decoded from where `files` stands
  bool have_file = false;
  for (chunks->Seek(std::string(1, kChunkTag)); chunks->Valid();
       chunks->Next()) {
    absl::string_view key = View(chunks->key());
    if (key.empty() || key[0] != kChunkTag) break;
    absl::string_view ds, path;
    uint32_t chunk = 0;
    if (!SplitChunkRest(key.substr(1), &ds, &path, &chunk)) continue;
    const absl::string_view rest = key.substr(1, ds.size() + 1 + path.size());
    absl::optional<absl::string_view> f = file_rest();
    while (f.has_value() && *f < rest) {
      files->Next();
      decoded = false;
      f = file_rest();
    }
    const bool match = f.has_value() && *f == rest;
    if (match && !decoded) {
      have_file = DecodeFile(View(files->value()), &file);
      decoded = true;
    }
    SsdChunkMeta m;
    if (!DecodeChunk(View(chunks->value()), &m)) m = SsdChunkMeta();
    if (!fn(ds, path, chunk, m, match && have_file ? &file : nullptr)) break;
  }
  absl::Status s = FromRocks(chunks->status(), "scan");
  if (s.ok()) s = FromRocks(files->status(), "scan");
  chunks.reset();
  files.reset();
  db_->ReleaseSnapshot(ro.snapshot);
  return s;
}

absl::Status SsdIndex::ForEachFileEverywhere(
    absl::FunctionRef<bool(absl::string_view, absl::string_view,
                           const SsdFileMeta&)>
        fn) const {
  const std::string start(1, kFileTag);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(start); it->Valid(); it->Next()) {
    absl::string_view key = View(it->key());
    if (key.empty() || key[0] != kFileTag) break;
    absl::string_view rest = key.substr(1);
    size_t nul = rest.find('\0');
    if (nul == absl::string_view::npos) continue;
    SsdFileMeta m;
    if (!DecodeFile(View(it->value()), &m)) continue;
    if (!fn(rest.substr(0, nul), rest.substr(nul + 1), m)) break;
  }
  return FromRocks(it->status(), "scan");
}

absl::Status SsdIndex::ForEachInDataFile(
    uint32_t data_file,
    absl::FunctionRef<bool(absl::string_view, absl::string_view, uint32_t)> fn)
    const {
  std::string start(1, kReverseTag);
  PutBe32(&start, data_file);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(start); it->Valid(); it->Next()) {
    absl::string_view key = View(it->key());
    if (!absl::StartsWith(key, start)) break;
    absl::string_view ds, path;
    uint32_t chunk = 0;
    if (!SplitChunkRest(key.substr(start.size()), &ds, &path, &chunk)) {
      continue;
    }
    if (!fn(ds, path, chunk)) break;
  }
  return FromRocks(it->status(), "scan");
}

}  // namespace dlcache
