// The LibTorch adapter against a real dlcached, through the C ABI only.
//
// A self-contained driver (no gtest, no Abseil) so that the same file
// builds here against Debian's CPU libtorch (a ctest) and on the GPU
// machine against that machine's own libtorch, carrying only
// libdlcache_c.so (client/torch/examples/CMakeLists.txt builds it there).
//
//   DLCACHED=path/to/dlcached DLCACHECTL=path/to/dlcachectl
//       torch_adapter_test [--require_gpu] [--only=cpu|gpu|CheckName]
//
// Every check prints "ok"/"FAIL"/"skip" with its name. Exit 1 when one
// failed (or --only selected none), else 77 when one skipped (ctest:
// Skipped; the skipped checks are listed), else 0. GPU checks skip without
// a usable GPU unless --require_gpu (or DLCACHE_REQUIRE_GPU=1), which makes
// that a failure. ctest runs the CPU checks and the GPU checks as two
// entries, so a skip is never hidden in a pass.

#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/epoch_order.h"
#include "dlcache/dlcache_cuda_c.h"
#include "dlcache/torch/cache_dataset.h"
#include "dlcache/torch/tensors.h"

namespace dt = dlcache::torch_adapter;

namespace {

int failures = 0;

#define CHECK_THAT(cond)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                    \
      throw CheckFailed();                                                    \
    }                                                                         \
  } while (0)

struct CheckFailed {};
struct Skip {
  std::string why;
};

std::string Env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

// Deterministic content: the bytes of file `seed` with `size` bytes.
std::string Content(size_t size, uint64_t seed) {
  std::string s(size, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

std::string Bytes(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()),
                     static_cast<size_t>(c.numel()));
}

// Waits for `cond` until `deadline_s`; false if it never held.
bool Eventually(const std::function<bool()>& cond, double deadline_s = 20) {
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration<double>(deadline_s);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

// No std::filesystem here: pip's libtorch.so exports its own copies of
// those symbols, the driver's calls bind to them, and remove_all there
// jumps through a null pointer (seen with torch 2.11 on the GPU machine).
void MakeDirs(const std::string& dir) {
  for (size_t at = 1; at != std::string::npos; at = dir.find('/', at + 1)) {
    ::mkdir(dir.substr(0, at).c_str(), 0700);
  }
  ::mkdir(dir.c_str(), 0700);
}

void RemoveTree(const std::string& dir) {
  ::nftw(
      dir.c_str(),
      [](const char* path, const struct stat*, int, struct FTW*) {
        ::remove(path);
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

// The tests' guarded temp scheme (tests/testing/temp_dir.h, which this
// driver cannot link): a new dlc-PID-XXXXXX directory under `base`,
// removed once this process is gone however it ends (a kill runs no
// destructor) by a shell in a session of its own that waits for end of
// file on a pipe only this process writes (close-on-exec: dlcached does
// not inherit it).
std::string GuardedTempDir(const std::string& base) {
  static std::set<std::string>* guarded = new std::set<std::string>;
  if (guarded->insert(base).second) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) == 0) {
      posix_spawn_file_actions_t actions;
      posix_spawnattr_t attr;
      posix_spawn_file_actions_init(&actions);
      posix_spawnattr_init(&attr);
      posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
      posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                       O_WRONLY, 0);
      posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
      posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
      const std::string pid = std::to_string(::getpid());
      const char* script =
          "read -r _; for d in \"$1\"/dlc-\"$2\"-*; do "
          "[ -e \"$d\" ] && rm -rf -- \"$d\"; done; exit 0";
      const char* args[] = {"sh",         "-c",        script, "dlc-cleanup",
                            base.c_str(), pid.c_str(), nullptr};
      pid_t child = 0;
      if (::posix_spawn(&child, "/bin/sh", &actions, &attr,
                        const_cast<char* const*>(args), environ) != 0) {
        ::close(fds[1]);  // no guard: the destructors still remove them
      }
      ::close(fds[0]);  // the write end stays open for the process's life
      posix_spawn_file_actions_destroy(&actions);
      posix_spawnattr_destroy(&attr);
    }
  }
  std::string templ = base + "/dlc-" + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return "";
  return templ;
}

