#include "server/source/source_factory.h"

#include "server/source/cephfs_source.h"
#include "server/source/nfs_source.h"
#include "server/source/posix_source.h"
#include "server/source/source_url.h"

namespace dlcache {
namespace {

template <typename T>
absl::StatusOr<std::shared_ptr<Source>> Shared(
    absl::StatusOr<std::unique_ptr<T>> s) {
  if (!s.ok()) return s.status();
  return std::shared_ptr<Source>(*std::move(s));
}

}  // namespace

absl::StatusOr<std::shared_ptr<Source>> OpenSource(const std::string& root) {
  absl::StatusOr<SourceUrl> url = ParseSourceUrl(root);
  if (!url.ok()) return url.status();
  switch (url->scheme) {
    case SourceUrl::Scheme::kPosix:
      return Shared(PosixSource::Open(url->path));
    case SourceUrl::Scheme::kNfs: {
      absl::StatusOr<NfsOptions> o = NfsOptionsFromUrl(*url);
      if (!o.ok()) return o.status();
      return Shared(NfsSource::Open(*o));
    }
    case SourceUrl::Scheme::kCephFs: {
      absl::StatusOr<CephFsOptions> o = CephFsOptionsFromUrl(*url);
      if (!o.ok()) return o.status();
      return Shared(CephFsSource::Open(*o));
    }
  }
  return absl::InternalError("unknown source scheme");
}

}  // namespace dlcache
