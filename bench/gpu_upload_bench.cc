// GPU upload benchmark: the same ImageNet-like batches uploaded, in one run,
// by
//   (a) dlcache's path: the bytes sit in a read-only mmapped /dev/shm arena
//       laid out like dlcached's (items at 4 KiB-aligned offsets in segment
//       files), registered once with cudaHostRegister(ReadOnly), and copied
//       by the UploadEngine (several methods);
//   (b) read() of each file into pageable memory, then cudaMemcpy;
//   (c) read() into a pinned buffer, then an async copy (DataLoader with
//       pin_memory), single-threaded and with reader threads;
// and reported as GB/s, batch latency and ratios to the cudaMallocHost peak
// measured in the same run. Every path's device bytes are checked against
// the source bytes.
//
// Self-contained (no server, no gRPC), so a binary built on the CPU machine
// with the static CUDA runtime runs on the GPU machine:
//   gpu_upload_bench [--items_per_batch=256] [--item_kb=110] [--batches=32]
//                    [--chunk_mb=4] [--chunks_per_batch=16] [--reps=5]
//                    [--reader_threads=8] [--dir=/dev/shm] [--out=FILE.md]

#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dlcache/cuda/upload_engine.h"
#include "dlcache/cuda/upload_layout.h"

namespace {

using dlcache::cuda::CopyOp;
using dlcache::cuda::HostChunk;
using dlcache::cuda::UploadEngine;
using dlcache::cuda::UploadMethod;
using Clock = std::chrono::steady_clock;

#define CUDA_OK(expr)                                                    \
  do {                                                                   \
    cudaError_t err_ = (expr);                                           \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(err_));                            \
      std::exit(2);                                                      \
    }                                                                    \
  } while (0)

void Die(const std::string& msg) {
  std::fprintf(stderr, "gpu_upload_bench: %s\n", msg.c_str());
  std::exit(2);
}

void CheckOk(const absl::Status& st, const char* what) {
  if (!st.ok()) Die(absl::StrCat(what, ": ", st.ToString()));
}
template <typename T>
void CheckOk(const absl::StatusOr<T>& st, const char* what) {
  CheckOk(st.status(), what);
}

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Flags {
  int items_per_batch = 256;
  double item_kb = 110;  // mean; sizes uniform in [0.5, 1.5] x mean
  int batches = 32;      // distinct small-item batches in the arena
  int chunk_mb = 4;
  int chunks_per_batch = 16;
  int chunk_batches = 16;  // distinct chunk batches
  int reps = 5;
  int rounds = 2;  // passes over the distinct batches per rep
  int reader_threads = 8;
  std::string dir = "/dev/shm";  // arena; "memfd" = memfd_create segments
  std::string src_dir;           // source files; default: dir (or /tmp)
  std::string out;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* name) -> const char* {
      std::string p = absl::StrCat("--", name, "=");
      return a.rfind(p, 0) == 0 ? argv[i] + p.size() : nullptr;
    };
    if (const char* v = val("items_per_batch"))
      f.items_per_batch = atoi(v);
    else if (const char* v = val("item_kb"))
      f.item_kb = atof(v);
    else if (const char* v = val("batches"))
      f.batches = atoi(v);
    else if (const char* v = val("chunk_mb"))
      f.chunk_mb = atoi(v);
    else if (const char* v = val("chunks_per_batch"))
      f.chunks_per_batch = atoi(v);
    else if (const char* v = val("chunk_batches"))
      f.chunk_batches = atoi(v);
    else if (const char* v = val("reps"))
      f.reps = atoi(v);
    else if (const char* v = val("rounds"))
      f.rounds = atoi(v);
    else if (const char* v = val("reader_threads"))
      f.reader_threads = atoi(v);
    else if (const char* v = val("dir"))
      f.dir = v;
    else if (const char* v = val("src_dir"))
      f.src_dir = v;
    else if (const char* v = val("out"))
      f.out = v;
    else
      Die(absl::StrCat("unknown flag ", a));
  }
  if (f.src_dir.empty()) f.src_dir = f.dir == "memfd" ? "/tmp" : f.dir;
  return f;
}

