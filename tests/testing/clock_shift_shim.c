// An LD_PRELOAD library that steps the wall clock of the processes it is
// loaded into without changing the machine's clock (issue 33): the wall
// readings (clock_gettime of CLOCK_REALTIME and CLOCK_REALTIME_COARSE,
// gettimeofday, time) get an offset added, read from the first 8 bytes
// (an int64 of nanoseconds, native order) of the file named by
// $DLCACHE_CLOCK_SHIFT_FILE, which a test maps and changes while the
// processes run. Absolute FUTEX_CLOCK_REALTIME waits made through
// syscall() (Abseil's Mutex and Notification waits) get the offset taken
// off again, so that a deadline computed from a shifted reading means
// what it would after a real step. Without the variable, or before the
// file exists, the offset is 0. Monotonic clocks are untouched.
// Thread-safe; async-signal-safe after the first call that finds the file.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*ClockGettimeFn)(clockid_t, struct timespec*);
typedef long (*SyscallFn)(long, ...);

static _Atomic(const int64_t*) g_shift;

// The offset in nanoseconds; 0 until the file named by the variable exists.
static int64_t ShiftNs(void) {
  const int64_t* p = g_shift;
  if (p == NULL) {
    const char* path = getenv("DLCACHE_CLOCK_SHIFT_FILE");
    if (path == NULL) return 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    void* m = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return 0;
    const int64_t* expected = NULL;
    if (!__atomic_compare_exchange_n(&g_shift, &expected, (const int64_t*)m,
                                     0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      munmap(m, sizeof(int64_t));  // another thread mapped it first
    }
    p = g_shift;
  }
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static void AddNs(struct timespec* ts, int64_t ns) {
  int64_t total = (int64_t)ts->tv_nsec + ns % 1000000000;
  ts->tv_sec += ns / 1000000000 + total / 1000000000;
  total %= 1000000000;
  if (total < 0) {
    total += 1000000000;
    ts->tv_sec -= 1;
  }
  ts->tv_nsec = total;
}

static ClockGettimeFn RealClockGettime(void) {
  static _Atomic(ClockGettimeFn) fn;
  ClockGettimeFn f = fn;
  if (f == NULL) {
    f = (ClockGettimeFn)dlsym(RTLD_NEXT, "clock_gettime");
    fn = f;
  }
  return f;
}

int clock_gettime(clockid_t id, struct timespec* ts) {
  const int rc = RealClockGettime()(id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    AddNs(ts, ShiftNs());
  }
  return rc;
}

int gettimeofday(struct timeval* tv, void* tz) {
  (void)tz;
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
  // glibc declares `tv` non-null.
  tv->tv_sec = ts.tv_sec;
  tv->tv_usec = ts.tv_nsec / 1000;
  return 0;
}

time_t time(time_t* out) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
  if (out != NULL) *out = ts.tv_sec;
  return ts.tv_sec;
}

long syscall(long number, ...) {
  static _Atomic(SyscallFn) real;
  SyscallFn f = real;
  if (f == NULL) {
    f = (SyscallFn)dlsym(RTLD_NEXT, "syscall");
    real = f;
  }
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (int i = 0; i < 6; ++i) a[i] = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_futex && (a[1] & FUTEX_CLOCK_REALTIME) != 0 &&
      a[3] != 0) {
    const int cmd = (int)(a[1] & FUTEX_CMD_MASK);
    if (cmd == FUTEX_WAIT_BITSET) {
      // The deadline came from a shifted reading: back to the kernel's.
      struct timespec ts = *(const struct timespec*)a[3];
      AddNs(&ts, -ShiftNs());
      return f(number, a[0], a[1], a[2], (long)&ts, a[4], a[5]);
    }
  }
  return f(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
