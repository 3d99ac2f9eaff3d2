#ifndef DLCACHE_SERVER_CLUSTER_PEER_DATA_WIRE_H_
#define DLCACHE_SERVER_CLUSTER_PEER_DATA_WIRE_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace dlcache {

// The raw chunk stream between nodes ("data plane"): a plain TCP connection
// next to the gRPC PeerService, used when the cluster runs without mTLS.
// A chunk travels as one response header followed by its bytes, written by
// the owner straight from its pinned arena slot and read by the asker
// straight into its own arena slot: one copy into and one out of the
// kernel, no HTTP/2 framing, no per-call threads. The asker keeps a pool of
// connections per peer, one request in flight on each, so several chunks
// are in flight per peer at once.
//
// Connection: the asker sends a hello (kDataHelloBytes: magic "DLCP",
// version, token length) and the token; the owner answers one uint32
// status code (0 = OK, else absl::StatusCode, UNAUTHENTICATED for a wrong
// token) and closes on anything but OK. Then any number of exchanges:
//   request:  kDataRequestBytes header, dataset bytes, path bytes
//   response: kDataResponseBytes header, message bytes (code != 0), data
// All integers are little-endian. A response with code != 0 carries no
// data; the connection stays usable after it.

inline constexpr uint32_t kDataMagic = 0x50434c44;  // "DLCP"
inline constexpr uint32_t kDataVersion = 1;
inline constexpr size_t kDataHelloBytes = 12;
inline constexpr size_t kDataRequestBytes = 32;
inline constexpr size_t kDataResponseBytes = 40;
inline constexpr size_t kMaxDataToken = 4096;
inline constexpr size_t kMaxDataDataset = 1024;
inline constexpr size_t kMaxDataPath = 16384;
inline constexpr size_t kMaxDataMessage = 4096;

enum class DataOp : uint8_t {
  kFetch = 1,  // one chunk of the expected file version
  kStat = 2,   // size and mtime only
};

struct DataRequestHeader {
  DataOp op = DataOp::kFetch;
  uint32_t chunk = 0;
  // kFetch: the version the asker expects; another version is answered
  // FAILED_PRECONDITION with the owner's size/mtime and no data.
  uint64_t expected_size = 0;
  int64_t expected_mtime_ns = 0;
  uint32_t dataset_len = 0;
  uint32_t path_len = 0;
};

struct DataResponseHeader {
  uint32_t code = 0;  // absl::StatusCode
  uint32_t message_len = 0;
  uint64_t file_size = 0;
  int64_t mtime_ns = 0;
  uint64_t checksum = 0;  // XXH3-64 of the data (kFetch)
  uint64_t data_len = 0;
};

// Encoders write exactly the *Bytes constant; decoders read it and return
// INVALID_ARGUMENT (hello, request) or DATA_LOSS (response) for a bad magic,
// version, op or a length over its maximum. Pure.
void EncodeDataHello(uint32_t token_len, char* out);
absl::Status DecodeDataHello(const char* in, uint32_t* token_len);
void EncodeDataRequest(const DataRequestHeader& h, char* out);
absl::Status DecodeDataRequest(const char* in, DataRequestHeader* h);
void EncodeDataResponse(const DataResponseHeader& h, char* out);
absl::Status DecodeDataResponse(const char* in, DataResponseHeader* h);

// Blocking I/O with a deadline on a non-blocking socket (a MonotonicNow()
// time, common/clock.h; InfiniteFuture = none). Write sends every byte of iov
// (MSG_NOSIGNAL, plus `flags`, e.g. MSG_MORE for a header whose data follows);
// Read fills dst. DEADLINE_EXCEEDED past the deadline, UNAVAILABLE on a closed
// or broken connection (Read: *got says how many bytes came before), INTERNAL
// on other errors. Modifies iov.
absl::Status DataWriteAll(int fd, absl::Span<iovec> iov, absl::Time deadline,
                          int flags = 0);

// Sends n bytes of file_fd from `offset` to the socket with sendfile(2):
// from a tmpfs or page-cache file TCP then queues references to the file's
// pages, not a copy of them, so the bytes must not change until the
// receiver has read them (see PeerDataServer). *sent says how many bytes
// went. UNIMPLEMENTED when sendfile cannot serve this file or socket
// (EINVAL, ENOSYS, EOPNOTSUPP, ESPIPE, or the file ended early): the caller
// sends the rest another way. Otherwise the codes of DataWriteAll. SIGPIPE is
// not suppressed (sendfile has no MSG_NOSIGNAL): block or ignore it in the
// calling thread.
absl::Status DataSendFile(int sock, int file_fd, uint64_t offset, size_t n,
                          absl::Time deadline, size_t* sent);
absl::Status DataReadAll(int fd, char* dst, size_t n, absl::Time deadline,
                         size_t* got = nullptr);
// Same, calling on_piece with each piece as soon as a recv() put it in
// dst (still in cache: a checksum over it costs no second pass over dst).
absl::Status DataReadAll(int fd, char* dst, size_t n, absl::Time deadline,
                         absl::FunctionRef<void(const char*, size_t)> on_piece);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PEER_DATA_WIRE_H_
