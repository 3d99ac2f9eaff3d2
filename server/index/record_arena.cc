#include "server/index/record_arena.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "server/memory/page_memory.h"

namespace dlcache {
namespace {

constexpr size_t kFirstPieceBytes = size_t{64} << 10;

}  // namespace

RecordArena::~RecordArena() {
  for (const Piece& p : pieces_) FreePages(p.data, p.bytes);
}

RecordArena::RecordArena(RecordArena&& other) noexcept
    : handles_(other.handles_),
      pieces_(std::move(other.pieces_)),
      next_(std::exchange(other.next_, nullptr)),
      end_(std::exchange(other.end_, nullptr)),
      free_(std::move(other.free_)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      large_bytes_(std::exchange(other.large_bytes_, 0)) {
  other.pieces_.clear();
  other.free_.clear();
}

void* RecordArena::Allocate(size_t bytes) {
  const size_t size = BlockBytes(bytes);
  if (size > kMaxSlabBytes) {
    large_bytes_ += bytes;
    return ::operator new(bytes);
  }
  const size_t cls = size / kStep;
  if (cls < free_.size() && free_[cls] != nullptr) {
    void* block = free_[cls];
    std::memcpy(&free_[cls], block, sizeof(void*));
    return block;
  }
  if (static_cast<size_t>(end_ - next_) < size) {
    // The old piece's tail (< kMaxSlabBytes) is left unused: at most
    // 0.2% of a 2 MiB piece.
    const size_t piece =
        pieces_.empty() ? kFirstPieceBytes
                        : std::min(kHugePageBytes, pieces_.back().bytes * 2);
    char* data = static_cast<char*>(AllocatePages(piece));
    pieces_.push_back({data, piece});
    if (handles_ != nullptr) handles_->AddRecordPiece(data, piece);
    mapped_bytes_ += PageRoundedBytes(piece);
    next_ = data;
    end_ = data + piece;
  }
  void* block = next_;
  next_ += size;
  return block;
}

void RecordArena::Free(void* block, size_t bytes) {
  const size_t size = BlockBytes(bytes);
  if (size > kMaxSlabBytes) {
    large_bytes_ -= bytes;
    ::operator delete(block);
    return;
  }
  const size_t cls = size / kStep;
  if (cls >= free_.size()) free_.resize(kMaxSlabBytes / kStep + 1, nullptr);
  std::memcpy(block, &free_[cls], sizeof(void*));
  free_[cls] = block;
}

}  // namespace dlcache