// A dlcached process on a temp socket, with a dataset "ds" in a temp dir;
// stopped (and its dirs removed) by the destructor, and killed by the
// kernel if this process dies first.
class Server {
 public:
  Server() {
    root_ = GuardedTempDir(Env("TEST_TMPDIR", "/tmp"));
    shm_ = GuardedTempDir("/dev/shm");
    CHECK_THAT(!root_.empty() && !shm_.empty());
    src_ = root_ + "/src";
    MakeDirs(src_);
    socket_ = root_ + "/dlcached.sock";
    Start();
  }
  ~Server() {
    Stop();
    RemoveTree(root_);
    RemoveTree(shm_);
  }

  void Write(const std::string& key, const std::string& bytes) {
    const std::string p = src_ + "/" + key;
    MakeDirs(p.substr(0, p.rfind('/')));
    std::ofstream(p, std::ios::binary) << bytes;
  }

  void Start() {
    const std::string bin = Env("DLCACHED");
    CHECK_THAT(!bin.empty());
    std::vector<std::string> args = {bin,
                                     "--socket=" + socket_,
                                     "--shm_dir=" + shm_,
                                     "--arena_bytes=128MiB",
                                     "--segment_bytes=16MiB",
                                     "--chunk_size=1MiB",
                                     "--dataset=ds=" + src_,
                                     "--metrics_address=",
                                     "--keep_arena=false"};
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    CHECK_THAT(pid_ >= 0);
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const std::string log = root_ + "/dlcached.log";
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    CHECK_THAT(Eventually([&] { return Leases() >= 0; }, 30));
  }

  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // The server's lease count from `dlcachectl --json status`; -1 if it
  // cannot be read (server not up, or no DLCACHECTL).
  int64_t Leases() const {
    const std::string ctl = Env("DLCACHECTL");
    if (ctl.empty()) return 0;  // cannot count: lease checks are skipped
    const std::string cmd =
        ctl + " --socket " + socket_ + " --json status 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return -1;
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    if (::pclose(p) != 0) return -1;
    const size_t at = out.find("\"leases\":");
    if (at == std::string::npos) return -1;
    return std::strtoll(out.c_str() + at + 9, nullptr, 10);
  }
  bool CanCountLeases() const { return !Env("DLCACHECTL").empty(); }

  // `dlcachectl --json status` as text ("" without DLCACHECTL or on error).
  std::string StatusJson() const {
    const std::string ctl = Env("DLCACHECTL");
    if (ctl.empty()) return "";
    const std::string cmd =
        ctl + " --socket " + socket_ + " --json status 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return "";
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    return ::pclose(p) == 0 ? out : "";
  }

  const std::string& socket() const { return socket_; }

 private:
  std::string root_, shm_, src_, socket_;
  pid_t pid_ = -1;
};

struct Fixture {
  Server server;
  std::map<std::string, std::string> files;
  std::vector<std::string> keys;  // 31 small files of different sizes

  Fixture() {
    for (int i = 0; i < 31; ++i) {
      std::string key = "img/" + std::to_string(i) + ".jpg";
      files[key] = Content(1000 + 977 * i, i);
      server.Write(key, files[key]);
      keys.push_back(key);
    }
    files["empty.bin"] = "";
    server.Write("empty.bin", "");
    files["big.bin"] = Content((1 << 20) * 2 + 5, 77);  // three chunks
    server.Write("big.bin", files["big.bin"]);
  }

  dt::ClientHandle Connect() {
    dt::ConnectOptions o;
    o.socket_path = server.socket();
    o.verify_checksums = true;
    return dt::Connect(o);
  }

