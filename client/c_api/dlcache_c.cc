// C ABI over dlcache::Client. Every entry point catches everything: no C++
// exception (std::bad_alloc included) may unwind into a C caller.

#include "dlcache/dlcache_c.h"

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "dlcache/client.h"

struct dlc_client {
  std::unique_ptr<dlcache::Client> client;
};

struct dlc_batch {
  dlcache::Batch batch;
  std::vector<std::string> errors;  // per item, "" for OK
};

namespace {

thread_local std::string last_error;

int Fail(int code, absl::string_view message) {
  last_error.assign(message.data(), message.size());
  return code;
}

int Fail(const absl::Status& st) {
  return Fail(static_cast<int>(st.code()), st.message());
}

// Runs `body` (returning an int status), turning exceptions into
// DLC_INTERNAL / DLC_RESOURCE_EXHAUSTED.
template <typename Body>
int Guard(Body body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(DLC_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Fail(DLC_INTERNAL, absl::StrCat("internal error: ", e.what()));
  } catch (...) {
    return Fail(DLC_INTERNAL, "internal error: unknown exception");
  }
}

int NullArg(const char* name) {
  return Fail(DLC_INVALID_ARGUMENT, absl::StrCat(name, " is NULL"));
}

// Copies C strings into a vector of std::string.
int ToPaths(const char* const* paths, size_t num_paths,
            std::vector<std::string>* out) {
  if (paths == nullptr && num_paths > 0) return NullArg("paths");
  out->reserve(num_paths);
  for (size_t i = 0; i < num_paths; ++i) {
    if (paths[i] == nullptr) {
      return Fail(DLC_INVALID_ARGUMENT, absl::StrCat("paths[", i, "] is NULL"));
    }
    out->emplace_back(paths[i]);
  }
  return DLC_OK;
}

int CheckItem(const dlc_batch* batch, size_t item) {
  if (batch == nullptr) return NullArg("batch");
  if (item >= batch->batch.size()) {
    return Fail(DLC_OUT_OF_RANGE,
                absl::StrCat("item ", item, " of a batch of ",
                             batch->batch.size()));
  }
  return DLC_OK;
}

}  // namespace

