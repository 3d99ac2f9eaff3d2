#include "server/index/file_index.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <utility>

#include "absl/hash/hash.h"
#include "server/memory/page_memory.h"

namespace dlcache {
namespace {

// Keys looked up ahead of the one being compared, per pipeline stage
// (FindBatch): enough to keep a core's ~10-16 line fill buffers busy
// with the misses of several keys, few enough that the prefetched lines
// are still in L1 when they are used.
constexpr size_t kAhead = 8;
constexpr size_t kRing = 32;  // > 2 * kAhead, a power of two
static_assert(kRing > 2 * kAhead && (kRing & (kRing - 1)) == 0);

// Odd multipliers from a counter through a 64-bit mixer (splitmix64's).
uint64_t NextHomeMultiplier() {
  static std::atomic<uint64_t> counter{0x9e3779b97f4a7c15ull};
  uint64_t z =
      counter.fetch_add(0x9e3779b97f4a7c15ull, std::memory_order_relaxed);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) | 1;
}

void PrefetchRecord(const FileRecord* r, size_t name_bytes) {
  const char* p = reinterpret_cast<const char*>(r);
  // The block from a one-chunk file's entry before the fields (which the
  // caller reads next) to the name's end: two lines for an ImageNet
  // record of 72 bytes. Before another record: a line of its neighbour.
  __builtin_prefetch(p - sizeof(ChunkEntry));
  __builtin_prefetch(p);
  __builtin_prefetch(p + FileRecord::kNameAt + name_bytes - 1);
}

}  // namespace

uint64_t FileIndex::DefaultHash(absl::string_view path) {
  return absl::Hash<absl::string_view>()(path);
}

FileIndex::FileIndex(HashFn hash, ChunkEntryPool* handles)
    : hash_(hash), arena_(handles) {}

FileIndex::~FileIndex() {
  for (size_t i = 0; i < capacity_; ++i) {
    if (Live(slots_[i])) Free(RecordOf(slots_[i]));
  }
  FreePages(slots_, capacity_ * sizeof(uint64_t));
}

