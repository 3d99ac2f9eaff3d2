#ifndef DLCACHE_CLIENT_INCLUDE_DLCACHE_DLCACHE_C_H_
#define DLCACHE_CLIENT_INCLUDE_DLCACHE_DLCACHE_C_H_

/* C ABI of the dlcache client, for bindings (Python ctypes, Rust, Go ...).
 *
 * Every function that can fail returns an int status: 0 (DLC_OK) or an
 * absl::StatusCode number (the DLC_* constants below). The message of the
 * last failure on the calling thread is dlc_last_error(). No function throws
 * or aborts on bad input; NULL arguments give DLC_INVALID_ARGUMENT.
 *
 * Ownership: dlc_connect returns a client the caller frees with dlc_close;
 * dlc_get_batch (and dlc_get_batch_packed) returns a batch the caller frees
 * with dlc_batch_free, which releases its leases. Per-batch arrays
 * (dlc_batch_arrays) and whole-batch copies (dlc_batch_copy) avoid per-item
 * calls. Chunk pointers are valid until the batch is freed.
 * A batch may outlive its client. A client may be used from several threads;
 * a batch from one thread at a time.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  DLC_OK = 0,
  DLC_CANCELLED = 1,
  DLC_UNKNOWN = 2,
  DLC_INVALID_ARGUMENT = 3,
  DLC_DEADLINE_EXCEEDED = 4,
  DLC_NOT_FOUND = 5,
  DLC_ALREADY_EXISTS = 6,
  DLC_PERMISSION_DENIED = 7,
  DLC_RESOURCE_EXHAUSTED = 8,
  DLC_FAILED_PRECONDITION = 9,
  DLC_ABORTED = 10,
  DLC_OUT_OF_RANGE = 11,
  DLC_UNIMPLEMENTED = 12,
  DLC_INTERNAL = 13,
  DLC_UNAVAILABLE = 14,
  DLC_DATA_LOSS = 15,
  DLC_UNAUTHENTICATED = 16,
};

typedef struct dlc_client dlc_client;
typedef struct dlc_batch dlc_batch;

typedef struct {
  int code;             /* the item's status */
  uint64_t file_size;   /* size of the whole file */
  uint64_t size;        /* bytes in the returned chunks */
  uint32_t num_chunks;  /* chunks returned */
  uint32_t chunk_count; /* chunks in the whole file */
  int hit;              /* 1 if served from memory without a fill */
} dlc_item_info;

typedef struct {
  const void* data; /* read-only */
  uint64_t size;
  uint32_t index; /* chunk index within the file */
  uint32_t segment;
  uint64_t offset;
  uint64_t checksum; /* XXH3-64 */
} dlc_chunk;

typedef struct {
  uint32_t id;
  const void* base; /* read-only mapping */
  uint64_t size;
} dlc_segment;

/* Message of the last failing call on this thread ("" if none). The pointer
 * is valid until the next dlc_* call on this thread. */
const char* dlc_last_error(void);
/* "OK", "NOT_FOUND", ...; never NULL. */
const char* dlc_status_name(int code);
/* The library's version, "MAJOR.MINOR.PATCH" (DLCACHE_VERSION_STRING of
 * <dlcache/version.h> when it was built); static, never NULL. */
const char* dlc_version(void);

/* socket_path NULL = the default: $DLCACHE_SOCKET when set, else
 * /run/dlcache/dlcached.sock. Waits up to 10 s for a server that is still
 * starting (its socket refuses); DLC_UNAVAILABLE after that, and at once
 * when the socket file does not exist. */
int dlc_connect(const char* socket_path, const char* client_name,
                dlc_client** out);

/* Connection options; fill with dlc_options_init() first, then change what
 * you need (never initialise the struct yourself). Its size (48 bytes on
 * LP64) is part of the ABI: numa_node went into what was tail padding, and
 * a later field that grows the struct will come with its own init call. */
