#ifndef DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_H_
#define DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_H_

#include <cstdint>

namespace dlcache {

// Where an item lives in the arena: slot `slot` of slab `slab`.
struct SlotRef {
  uint32_t slab = 0;
  uint32_t slot = 0;
};

// One cached chunk, 32 bytes: there is one per cached chunk, so it holds
// only what the hit path and eviction read. What few entries need lives
// in the memory tier's side tables: the status of a failed fill, the
// links of the borrowed list. Where an entry lies says which file it
// belongs to (issue 17): a one-chunk file's entry lies in its record's
// block, right before the record (`in_record`; FileRecord::OfInlineEntry),
// any other in a ChunkEntryPool cell after a pointer to its record
// (ChunkEntryPool::FileOf); tier/file_record.h's FileOf reads either.
// The slab slot is derived from (segment, offset) (SlabAllocator::RefAt),
// which share one word (kSegmentBits and kOffsetBits: the arena has at
// most 1,000,000 segments, Arena::Create); a chunk is at most kMaxLength
// bytes (--chunk_size is checked against it). Owned by MemoryTier (its
// ChunkEntryPool or its records' blocks); all fields are guarded by the
// MemoryTier mutex: written only while it is held exclusively, except
// `pins`, which hits and releases change under the shared lock through
// std::atomic_ref (MemoryTier::ServeHits, Release).
struct ChunkEntry {
  enum class State : uint8_t { kFilling, kReady, kFailed };

  static constexpr int kSegmentBits = 20;
  static constexpr int kOffsetBits = 64 - kSegmentBits;  // 16 TiB
  static constexpr uint64_t kMaxSegments = uint64_t{1} << kSegmentBits;
  static constexpr uint64_t kMaxOffset = (uint64_t{1} << kOffsetBits) - 1;
  static constexpr uint64_t kMaxLength = UINT32_MAX;

  uint32_t segment() const {
    return static_cast<uint32_t>(place_ >> kOffsetBits);
  }
  uint64_t offset() const { return place_ & kMaxOffset; }
  // segment < kMaxSegments, offset <= kMaxOffset (MemoryTier checks the
  // arena's geometry once).
  void SetPlace(uint32_t segment, uint64_t offset) {
    place_ = (uint64_t{segment} << kOffsetBits) | offset;
  }

 private:
  uint64_t place_ = 0;  // segment << kOffsetBits | offset

 public:
  uint64_t checksum = 0;
  uint32_t length = 0;  // <= kMaxLength
  uint32_t chunk = 0;
  // Leases, fillers and waiters: a pinned entry is never evicted or freed.
  // Aligned for std::atomic_ref (see above; at byte 24).
  alignas(4) uint32_t pins = 0;
  uint16_t dataset = 0;  // MemoryTier allows at most kMaxDatasets
  State state = State::kFilling;
  bool has_slot : 1 = false;    // false for empty chunks
  bool referenced : 1 = false;  // CLOCK bit
  // Admission (issue 11), set by the memory tier:
  // filled from a peer and kept in the bounded borrowed share; evicted
  // before chunks this node owns.
  bool borrowed : 1 = false;
  // Kept by a MinIO-style dataset: eviction policies take it only when
  // nothing else is evictable.
  bool sticky : 1 = false;
  // Not kept: served to the filler and its waiters, then freed (a MinIO
  // dataset that is full, a peer copy the borrowed share has no room for).
  bool transient : 1 = false;
  // Re-adopted from the previous server's arena without its checksum
  // checked yet (--readopt_verify=background): never leased as it is;
  // MemoryTier checks it first (MemoryTier::VerifyAdopted, Acquire).
  bool unverified : 1 = false;
  // Lies in its one-chunk file's record block (FileRecord), not in the
  // pool; set when the storage is made an entry, never changed.
  bool in_record : 1 = false;
  // Out of the index (evicted, dropped, a failed or transient fill) while
  // pinned: freed by its last unpin, with its record's block for an
  // in_record entry (the record left the index with it). Changes only
  // under the tier's exclusive lock, and never back.
  bool detached : 1 = false;
};

static_assert(sizeof(ChunkEntry) == 32, "one entry per cached chunk");

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_H_