FileIndex::FileIndex(FileIndex&& other) noexcept
    : hash_(other.hash_),
      slots_(std::exchange(other.slots_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      size_(std::exchange(other.size_, 0)),
      erased_(std::exchange(other.erased_, 0)),
      unlinked_(std::exchange(other.unlinked_, 0)),
      home_mul_(other.home_mul_),
      arena_(std::move(other.arena_)),
      folders_(std::move(other.folders_)) {}

size_t FileIndex::CapacityFor(size_t n) {
  constexpr size_t kSlotsPerPage = 4096 / sizeof(uint64_t);
  size_t c =
      std::max(kMinCapacity, (n * 100 + kMaxLoadPercent - 1) / kMaxLoadPercent);
  // The rest of a page would be mapped anyway.
  if (c >= kSlotsPerPage)
    c = (c + kSlotsPerPage - 1) / kSlotsPerPage * kSlotsPerPage;
  while (MaxLoad(c) < n) ++c;  // rounding
  return c;
}

size_t FileIndex::GrownCapacity(size_t n) const {
  return CapacityFor(std::max(n, MaxLoad(capacity_ * kGrowthPercent / 100)));
}

size_t FileIndex::ProbeTag(size_t i, uint64_t tag) const {
  for (;; i = Next(i)) {
    const uint64_t s = slots_[i];
    if (s == kEmpty) return capacity_;
    if (Live(s) && TagOf(s) == tag) return i;
  }
}

FileRecord* FileIndex::FindFrom(size_t i, uint64_t tag,
                                absl::string_view path) const {
  for (i = ProbeTag(i, tag); i != capacity_; i = ProbeTag(Next(i), tag)) {
    FileRecord* r = RecordOf(slots_[i]);
    if (Matches(*r, path)) return r;
  }
  return nullptr;
}

FileRecord* FileIndex::Find(absl::string_view path) const {
  if (size_ == 0) return nullptr;
  const uint64_t h = hash_(path);
  return FindFrom(Home(h), TagOf(h), path);
}

void FileIndex::FindBatch(size_t n,
                          absl::FunctionRef<absl::string_view(size_t)> path_of,
                          FileRecord** out) const {
  if (size_ == 0) {
    for (size_t i = 0; i < n; ++i) out[i] = nullptr;
    return;
  }
  // Per key in flight: its path, hash, and the slot of its candidate
  // record (the first with its tag; capacity_ when an empty slot came
  // first, i.e. it is not here).
  struct Key {
    absl::string_view path;
    uint64_t hash;
    size_t slot;
  };
  Key ring[kRing];
  for (size_t step = 0; step < n + 2 * kAhead; ++step) {
    // Stage 1, key `step`: hash, start loading its slot.
    if (step < n) {
      Key& k = ring[step % kRing];
      k.path = path_of(step);
      k.hash = hash_(k.path);
      __builtin_prefetch(&slots_[Home(k.hash)]);
    }
    // Stage 2, kAhead keys behind: probe its slots by tag only (the
    // slot's line has arrived), start loading the candidate record.
    if (step >= kAhead && step - kAhead < n) {
      Key& k = ring[(step - kAhead) % kRing];
      k.slot = ProbeTag(Home(k.hash), TagOf(k.hash));
      if (k.slot != capacity_) {
        PrefetchRecord(RecordOf(slots_[k.slot]), k.path.size());
      }
    }
    // Stage 3, 2 x kAhead keys behind: compare the path (the record has
    // arrived), start loading what the caller reads next.
    if (step >= 2 * kAhead) {
      const size_t key = step - 2 * kAhead;
      const Key& k = ring[key % kRing];
      FileRecord* r = nullptr;
      if (k.slot != capacity_) {
        r = RecordOf(slots_[k.slot]);
        // A tag collision (1 in 65536 per probed slot): probe on.
        if (!Matches(*r, k.path)) {
          r = FindFrom(Next(k.slot), TagOf(k.hash), k.path);
        }
      }
      out[key] = r;
      // A one-chunk file's entry came with the record.
      if (r != nullptr && r->chunk_table() != nullptr) {
        __builtin_prefetch(r->chunk_table());
      }
    }
  }
}

void FileIndex::Place(FileRecord* record, uint64_t hash) {
  const uint64_t p = reinterpret_cast<uint64_t>(record);
  // User-space addresses fit 47 bits on x86-64 (48 on arm64 with 4 KiB
  // pages); a larger one would lose its top bits to the tag.
  if ((p & ~kPointerMask) != 0) std::abort();
  for (size_t i = Home(hash);; i = Next(i)) {
    if (!Live(slots_[i])) {
      if (slots_[i] == kErased) --erased_;
      slots_[i] = p | (TagOf(hash) << kTagShift);
      return;
    }
  }
}

void FileIndex::Rehash(size_t capacity) {
  uint64_t* old = slots_;
  const size_t old_capacity = capacity_;
  slots_ = static_cast<uint64_t*>(AllocatePages(capacity * sizeof(uint64_t)));
  capacity_ = capacity;
  // A new multiplier for every table: the old table is walked in the
  // order of its homes, and records put into a table whose homes follow
  // the same order (a smaller table, or another index filled from this
  // one's ForEach: a restart's adoption) would pile up in one run of
  // linear probing and make inserting quadratic.
  home_mul_ = NextHomeMultiplier();
  erased_ = 0;
  // Each record is read for its hash: load the records a few slots ahead
  // (a large table's records are out of the caches).
  constexpr size_t kRehashAhead = 16;
  std::string scratch;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (i + kRehashAhead < old_capacity && Live(old[i + kRehashAhead])) {
      const FileRecord* ahead = RecordOf(old[i + kRehashAhead]);
      __builtin_prefetch(ahead);
      __builtin_prefetch(reinterpret_cast<const char*>(ahead) +
                         sizeof(FileRecord) + 32);
    }
    if (!Live(old[i])) continue;
    FileRecord* r = RecordOf(old[i]);
    Place(r, hash_(PathOf(*r, &scratch)));
  }
  FreePages(old, old_capacity * sizeof(uint64_t));
}

void FileIndex::Reserve(size_t n) {
  const size_t want = CapacityFor(n);
  if (want > capacity_) Rehash(want);
}

FileRecord* FileIndex::Insert(absl::string_view path, const FileInfo& info,
                              uint32_t chunk_count) {
  if (size_ + erased_ + 1 > MaxLoad(capacity_)) {
    // Grows when live records need it; otherwise the same size, rid of
    // the erased slots.
    Rehash(size_ + 1 > MaxLoad(capacity_) ? GrownCapacity(size_ + 1)
                                          : capacity_);
  }
  const absl::string_view folder = FolderTable::FolderOf(path);
  const uint16_t id = folders_.Acquire(folder, size_);
  FileRecord* r = FileRecord::Create(
      id, id == FolderTable::kNone ? path : path.substr(folder.size()), info,
      chunk_count, &arena_);
  Place(r, hash_(path));
  ++size_;
  return r;
}

FileRecord* FileIndex::Replace(FileRecord* old, const FileInfo& info,
                               uint32_t chunk_count) {
  std::string scratch;
  const uint64_t h = hash_(PathOf(*old, &scratch));
  size_t i = ProbeTag(Home(h), TagOf(h));
  while (i != capacity_ && RecordOf(slots_[i]) != old) {
    i = ProbeTag(Next(i), TagOf(h));
  }
  if (i == capacity_) std::abort();  // not in the index: a caller's bug
  folders_.AddRef(old->folder());
  FileRecord* r = FileRecord::Create(old->folder(), old->name(), info,
                                     chunk_count, &arena_);
  slots_[i] = reinterpret_cast<uint64_t>(r) | (TagOf(h) << kTagShift);
  if ((reinterpret_cast<uint64_t>(r) & ~kPointerMask) != 0) std::abort();
  ++unlinked_;
  return r;
}

void FileIndex::FreeUnlinked(FileRecord* record) {
  --unlinked_;
  Free(record);
}

void FileIndex::Free(FileRecord* record) {
  folders_.Release(record->folder());
  FileRecord::Destroy(record, &arena_);
}

absl::string_view FileIndex::PathOf(const FileRecord& record,
                                    std::string* scratch) const {
  if (record.folder() == FolderTable::kNone) return record.name();
  const absl::string_view folder = folders_.text(record.folder());
  const absl::string_view name = record.name();
  scratch->reserve(folder.size() + name.size());
  scratch->assign(folder.data(), folder.size());
  scratch->append(name.data(), name.size());
  return *scratch;
}

void FileIndex::EraseIf(absl::FunctionRef<bool(FileRecord*)> fn) {
  RemoveIf([&](FileRecord* r) {
    return fn(r) ? Removal::kDestroy : Removal::kKeep;
  });
}

void FileIndex::RemoveIf(absl::FunctionRef<Removal(FileRecord*)> fn) {
  for (size_t i = 0; i < capacity_; ++i) {
    if (!Live(slots_[i])) continue;
    FileRecord* r = RecordOf(slots_[i]);
    const Removal what = fn(r);
    if (what == Removal::kKeep) continue;
    if (what == Removal::kDestroy) {
      Free(r);
    } else {
      ++unlinked_;
    }
    slots_[i] = kErased;
    --size_;
    ++erased_;
  }
  // Erased slots lengthen every probe that passes them: rebuild once they
  // are a quarter of the table (an evict of a whole dataset empties it).
  // Smaller when few are left, with room to grow by a step before the
  // next rehash.
  if (erased_ > 0 && erased_ >= capacity_ / 4) {
    Rehash(std::min(capacity_, CapacityFor(size_ * kGrowthPercent / 100)));
  }
}

void FileIndex::ForEach(absl::FunctionRef<void(const FileRecord&)> fn) const {
  for (size_t i = 0; i < capacity_; ++i) {
    if (Live(slots_[i])) fn(*RecordOf(slots_[i]));
  }
}

size_t FileIndex::TableBytes() const {
  return capacity_ == 0 ? 0 : PageRoundedBytes(capacity_ * sizeof(uint64_t));
}

size_t FileIndex::RecordBytes() const {
  size_t bytes = arena_.MappedBytes() + arena_.LargeBytes();
  ForEach([&](const FileRecord& r) { bytes += r.TableHeapBytes(); });
  return bytes;
}

}  // namespace dlcache