typedef struct {
  const char* socket_path;  /* NULL = the default ($DLCACHE_SOCKET) */
  const char* client_name;  /* NULL = "client" */
  double connect_timeout_s; /* default 10 */
  double rpc_timeout_s;     /* default 60 */
  double release_delay_s;   /* default 0.005 */
  int verify_checksums;     /* 1 = check XXH3 of every chunk; default 0 */
  /* NUMA node of this process's GPU (dlc_pci_numa_node), sent when the
   * session opens so that dlcached puts the chunks this client fills on
   * that node's memory (docs/numa.md); -1 = no preference (default). */
  int numa_node;
} dlc_options;

void dlc_options_init(dlc_options* options);
/* The NUMA node of PCI device `pci_bus_id` (a GPU's bus id as
 * cudaDeviceGetPCIBusId or NVML give it, e.g. "0000:3B:00.0") from
 * /sys/bus/pci/devices/<addr>/numa_node, in *node: -1 when the kernel does
 * not know. DLC_INVALID_ARGUMENT for a malformed id, DLC_NOT_FOUND when
 * there is no such device. */
int dlc_pci_numa_node(const char* pci_bus_id, int* node);
/* Like dlc_connect; non-positive timeouts give DLC_INVALID_ARGUMENT. */
int dlc_connect_with_options(const dlc_options* options, dlc_client** out);
void dlc_close(dlc_client* client);

int dlc_get_batch(dlc_client* client, const char* dataset,
                  const char* const* paths, size_t num_paths, dlc_batch** out);
/* Copies bytes [offset, offset + length) of one file into dst (length 0 =
 * to the end of the file), reading only the chunks that cover them: files
 * of any size, past 4 GiB included, and parts of large files. *copied (may
 * be NULL) gets the bytes written, fewer than length where the file ends
 * first. DLC_INVALID_ARGUMENT when dst_size is smaller than what the
 * range holds (nothing written; *copied then gets the range's size, so
 * dst_size 0 asks for it), DLC_OUT_OF_RANGE when offset is past the
 * end of the file (offset == size copies nothing and is OK), else the
 * item's code (DLC_NOT_FOUND, DLC_DATA_LOSS...) with its message in
 * dlc_last_error. Holds no lease after it returns. */
int dlc_read_range(dlc_client* client, const char* dataset, const char* path,
                   uint64_t offset, uint64_t length, void* dst,
                   uint64_t dst_size, uint64_t* copied);
int dlc_prefetch(dlc_client* client, const char* dataset,
                 const char* const* paths, size_t num_paths);
/* The stall a loader measured (issue 34, dlcache::Client::ReportStall):
 * since its last report the training loop waited wait_seconds inside
 * next() for batches and spent step_seconds between them (its own work),
 * over `batches` batches, reading `dataset` as epoch plan `plan` (NULL or
 * "" = no plan). Nothing is answered; what cannot be sent now (another
 * thread is writing) goes with the next report or batch, or at
 * dlc_close. final != 0 (a pass's last report): waits for that writer
 * instead. DLC_INVALID_ARGUMENT for negative or non-finite times, a bad
 * dataset or a plan name over 128 bytes. */
int dlc_report_stall(dlc_client* client, const char* dataset, const char* plan,
                     double wait_seconds, double step_seconds, uint64_t batches,
                     int final);
/* Epoch plans (issue 14, dlcache::Client::RegisterPlan): keys
 * [offset, offset + num_paths) of epoch `epoch`'s read order, added to the
 * plan named `plan` shared by every session that registers or attaches to
 * it (num_paths 0: attach only). reset != 0 starts the plan afresh.
 * DLC_RESOURCE_EXHAUSTED over the server's plan limits, DLC_UNIMPLEMENTED
 * when the server has plans off. */
int dlc_register_plan(dlc_client* client, const char* dataset, const char* plan,
                      uint64_t epoch, uint64_t offset, const char* const* paths,
                      size_t num_paths, int reset);
/* One plan for the ranks of a job (dlcache::Client::RegisterJobPlan):
 * paths are indices [offset, offset + num_paths) of the job's whole epoch
 * order; this session reads as `rank` of `world_size`. Only what the plan
 * lacks is sent. On success *has_epoch, *held_epoch and *next_offset (each
 * may be NULL) tell what the plan holds. DLC_FAILED_PRECONDITION when the
 * plan exists with another world size. */
