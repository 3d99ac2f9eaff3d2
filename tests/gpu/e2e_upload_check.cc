// End-to-end check and measurement against a running dlcached: ImageNet-like
// files are written to the server's source directory, read through the
// cache (GetBatch over the Unix socket, handles into shared memory) and
// uploaded to the GPU with the CudaUploader; the device bytes are compared
// with the files and the pipelined rate is printed.
//
//   dlcached --source=DIR --socket=SOCK ... &
//   e2e_upload_check --socket=SOCK --source=DIR [--files=8192]
//                    [--batch=256] [--item_kb=110] [--epochs=3]
// Exit status: 0 ok, 1 mismatch or error, 77 no GPU.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dlcache/client.h"
#include "dlcache/cuda/cuda_uploader.h"
#include "dlcache/cuda/upload_pipeline.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string socket;
  std::string source;
  std::string dataset = "default";
  int files = 8192;
  int batch = 256;
  double item_kb = 110;
  int epochs = 3;
};

std::string FileBytes(int i, size_t size) {
  std::string s(size, '\0');
  uint64_t x = 0x9E3779B97F4A7C15ull * (i + 1);
  for (size_t k = 0; k < size; ++k) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[k] = static_cast<char>(x);
  }
  return s;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "e2e_upload_check: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto v = [&](const char* n) -> const char* {
      std::string p = absl::StrCat("--", n, "=");
      return a.rfind(p, 0) == 0 ? argv[i] + p.size() : nullptr;
    };
    if (const char* x = v("socket"))
      f.socket = x;
    else if (const char* x = v("source"))
      f.source = x;
    else if (const char* x = v("dataset"))
      f.dataset = x;
    else if (const char* x = v("files"))
      f.files = atoi(x);
    else if (const char* x = v("batch"))
      f.batch = atoi(x);
    else if (const char* x = v("item_kb"))
      f.item_kb = atof(x);
    else if (const char* x = v("epochs"))
      f.epochs = atoi(x);
    else
      return Fail("unknown flag " + a);
  }
  if (absl::Status st = dlcache::cuda::CudaAvailable(); !st.ok()) {
    std::printf("e2e_upload_check: %s\n", st.ToString().c_str());
    return 77;
  }
  // The data set, written where the server reads it.
  std::mt19937_64 rng(1);
  const size_t mean = static_cast<size_t>(f.item_kb * 1000);
  std::uniform_int_distribution<size_t> size_dist(mean / 2, mean * 3 / 2);
  std::vector<std::string> keys;
  std::vector<size_t> sizes;
  mkdir((f.source + "/train").c_str(), 0755);
  for (int i = 0; i < f.files; ++i) {
    keys.push_back(absl::StrFormat("train/%06d.jpg", i));
    sizes.push_back(size_dist(rng));
    std::string bytes = FileBytes(i, sizes.back());
    std::string path = f.source + "/" + keys.back();
    int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || write(fd, bytes.data(), bytes.size()) !=
                      static_cast<ssize_t>(bytes.size())) {
      return Fail("write " + path);
    }
    close(fd);
  }
  dlcache::ClientOptions co;
  co.socket_path = f.socket;
  co.connect_timeout = absl::Seconds(30);
  auto client = dlcache::Client::Connect(co);
  if (!client.ok()) return Fail(client.status().ToString());
  auto up = dlcache::cuda::CudaUploader::Create(client->get(), {});
  if (!up.ok()) return Fail(up.status().ToString());

  std::vector<size_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  uint64_t payload_per_epoch = 0;
  for (size_t s : sizes) payload_per_epoch += s;
  bool ok = true;
  for (int epoch = 0; epoch < f.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    size_t next = 0;
    std::vector<std::vector<size_t>> flight;
    dlcache::cuda::UploadPipeline pipe(
        up->get(), 1, [&]() -> absl::StatusOr<std::optional<dlcache::Batch>> {
          if (next >= order.size()) return std::optional<dlcache::Batch>();
          std::vector<size_t> idx(
              order.begin() + next,
              order.begin() + std::min(order.size(), next + f.batch));
          next += idx.size();
          std::vector<std::string> batch_keys;
          for (size_t i : idx) batch_keys.push_back(keys[i]);
          auto b = (*client)->GetBatch(f.dataset, batch_keys);
          if (!b.ok()) return b.status();
          flight.push_back(idx);
          return std::optional<dlcache::Batch>(std::move(*b));
        });
    auto t0 = Clock::now();
    double check_sec = 0;  // byte checks, left out of the rate
    int batches = 0, hits = 0;
    std::optional<dlcache::cuda::GpuBatch> held;
    while (true) {
      auto gpu = pipe.Next();
      if (!gpu.ok()) return Fail(gpu.status().ToString());
      if (!gpu->has_value()) break;
      std::vector<size_t> idx = flight.front();
      flight.erase(flight.begin());
      dlcache::cuda::GpuBatch& g = **gpu;
      // Check the first two batches of every epoch byte for byte.
      if (batches < 2) {
        auto c0 = Clock::now();
        std::vector<char> host(g.size());
        if (!(*up)->engine().CopyToHost(g.data(), host.data(), g.size()).ok()) {
          return Fail("CopyToHost");
        }
        for (size_t k = 0; k < idx.size(); ++k) {
          const auto& it = g.items()[k];
          std::string want = FileBytes(static_cast<int>(idx[k]), sizes[idx[k]]);
          if (!it.status.ok() || it.size != want.size() ||
              std::memcmp(host.data() + it.offset, want.data(), it.size) != 0) {
            std::fprintf(stderr, "MISMATCH %s: %s\n", keys[idx[k]].c_str(),
                         it.status.ToString().c_str());
            ok = false;
          }
        }
        check_sec += std::chrono::duration<double>(Clock::now() - c0).count();
      }
      hits += g.stats().staged_bytes == 0 ? 1 : 0;
      ++batches;
      held = std::move(**gpu);  // a consumer holds the current batch
    }
    held.reset();
    double sec =
        std::chrono::duration<double>(Clock::now() - t0).count() - check_sec;
    std::printf(
        "epoch %d: %d batches of %d, %.2f GB/s end to end (GetBatch RPC + "
        "upload, pipelined), %.3f ms per batch%s, %s\n",
        epoch, batches, f.batch, payload_per_epoch / sec / 1e9,
        sec * 1e3 / batches,
        epoch == 0 ? " (cold: server fills from files)" : " (warm)",
        hits == batches ? "no staging" : "STAGED");
  }
  // The RPC alone, for comparison: warm GetBatch calls, nothing uploaded.
  {
    auto t0 = Clock::now();
    int n = 0;
    for (size_t next = 0; next < order.size(); next += f.batch, ++n) {
      std::vector<std::string> batch_keys;
      for (size_t i = next; i < std::min(order.size(), next + f.batch); ++i) {
        batch_keys.push_back(keys[order[i]]);
      }
      auto b = (*client)->GetBatch(f.dataset, batch_keys);
      if (!b.ok()) return Fail(b.status().ToString());
    }
    double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf(
        "GetBatch alone (warm, no upload): %.3f ms per batch of %d, "
        "%.2f GB/s of handles' bytes\n",
        sec * 1e3 / n, f.batch, payload_per_epoch / sec / 1e9);
  }
  std::printf("e2e bytes check: %s\n",
              ok ? "GPU bytes equal source bytes" : "MISMATCH");
  return ok ? 0 : 1;
}