  dt::CacheDatasetOptions Options() const {
    dt::CacheDatasetOptions o;
    o.dataset = "ds";
    o.keys = keys;
    o.seed = 3;
    return o;
  }
};

bool GpuUsable(std::string* why) {
  if (!torch::cuda::is_available()) {
    *why = "libtorch sees no CUDA device";
    return false;
  }
  if (dlc_cuda_available(0) != DLC_OK) {
    *why = std::string("dlcache: ") + dlc_cuda_last_error();
    return false;
  }
  return true;
}

void Step(const char* what) { std::fprintf(stderr, "  step: %s\n", what); }

void CpuViewsAndStatuses(Fixture& f) {
  Step("connect");
  dt::ClientHandle c = f.Connect();
  Step("get_batch");
  std::vector<const char*> keys = {f.keys[3].c_str(), "nope.jpg", "big.bin",
                                   "empty.bin"};
  dlc_batch* b = nullptr;
  CHECK_THAT(dlc_get_batch(c.get(), "ds", keys.data(), keys.size(), &b) ==
             DLC_OK);
  Step("CpuBatchTensors");
  dt::BatchTensors t = dt::CpuBatchTensors(b);
  Step("checks");
  CHECK_THAT(t.items.size() == 4);
  CHECK_THAT(Bytes(t.items[0]) == f.files[f.keys[3]]);
  CHECK_THAT(t.codes[1] == DLC_NOT_FOUND && !t.items[1].defined());
  CHECK_THAT(t.errors[1].find("nope.jpg") != std::string::npos ||
             !t.errors[1].empty());
  CHECK_THAT(Bytes(t.items[2]) == f.files["big.bin"]);
  CHECK_THAT(t.items[3].defined() && t.items[3].numel() == 0);
  CHECK_THAT(t.items[0].dtype() == at::kByte);
}

void CpuViewsHoldTheirLeases(Fixture& f) {
  if (!f.server.CanCountLeases()) throw Skip{"DLCACHECTL not set"};
  dt::ClientHandle c = f.Connect();
  const int64_t before = f.server.Leases();
  std::vector<const char*> keys = {f.keys[0].c_str(), f.keys[1].c_str()};
  dlc_batch* b = nullptr;
  CHECK_THAT(dlc_get_batch(c.get(), "ds", keys.data(), keys.size(), &b) ==
             DLC_OK);
  at::Tensor kept;
  {
    dt::BatchTensors t = dt::CpuBatchTensors(b);
    kept = t.items[1];
  }
  // The batch is gone but one view lives: its leases stay.
  CHECK_THAT(f.server.Leases() >= before + 2);
  CHECK_THAT(Bytes(kept) == f.files[f.keys[1]]);
  kept = at::Tensor();
  CHECK_THAT(Eventually([&] { return f.server.Leases() <= before; }));
}

// Two epochs through torch's DataLoader on `device`: every byte equal,
// every key once per epoch, different orders.
void RunEpochs(Fixture& f, c10::Device device) {
  dt::CacheDatasetOptions o = f.Options();
  o.keys.push_back("big.bin");
  o.keys.push_back("empty.bin");
  o.device = device;
  auto loader = torch::data::make_data_loader(
      dt::CacheDataset(f.Connect(), o), torch::data::DataLoaderOptions(7));
  std::vector<std::vector<std::string>> orders;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::string> order;
    for (dt::CacheBatch& b : *loader) {
      CHECK_THAT(b.items.size() == b.keys.size());
      for (size_t i = 0; i < b.keys.size(); ++i) {
        CHECK_THAT(b.codes[i] == DLC_OK);
        CHECK_THAT(b.items[i].device().type() == device.type());
        CHECK_THAT(Bytes(b.items[i]) == f.files.at(b.keys[i]));
        order.push_back(b.keys[i]);
      }
    }
    std::vector<std::string> sorted = order, want = o.keys;
    std::sort(sorted.begin(), sorted.end());
    std::sort(want.begin(), want.end());
    CHECK_THAT(sorted == want);
    orders.push_back(order);
  }
  CHECK_THAT(orders[0] != orders[1]);
}