// Deterministic bytes of item `id` (splitmix64 stream).
void FillItem(uint64_t id, std::byte* dst, uint64_t size) {
  uint64_t x = id * 0x9E3779B97F4A7C15ull + 0x1234567ull;
  uint64_t i = 0;
  for (; i + 8 <= size; i += 8) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(dst + i, &z, 8);
  }
  for (; i < size; ++i) dst[i] = std::byte(id + i);
}

void ParallelFor(int n, int threads, const std::function<void(int)>& fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) fn(i);
    });
  }
  for (auto& th : pool) th.join();
}

// ---- The dataset: an arena like dlcached's plus the same bytes as files ----

struct Item {
  uint64_t size = 0;
  int segment = 0;
  uint64_t offset = 0;             // in the segment, 4 KiB aligned
  const std::byte* ptr = nullptr;  // in the read-only mapping
  int file = 0;                    // source file index
  uint64_t file_offset = 0;
};

struct Dataset {
  std::string name;
  std::vector<Item> items;
  std::vector<std::string> files;
  std::vector<std::pair<const std::byte*, uint64_t>> segments;  // mappings
  uint64_t arena_bytes = 0;
  std::vector<std::vector<int>> seq_batches, shuf_batches;
};

constexpr uint64_t kSegmentBytes = 256ull << 20;  // dlcached's default
constexpr uint64_t kPageAlign = 4096;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Lays `sizes` out in segment files under dir/arena_<name>/ (written with
// write(), then mapped PROT_READ / MAP_SHARED from an O_RDONLY fd, as the
// client maps the server's segments), and writes the source files: one per
// item when per_item_files, else one file holding all items back to back.
Dataset BuildDataset(const std::string& name,
                     const std::vector<uint64_t>& sizes, const std::string& dir,
                     const std::string& src_root, bool per_item_files) {
  Dataset ds;
  ds.name = name;
  ds.items.resize(sizes.size());
  int seg = 0;
  uint64_t off = 0;
  std::vector<uint64_t> seg_used(1, 0);
  uint64_t file_off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Item& it = ds.items[i];
    it.size = sizes[i];
    if (off + it.size > kSegmentBytes) {
      ++seg;
      off = 0;
      seg_used.push_back(0);
    }
    it.segment = seg;
    it.offset = off;
    off = AlignUp(off + it.size, kPageAlign);
    seg_used[seg] = off;
    it.file = per_item_files ? static_cast<int>(i) : 0;
    it.file_offset = per_item_files ? 0 : file_off;
    file_off += it.size;
  }
  const bool memfd = dir == "memfd";
  const std::string arena_dir = absl::StrCat(dir, "/dlcache_bench_", name);
  const std::string src_dir =
      absl::StrCat(src_root, "/dlcache_bench_src_", name);
  if (!memfd) mkdir(arena_dir.c_str(), 0755);
  mkdir(src_dir.c_str(), 0755);
  if (per_item_files) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      ds.files.push_back(absl::StrFormat("%s/%06d.jpg", src_dir, i));
    }
  } else {
    ds.files.push_back(absl::StrCat(src_dir, "/shard.bin"));
  }
  // Segment files.
  const int nseg = seg + 1;
  std::vector<int> seg_fds(nseg, -1);
  ParallelFor(nseg, 16, [&](int s) {
    std::string path = absl::StrFormat("%s/segment_%04d", arena_dir, s);
    int fd = memfd ? memfd_create(path.c_str(), 0)
                   : open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) Die(absl::StrCat("open ", path, ": ", strerror(errno)));
    std::vector<std::byte> buf(seg_used[s]);
    for (size_t i = 0; i < ds.items.size(); ++i) {
      if (ds.items[i].segment == s) {
        FillItem(i, buf.data() + ds.items[i].offset, ds.items[i].size);
      }
    }
    if (write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) {
      Die(absl::StrCat("write ", path, ": ", strerror(errno)));
    }
    if (memfd) {
      seg_fds[s] = fd;
    } else {
      close(fd);
    }
  });
  for (int s = 0; s < nseg; ++s) {
    std::string path = absl::StrFormat("%s/segment_%04d", arena_dir, s);
    int fd = memfd ? seg_fds[s] : open(path.c_str(), O_RDONLY);
    void* p = mmap(nullptr, seg_used[s], PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      Die(absl::StrCat("mmap ", path, ": ", strerror(errno)));
    close(fd);
    // Fault the pages in now so that the first timed pass does not.
    madvise(p, seg_used[s], MADV_WILLNEED);
    ds.segments.emplace_back(static_cast<const std::byte*>(p), seg_used[s]);
    ds.arena_bytes += seg_used[s];
  }
  for (Item& it : ds.items) it.ptr = ds.segments[it.segment].first + it.offset;
  // Source files with the same bytes.
  if (per_item_files) {
    ParallelFor(static_cast<int>(ds.items.size()), 16, [&](int i) {
      int fd = open(ds.files[i].c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
      if (fd < 0)
        Die(absl::StrCat("open ", ds.files[i], ": ", strerror(errno)));
      if (write(fd, ds.items[i].ptr, ds.items[i].size) !=
          static_cast<ssize_t>(ds.items[i].size)) {
        Die("write source");
      }
      close(fd);
    });
  } else {
    int fd = open(ds.files[0].c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) Die(absl::StrCat("open ", ds.files[0], ": ", strerror(errno)));
    for (const Item& it : ds.items) {
      if (write(fd, it.ptr, it.size) != static_cast<ssize_t>(it.size)) {
        Die("write source");
      }
    }
    close(fd);
  }
  return ds;
}

void MakeBatches(Dataset* ds, int per_batch, uint64_t seed) {
  const int n = static_cast<int>(ds->items.size()) / per_batch;
  std::vector<int> perm(ds->items.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int b = 0; b < n; ++b) {
    std::vector<int> seq(per_batch), shuf(per_batch);
    for (int k = 0; k < per_batch; ++k) {
      seq[k] = b * per_batch + k;
      shuf[k] = perm[b * per_batch + k];
    }
    ds->seq_batches.push_back(seq);
    ds->shuf_batches.push_back(shuf);
  }
}

uint64_t BatchBytes(const Dataset& ds, const std::vector<int>& batch) {
  uint64_t n = 0;
  for (int i : batch) n += ds.items[i].size;
  return n;
}

// ---- Results ----

struct Result {
  std::string dataset, order, path, detail;
  double gbps = 0;        // median over reps, pipelined
  double latency_ms = 0;  // median single-batch round trip
  double batch_mb = 0;
  double host_us = -1;  // CPU time per batch in the submitting call
  bool verified = false;
  std::string stats;
};

std::vector<Result> g_results;

// ---- (a) the registered arena through the UploadEngine ----

struct EngineCase {
  std::string name;
  UploadMethod method;
  bool preserve_gaps;
};

std::vector<std::vector<HostChunk>> Chunks(const Dataset& ds,
                                           const std::vector<int>& batch) {
  std::vector<std::vector<HostChunk>> items(batch.size());
  for (size_t k = 0; k < batch.size(); ++k) {
    const Item& it = ds.items[batch[k]];
    items[k].push_back(HostChunk{it.ptr, it.size});
  }
  return items;
}

bool VerifyDevice(const Dataset& ds, const std::vector<int>& batch,
                  const std::vector<uint64_t>& offsets, const void* dev,
                  uint64_t span) {
  std::vector<std::byte> host(span);
  CUDA_OK(cudaMemcpy(host.data(), dev, span, cudaMemcpyDeviceToHost));
  std::vector<std::byte> expect;
  for (size_t k = 0; k < batch.size(); ++k) {
    const Item& it = ds.items[batch[k]];
    expect.resize(it.size);
    FillItem(batch[k], expect.data(), it.size);
    if (std::memcmp(host.data() + offsets[k], expect.data(), it.size) != 0) {
      std::fprintf(stderr, "MISMATCH dataset %s item %d (batch pos %zu)\n",
                   ds.name.c_str(), batch[k], k);
      return false;
    }
  }
  return true;
}

void RunEngineCase(UploadEngine& eng, const Dataset& ds, const Flags& flags,
                   const std::vector<std::vector<int>>& batches,
                   const std::string& order, const EngineCase& c) {
  dlcache::cuda::LayoutOptions lo;
  lo.preserve_gaps = c.preserve_gaps;
  std::vector<dlcache::cuda::UploadLayout> layouts;
  uint64_t max_total = 0, payload = 0;
  for (const auto& b : batches) {
    layouts.push_back(dlcache::cuda::PlanUploadLayout(Chunks(ds, b), lo));
    max_total = std::max(max_total, layouts.back().total);
    payload += BatchBytes(ds, b);
  }
  constexpr int kDepth = 2;
  std::vector<dlcache::cuda::DeviceBuffer> bufs;
  for (int i = 0; i < kDepth; ++i) {
    auto b = eng.AllocateDevice(max_total);
    CheckOk(b, "AllocateDevice");
    bufs.push_back(std::move(*b));
  }
  dlcache::cuda::EnqueueOptions eo;
  eo.method = c.method;
  auto enqueue = [&](size_t b, int slot) {
    auto t =
        eng.Enqueue(layouts[b].ops, bufs[slot].data(), bufs[slot].size(), eo);
    CheckOk(t, "Enqueue");
    return std::move(*t);
  };
  // Correctness first: poisoned buffers, two batches, every item compared.
  bool ok = true;
  for (size_t b = 0; b < std::min<size_t>(2, batches.size()); ++b) {
    CheckOk(eng.Fill(bufs[0].data(), 0xA5, bufs[0].size()), "Fill");
    auto t = enqueue(b, 0);
    CheckOk(t.Wait(), "Wait");
    std::vector<uint64_t> offs;
    for (const auto& s : layouts[b].items) offs.push_back(s.offset);
    ok = ok &&
         VerifyDevice(ds, batches[b], offs, bufs[0].data(), layouts[b].total);
  }
  // Warm-up, then pipelined passes (kDepth uploads in flight).
  for (size_t b = 0; b < std::min<size_t>(3, batches.size()); ++b) {
    CheckOk(enqueue(b, 0).Wait(), "Wait");
  }
  std::vector<double> gbps;
  std::string stats;
  double enqueue_sec = 0;
  int enqueues = 0;
  for (int rep = 0; rep < flags.reps; ++rep) {
    std::deque<dlcache::cuda::UploadTicket> inflight;
    auto t0 = Clock::now();
    int k = 0;
    for (int round = 0; round < flags.rounds; ++round) {
      for (size_t b = 0; b < batches.size(); ++b, ++k) {
        if (static_cast<int>(inflight.size()) == kDepth) {
          CheckOk(inflight.front().Wait(), "Wait");
          inflight.pop_front();
        }
        auto e0 = Clock::now();
        inflight.push_back(enqueue(b, k % kDepth));
        enqueue_sec += Seconds(Clock::now() - e0);
        ++enqueues;
      }
    }
    while (!inflight.empty()) {
      CheckOk(inflight.front().Wait(), "Wait");
      if (inflight.size() == 1) {
        const auto& s = inflight.front().stats();
        stats = absl::StrFormat("%s runs=%d/%d copied=%.1fMB",
                                dlcache::cuda::UploadMethodName(s.method),
                                s.runs, s.ops, s.copied_bytes / 1e6);
      }
      inflight.pop_front();
    }
    double sec = Seconds(Clock::now() - t0);
    gbps.push_back(payload * flags.rounds / sec / 1e9);
  }
  // Latency: one batch at a time, submit to completion.
  std::vector<double> lat;
  for (size_t b = 0; b < batches.size(); ++b) {
    auto t0 = Clock::now();
    CheckOk(enqueue(b, 0).Wait(), "Wait");
    lat.push_back(Seconds(Clock::now() - t0) * 1e3);
  }
  Result r;
  r.dataset = ds.name;
  r.order = order;
  r.path = "(a) dlcache registered shm";
  r.detail = c.name;
  r.gbps = Median(gbps);
  r.latency_ms = Median(lat);
  r.batch_mb = payload / 1e6 / batches.size();
  r.host_us = enqueue_sec * 1e6 / std::max(1, enqueues);
  r.verified = ok;
  r.stats = stats;
  g_results.push_back(r);
  std::printf("  %-6s %-10s %-34s %7.2f GB/s  %7.3f ms  host %6.0f us  %s %s\n",
              ds.name.c_str(), order.c_str(), c.name.c_str(), r.gbps,
              r.latency_ms, r.host_us, ok ? "verified" : "MISMATCH",
              stats.c_str());
  std::fflush(stdout);
}

// ---- (b) and (c): read() then copy ----

void ReadItem(const Dataset& ds, int i, std::byte* dst, std::vector<int>* fds) {
  const Item& it = ds.items[i];
  int fd;
  if (fds != nullptr) {
    fd = (*fds)[it.file];
  } else {
    fd = open(ds.files[it.file].c_str(), O_RDONLY);
    if (fd < 0) Die(absl::StrCat("open ", ds.files[it.file]));
  }
  uint64_t done = 0;
  while (done < it.size) {
    ssize_t n = pread(fd, dst + done, it.size - done, it.file_offset + done);
    if (n <= 0) Die("read");
    done += n;
  }
  if (fds == nullptr) close(fd);
}

enum class HostKind { kPageable, kPinned };

void RunReadCase(const Dataset& ds, const Flags& flags,
                 const std::vector<std::vector<int>>& batches,
                 const std::string& order, HostKind kind, int threads) {
  uint64_t max_bytes = 0, payload = 0;
  std::vector<std::vector<uint64_t>> offsets;
  for (const auto& b : batches) {
    std::vector<uint64_t> offs;
    uint64_t at = 0;
    for (int i : b) {
      offs.push_back(at);
      at += ds.items[i].size;
    }
    offsets.push_back(offs);
    max_bytes = std::max(max_bytes, at);
    payload += at;
  }
  // Per-item files are opened for every read, like a Dataset's
  // __getitem__; a shard file stays open.
  std::vector<int> shard_fds;
  const bool per_item = ds.files.size() == ds.items.size();
  if (!per_item) {
    for (const auto& f : ds.files)
      shard_fds.push_back(open(f.c_str(), O_RDONLY));
  }
  std::vector<int>* fds = per_item ? nullptr : &shard_fds;
  constexpr int kDepth = 2;
  std::vector<std::byte*> host(kDepth);
  for (int i = 0; i < kDepth; ++i) {
    if (kind == HostKind::kPinned) {
      CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&host[i]), max_bytes));
    } else {
      host[i] = static_cast<std::byte*>(std::malloc(max_bytes));
      std::memset(host[i], 0, max_bytes);
    }
  }
  std::byte* dev[kDepth];
  for (int i = 0; i < kDepth; ++i) CUDA_OK(cudaMalloc(&dev[i], max_bytes));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t done[kDepth];
  for (auto& e : done)
    CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  auto read_batch = [&](size_t b, std::byte* dst) {
    const auto& batch = batches[b];
    if (threads <= 1) {
      for (size_t k = 0; k < batch.size(); ++k) {
        ReadItem(ds, batch[k], dst + offsets[b][k], fds);
      }
    } else {
      ParallelFor(static_cast<int>(batch.size()), threads, [&](int k) {
        ReadItem(ds, batch[k], dst + offsets[b][k], fds);
      });
    }
  };
  auto upload = [&](size_t b, int slot) {
    uint64_t n = offsets[b].back() + ds.items[batches[b].back()].size;
    // The buffer may still feed the previous copy from this slot.
    CUDA_OK(cudaEventSynchronize(done[slot]));
    read_batch(b, host[slot]);
    CUDA_OK(cudaMemcpyAsync(dev[slot], host[slot], n, cudaMemcpyHostToDevice,
                            stream));
    CUDA_OK(cudaEventRecord(done[slot], stream));
  };
  bool ok = true;
  for (size_t b = 0; b < std::min<size_t>(2, batches.size()); ++b) {
    CUDA_OK(cudaMemsetAsync(dev[0], 0xA5, max_bytes, stream));
    upload(b, 0);
    CUDA_OK(cudaStreamSynchronize(stream));
    ok = ok && VerifyDevice(ds, batches[b], offsets[b], dev[0], max_bytes);
  }
  for (size_t b = 0; b < std::min<size_t>(3, batches.size()); ++b) upload(b, 0);
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<double> gbps;
  for (int rep = 0; rep < flags.reps; ++rep) {
    auto t0 = Clock::now();
    int k = 0;
    for (int round = 0; round < flags.rounds; ++round) {
      for (size_t b = 0; b < batches.size(); ++b, ++k) upload(b, k % kDepth);
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    gbps.push_back(payload * flags.rounds / Seconds(Clock::now() - t0) / 1e9);
  }
  std::vector<double> lat;
  for (size_t b = 0; b < batches.size(); ++b) {
    auto t0 = Clock::now();
    upload(b, 0);
    CUDA_OK(cudaStreamSynchronize(stream));
    lat.push_back(Seconds(Clock::now() - t0) * 1e3);
  }
  for (auto& e : done) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
  for (int i = 0; i < kDepth; ++i) {
    cudaFree(dev[i]);
    if (kind == HostKind::kPinned)
      cudaFreeHost(host[i]);
    else
      std::free(host[i]);
  }
  for (int fd : shard_fds) close(fd);
  Result r;
  r.dataset = ds.name;
  r.order = order;
  r.path = kind == HostKind::kPinned ? "(c) read() -> pinned -> GPU"
                                     : "(b) read() -> pageable -> GPU";
  r.detail = threads <= 1 ? "1 reader thread"
                          : absl::StrCat(threads, " reader threads");
  r.gbps = Median(gbps);
  r.latency_ms = Median(lat);
  r.batch_mb = payload / 1e6 / batches.size();
  r.verified = ok;
  g_results.push_back(r);
  std::printf("  %-6s %-10s %-34s %7.2f GB/s  %7.3f ms  %s\n", ds.name.c_str(),
              order.c_str(), (r.path.substr(0, 3) + " " + r.detail).c_str(),
              r.gbps, r.latency_ms, ok ? "verified" : "MISMATCH");
  std::fflush(stdout);
}

