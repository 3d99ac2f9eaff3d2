// C ABI over dlcache::Client. Every entry point catches everything: no C++
// exception (std::bad_alloc included) may unwind into a C caller.

#include "dlcache/dlcache_c.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/c_api/error_channel.h"
#include "dlcache/client.h"
#include "dlcache/version.h"

struct dlc_client {
  std::unique_ptr<dlcache::Client> client;
};

struct dlc_list {
  std::string names;  // NUL-terminated, back to back
  std::vector<uint64_t> sizes;
  std::vector<int64_t> mtimes;
  std::string next_page_token;
};

struct dlc_batch {
  dlcache::Batch batch;
  std::vector<std::string> errors;  // per item, "" for OK
  // Per-item arrays (dlc_batch_arrays), built on first use in one block.
  bool arrays_ready = false;
  std::unique_ptr<unsigned char[]> array_block;
  dlc_batch_arrays arrays{};
};

namespace {

using Errors = dlcache::c_api::ErrorChannel<struct ClientCallsTag>;

// Copies C strings into a vector of std::string.
int ToPaths(const char* const* paths, size_t num_paths,
            std::vector<std::string>* out) {
  if (paths == nullptr && num_paths > 0) return Errors::NullArg("paths");
  out->reserve(num_paths);
  for (size_t i = 0; i < num_paths; ++i) {
    if (paths[i] == nullptr) {
      return Errors::Fail(DLC_INVALID_ARGUMENT,
                          absl::StrCat("paths[", i, "] is NULL"));
    }
    out->emplace_back(paths[i]);
  }
  return DLC_OK;
}

// Fills the per-item fields of item `i` into whichever arrays are given.
inline void FillOne(const dlcache::Item& it, size_t i, int32_t* code,
                    uint64_t* size, const void** data, uint64_t* file_size,
                    uint8_t* hit, uint32_t* num_chunks) {
  absl::Span<const dlcache::ChunkView> chunks = it.chunks();
  const bool ok = it.ok();
  if (code != nullptr) code[i] = static_cast<int32_t>(it.status().code());
  if (size != nullptr) {
    uint64_t n = 0;
    for (const dlcache::ChunkView& c : chunks) n += c.size;
    size[i] = ok ? n : 0;
  }
  if (data != nullptr) {
    data[i] = (ok && chunks.size() == 1) ? chunks[0].data : nullptr;
  }
  if (file_size != nullptr) file_size[i] = it.file_size();
  if (hit != nullptr) hit[i] = it.hit() ? 1 : 0;
  if (num_chunks != nullptr) {
    num_chunks[i] = static_cast<uint32_t>(chunks.size());
  }
}

template <typename T>
T* Carve(unsigned char* block, size_t* used, size_t n) {
  *used = (*used + alignof(T) - 1) / alignof(T) * alignof(T);
  T* p = reinterpret_cast<T*>(block + *used);
  *used += n * sizeof(T);
  return p;
}

// Builds batch->arrays (once). May throw std::bad_alloc (callers Guard).
void BuildArrays(dlc_batch* b) {
  if (b->arrays_ready) return;
  const size_t n = b->batch.size();
  const size_t bytes =
      n * (sizeof(uint64_t) * 2 + sizeof(void*) + sizeof(int32_t) +
           sizeof(uint32_t) + sizeof(uint8_t)) +
      64;
  b->array_block.reset(new unsigned char[bytes]);
  unsigned char* block = b->array_block.get();
  size_t used = 0;
  uint64_t* size = Carve<uint64_t>(block, &used, n);
  uint64_t* file_size = Carve<uint64_t>(block, &used, n);
  const void** data = Carve<const void*>(block, &used, n);
  int32_t* code = Carve<int32_t>(block, &used, n);
  uint32_t* num_chunks = Carve<uint32_t>(block, &used, n);
  uint8_t* hit = Carve<uint8_t>(block, &used, n);
  dlc_batch_arrays& a = b->arrays;
  a.num_items = n;
  a.total_size = 0;
  a.num_failed = 0;
  a.num_multi_chunk = 0;
  bool uniform = n > 0;
  for (size_t i = 0; i < n; ++i) {
    FillOne(b->batch[i], i, code, size, data, file_size, hit, num_chunks);
    a.total_size += size[i];
    if (code[i] != DLC_OK) {
      ++a.num_failed;
      uniform = false;
    }
    if (num_chunks[i] > 1) ++a.num_multi_chunk;
    if (size[i] != size[0]) uniform = false;
  }
  a.uniform_size = uniform ? size[0] : DLC_NO_UNIFORM_SIZE;
  a.code = code;
  a.size = size;
  a.file_size = file_size;
  a.data = data;
  a.num_chunks = num_chunks;
  a.hit = hit;
  b->arrays_ready = true;
}

// Wraps a C++ batch into a new dlc_batch.
std::unique_ptr<dlc_batch> MakeBatch(dlcache::Batch batch) {
  auto handle = std::make_unique<dlc_batch>();
  handle->batch = std::move(batch);
  handle->errors.resize(handle->batch.size());
  for (size_t i = 0; i < handle->batch.size(); ++i) {
    const absl::Status& st = handle->batch[i].status();
    if (!st.ok()) handle->errors[i] = std::string(st.message());
  }
  return handle;
}

int CheckItem(const dlc_batch* batch, size_t item) {
  if (batch == nullptr) return Errors::NullArg("batch");
  if (item >= batch->batch.size()) {
    return Errors::Fail(
        DLC_OUT_OF_RANGE,
        absl::StrCat("item ", item, " of a batch of ", batch->batch.size()));
  }
  return DLC_OK;
}

}  // namespace