void ShardsByRank(Fixture& f) {
  for (bool drop_last : {false, true}) {
    std::multiset<std::string> seen;
    for (int rank = 0; rank < 3; ++rank) {
      dt::CacheDatasetOptions o = f.Options();
      o.rank = rank;
      o.world_size = 3;
      o.drop_last = drop_last;
      dt::CacheDataset ds(f.Connect(), o);
      CHECK_THAT(*ds.size() == (drop_last ? 10u : 11u));
      size_t n = 0;
      while (auto b = ds.get_batch(4)) {
        for (const std::string& k : b->keys) seen.insert(k);
        n += b->keys.size();
      }
      CHECK_THAT(n == (drop_last ? 8u : 11u));  // drop_last: 2 batches of 4
    }
    if (!drop_last) {
      // 31 keys padded to 33: every key, and two of them twice.
      std::set<std::string> distinct(seen.begin(), seen.end());
      CHECK_THAT(distinct.size() == 31 && seen.size() == 33);
    }
  }
  dt::CacheDatasetOptions bad = f.Options();
  bad.rank = 3;
  bad.world_size = 3;
  bool threw = false;
  try {
    dt::CacheDataset ds(f.Connect(), bad);
  } catch (const c10::Error& e) {
    threw = std::string(e.what()).find("INVALID_ARGUMENT") != std::string::npos;
  }
  CHECK_THAT(threw);
}

void EpochsSaveLoadAndSetEpoch(Fixture& f) {
  dt::CacheDatasetOptions o = f.Options();
  dt::CacheDataset ds(f.Connect(), o);
  auto first = ds.get_batch(5);
  CHECK_THAT(first.has_value());
  torch::serialize::OutputArchive out;
  ds.save(out);
  auto expected = ds.get_batch(5);
  std::stringstream buf;
  out.save_to(buf);
  torch::serialize::InputArchive in;
  in.load_from(buf);
  dt::CacheDataset other(f.Connect(), o);
  other.load(in);
  auto resumed = other.get_batch(5);
  CHECK_THAT(resumed.has_value() && expected.has_value());
  CHECK_THAT(resumed->keys == expected->keys);
  // set_epoch(e) then reset() (what a loader does) reads epoch e's order.
  dt::CacheDataset a(f.Connect(), o), b(f.Connect(), o);
  a.reset();
  a.reset();  // epoch 1
  b.set_epoch(1);
  b.reset();
  CHECK_THAT(a.epoch() == 1 && b.epoch() == 1);
  CHECK_THAT(a.get_batch(31)->keys == b.get_batch(31)->keys);
}

// The dataset reads common/epoch_order's order (the one Python's loaders
// read; python_train_test checks those against the same function), and
// registers each epoch as a plan on its session.
void OrderIsTheOneEpochOrderWithAPlan(Fixture& f) {
  dt::CacheDatasetOptions o = f.Options();
  o.seed = 5;
  o.rank = 1;
  o.world_size = 3;
  o.plan_name = "adapter-order-test";
  dt::CacheDataset ds(f.Connect(), o);
  ds.set_epoch(3);
  ds.reset();
  std::vector<std::string> got;
  while (auto b = ds.get_batch(4)) {
    got.insert(got.end(), b->keys.begin(), b->keys.end());
  }
  dlcache::EpochOrderOptions e;
  e.seed = 5;
  e.epoch = 3;
  e.rank = 1;
  e.world_size = 3;
  std::vector<std::string> want;
  for (size_t i : dlcache::EpochRankOrder(o.keys.size(), e)) {
    want.push_back(o.keys[i]);
  }
  CHECK_THAT(got == want);
  // The golden order of common/epoch_order's unit test and Python's.
  std::vector<size_t> golden = {0, 9, 1, 6, 3, 5, 4, 2, 8, 7};
  CHECK_THAT(dlcache::EpochPermutation(10, {}) == golden);
  CHECK_THAT(ds.plan_name() == "adapter-order-test");
  CHECK_THAT(ds.plan_registered());
  if (f.server.CanCountLeases()) {
    CHECK_THAT(f.server.StatusJson().find("adapter-order-test") !=
               std::string::npos);
  }
}

