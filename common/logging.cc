#include "common/logging.h"

#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dlcache {
namespace {

int InitialLevel() {
  const char* env = std::getenv("DLCACHE_LOG_LEVEL");
  if (env == nullptr) return 0;
  if (std::strcmp(env, "WARNING") == 0) return 1;
  if (std::strcmp(env, "ERROR") == 0) return 2;
  return 0;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level{InitialLevel()};
  return level;
}

}  // namespace

void SetMinLogLevel(LogLevel level) {
  MinLevel().store(static_cast<int>(level), std::memory_order_relaxed);
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= MinLevel().load(std::memory_order_relaxed);
}

LogMessage::LogMessage(LogLevel level, const char* file, int line)
    : level_(level) {
  timeval tv;
  ::gettimeofday(&tv, nullptr);
  tm t;
  ::localtime_r(&tv.tv_sec, &t);
  const char* base = std::strrchr(file, '/');
  char head[96];
  std::snprintf(head, sizeof(head), "%c%02d%02d %02d:%02d:%02d.%06ld %s:%d] ",
                "IWE"[static_cast<int>(level_)], t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, static_cast<long>(tv.tv_usec),
                base ? base + 1 : file, line);
  stream_ << head;
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  std::string s = stream_.str();
  // One write() so lines from different threads do not interleave.
  ssize_t unused = ::write(STDERR_FILENO, s.data(), s.size());
  (void)unused;
}

}  // namespace dlcache
