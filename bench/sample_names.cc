#include "bench/sample_names.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dlcache::bench {

absl::StatusOr<SampleNames> ParseSampleNames(absl::string_view text) {
  if (text == "short") return SampleNames::kShort;
  if (text == "imagenet") return SampleNames::kImageNet;
  return absl::InvalidArgumentError(
      absl::StrCat("--names: \"", text, "\" is neither short nor imagenet"));
}

std::string SampleName(SampleNames style, uint64_t i) {
  const auto cls = static_cast<unsigned>(i % 1000);
  if (style == SampleNames::kShort) {
    return absl::StrFormat("n%04u/%08u.JPEG", cls, static_cast<unsigned>(i));
  }
  // Synset ids spread as ILSVRC's (n01440764 .. n15075141); the numbers
  // within a class are sparse, as theirs, mostly of 4-5 digits.
  const unsigned synset = 1440764 + cls * 13634;
  const auto number = static_cast<unsigned>(i / 1000 * 37 + cls % 97 + 1);
  return absl::StrFormat("n%08u/n%08u_%u.JPEG", synset, synset, number);
}

}  // namespace dlcache::bench