// The stall the loop sees (issue 34): get_batch measures the loop's wait
// and step and reports them as the plan; dlcached's status has them.
void CpuStallIsReported(Fixture& f) {
  dt::CacheDatasetOptions o = f.Options();
  o.plan_name = "adapter-stall-test";
  dt::CacheDataset ds(f.Connect(), o);
  size_t batches = 0;
  while (auto b = ds.get_batch(4)) {
    ++batches;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK_THAT(batches == (o.keys.size() + 3) / 4);
  // Every step but the last one's (it ended in the call that found the
  // epoch's end).
  CHECK_THAT(ds.stall_step_seconds() >= 0.005 * static_cast<double>(batches));
  CHECK_THAT(ds.stall_wait_seconds() > 0);
  if (!f.server.CanCountLeases()) return;
  // Reports are notifications: the sums arrive when they arrive.
  CHECK_THAT(Eventually([&] {
    const std::string st = f.server.StatusJson();
    const size_t at = st.find("\"plan\":\"adapter-stall-test\"");
    if (at == std::string::npos) return false;
    size_t b = st.find("\"batches\":", at);
    if (b == std::string::npos) return false;
    b += 10;
    if (b < st.size() && st[b] == '"') ++b;
    return std::strtoull(st.c_str() + b, nullptr, 10) == batches;
  }));
}

void GpuEpochs(Fixture& f) { RunEpochs(f, c10::Device(c10::kCUDA, 0)); }

void GpuPrefetchAndLeases(Fixture& f) {
  dt::CacheDatasetOptions o = f.Options();
  o.device = c10::Device(c10::kCUDA, 0);
  o.prefetch = 3;
  o.shuffle = false;
  const int64_t before = f.server.CanCountLeases() ? f.server.Leases() : 0;
  {
    dt::CacheDataset ds(f.Connect(), o);
    auto b = ds.get_batch(2);
    CHECK_THAT(b.has_value() && b->codes[0] == DLC_OK);
    // The producer runs ahead by `prefetch` batches, no further.
    CHECK_THAT(Eventually([&] { return ds.batches_ready() == 3; }));
    CHECK_THAT(ds.batches_ready() == 3);
    size_t n = b->keys.size();
    while (auto next = ds.get_batch(2)) {
      CHECK_THAT(static_cast<int64_t>(Bytes(next->data).size()) ==
                 next->data.numel());
      n += next->keys.size();
    }
    CHECK_THAT(n == f.keys.size());
    CHECK_THAT(ds.uploaded_batches() == 16);
  }
  // Destroyed with the uploads done: no lease left behind.
  if (f.server.CanCountLeases()) {
    CHECK_THAT(Eventually([&] { return f.server.Leases() <= before; }));
  }
  // Destroyed mid-epoch with batches in flight: none left either.
  {
    dt::CacheDataset ds(f.Connect(), o);
    CHECK_THAT(ds.get_batch(2).has_value());
  }
  if (f.server.CanCountLeases()) {
    CHECK_THAT(Eventually([&] { return f.server.Leases() <= before; }));
  }
}

void GpuFailedItemsKeepTheirCodes(Fixture& f) {
  dt::CacheDatasetOptions o = f.Options();
  o.device = c10::Device(c10::kCUDA, 0);
  o.keys = {f.keys[0], "missing.jpg", f.keys[5]};
  o.shuffle = false;
  dt::CacheDataset ds(f.Connect(), o);
  auto b = ds.get_batch(3);
  CHECK_THAT(b.has_value());
  CHECK_THAT(b->codes[0] == DLC_OK && b->codes[1] == DLC_NOT_FOUND &&
             b->codes[2] == DLC_OK);
  CHECK_THAT(!b->items[1].defined());
  CHECK_THAT(Bytes(b->items[0]) == f.files[f.keys[0]]);
  CHECK_THAT(Bytes(b->items[2]) == f.files[f.keys[5]]);
}

// The server restarts mid-epoch: at most the batch in flight fails (thrown),
// the epoch goes on, every byte still equal to the source.
void RestartMidEpoch(Fixture& f, c10::Device device) {
  dt::CacheDatasetOptions o = f.Options();
  o.device = device;
  dt::CacheDataset ds(f.Connect(), o);
  size_t delivered = 0;
  for (int i = 0; i < 2; ++i) delivered += ds.get_batch(4)->keys.size();
  f.server.Stop();
  f.server.Start();
  int thrown = 0;
  while (true) {
    try {
      auto b = ds.get_batch(4);
      if (!b.has_value()) break;
      for (size_t i = 0; i < b->keys.size(); ++i) {
        CHECK_THAT(b->codes[i] == DLC_OK);
        CHECK_THAT(Bytes(b->items[i]) == f.files.at(b->keys[i]));
      }
      delivered += b->keys.size();
    } catch (const c10::Error&) {
      ++thrown;
      CHECK_THAT(thrown <= 2);
    }
  }
  CHECK_THAT(delivered + 4 * static_cast<size_t>(thrown) >= f.keys.size());
  CHECK_THAT(delivered >= f.keys.size() - 8);
  // The new session registered the rest of the epoch as its plan again.
  CHECK_THAT(ds.plan_registered());
  if (f.server.CanCountLeases()) {
    CHECK_THAT(f.server.StatusJson().find(ds.plan_name()) != std::string::npos);
  }
}

void ServerGoneIsThrown(Fixture& f) {
  dt::ConnectOptions co;
  co.socket_path = f.server.socket();
  co.rpc_timeout_s = 2;
  dt::CacheDataset ds(dt::Connect(co), f.Options());
  f.server.Stop();
  bool threw = false;
  try {
    ds.get_batch(4);
  } catch (const c10::Error&) {
    threw = true;
  }
  CHECK_THAT(threw);
  f.server.Start();
}

}  // namespace