extern "C" {

const char* dlc_last_error(void) { return last_error.c_str(); }

const char* dlc_status_name(int code) {
  switch (code) {
    case DLC_OK: return "OK";
    case DLC_CANCELLED: return "CANCELLED";
    case DLC_UNKNOWN: return "UNKNOWN";
    case DLC_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case DLC_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case DLC_NOT_FOUND: return "NOT_FOUND";
    case DLC_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case DLC_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case DLC_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case DLC_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case DLC_ABORTED: return "ABORTED";
    case DLC_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case DLC_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case DLC_INTERNAL: return "INTERNAL";
    case DLC_UNAVAILABLE: return "UNAVAILABLE";
    case DLC_DATA_LOSS: return "DATA_LOSS";
    case DLC_UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
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

void dlc_options_init(dlc_options* options) {
  if (options == nullptr) return;
  const dlcache::ClientOptions defaults;
  options->socket_path = nullptr;
  options->client_name = nullptr;
  options->connect_timeout_s =
      absl::ToDoubleSeconds(defaults.connect_timeout);
  options->rpc_timeout_s = absl::ToDoubleSeconds(defaults.rpc_timeout);
  options->release_delay_s = absl::ToDoubleSeconds(defaults.release_delay);
  options->verify_checksums = defaults.verify_checksums ? 1 : 0;
}

int dlc_connect_with_options(const dlc_options* opts, dlc_client** out) {
  return Guard([&] {
    if (out == nullptr) return NullArg("out");
    *out = nullptr;
    if (opts == nullptr) return NullArg("options");
    // NaN fails these comparisons too.
    if (!(opts->connect_timeout_s > 0) || !(opts->rpc_timeout_s > 0) ||
        !(opts->release_delay_s >= 0)) {
      return Fail(DLC_INVALID_ARGUMENT,
                  "timeouts must be positive and release_delay_s >= 0");
    }
    dlcache::ClientOptions options;
    if (opts->socket_path != nullptr) options.socket_path = opts->socket_path;
    if (opts->client_name != nullptr) options.client_name = opts->client_name;
    options.connect_timeout = absl::Seconds(opts->connect_timeout_s);
    options.rpc_timeout = absl::Seconds(opts->rpc_timeout_s);
    options.release_delay = absl::Seconds(opts->release_delay_s);
    options.verify_checksums = opts->verify_checksums != 0;
    absl::StatusOr<std::unique_ptr<dlcache::Client>> client =
        dlcache::Client::Connect(options);
    if (!client.ok()) return Fail(client.status());
    auto handle = std::make_unique<dlc_client>();
    handle->client = *std::move(client);
    *out = handle.release();
    return static_cast<int>(DLC_OK);
  });
}

void dlc_close(dlc_client* client) {
  Guard([&] {
    delete client;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_get_batch(dlc_client* client, const char* dataset,
                  const char* const* paths, size_t num_paths,
                  dlc_batch** out) {
  return Guard([&] {
    if (out == nullptr) return NullArg("out");
    *out = nullptr;
    if (client == nullptr) return NullArg("client");
    if (dataset == nullptr) return NullArg("dataset");
    std::vector<std::string> keys;
    if (int rc = ToPaths(paths, num_paths, &keys); rc != DLC_OK) return rc;
    absl::StatusOr<dlcache::Batch> batch =
        client->client->GetBatch(dataset, keys);
    if (!batch.ok()) return Fail(batch.status());
    auto handle = std::make_unique<dlc_batch>();
    handle->batch = *std::move(batch);
    handle->errors.resize(handle->batch.size());
    for (size_t i = 0; i < handle->batch.size(); ++i) {
      const absl::Status& st = handle->batch[i].status();
      if (!st.ok()) handle->errors[i] = std::string(st.message());
    }
    *out = handle.release();
    return static_cast<int>(DLC_OK);
  });
}

int dlc_prefetch(dlc_client* client, const char* dataset,
                 const char* const* paths, size_t num_paths) {
  return Guard([&] {
    if (client == nullptr) return NullArg("client");
    if (dataset == nullptr) return NullArg("dataset");
    std::vector<std::string> keys;
    if (int rc = ToPaths(paths, num_paths, &keys); rc != DLC_OK) return rc;
    absl::Status st = client->client->Prefetch(dataset, keys);
    if (!st.ok()) return Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

size_t dlc_batch_size(const dlc_batch* batch) {
  return batch == nullptr ? 0 : batch->batch.size();
}

int dlc_batch_item(const dlc_batch* batch, size_t item, dlc_item_info* out) {
  return Guard([&] {
    if (out == nullptr) return NullArg("out");
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
  return Guard([&] {
    if (out == nullptr) return NullArg("out");
    if (int rc = CheckItem(batch, item); rc != DLC_OK) return rc;
    absl::Span<const dlcache::ChunkView> chunks = batch->batch[item].chunks();
    if (chunk >= chunks.size()) {
      return Fail(DLC_OUT_OF_RANGE,
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
  return Guard([&] {
    if (int rc = CheckItem(batch, item); rc != DLC_OK) return rc;
    const dlcache::Item& it = batch->batch[item];
    if (dst == nullptr && it.size() > 0) return NullArg("dst");
    absl::Status st = it.CopyTo(absl::Span<std::byte>(
        static_cast<std::byte*>(dst), static_cast<size_t>(dst_size)));
    if (!st.ok()) return Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

void dlc_batch_free(dlc_batch* batch) {
  Guard([&] {
    delete batch;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_segments(const dlc_client* client, dlc_segment* out, size_t max,
                 size_t* count) {
  return Guard([&] {
    if (client == nullptr) return NullArg("client");
    if (count == nullptr) return NullArg("count");
    if (out == nullptr && max > 0) return NullArg("out");
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
  return Guard([&] {
    if (client == nullptr) return NullArg("client");
    if (generation == nullptr) return NullArg("generation");
    *generation = client->client->mapping_generation();
    return static_cast<int>(DLC_OK);
  });
}

}  // extern "C"