int dlc_register_job_plan(dlc_client* client, const char* dataset,
                          const char* plan, uint32_t world_size, uint32_t rank,
                          uint64_t epoch, uint64_t offset,
                          const char* const* paths, size_t num_paths,
                          int* has_epoch, uint64_t* held_epoch,
                          uint64_t* next_offset);

size_t dlc_batch_size(const dlc_batch* batch);
int dlc_batch_item(const dlc_batch* batch, size_t item, dlc_item_info* out);
/* Error message of an item ("" for OK items); valid until the batch is
 * freed. */
const char* dlc_batch_item_error(const dlc_batch* batch, size_t item);
int dlc_batch_chunk(const dlc_batch* batch, size_t item, uint32_t chunk,
                    dlc_chunk* out);
/* Copies the item's chunks back to back; DLC_INVALID_ARGUMENT if dst_size
 * is smaller than the item's size. */
int dlc_batch_copy_item(const dlc_batch* batch, size_t item, void* dst,
                        uint64_t dst_size);
void dlc_batch_free(dlc_batch* batch);

/* ---- Whole-batch calls (one C call per batch, no per-item calls) ---- */

/* Per-item arrays of a batch, num_items entries each, owned by the batch
 * and valid until dlc_batch_free. For item i:
 *   code[i]       its status (DLC_OK or the per-item error);
 *   size[i]       bytes returned (0 for failed items);
 *   file_size[i]  size of the whole file;
 *   data[i]       its bytes, read-only, when it is OK and has exactly one
 *                 chunk; NULL for failed items, empty files and multi-chunk
 *                 items (num_chunks[i] > 1: read those with dlc_batch_chunk
 *                 or copy them with dlc_batch_copy_item / dlc_batch_copy);
 *   num_chunks[i] chunks returned;
 *   hit[i]        1 if served from memory without a fill.
 * Summary: total_size = sum of size[]; uniform_size = the size every item
 * has when all items are OK and of equal size (and num_items > 0), else
 * DLC_NO_UNIFORM_SIZE; num_failed and num_multi_chunk count items. */
#define DLC_NO_UNIFORM_SIZE UINT64_MAX
typedef struct {
  size_t num_items;
  const int32_t* code;
  const uint64_t* size;
  const uint64_t* file_size;
  const void* const* data;
  const uint32_t* num_chunks;
  const uint8_t* hit;
  uint64_t total_size;
  uint64_t uniform_size;
  size_t num_failed;
  size_t num_multi_chunk;
} dlc_batch_arrays;

/* Like dlc_get_batch, but the keys are packed: num_keys NUL-terminated
 * strings back to back in keys[0 .. keys_size) (keys_size counts the
 * terminators; a key cannot contain NUL). If arrays is not NULL it receives
 * the batch's per-item arrays (as dlc_batch_arrays), filled in the same
 * call. DLC_INVALID_ARGUMENT if keys does not hold exactly num_keys
 * terminated strings. */
int dlc_get_batch_packed(dlc_client* client, const char* dataset,
                         const char* keys, size_t keys_size, size_t num_keys,
                         dlc_batch** out, const dlc_batch_arrays** arrays);
/* The same for keys [plan_offset, plan_offset + num_keys) of epoch
 * plan_epoch of the order this session registered as its plan
 * (dlc_register_plan; dlcache::Client::GetBatch with a PlanPosition): the
 * server counts the batch's progress by position, not key by key. In a job
 * plan (dlc_register_job_plan) the offset counts this rank's reads (read j
 * is index rank + j * world_size of the job's order). A server that
 * predates it gets a plain request. */
int dlc_get_batch_packed_at(dlc_client* client, const char* dataset,
                            const char* keys, size_t keys_size, size_t num_keys,
                            uint64_t plan_epoch, uint64_t plan_offset,
                            dlc_batch** out, const dlc_batch_arrays** arrays);

/* The batch's per-item arrays (computed on the first call, then cached;
 * valid until dlc_batch_free). */
int dlc_batch_arrays_get(dlc_batch* batch, const dlc_batch_arrays** out);

