#ifndef DLCACHE_COMMON_UNIQUE_FD_H_
#define DLCACHE_COMMON_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace dlcache {

// Owns a file descriptor and closes it on destruction. Move-only.
// Not thread-safe (like any value type).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace dlcache

#endif  // DLCACHE_COMMON_UNIQUE_FD_H_
