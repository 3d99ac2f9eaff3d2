// DLCACHE_WITH_CEPHFS=OFF: no libcephfs client; CephFsSource::Open then
// answers UNIMPLEMENTED with the reason.
#include "server/source/cephfs_source.h"

namespace dlcache {

std::unique_ptr<CephFsClient> NewLibCephFsClient() { return nullptr; }

}  // namespace dlcache
