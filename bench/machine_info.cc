#include "bench/machine_info.h"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dlcache::bench {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// utime + stime of /proc/<pid>/stat (fields 14 and 15; the command name in
// field 2 may contain spaces, so count from its closing parenthesis).
uint64_t ProcessTicks(const std::string& stat_path) {
  const std::string s = ReadFile(stat_path);
  const size_t paren = s.rfind(')');
  if (paren == std::string::npos) return 0;
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(s).substr(paren + 2), ' ');
  // After ")": field 3 is index 0, so utime (14) is 11 and stime (15) 12.
  uint64_t utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) ||
      !absl::SimpleAtoi(f[12], &stime)) {
    return 0;
  }
  return utime + stime;
}

}  // namespace

std::string DescribeMachine() {
  std::string model;
  for (absl::string_view line :
       absl::StrSplit(ReadFile("/proc/cpuinfo"), '\n')) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != absl::string_view::npos) {
        model = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
      break;
    }
  }
  uint64_t mem_kb = 0;
  for (absl::string_view line :
       absl::StrSplit(ReadFile("/proc/meminfo"), '\n')) {
    if (absl::ConsumePrefix(&line, "MemTotal:")) {
      line = absl::StripAsciiWhitespace(line);
      absl::ConsumeSuffix(&line, " kB");
      if (!absl::SimpleAtoi(line, &mem_kb)) mem_kb = 0;
      break;
    }
  }
  utsname u{};
  ::uname(&u);
  return absl::StrFormat("%s, %d cores online, %.1f GiB RAM, Linux %s",
                         model.empty() ? "unknown CPU" : model,
                         static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)),
                         mem_kb / 1048576.0, u.release);
}

std::string LoadAverage() {
  const std::string text = ReadFile("/proc/loadavg");
  std::vector<absl::string_view> f = absl::StrSplit(text, ' ');
  if (f.size() < 3) return "unknown";
  return absl::StrCat(f[0], " ", f[1], " ", f[2]);
}

CpuSample SampleCpu(const std::vector<pid_t>& pids) {
  CpuSample s;
  const std::string stat = ReadFile("/proc/stat");
  // First line: "cpu  user nice system idle iowait irq softirq steal ...".
  absl::string_view first = absl::string_view(stat).substr(0, stat.find('\n'));
  std::vector<absl::string_view> f =
      absl::StrSplit(first, ' ', absl::SkipEmpty());
  for (size_t i = 1; i < f.size() && i <= 8; ++i) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(f[i], &v)) continue;
    s.total += v;
    if (i != 4 && i != 5) s.busy += v;  // 4 = idle, 5 = iowait
  }
  s.ours = ProcessTicks("/proc/self/stat");
  for (pid_t p : pids)
    s.ours += ProcessTicks(absl::StrCat("/proc/", p, "/stat"));
  s.wall_s = std::chrono::duration<double>(
                 std::chrono::steady_clock::now().time_since_epoch())
                 .count();
  return s;
}

double CpuSecondsUsed(const std::vector<pid_t>& pids) {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  double s = u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
             u.ru_stime.tv_usec / 1e6;
  uint64_t ticks = 0;
  for (pid_t p : pids)
    ticks += ProcessTicks(absl::StrCat("/proc/", p, "/stat"));
  return s + static_cast<double>(ticks) / ::sysconf(_SC_CLK_TCK);
}

double OtherProcessCores(const CpuSample& before, const CpuSample& after) {
  const double ticks_per_s = ::sysconf(_SC_CLK_TCK);
  const double wall = after.wall_s - before.wall_s;
  if (wall <= 0 || ticks_per_s <= 0) return 0;
  const double busy = static_cast<double>(after.busy - before.busy);
  const double ours = static_cast<double>(after.ours - before.ours);
  const double other = busy > ours ? busy - ours : 0;
  return other / ticks_per_s / wall;
}

}  // namespace dlcache::bench