extern "C" {

const char* dlc_last_error(void) { return Errors::Message().c_str(); }

const char* dlc_version(void) { return DLCACHE_VERSION_STRING; }

const char* dlc_status_name(int code) {
  switch (code) {
    case DLC_OK:
      return "OK";
    case DLC_CANCELLED:
      return "CANCELLED";
    case DLC_UNKNOWN:
      return "UNKNOWN";
    case DLC_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case DLC_DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case DLC_NOT_FOUND:
      return "NOT_FOUND";
    case DLC_ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case DLC_PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case DLC_RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case DLC_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case DLC_ABORTED:
      return "ABORTED";
    case DLC_OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case DLC_UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case DLC_INTERNAL:
      return "INTERNAL";
    case DLC_UNAVAILABLE:
      return "UNAVAILABLE";
    case DLC_DATA_LOSS:
      return "DATA_LOSS";
    case DLC_UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

int dlc_connect(const char* socket_path, const char* client_name,
                dlc_client** out) {
  dlc_options options;
  dlc_options_init(&options);
  options.socket_path = socket_path;
  options.client_name = client_name;
  return dlc_connect_with_options(&options, out);
}

// numa_node took the 4 bytes of tail padding after verify_checksums, so
// the struct kept the size programs built against the older header
// allocate: dlc_options_init from this library never writes past them.
// A later field that grows the struct needs a size-taking init instead.
static_assert(sizeof(dlc_options) == 48 &&
                  offsetof(dlc_options, numa_node) == 44,
              "dlc_options must keep its size and layout (C ABI)");

void dlc_options_init(dlc_options* options) {
  if (options == nullptr) return;
  const dlcache::ClientOptions defaults;
  options->socket_path = nullptr;
  options->client_name = nullptr;
  options->connect_timeout_s = absl::ToDoubleSeconds(defaults.connect_timeout);
  options->rpc_timeout_s = absl::ToDoubleSeconds(defaults.rpc_timeout);
  options->release_delay_s = absl::ToDoubleSeconds(defaults.release_delay);
  options->verify_checksums = defaults.verify_checksums ? 1 : 0;
  options->numa_node = defaults.numa_node;
}

int dlc_pci_numa_node(const char* pci_bus_id, int* node) {
  return Errors::Guard([&] {
    if (node == nullptr) return Errors::NullArg("node");
    *node = -1;
    if (pci_bus_id == nullptr) return Errors::NullArg("pci_bus_id");
    absl::StatusOr<int> n = dlcache::NumaNodeOfPciDevice(pci_bus_id);
    if (!n.ok()) return Errors::Fail(n.status());
    *node = *n;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_connect_with_options(const dlc_options* opts, dlc_client** out) {
  return Errors::Guard([&] {
    if (out == nullptr) return Errors::NullArg("out");
    *out = nullptr;
    if (opts == nullptr) return Errors::NullArg("options");
    // NaN fails these comparisons too.
    if (!(opts->connect_timeout_s > 0) || !(opts->rpc_timeout_s > 0) ||
        !(opts->release_delay_s >= 0)) {
      return Errors::Fail(DLC_INVALID_ARGUMENT,
                          "timeouts must be positive and release_delay_s >= 0");
    }
    dlcache::ClientOptions options;
    if (opts->socket_path != nullptr) options.socket_path = opts->socket_path;
    if (opts->client_name != nullptr) options.client_name = opts->client_name;
    options.connect_timeout = absl::Seconds(opts->connect_timeout_s);
    options.rpc_timeout = absl::Seconds(opts->rpc_timeout_s);
    options.release_delay = absl::Seconds(opts->release_delay_s);
    options.verify_checksums = opts->verify_checksums != 0;
    options.numa_node = opts->numa_node >= 0 ? opts->numa_node : -1;
    absl::StatusOr<std::unique_ptr<dlcache::Client>> client =
        dlcache::Client::Connect(options);
    if (!client.ok()) return Errors::Fail(client.status());
    auto handle = std::make_unique<dlc_client>();
    handle->client = *std::move(client);
    *out = handle.release();
    return static_cast<int>(DLC_OK);
  });
}

void dlc_close(dlc_client* client) {
  Errors::Guard([&] {
    delete client;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_get_batch(dlc_client* client, const char* dataset,
                  const char* const* paths, size_t num_paths, dlc_batch** out) {
  return Errors::Guard([&] {
    if (out == nullptr) return Errors::NullArg("out");
    *out = nullptr;
    if (client == nullptr) return Errors::NullArg("client");
    if (dataset == nullptr) return Errors::NullArg("dataset");
    std::vector<std::string> keys;
    if (int rc = ToPaths(paths, num_paths, &keys); rc != DLC_OK) return rc;
    absl::StatusOr<dlcache::Batch> batch =
        client->client->GetBatch(dataset, keys);
    if (!batch.ok()) return Errors::Fail(batch.status());
    *out = MakeBatch(*std::move(batch)).release();
    return static_cast<int>(DLC_OK);
  });
}

int dlc_read_range(dlc_client* client, const char* dataset, const char* path,
                   uint64_t offset, uint64_t length, void* dst,
                   uint64_t dst_size, uint64_t* copied) {
  return Errors::Guard([&] {
    if (copied != nullptr) *copied = 0;
    if (client == nullptr) return Errors::NullArg("client");
    if (dataset == nullptr) return Errors::NullArg("dataset");
    if (path == nullptr) return Errors::NullArg("path");
    dlcache::Client& c = *client->client;
    // The size first: the chunks to ask for, and a clear answer for a
    // range past the end (a chunk index past the file is the server's
    // INVALID_ARGUMENT, which would not name the offset).
    const std::string key(path);
    absl::StatusOr<std::vector<dlcache::FileStatus>> stat =
        c.Stat(dataset, absl::MakeConstSpan(&key, 1));
    if (!stat.ok()) return Errors::Fail(stat.status());
    if (stat->size() != 1) {
      return Errors::Fail(DLC_INTERNAL, "Stat answered no item");
    }
    if (!(*stat)[0].status.ok()) return Errors::Fail((*stat)[0].status);
    const uint64_t size = (*stat)[0].size;
    if (offset > size) {
      return Errors::Fail(
          DLC_OUT_OF_RANGE,
          absl::StrCat("offset ", offset, " is past the end of ", path, " (",
                       size, " bytes)"));
    }
    const uint64_t end =
        length == 0 || length > size - offset ? size : offset + length;
    if (end - offset > dst_size) {
      if (copied != nullptr) *copied = end - offset;
      return Errors::Fail(
          DLC_INVALID_ARGUMENT,
          absl::StrCat("dst holds ", dst_size, " bytes; the range holds ",
                       end - offset));
    }
    if (end == offset) return static_cast<int>(DLC_OK);
    if (dst == nullptr) return Errors::NullArg("dst");
    const uint64_t chunk = c.chunk_size();
    if (chunk == 0) return Errors::Fail(DLC_INTERNAL, "chunk size 0");
    dlcache::ItemRequest req;
    req.path = key;
    req.first_chunk = static_cast<uint32_t>(offset / chunk);
    req.max_chunks =
        static_cast<uint32_t>((end - 1) / chunk - offset / chunk + 1);
    absl::StatusOr<dlcache::Batch> batch =
        c.GetBatch(dataset, absl::MakeConstSpan(&req, 1));
    if (!batch.ok()) return Errors::Fail(batch.status());
    if (batch->size() != 1) {
      return Errors::Fail(DLC_INTERNAL, "GetBatch answered no item");
    }
    const dlcache::Item& item = (*batch)[0];
    if (!item.ok()) return Errors::Fail(item.status());
    uint64_t written = 0;
    char* out = static_cast<char*>(dst);
    for (const dlcache::ChunkView& v : item.chunks()) {
      const uint64_t begin = static_cast<uint64_t>(v.index) * chunk;
      const uint64_t from = std::max(begin, offset);
      const uint64_t to = std::min(begin + v.size, end);
      if (from >= to) continue;
      std::memcpy(out + (from - offset),
                  reinterpret_cast<const char*>(v.data) + (from - begin),
                  to - from);
      written += to - from;
    }
    // The file changed size between Stat and GetBatch, or chunks are
    // missing: say so rather than hand back a range with holes.
    if (written != end - offset) {
      return Errors::Fail(
          DLC_DATA_LOSS,
          absl::StrCat("read ", written, " of ", end - offset, " bytes of ",
                       path, " at offset ", offset, " (did the file change?)"));
    }
    if (copied != nullptr) *copied = written;
    return static_cast<int>(DLC_OK);
  });
}

namespace {

// dlc_get_batch_packed and dlc_get_batch_packed_at: `at` null or the plan
// position.
int GetBatchPacked(dlc_client* client, const char* dataset, const char* keys,
                   size_t keys_size, size_t num_keys,
                   const dlcache::PlanPosition* at, dlc_batch** out,
                   const dlc_batch_arrays** arrays) {
  return Errors::Guard([&] {
    if (out == nullptr) return Errors::NullArg("out");
    *out = nullptr;
    if (arrays != nullptr) *arrays = nullptr;
    if (client == nullptr) return Errors::NullArg("client");
    if (dataset == nullptr) return Errors::NullArg("dataset");
    if (keys == nullptr && keys_size > 0) return Errors::NullArg("keys");
    std::vector<std::string> paths;
    paths.reserve(num_keys);
    const char* p = keys;
    const char* const end = keys + keys_size;
    while (p < end) {
      const void* nul = std::memchr(p, '\0', static_cast<size_t>(end - p));
      if (nul == nullptr) {
        return Errors::Fail(DLC_INVALID_ARGUMENT,
                            "packed keys: the last key is not NUL-terminated");
      }
      const char* stop = static_cast<const char*>(nul);
      if (paths.size() == num_keys) break;  // reported below
      paths.emplace_back(p, static_cast<size_t>(stop - p));
      p = stop + 1;
    }
    if (paths.size() != num_keys || p != end) {
      return Errors::Fail(DLC_INVALID_ARGUMENT,
                          absl::StrCat("packed keys: expected ", num_keys,
                                       " NUL-terminated keys in ", keys_size,
                                       " bytes (a key may not contain NUL)"));
    }
    absl::StatusOr<dlcache::Batch> batch =
        at != nullptr ? client->client->GetBatch(dataset, paths, *at)
                      : client->client->GetBatch(dataset, paths);
    if (!batch.ok()) return Errors::Fail(batch.status());
    std::unique_ptr<dlc_batch> handle = MakeBatch(*std::move(batch));
    if (arrays != nullptr) {
      BuildArrays(handle.get());
      *arrays = &handle->arrays;
    }
    *out = handle.release();
    return static_cast<int>(DLC_OK);
  });
}

}  // namespace

int dlc_get_batch_packed(dlc_client* client, const char* dataset,
                         const char* keys, size_t keys_size, size_t num_keys,
                         dlc_batch** out, const dlc_batch_arrays** arrays) {
  return GetBatchPacked(client, dataset, keys, keys_size, num_keys, nullptr,
                        out, arrays);
}

int dlc_get_batch_packed_at(dlc_client* client, const char* dataset,
                            const char* keys, size_t keys_size, size_t num_keys,
                            uint64_t plan_epoch, uint64_t plan_offset,
                            dlc_batch** out, const dlc_batch_arrays** arrays) {
  const dlcache::PlanPosition at{plan_epoch, plan_offset};
  return GetBatchPacked(client, dataset, keys, keys_size, num_keys, &at, out,
                        arrays);
}

int dlc_batch_arrays_get(dlc_batch* batch, const dlc_batch_arrays** out) {
  return Errors::Guard([&] {
    if (out == nullptr) return Errors::NullArg("out");
    *out = nullptr;
    if (batch == nullptr) return Errors::NullArg("batch");
    BuildArrays(batch);
    *out = &batch->arrays;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_batch_fill_arrays(const dlc_batch* batch, size_t first, size_t count,
                          int32_t* code, uint64_t* size, const void** data,
                          uint64_t* file_size, uint8_t* hit,
                          uint32_t* num_chunks) {
  return Errors::Guard([&] {
    if (batch == nullptr) return Errors::NullArg("batch");
    const size_t n = batch->batch.size();
    if (first > n || count > n - first) {
      return Errors::Fail(DLC_OUT_OF_RANGE,
                          absl::StrCat("items [", first, ", ", first, "+",
                                       count, ") of a batch of ", n));
    }
    for (size_t i = 0; i < count; ++i) {
      FillOne(batch->batch[first + i], i, code, size, data, file_size, hit,
              num_chunks);
    }
    return static_cast<int>(DLC_OK);
  });
}

int dlc_batch_copy(const dlc_batch* batch, void* dst, uint64_t dst_size,
                   uint64_t stride, uint64_t* offsets) {
  return Errors::Guard([&] {
    if (batch == nullptr) return Errors::NullArg("batch");
    const size_t n = batch->batch.size();
    // Sizes first: check everything before writing a byte.
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      const dlcache::Item& it = batch->batch[i];
      const uint64_t sz = it.ok() ? it.size() : 0;
      if (stride > 0 && sz > stride) {
        return Errors::Fail(
            DLC_INVALID_ARGUMENT,
            absl::StrCat("item ", i, " has ", sz,
                         " bytes, more than the stride of ", stride));
      }
      total += sz;
    }
    uint64_t need = total;
    if (stride > 0) {
      if (n > 0 && stride > UINT64_MAX / n) {
        return Errors::Fail(DLC_INVALID_ARGUMENT,
                            "num_items * stride overflows");
      }
      need = stride * n;
    }
    if (dst_size < need) {
      return Errors::Fail(
          DLC_INVALID_ARGUMENT,
          absl::StrCat("dst has ", dst_size, " bytes, ", need, " needed"));
    }
    if (dst == nullptr && need > 0) return Errors::NullArg("dst");
    auto* out = static_cast<unsigned char*>(dst);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; ++i) {
      const dlcache::Item& it = batch->batch[i];
      if (offsets != nullptr) offsets[i] = pos;
      uint64_t written = 0;
      if (it.ok()) {
        for (const dlcache::ChunkView& c : it.chunks()) {
          if (c.size > 0) std::memcpy(out + pos + written, c.data, c.size);
          written += c.size;
        }
      }
      if (stride > 0) {
        if (written < stride) {
          std::memset(out + pos + written, 0,
                      static_cast<size_t>(stride - written));
        }
        pos += stride;
      } else {
        pos += written;
      }
    }
    if (offsets != nullptr) offsets[n] = pos;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_prefetch(dlc_client* client, const char* dataset,
                 const char* const* paths, size_t num_paths) {
  return Errors::Guard([&] {
    if (client == nullptr) return Errors::NullArg("client");
    if (dataset == nullptr) return Errors::NullArg("dataset");
    std::vector<std::string> keys;
    if (int rc = ToPaths(paths, num_paths, &keys); rc != DLC_OK) return rc;
    absl::Status st = client->client->Prefetch(dataset, keys);
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_report_stall(dlc_client* client, const char* dataset, const char* plan,
                     double wait_seconds, double step_seconds, uint64_t batches,
                     int final) {
  return Errors::Guard([&] {
    if (client == nullptr) return Errors::NullArg("client");
    if (dataset == nullptr) return Errors::NullArg("dataset");
    // Past a day per report is no loop's; also keeps the conversion to
    // nanoseconds exact.
    constexpr double kMaxSeconds = 86400;
    if (!(wait_seconds >= 0 && wait_seconds <= kMaxSeconds) ||
        !(step_seconds >= 0 && step_seconds <= kMaxSeconds)) {
      return Errors::Fail(absl::InvalidArgumentError(
          "dlc_report_stall: times must be within [0, 86400] seconds"));
    }
    absl::Status st = client->client->ReportStall(
        dataset, plan == nullptr ? "" : plan, absl::Seconds(wait_seconds),
        absl::Seconds(step_seconds), batches, final != 0);
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_register_plan(dlc_client* client, const char* dataset, const char* plan,
                      uint64_t epoch, uint64_t offset, const char* const* paths,
                      size_t num_paths, int reset) {
  return Errors::Guard([&] {
    if (client == nullptr) return Errors::NullArg("client");
    if (dataset == nullptr) return Errors::NullArg("dataset");
    if (plan == nullptr) return Errors::NullArg("plan");
    std::vector<std::string> keys;
    if (int rc = ToPaths(paths, num_paths, &keys); rc != DLC_OK) return rc;
    absl::Status st = client->client->RegisterPlan(dataset, plan, epoch, keys,
                                                   offset, reset != 0);
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_register_job_plan(dlc_client* client, const char* dataset,
                          const char* plan, uint32_t world_size, uint32_t rank,
                          uint64_t epoch, uint64_t offset,
                          const char* const* paths, size_t num_paths,
                          int* has_epoch, uint64_t* held_epoch,
                          uint64_t* next_offset) {
  return Errors::Guard([&] {
    if (client == nullptr) return Errors::NullArg("client");
    if (dataset == nullptr) return Errors::NullArg("dataset");
    if (plan == nullptr) return Errors::NullArg("plan");
    std::vector<std::string> keys;
    if (int rc = ToPaths(paths, num_paths, &keys); rc != DLC_OK) return rc;
    absl::StatusOr<dlcache::JobPlanState> st = client->client->RegisterJobPlan(
        dataset, plan, dlcache::JobPlanRank{world_size, rank}, epoch, keys,
        offset);
    if (!st.ok()) return Errors::Fail(st.status());
    if (has_epoch != nullptr) *has_epoch = st->has_epoch ? 1 : 0;
    if (held_epoch != nullptr) *held_epoch = st->epoch;
    if (next_offset != nullptr) *next_offset = st->next_offset;
    return static_cast<int>(DLC_OK);
  });
}

size_t dlc_batch_size(const dlc_batch* batch) {
  return batch == nullptr ? 0 : batch->batch.size();
}

int dlc_batch_item(const dlc_batch* batch, size_t item, dlc_item_info* out) {
  return Errors::Guard([&] {
    if (out == nullptr) return Errors::NullArg("out");
    if (int rc = CheckItem(batch, item); rc != DLC_OK) return rc;
    const dlcache::Item& it = batch->batch[item];
    out->code = static_cast<int>(it.status().code());
    out->file_size = it.file_size();
    out->size = it.size();
    out->num_chunks = static_cast<uint32_t>(it.chunks().size());
    out->chunk_count = it.chunk_count();
    out->hit = it.hit() ? 1 : 0;
    return static_cast<int>(DLC_OK);
  });
}

const char* dlc_batch_item_error(const dlc_batch* batch, size_t item) {
  if (batch == nullptr || item >= batch->errors.size()) return "";
  return batch->errors[item].c_str();
}

int dlc_batch_chunk(const dlc_batch* batch, size_t item, uint32_t chunk,
                    dlc_chunk* out) {
  return Errors::Guard([&] {
    if (out == nullptr) return Errors::NullArg("out");
    if (int rc = CheckItem(batch, item); rc != DLC_OK) return rc;
    absl::Span<const dlcache::ChunkView> chunks = batch->batch[item].chunks();
    if (chunk >= chunks.size()) {
      return Errors::Fail(DLC_OUT_OF_RANGE,
                          absl::StrCat("chunk ", chunk, " of an item with ",
                                       chunks.size(), " chunks"));
    }
    const dlcache::ChunkView& c = chunks[chunk];
    out->data = c.data;
    out->size = c.size;
    out->index = c.index;
    out->segment = c.segment;
    out->offset = c.offset;
    out->checksum = c.checksum;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_batch_copy_item(const dlc_batch* batch, size_t item, void* dst,
                        uint64_t dst_size) {
  return Errors::Guard([&] {
    if (int rc = CheckItem(batch, item); rc != DLC_OK) return rc;
    const dlcache::Item& it = batch->batch[item];
    if (dst == nullptr && it.size() > 0) return Errors::NullArg("dst");
    absl::Status st = it.CopyTo(absl::Span<std::byte>(
        static_cast<std::byte*>(dst), static_cast<size_t>(dst_size)));
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

void dlc_batch_free(dlc_batch* batch) {
  Errors::Guard([&] {
    delete batch;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_segments(const dlc_client* client, dlc_segment* out, size_t max,
                 size_t* count) {
  return Errors::Guard([&] {
    if (client == nullptr) return Errors::NullArg("client");
    if (count == nullptr) return Errors::NullArg("count");
    if (out == nullptr && max > 0) return Errors::NullArg("out");
    std::vector<dlcache::MappedSegment> segs = client->client->segments();
    *count = segs.size();
    for (size_t i = 0; i < segs.size() && i < max; ++i) {
      out[i].id = segs[i].id;
      out[i].base = segs[i].base;
      out[i].size = segs[i].size;
    }
    return static_cast<int>(DLC_OK);
  });
}

int dlc_mapping_generation(const dlc_client* client, uint64_t* generation) {
  return Errors::Guard([&] {
    if (client == nullptr) return Errors::NullArg("client");
    if (generation == nullptr) return Errors::NullArg("generation");
    *generation = client->client->mapping_generation();
    return static_cast<int>(DLC_OK);
  });
}

int dlc_sessions_opened(const dlc_client* client, uint64_t* sessions) {
  return Errors::Guard([&] {
    if (client == nullptr) return Errors::NullArg("client");
    if (sessions == nullptr) return Errors::NullArg("sessions");
    *sessions = client->client->sessions_opened();
    return static_cast<int>(DLC_OK);
  });
}

int dlc_list_page(dlc_client* client, const char* dataset, const char* prefix,
                  const char* page_token, uint32_t max_entries, int refresh,
                  dlc_list** out) {
  return Errors::Guard([&] {
    if (out == nullptr) return Errors::NullArg("out");
    *out = nullptr;
    if (client == nullptr) return Errors::NullArg("client");
    if (dataset == nullptr) return Errors::NullArg("dataset");
    absl::StatusOr<dlcache::FileListPage> page = client->client->ListPage(
        dataset, prefix == nullptr ? "" : prefix,
        page_token == nullptr ? "" : page_token, max_entries, refresh != 0);
    if (!page.ok()) return Errors::Fail(page.status());
    auto list = std::make_unique<dlc_list>();
    size_t bytes = 0;
    for (const dlcache::FileEntry& e : page->entries)
      bytes += e.name.size() + 1;
    list->names.reserve(bytes);
    list->sizes.reserve(page->entries.size());
    list->mtimes.reserve(page->entries.size());
    for (const dlcache::FileEntry& e : page->entries) {
      list->names.append(e.name);
      list->names.push_back('\0');
      list->sizes.push_back(e.size);
      list->mtimes.push_back(e.mtime_ns);
    }
    list->next_page_token = std::move(page->next_page_token);
    *out = list.release();
    return static_cast<int>(DLC_OK);
  });
}

int dlc_list_arrays(const dlc_list* list, const char** names,
                    size_t* names_bytes, const uint64_t** sizes,
                    const int64_t** mtimes_ns, size_t* count) {
  return Errors::Guard([&] {
    if (list == nullptr) return Errors::NullArg("list");
    if (names != nullptr) *names = list->names.data();
    if (names_bytes != nullptr) *names_bytes = list->names.size();
    if (sizes != nullptr) *sizes = list->sizes.data();
    if (mtimes_ns != nullptr) *mtimes_ns = list->mtimes.data();
    if (count != nullptr) *count = list->sizes.size();
    return static_cast<int>(DLC_OK);
  });
}

const char* dlc_list_next_page_token(const dlc_list* list) {
  return list == nullptr ? "" : list->next_page_token.c_str();
}

void dlc_list_free(dlc_list* list) { delete list; }

}  // extern "C"
