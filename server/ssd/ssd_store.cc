#include "server/ssd/ssd_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/unique_fd.h"

namespace dlcache {
namespace {

constexpr absl::string_view kSuffix = ".dat";
constexpr size_t kDigits = 10;

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::UnavailableError(msg);
}

bool ParseName(absl::string_view name, uint32_t* id) {
  if (name.size() != kDigits + kSuffix.size() ||
      !absl::EndsWith(name, kSuffix)) {
    return false;
  }
  absl::string_view digits = name.substr(0, kDigits);
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(digits, id);
}

}  // namespace

struct SsdStore::File {
  uint32_t id = 0;
  UniqueFd fd;
  uint64_t size = 0;  // guarded by the store's mu_
};

SsdStore::SsdStore(const Options& options) : options_(options) {}

SsdStore::~SsdStore() {
  SyncSealed();
  if (absl::Status s = Sync(); !s.ok()) {
    DLC_LOG(WARNING) << "ssd store: " << s.message();
  }
}

std::string SsdStore::PathOf(uint32_t file) const {
  return absl::StrFormat("%s/%010u%s", options_.dir, file, kSuffix);
}

absl::StatusOr<std::unique_ptr<SsdStore>> SsdStore::Open(
    const Options& options, uint32_t first_new_id) {
  absl::StatusOr<UniqueFd> dir_fd =
      EnsurePrivateDir(options.dir, options.access, "ssd data dir");
  if (!dir_fd.ok()) return dir_fd.status();
  std::unique_ptr<SsdStore> store(new SsdStore(options));
  DIR* d = ::opendir(options.dir.c_str());
  if (d == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ssd store: cannot read ", options.dir, ": ", std::strerror(errno)));
  }
  absl::MutexLock lock(&store->mu_);
  uint32_t max_id = 0;
  while (struct dirent* e = ::readdir(d)) {
    uint32_t id = 0;
    if (!ParseName(e->d_name, &id)) continue;
    auto f = std::make_shared<File>();
    f->id = id;
    f->fd = UniqueFd(::openat(dir_fd->get(), e->d_name,
                              O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st;
    if (!f->fd.valid() || ::fstat(f->fd.get(), &st) != 0) {
      DLC_LOG(WARNING) << "ssd store: skipping " << store->PathOf(id) << ": "
                       << std::strerror(errno);
      continue;
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      DLC_LOG(WARNING) << "ssd store: skipping " << store->PathOf(id)
                       << ": not a regular file of this uid";
      continue;
    }
    // Tightens files an older server left 0644.
    if (absl::Status m =
            SetPrivateFileMode(f->fd.get(), options.access, store->PathOf(id));
        !m.ok()) {
      DLC_LOG(WARNING) << "ssd store: " << m.message();
    }
    f->size = static_cast<uint64_t>(st.st_size);
    store->disk_bytes_ += f->size;
    store->files_[id] = std::move(f);
    if (id > max_id) max_id = id;
  }
  ::closedir(d);
  store->next_id_ = std::max(first_new_id, max_id + 1);
  if (store->next_id_ == 0) store->next_id_ = 1;  // wrapped: start over
  return store;
}

absl::Status SsdStore::StartNewFile() {
  uint32_t id = next_id_;
  UniqueFd fd(::open(PathOf(id).c_str(),
                     O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     options_.access.file_mode()));
  if (!fd.valid()) {
    return ErrnoStatus(errno, absl::StrCat("create ", PathOf(id)));
  }
  if (absl::Status m =
          SetPrivateFileMode(fd.get(), options_.access, PathOf(id));
      !m.ok()) {
    ::unlink(PathOf(id).c_str());
    return absl::UnavailableError(m.message());
  }
  next_id_ = id + 1 == 0 ? 1 : id + 1;
  auto f = std::make_shared<File>();
  f->id = id;
  f->fd = std::move(fd);
  files_[id] = f;
  active_ = std::move(f);
  return absl::OkStatus();
}

absl::StatusOr<SsdStore::Location> SsdStore::Append(
    absl::Span<const char> bytes) {
  if (bytes.size() > options_.data_file_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ssd store: ", bytes.size(), " bytes do not fit a data file of ",
        options_.data_file_bytes));
  }
  absl::MutexLock append_lock(&append_mu_);
  std::shared_ptr<File> f;
  uint64_t start = 0;
  {
    absl::MutexLock lock(&mu_);
    if (active_ != nullptr &&
        active_->size + bytes.size() > options_.data_file_bytes) {
      // Sealed files are never written again; one sync makes them durable.
      sealed_.push_back(std::move(active_));
      active_ = nullptr;
    }
    if (active_ == nullptr) {
      if (absl::Status s = StartNewFile(); !s.ok()) return s;
    }
    f = active_;
    start = f->size;
  }
  // The write runs without mu_: readers only ever read below f->size.
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pwrite(f->fd.get(), bytes.data() + done, bytes.size() - done,
                         static_cast<off_t>(start + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : ENOSPC;
      // Leave no torn tail: the next append starts where this one did.
      if (::ftruncate(f->fd.get(), static_cast<off_t>(start)) != 0) {
        DLC_LOG(WARNING) << "ssd store: ftruncate " << PathOf(f->id) << ": "
                         << std::strerror(errno);
      }
      return ErrnoStatus(err, absl::StrCat("write ", PathOf(f->id)));
    }
    done += static_cast<size_t>(n);
  }
  if (options_.sync_every_write && ::fdatasync(f->fd.get()) != 0) {
    int err = errno;
    if (::ftruncate(f->fd.get(), static_cast<off_t>(start)) != 0) {
      DLC_LOG(WARNING) << "ssd store: ftruncate " << PathOf(f->id) << ": "
                       << std::strerror(errno);
    }
    return ErrnoStatus(err, absl::StrCat("fdatasync ", PathOf(f->id)));
  }
  absl::MutexLock lock(&mu_);
  f->size = start + bytes.size();
  // A file dropped meanwhile no longer counts.
  if (files_.count(f->id) != 0) disk_bytes_ += bytes.size();
  return Location{f->id, start};
}