// ---- Peak: cudaMallocHost -> device ----

double PinnedPeak(uint64_t bytes, int reps) {
  void* h;
  void* d;
  CUDA_OK(cudaMallocHost(&h, bytes));
  std::memset(h, 0x5A, bytes);
  CUDA_OK(cudaMalloc(&d, bytes));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) {
    CUDA_OK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s));
  }
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    CUDA_OK(cudaEventRecord(a, s));
    CUDA_OK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaEventRecord(b, s));
    CUDA_OK(cudaEventSynchronize(b));
    float ms;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    v.push_back(bytes / (ms / 1e3) / 1e9);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
  cudaFree(d);
  cudaFreeHost(h);
  return Median(v);
}

// Per-copy cost of separate small async copies from pinned memory.
double SmallCopyMicros(uint64_t size, int count) {
  void* h;
  void* d;
  CUDA_OK(cudaMallocHost(&h, size * count));
  CUDA_OK(cudaMalloc(&d, size * count));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<double> v;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    for (int i = 0; i < count; ++i) {
      CUDA_OK(cudaMemcpyAsync(static_cast<char*>(d) + i * size,
                              static_cast<char*>(h) + i * size, size,
                              cudaMemcpyHostToDevice, s));
    }
    CUDA_OK(cudaStreamSynchronize(s));
    v.push_back(Seconds(Clock::now() - t0) * 1e6 / count);
  }
  cudaStreamDestroy(s);
  cudaFree(d);
  cudaFreeHost(h);
  return Median(v);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  if (absl::Status st = dlcache::cuda::CudaAvailable(0); !st.ok()) {
    std::printf("gpu_upload_bench: %s\n", st.ToString().c_str());
    return 77;  // "skipped"
  }
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  int ro = 0;
  cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, 0);
  std::printf("device: %s, %d SMs, read-only registration %s\n", prop.name,
              prop.multiProcessorCount, ro ? "supported" : "UNSUPPORTED");

  // Data sets: ImageNet-like items and 4 MiB chunks.
  std::mt19937_64 rng(42);
  const uint64_t mean = static_cast<uint64_t>(flags.item_kb * 1000);
  std::uniform_int_distribution<uint64_t> size_dist(mean / 2, mean * 3 / 2);
  std::vector<uint64_t> small_sizes(static_cast<size_t>(flags.items_per_batch) *
                                    flags.batches);
  for (auto& s : small_sizes) s = size_dist(rng);
  std::vector<uint64_t> chunk_sizes(
      static_cast<size_t>(flags.chunks_per_batch) * flags.chunk_batches,
      static_cast<uint64_t>(flags.chunk_mb) << 20);

  struct statvfs vfs;
  uint64_t need = 0;
  for (auto s : small_sizes) need += 2 * AlignUp(s, kPageAlign);
  for (auto s : chunk_sizes) need += 2 * s;
  for (const std::string& d : {flags.dir, flags.src_dir}) {
    if (d == "memfd" || statvfs(d.c_str(), &vfs) != 0) continue;
    uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    uint64_t want = flags.dir == flags.src_dir ? need : need / 2;
    std::printf("%s: %.1f GB free, %.1f GB needed\n", d.c_str(), avail / 1e9,
                want / 1e9);
    if (avail < want + (256ull << 20)) {
      Die(absl::StrCat(d, " is too small; pass --dir=memfd / --src_dir"));
    }
  }
  std::printf("arena: %s, source files: %s\n", flags.dir.c_str(),
              flags.src_dir.c_str());
  auto t0 = Clock::now();
  Dataset small =
      BuildDataset("110KB", small_sizes, flags.dir, flags.src_dir, true);
  Dataset chunks =
      BuildDataset("4MiB", chunk_sizes, flags.dir, flags.src_dir, false);
  MakeBatches(&small, flags.items_per_batch, 7);
  MakeBatches(&chunks, flags.chunks_per_batch, 8);
  std::printf(
      "datasets built in %.1f s: %zu items (%.0f MB arena), %zu chunks "
      "(%.0f MB arena)\n",
      Seconds(Clock::now() - t0), small.items.size(), small.arena_bytes / 1e6,
      chunks.items.size(), chunks.arena_bytes / 1e6);

  const double peak = PinnedPeak(256ull << 20, 20);
  const double peak_batch =
      PinnedPeak(BatchBytes(small, small.seq_batches[0]), 20);
  const double small_copy_us = SmallCopyMicros(mean, 2048);
  std::printf(
      "peak cudaMallocHost -> device: %.2f GB/s (256 MiB copies), "
      "%.2f GB/s (one %.1f MB copy); separate %.0f KB copies: %.2f us "
      "each\n",
      peak, peak_batch, BatchBytes(small, small.seq_batches[0]) / 1e6,
      mean / 1e3, small_copy_us);

  dlcache::cuda::EngineOptions eo;
  auto engine = UploadEngine::Create(eo);
  CheckOk(engine, "UploadEngine::Create");
  double reg_sec = 0;
  uint64_t reg_bytes = 0;
  for (Dataset* ds : {&small, &chunks}) {
    for (auto& [base, size] : ds->segments) {
      auto r0 = Clock::now();
      absl::Status st = (*engine)->RegisterHost(base, size);
      reg_sec += Seconds(Clock::now() - r0);
      reg_bytes += size;
      if (!st.ok()) {
        std::printf("registration failed (%s): path (a) goes through staging\n",
                    st.ToString().c_str());
      }
    }
  }
  std::printf("cudaHostRegister(ReadOnly): %.0f ms per GiB\n",
              reg_sec * 1e3 / (reg_bytes / double(1 << 30)));

  const std::vector<EngineCase> small_cases = {
      {"memcpy, one copy per item", UploadMethod::kMemcpy, false},
      {"memcpy, adjacent items coalesced", UploadMethod::kMemcpy, true},
      {"cudaMemcpyBatchAsync", UploadMethod::kMemcpyBatch, false},
      {"gather kernel (mapped host memory)", UploadMethod::kGatherKernel,
       false},
      {"auto (CudaUploader default)", UploadMethod::kAuto, true},
  };
  const std::vector<EngineCase> chunk_cases = {
      {"memcpy, one copy per chunk", UploadMethod::kMemcpy, false},
      {"memcpy, adjacent chunks coalesced", UploadMethod::kMemcpy, true},
      {"cudaMemcpyBatchAsync", UploadMethod::kMemcpyBatch, false},
      {"gather kernel (mapped host memory)", UploadMethod::kGatherKernel,
       false},
      {"auto (CudaUploader default)", UploadMethod::kAuto, true},
  };
  std::printf(
      "\n  data   order      path                                  "
      "throughput   latency\n");
  for (Dataset* ds : {&small, &chunks}) {
    const auto& cases = ds == &small ? small_cases : chunk_cases;
    for (const char* order : {"shuffled", "sequential"}) {
      const auto& batches =
          std::string(order) == "shuffled" ? ds->shuf_batches : ds->seq_batches;
      for (const EngineCase& c : cases) {
        RunEngineCase(**engine, *ds, flags, batches, order, c);
      }
      RunReadCase(*ds, flags, batches, order, HostKind::kPageable, 1);
      RunReadCase(*ds, flags, batches, order, HostKind::kPinned, 1);
      RunReadCase(*ds, flags, batches, order, HostKind::kPinned,
                  flags.reader_threads);
    }
  }

  // Gather kernel shape sweep (shuffled small items).
  std::printf("\ngather kernel shape (110KB shuffled):\n");
  for (int bps : {1, 2, 4, 8}) {
    dlcache::cuda::EngineOptions k;
    k.gather_blocks_per_sm = bps;
    (*engine).reset();
    auto e2 = UploadEngine::Create(k);
    CheckOk(e2, "UploadEngine::Create");
    for (auto& [base, size] : small.segments) {
      CheckOk((*e2)->RegisterHost(base, size), "RegisterHost");
    }
    RunEngineCase(**e2, small, flags, small.shuf_batches, "shuffled",
                  {absl::StrCat("kernel, ", bps, " blocks/SM"),
                   UploadMethod::kGatherKernel, false});
    *engine = std::move(*e2);
  }

  // Summary table.
  std::string md;
  absl::StrAppendFormat(
      &md,
      "Device: %s. Peak (cudaMallocHost -> device, 256 MiB copies, same run): "
      "**%.2f GB/s**; one %.1f MB pinned copy: %.2f GB/s; separate %.0f KB "
      "pinned copies: %.2f us each. cudaHostRegister(ReadOnly): %.0f "
      "ms/GiB.\n\n",
      prop.name, peak, BatchBytes(small, small.seq_batches[0]) / 1e6,
      peak_batch, mean / 1e3, small_copy_us,
      reg_sec * 1e3 / (reg_bytes / double(1 << 30)));
  md +=
      "| data | order | path | method | GB/s | % of peak | batch latency ms | "
      "host us/batch | bytes check |\n"
      "|---|---|---|---|---:|---:|---:|---:|---|\n";
  std::map<std::string, double> best_c;
  for (const Result& r : g_results) {
    if (r.path.rfind("(c)", 0) == 0 && r.detail == "1 reader thread") {
      best_c[r.dataset + r.order] = r.gbps;
    }
  }
  for (const Result& r : g_results) {
    absl::StrAppendFormat(
        &md, "| %s x %d | %s | %s | %s | %.2f | %.0f%% | %.3f | %s | %s |\n",
        r.dataset,
        r.dataset == "110KB" ? flags.items_per_batch : flags.chunks_per_batch,
        r.order, r.path, r.detail, r.gbps, 100 * r.gbps / peak, r.latency_ms,
        r.host_us < 0 ? std::string("-") : absl::StrFormat("%.0f", r.host_us),
        r.verified ? "equal" : "MISMATCH");
  }
  md += "\n";
  for (const Result& r : g_results) {
    if (r.detail.rfind("auto", 0) != 0) continue;
    double c = best_c[r.dataset + r.order];
    absl::StrAppendFormat(&md,
                          "- %s %s: auto path %.2f GB/s = %.0f%% of peak, "
                          "%.1fx path (c) with 1 reader thread\n",
                          r.dataset, r.order, r.gbps, 100 * r.gbps / peak,
                          c > 0 ? r.gbps / c : 0);
  }
  std::printf("\n%s", md.c_str());
  if (!flags.out.empty()) {
    FILE* f = std::fopen(flags.out.c_str(), "w");
    if (f != nullptr) {
      std::fputs(md.c_str(), f);
      std::fclose(f);
    }
  }
  bool all_ok = true;
  for (const Result& r : g_results) all_ok = all_ok && r.verified;
  (*engine).reset();  // unregisters before the mappings go
  // Clean up the arena and source files.
  for (Dataset* ds : {&small, &chunks}) {
    for (auto& [base, size] : ds->segments) {
      munmap(const_cast<std::byte*>(base), size);
    }
    std::string cmd =
        absl::StrCat("rm -rf '", flags.dir, "/dlcache_bench_", ds->name, "' '",
                     flags.src_dir, "/dlcache_bench_src_", ds->name, "'");
    if (flags.dir == "memfd") {
      cmd = absl::StrCat("rm -rf '", flags.src_dir, "/dlcache_bench_src_",
                         ds->name, "'");
    }
    if (std::system(cmd.c_str()) != 0) std::perror("cleanup");
  }
  return all_ok ? 0 : 1;
}
