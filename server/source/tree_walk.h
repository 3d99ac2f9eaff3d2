#ifndef DLCACHE_SERVER_SOURCE_TREE_WALK_H_
#define DLCACHE_SERVER_SOURCE_TREE_WALK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/backend/source.h"

namespace dlcache {

// One directory entry as a network source's client library reports it.
struct TreeEntry {
  std::string name;
  uint32_t mode = 0;  // st_mode bits (S_IFMT and permissions)
  FileInfo info;      // meaningful for regular files
};

// Lists one directory (a path relative to the source's root, "" = the
// root) into *entries (cleared by the callee). Codes as Source::List.
using ReadDirFn = absl::FunctionRef<absl::Status(
    const std::string& dir, std::vector<TreeEntry>* entries)>;

// The depth-first walk of Source::List for sources that can only read one
// directory at a time (NfsSource, CephFsSource): calls `fn` with the
// relative path and info of every regular file below the directory
// `prefix` ("" = the root) until `fn` returns false. Rules, shared so that
// both sources behave alike:
//  * a subdirectory that vanished mid-walk (NOT_FOUND) is skipped;
//  * UNAVAILABLE (the server went away) ends the walk: a warm-up must not
//    claim to be complete;
//  * any other error is remembered and the walk goes on; the last one is
//    returned, else OK;
//  * entries that are neither directories nor regular files (symlinks,
//    fifos...) are skipped and counted in one WARNING naming `source` and
//    the first of them.
// Blocks for as long as read_dir and fn do.
absl::Status WalkTree(
    absl::string_view source, absl::string_view prefix, ReadDirFn read_dir,
    absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_TREE_WALK_H_
