#include "dlcache/cuda/upload_layout.h"

namespace dlcache::cuda {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

}  // namespace

UploadLayout PlanUploadLayout(absl::Span<const std::vector<HostChunk>> items,
                              const LayoutOptions& options) {
  const uint64_t align = options.alignment == 0 ? 1 : options.alignment;
  UploadLayout layout;
  layout.items.resize(items.size());
  uint64_t end = 0;
  // Host address just past the previous item's last chunk (0 = none).
  uintptr_t prev_src_end = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::vector<HostChunk>& chunks = items[i];
    uint64_t size = 0;
    for (const HostChunk& c : chunks) size += c.size;
    if (size == 0) {
      layout.items[i] = {AlignUp(end, align), 0};
      continue;
    }
    const HostChunk* first = nullptr;
    for (const HostChunk& c : chunks) {
      if (c.size > 0) {
        first = &c;
        break;
      }
    }
    const uintptr_t src = reinterpret_cast<uintptr_t>(first->data);
    uint64_t start = AlignUp(end, align);
    if (options.preserve_gaps && prev_src_end != 0 && src >= prev_src_end &&
        src - prev_src_end <= options.max_gap &&
        (end + (src - prev_src_end)) % align == 0) {
      start = end + (src - prev_src_end);
    }
    uint64_t at = start;
    for (const HostChunk& c : chunks) {
      if (c.size == 0) continue;
      layout.ops.push_back(CopyOp{c.data, c.size, at});
      at += c.size;
    }
    const HostChunk* last = first;
    for (const HostChunk& c : chunks) {
      if (c.size > 0) last = &c;
    }
    prev_src_end = reinterpret_cast<uintptr_t>(last->data) + last->size;
    layout.items[i] = {start, size};
    end = at;
  }
  layout.total = end;
  return layout;
}

}  // namespace dlcache::cuda
