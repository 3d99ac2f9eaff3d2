#include "tests/testing/temp_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace dlcache::testing {
namespace {

// Removes this process's dlc-PID-* directories under `base` once the
// process is gone, however it ends: a test killed by ctest's timeout, an
// OOM kill or a crash runs no destructor. A shell in a session of its own
// (a process-group kill does not reach it) reads a pipe whose only writer is
// this process (close-on-exec, so daemons the test starts do not hold it);
// end of file means this process exited. Best effort: without the guard
// the next TempDir's sweep still removes the directories.
void StartCleanupGuard(const std::string& base) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
  // Not the test's output: ctest waits for every holder of that pipe.
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                   O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  const std::string pid = absl::StrCat(::getpid());
  // A test in a mount namespace of its own (EnterPrivateMountNamespace)
  // starts its guard there too: what is still mounted under its
  // directories in that namespace is unmounted (deepest first) before the
  // removal, which would otherwise stop at the mount points.
  const char* script =
      "read -r _; for d in \"$1\"/dlc-\"$2\"-*; do [ -e \"$d\" ] || continue; "
      "awk -v p=\"$d/\" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | "
      "sort -r | while read -r m; do umount -l \"$m\"; done; "
      "rm -rf -- \"$d\"; done; exit 0";
  const char* argv[] = {"sh",         "-c",        script, "dlc-cleanup",
                        base.c_str(), pid.c_str(), nullptr};
  pid_t child = 0;
  if (posix_spawn(&child, "/bin/sh", &actions, &attr,
                  const_cast<char* const*>(argv), environ) != 0) {
    ::close(fds[1]);
  }
  // On success the write end stays open for the life of the process.
  ::close(fds[0]);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
}

// The first TempDir of a process under a parent removes the leftovers of
// processes that are gone (names carry the creating pid) and starts the
// guard for its own.
void PrepareBase(const std::string& base) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* prepared ABSL_GUARDED_BY(mu) =
      new absl::flat_hash_set<std::string>;
  {
    absl::MutexLock lock(&mu);
    // Keyed by pid too: a forked child prepares for its own directories.
    if (!prepared->insert(absl::StrCat(::getpid(), ":", base)).second) return;
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "dlc-")) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
    int pid = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &pid) || pid <= 0)
      continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    std::filesystem::remove_all(entry.path(), rm);
  }
  StartCleanupGuard(base);
}

}  // namespace

TempDir::TempDir(absl::string_view parent) {
  std::string base(parent);
  if (base.empty()) {
    const char* env = std::getenv("TEST_TMPDIR");
    base = env != nullptr ? env : "/tmp";
  }
  PrepareBase(base);
  std::string templ = absl::StrCat(base, "/dlc-", ::getpid(), "-XXXXXX");
  if (::mkdtemp(templ.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Sub(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

void WriteFileOrDie(const std::string& path, absl::string_view bytes) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
  out.close();
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

std::string RandomBytes(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(size, '\0');
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (; i < size; ++i) s[i] = static_cast<char>(rng());
  return s;
}

}  // namespace dlcache::testing