void SsdStore::SyncSealed() {
  std::vector<std::shared_ptr<File>> files;
  {
    absl::MutexLock lock(&mu_);
    files.swap(sealed_);
  }
  for (const std::shared_ptr<File>& f : files) {
    if (::fdatasync(f->fd.get()) != 0) {
      DLC_LOG(WARNING) << "ssd store: fdatasync " << PathOf(f->id) << ": "
                       << std::strerror(errno);
    }
  }
}

absl::Status SsdStore::Read(uint32_t file, uint64_t offset,
                            absl::Span<char> dst) const {
  std::shared_ptr<File> f;
  uint64_t size = 0;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = files_.find(file);
    if (it == files_.end()) {
      return absl::NotFoundError(
          absl::StrCat("ssd store: data file ", file, " is gone"));
    }
    f = it->second;
    size = f->size;
  }
  if (offset > size || dst.size() > size - offset) {
    return absl::DataLossError(absl::StrCat("ssd store: ", PathOf(file), " is ",
                                            size, " bytes, need ",
                                            offset + dst.size()));
  }
  size_t done = 0;
  while (done < dst.size()) {
    ssize_t n = ::pread(f->fd.get(), dst.data() + done, dst.size() - done,
                        static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat(
          "ssd store: read ", PathOf(file), ": ", std::strerror(errno)));
    }
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat("ssd store: ", PathOf(file), " was truncated"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SsdStore::Drop(uint32_t file) {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(file);
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat("ssd store: no data file ", file));
  }
  if (active_ == it->second) active_ = nullptr;
  // Not worth a sync, and its descriptor must close for the space to
  // come back.
  sealed_.erase(std::remove(sealed_.begin(), sealed_.end(), it->second),
                sealed_.end());
  disk_bytes_ -= it->second->size;
  files_.erase(it);
  if (::unlink(PathOf(file).c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("unlink ", PathOf(file)));
  }
  return absl::OkStatus();
}

absl::Status SsdStore::Sync() {
  std::shared_ptr<File> f;
  {
    absl::MutexLock lock(&mu_);
    f = active_;
  }
  if (f != nullptr && ::fdatasync(f->fd.get()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fdatasync ", PathOf(f->id)));
  }
  return absl::OkStatus();
}

std::vector<SsdStore::DataFile> SsdStore::Files() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<DataFile> out;
  out.reserve(files_.size());
  for (const auto& [id, f] : files_) {
    out.push_back(DataFile{id, f->size, f == active_});
  }
  return out;
}

absl::optional<uint64_t> SsdStore::FileBytes(uint32_t file) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = files_.find(file);
  if (it == files_.end()) return absl::nullopt;
  return it->second->size;
}

uint64_t SsdStore::disk_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return disk_bytes_;
}

uint32_t SsdStore::next_file_id() const {
  absl::ReaderMutexLock lock(&mu_);
  return next_id_;
}

}  // namespace dlcache