// A crash names the check it happened in and where (the GPU machine has
// no debugger).
const char* current_check = "";

void PrintAddress(const char* what, const void* addr) {
  Dl_info info{};
  if (addr != nullptr && ::dladdr(addr, &info) != 0) {
    std::fprintf(
        stderr, "  %s %p %s(%s+%#lx)\n", what, addr,
        info.dli_fname != nullptr ? info.dli_fname : "?",
        info.dli_sname != nullptr ? info.dli_sname : "?",
        static_cast<unsigned long>(
            static_cast<const char*>(addr) -
            static_cast<const char*>(
                info.dli_saddr != nullptr ? info.dli_saddr : info.dli_fbase)));
  } else {
    std::fprintf(stderr, "  %s %p\n", what, addr);
  }
}

void OnCrash(int sig, siginfo_t* si, void* ctx) {
  std::fprintf(stderr, "\nsignal %d (fault address %p) in check %s\n", sig,
               si != nullptr ? si->si_addr : nullptr, current_check);
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(ctx);
  const greg_t* r = uc->uc_mcontext.gregs;
  PrintAddress("pc", reinterpret_cast<const void*>(r[REG_RIP]));
  // A call through a null pointer leaves its return address on the stack.
  PrintAddress("[sp]", *reinterpret_cast<void* const*>(r[REG_RSP]));
  auto* fp = reinterpret_cast<void* const*>(r[REG_RBP]);
  for (int i = 0; i < 16 && fp != nullptr; ++i) {
    PrintAddress("frame", fp[1]);
    auto* next = static_cast<void* const*>(fp[0]);
    if (next <= fp) break;
    fp = next;
  }
#endif
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, 2);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

