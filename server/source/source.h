#ifndef DLCACHE_SERVER_SOURCE_SOURCE_H_
#define DLCACHE_SERVER_SOURCE_SOURCE_H_

// Moved to server/backend/source.h (issue 13). Kept only for the tests in
// tests/integration that still include this path; include the new one.
#include "server/backend/source.h"  // IWYU pragma: export

#endif  // DLCACHE_SERVER_SOURCE_SOURCE_H_