/* Fills caller-provided arrays for items [first, first + count); any array
 * pointer may be NULL (not filled). Same meaning as dlc_batch_arrays.
 * DLC_OUT_OF_RANGE if the range exceeds the batch. */
int dlc_batch_fill_arrays(const dlc_batch* batch, size_t first, size_t count,
                          int32_t* code, uint64_t* size, const void** data,
                          uint64_t* file_size, uint8_t* hit,
                          uint32_t* num_chunks);

/* Copies every item's bytes (all chunks, multi-chunk items included) into
 * one caller buffer, in item order:
 *   stride == 0: back to back (variable-size samples): item i lands at
 *     offsets[i], offsets[num_items] = the total; needs dst_size >= total.
 *   stride > 0: item i at i * stride (fixed-size slots); the rest of a
 *     slot after a shorter item is zero-filled; offsets[i] = i * stride,
 *     offsets[num_items] = num_items * stride; needs dst_size >=
 *     num_items * stride, and DLC_INVALID_ARGUMENT if an item is larger
 *     than stride.
 * Failed items take 0 bytes (their slot is zeroed); check the codes.
 * offsets (num_items + 1 entries) may be NULL. dst may be NULL when no
 * byte is needed. Nothing is written on failure. */
int dlc_batch_copy(const dlc_batch* batch, void* dst, uint64_t dst_size,
                   uint64_t stride, uint64_t* offsets);

/* Mapped segments, for GPU registration. Fills up to max entries and stores
 * the total count in *count. They change when the client reconnected to a
 * restarted dlcached that has new segments; then the mapping generation
 * changes too (see dlc_mapping_generation). */
int dlc_segments(const dlc_client* client, dlc_segment* out, size_t max,
                 size_t* count);

/* The client's mapping generation: 1 after connecting, +1 each time a
 * reconnect (the client reconnects by itself after a dlcached restart) had
 * to map new segments. Compare it with the value segments were registered
 * at and register dlc_segments() again when it changed. Batches returned
 * before keep reading their old mapping. */
int dlc_mapping_generation(const dlc_client* client, uint64_t* generation);

/* Sessions the client opened so far: 1 after connecting, +1 per reconnect
 * (dlcache::Client::sessions_opened). What a session registered (epoch
 * plans) ends with it: a loader that sees this change registers again.
 * 0 in a fork()ed child. */
int dlc_sessions_opened(const dlc_client* client, uint64_t* sessions);

/* ---- Listing through the cache (issue 30; docs/listing.md) ---- */

/* One page of a dataset's listing: owns its arrays. */
typedef struct dlc_list dlc_list;

/* Up to max_entries (0 = the server's default) of the dataset's files
 * whose names come after page_token (NULL or "" = the first page), under
 * prefix (NULL or "" = all; else a directory or a file), sorted by name.
 * refresh != 0: the server lists its source again first (a first page
 * only). Pass dlc_list_next_page_token() for the next page; "" after the
 * last. DLC_PERMISSION_DENIED for a caller who may not read the dataset,
 * DLC_NOT_FOUND for an unknown dataset, DLC_UNIMPLEMENTED from a server
 * that predates listing. Blocks. Free with dlc_list_free. */
int dlc_list_page(dlc_client* client, const char* dataset, const char* prefix,
                  const char* page_token, uint32_t max_entries, int refresh,
                  dlc_list** out);
/* The page's entries as arrays valid until dlc_list_free: *names holds
 * *count NUL-terminated names back to back (*names_bytes bytes in all,
 * NULs included), sizes[i] and mtimes_ns[i] belong to name i. Any output
 * may be NULL. */
int dlc_list_arrays(const dlc_list* list, const char** names,
                    size_t* names_bytes, const uint64_t** sizes,
                    const int64_t** mtimes_ns, size_t* count);
/* The token of the next page ("" = this was the last); never NULL. */
const char* dlc_list_next_page_token(const dlc_list* list);
void dlc_list_free(dlc_list* list);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLCACHE_CLIENT_INCLUDE_DLCACHE_DLCACHE_C_H_ */
