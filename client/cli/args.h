#ifndef DLCACHE_CLIENT_CLI_ARGS_H_
#define DLCACHE_CLIENT_CLI_ARGS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dlcache {
namespace cli {

// A command-line flag: "--name VALUE", "--name=VALUE", or a switch
// "--name" when value_name is empty. short_name (e.g. 'j') also allows
// "-j VALUE".
struct FlagSpec {
  std::string name;
  std::string value_name;  // e.g. "PATH"; empty for a switch
  std::string help;
  char short_name = 0;
};

// The result of ParseArgs: positionals in order and the flags seen (the
// last occurrence wins; switches map to "").
struct ParsedArgs {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;

  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  std::string Get(const std::string& name,
                  const std::string& fallback = "") const;
};

// Parses `args` (argv without the program name). Flags may come before or
// after positionals; "--" makes everything after it positional; "-" alone
// is positional. Returns INVALID_ARGUMENT naming the offending argument
// for an unknown flag, a missing value, or a value given to a switch.
// Pure, thread-safe.
absl::StatusOr<ParsedArgs> ParseArgs(absl::Span<const std::string> args,
                                     absl::Span<const FlagSpec> flags);

// "  -j, --parallel N   help" lines, aligned, one per flag.
std::string FormatFlagHelp(absl::Span<const FlagSpec> flags);

}  // namespace cli
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_CLI_ARGS_H_