int main(int argc, char** argv) {
  bool require_gpu = Env("DLCACHE_REQUIRE_GPU") == "1";
  std::string only;  // "", "cpu", "gpu" or a check's name
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--require_gpu") require_gpu = true;
    if (a.rfind("--only=", 0) == 0) only = a.substr(7);
  }
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_sigaction = OnCrash;
  sa.sa_flags = SA_SIGINFO;
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS}) ::sigaction(sig, &sa, nullptr);
  std::string no_gpu;
  const bool gpu = GpuUsable(&no_gpu);
  int skipped = 0, passed = 0;
  std::vector<std::string> skipped_names;
  auto run = [&](const char* name, bool needs_gpu,
                 const std::function<void(Fixture&)>& fn) {
    if (!only.empty() && only != name && !(only == "cpu" && !needs_gpu) &&
        !(only == "gpu" && needs_gpu)) {
      return;
    }
    if (needs_gpu && !gpu) {
      if (require_gpu) {
        std::printf("FAIL %s: no GPU: %s\n", name, no_gpu.c_str());
        ++failures;
      } else {
        std::printf("skip %s: no GPU: %s\n", name, no_gpu.c_str());
        ++skipped;
        skipped_names.push_back(name);
      }
      return;
    }
    current_check = name;
    std::printf("run  %s\n", name);
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      Step("fixture (dlcached, files)");
      Fixture f;
      fn(f);
      ++passed;
      std::printf(
          "ok   %s (%.2f s)\n", name,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count());
    } catch (const Skip& s) {
      ++skipped;
      skipped_names.push_back(name);
      std::printf("skip %s: %s\n", name, s.why.c_str());
    } catch (const CheckFailed&) {
      ++failures;
      std::printf("FAIL %s\n", name);
    } catch (const std::exception& e) {
      ++failures;
      std::printf("FAIL %s: %s\n", name, e.what());
    }
    std::fflush(stdout);
  };
  run("CpuViewsAndStatuses", false, CpuViewsAndStatuses);
  run("CpuViewsHoldTheirLeases", false, CpuViewsHoldTheirLeases);
  run("CpuEpochsShuffleThroughTorchDataLoader", false,
      [](Fixture& f) { RunEpochs(f, c10::Device(c10::kCPU)); });
  run("ShardsByRank", false, ShardsByRank);
  run("EpochsSaveLoadAndSetEpoch", false, EpochsSaveLoadAndSetEpoch);
  run("CpuRestartMidEpoch", false,
      [](Fixture& f) { RestartMidEpoch(f, c10::Device(c10::kCPU)); });
  run("OrderIsTheOneEpochOrderWithAPlan", false,
      OrderIsTheOneEpochOrderWithAPlan);
  run("CpuStallIsReported", false, CpuStallIsReported);
  run("ServerGoneIsThrown", false, ServerGoneIsThrown);
  run("GpuEpochsEqualSourceBytes", true, GpuEpochs);
  run("GpuPrefetchAndLeases", true, GpuPrefetchAndLeases);
  run("GpuFailedItemsKeepTheirCodes", true, GpuFailedItemsKeepTheirCodes);
  run("GpuRestartMidEpoch", true,
      [](Fixture& f) { RestartMidEpoch(f, c10::Device(c10::kCUDA, 0)); });
  std::printf("%d passed, %d failed, %d skipped\n", passed, failures, skipped);
  if (failures > 0) return 1;
  if (passed + skipped == 0) {
    std::printf("FAIL: --only=%s selects no check\n", only.c_str());
    return 1;
  }
  if (skipped > 0) {
    std::printf("SKIPPED:");
    for (const std::string& n : skipped_names) std::printf(" %s", n.c_str());
    std::printf("\n");
    return 77;  // ctest's SKIP_RETURN_CODE
  }
  return 0;
}
