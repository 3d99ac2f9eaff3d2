#ifndef DLCACHE_BENCH_SAMPLE_NAMES_H_
#define DLCACHE_BENCH_SAMPLE_NAMES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlcache::bench {

// How the scale benches name their files (issue 17), always in 1000 class
// folders, file i in folder i % 1000:
//   kShort     "n0123/00004567.JPEG"              19 bytes
//   kImageNet  "n01440887/n01440887_1234.JPEG"    ~30 bytes, as ILSVRC's
//              train set (synset folders, "<synset>_<number>.JPEG")
// The index keeps every path, so the per-item RAM grows with its length.
enum class SampleNames { kShort, kImageNet };

// "short" or "imagenet"; INVALID_ARGUMENT otherwise.
absl::StatusOr<SampleNames> ParseSampleNames(absl::string_view text);

// The relative path of file i. Pure, thread-safe.
std::string SampleName(SampleNames style, uint64_t i);

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_SAMPLE_NAMES_H_
