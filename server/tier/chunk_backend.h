#ifndef DLCACHE_SERVER_TIER_CHUNK_BACKEND_H_
#define DLCACHE_SERVER_TIER_CHUNK_BACKEND_H_

// Moved to server/backend/chunk_backend.h (issue 13). Kept only for the
// tests in tests/integration that still include this path; include the new
// one.
#include "server/backend/chunk_backend.h"  // IWYU pragma: export

#endif  // DLCACHE_SERVER_TIER_CHUNK_BACKEND_H_
