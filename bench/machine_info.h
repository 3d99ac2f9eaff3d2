#ifndef DLCACHE_BENCH_MACHINE_INFO_H_
#define DLCACHE_BENCH_MACHINE_INFO_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dlcache::bench {

// One line describing the machine: CPU model, online cores, memory,
// kernel. Reads /proc; never fails (unknown parts are left out).
std::string DescribeMachine();

// The 1/5/15-minute load averages from /proc/loadavg, e.g. "1.52 0.98 0.60".
std::string LoadAverage();

// CPU time counters, to tell how busy other processes kept the machine
// while we measured. All in clock ticks.
struct CpuSample {
  uint64_t busy = 0;  // all CPUs, non-idle (user+nice+system+irq+softirq+steal)
  uint64_t total = 0;  // all CPUs, including idle and iowait
  uint64_t ours = 0;   // this process plus `pids` (e.g. redis-server)
  double wall_s = 0;
};

CpuSample SampleCpu(const std::vector<pid_t>& pids);

// CPU time used so far by this process (all threads, getrusage: exact)
// plus `pids` (from /proc, in clock ticks of 10 ms typically), in seconds.
double CpuSecondsUsed(const std::vector<pid_t>& pids);

// CPU cores' worth of work done by processes other than ours between two
// samples (0 on an idle machine; 2.0 means two cores were fully taken).
double OtherProcessCores(const CpuSample& before, const CpuSample& after);

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_MACHINE_INFO_H_
