// DLCACHE_WITH_NFS=OFF: nfs:// roots are parsed (so errors in them are
// still reported) but cannot be opened.
#include "absl/status/status.h"
#include "server/source/nfs_source.h"

namespace dlcache {

absl::StatusOr<NfsOptions> NfsOptionsFromUrl(const SourceUrl& url) {
  NfsOptions o;
  o.host = url.host;
  o.export_path = url.path;
  return o;
}

absl::StatusOr<std::unique_ptr<NfsSource>> NfsSource::Open(const NfsOptions&) {
  return absl::UnimplementedError(
      "nfs:// sources need libnfs: this dlcached was built with "
      "DLCACHE_WITH_NFS=OFF (install libnfs-dev and rebuild), or mount the "
      "export and give its directory instead");
}

class NfsSource::Loop {};

NfsSource::~NfsSource() = default;
absl::StatusOr<FileInfo> NfsSource::Stat(absl::string_view) {
  return absl::UnimplementedError("built without libnfs");
}
absl::Status NfsSource::ReadAt(absl::string_view, uint64_t, absl::Span<char>) {
  return absl::UnimplementedError("built without libnfs");
}
absl::Status NfsSource::List(
    absl::string_view,
    absl::FunctionRef<bool(absl::string_view, const FileInfo&)>) {
  return absl::UnimplementedError("built without libnfs");
}
uint64_t NfsSource::inflight() const { return 0; }
uint64_t NfsSource::max_inflight() const { return 0; }
uint64_t NfsSource::remounts() const { return 0; }

}  // namespace dlcache
