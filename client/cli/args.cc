#include "client/cli/args.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dlcache {
namespace cli {
namespace {

const FlagSpec* FindLong(absl::Span<const FlagSpec> flags,
                         absl::string_view name) {
  for (const FlagSpec& f : flags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const FlagSpec* FindShort(absl::Span<const FlagSpec> flags, char c) {
  for (const FlagSpec& f : flags) {
    if (f.short_name != 0 && f.short_name == c) return &f;
  }
  return nullptr;
}

// "-j, --parallel N", or "    --json" so long names line up.
std::string Synopsis(const FlagSpec& f) {
  std::string s = f.short_name != 0
                      ? absl::StrCat("-", std::string(1, f.short_name), ", ")
                      : std::string("    ");
  absl::StrAppend(&s, "--", f.name);
  if (!f.value_name.empty()) absl::StrAppend(&s, " ", f.value_name);
  return s;
}

}  // namespace

std::string ParsedArgs::Get(const std::string& name,
                            const std::string& fallback) const {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : it->second;
}

absl::StatusOr<ParsedArgs> ParseArgs(absl::Span<const std::string> args,
                                     absl::Span<const FlagSpec> flags) {
  ParsedArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      out.positional.insert(out.positional.end(), args.begin() + i + 1,
                            args.end());
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      out.positional.push_back(a);
      continue;
    }
    const FlagSpec* spec = nullptr;
    std::string value;
    bool has_inline_value = false;
    if (absl::StartsWith(a, "--")) {
      std::string name = a.substr(2);
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
        has_inline_value = true;
      }
      spec = FindLong(flags, name);
    } else if (a.size() == 2) {
      spec = FindShort(flags, a[1]);
    }
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a));
    }
    if (spec->value_name.empty()) {
      if (has_inline_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", spec->name, " takes no value"));
      }
      out.flags[spec->name] = "";
      continue;
    }
    if (!has_inline_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(a, " needs a value (", spec->value_name, ")"));
      }
      value = args[++i];
    }
    out.flags[spec->name] = value;
  }
  return out;
}

std::string FormatFlagHelp(absl::Span<const FlagSpec> flags) {
  size_t width = 0;
  for (const FlagSpec& f : flags) width = std::max(width, Synopsis(f).size());
  std::string out;
  for (const FlagSpec& f : flags) {
    std::string syn = Synopsis(f);
    absl::StrAppend(&out, "  ", syn, std::string(width - syn.size() + 3, ' '),
                    f.help, "\n");
  }
  return out;
}

}  // namespace cli
}  // namespace dlcache
