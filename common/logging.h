#ifndef DLCACHE_COMMON_LOGGING_H_
#define DLCACHE_COMMON_LOGGING_H_

// Minimal logging (Debian's Abseil 20220623 has no absl/log):
//   DLC_LOG(INFO) << "arena: " << n << " segments";
// Writes one line "I1202 13:05:01.123456 file.cc:42] msg" to stderr per
// statement, atomically (one write()). Levels: INFO, WARNING, ERROR.
// Thread-safe. SetMinLogLevel() filters; default INFO, or the value of
// the DLCACHE_LOG_LEVEL environment variable (INFO/WARNING/ERROR).

#include <sstream>

namespace dlcache {

enum class LogLevel { kInfo = 0, kWarning = 1, kError = 2 };

void SetMinLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace dlcache

#define DLC_LOG_LEVEL_INFO ::dlcache::LogLevel::kInfo
#define DLC_LOG_LEVEL_WARNING ::dlcache::LogLevel::kWarning
#define DLC_LOG_LEVEL_ERROR ::dlcache::LogLevel::kError
#define DLC_LOG(level)                                 \
  if (!::dlcache::LogEnabled(DLC_LOG_LEVEL_##level)) { \
  } else                                               \
    ::dlcache::LogMessage(DLC_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

#endif  // DLCACHE_COMMON_LOGGING_H_
