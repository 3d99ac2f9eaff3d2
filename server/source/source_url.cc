#include "server/source/source_url.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/log_escape.h"

namespace dlcache {
namespace {

absl::Status Bad(absl::string_view root, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad source root '", LogEscape(root), "': ", why));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Percent-decoding; false on a truncated or non-hex escape or a NUL.
bool PercentDecode(absl::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    int hi = HexValue(in[i + 1]), lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

// "/a//b/" -> "/a/b"; ".." anywhere is refused rather than resolved, since
// the server resolves it against a tree we cannot see.
absl::StatusOr<std::string> NormalisePath(absl::string_view root,
                                          absl::string_view raw) {
  std::string decoded;
  if (!PercentDecode(raw, &decoded)) return Bad(root, "bad %-escape in path");
  std::vector<absl::string_view> parts;
  for (absl::string_view p : absl::StrSplit(decoded, '/', absl::SkipEmpty())) {
    if (p == ".") continue;
    if (p == "..") return Bad(root, "'..' in path");
    parts.push_back(p);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

absl::Status ParseQuery(absl::string_view root, absl::string_view query,
                        SourceUrl* url) {
  if (query.empty()) return absl::OkStatus();
  for (absl::string_view kv : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    std::vector<absl::string_view> p =
        absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.size() != 2 || p[0].empty()) {
      return Bad(root,
                 absl::StrCat("option '", LogEscape(kv), "' is not KEY=VALUE"));
    }
    std::string key, value;
    if (!PercentDecode(p[0], &key) || !PercentDecode(p[1], &value)) {
      return Bad(root, "bad %-escape in an option");
    }
    if (!url->options.emplace(key, value).second) {
      return Bad(root,
                 absl::StrCat("option '", LogEscape(key), "' given twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SourceUrl> ParseSourceUrl(absl::string_view root) {
  SourceUrl url;
  const size_t sep = root.find("://");
  if (sep == absl::string_view::npos) {
    if (root.empty()) return Bad(root, "empty");
    url.scheme = SourceUrl::Scheme::kPosix;
    url.path = std::string(root);
    return url;
  }
  const std::string scheme = absl::AsciiStrToLower(root.substr(0, sep));
  if (scheme == "nfs") {
    url.scheme = SourceUrl::Scheme::kNfs;
  } else if (scheme == "cephfs") {
    url.scheme = SourceUrl::Scheme::kCephFs;
  } else {
    return Bad(root, absl::StrCat("unknown scheme '", LogEscape(scheme),
                                  "' (want a directory, nfs:// or cephfs://)"));
  }
  absl::string_view rest = root.substr(sep + 3);
  absl::string_view query;
  if (size_t q = rest.find('?'); q != absl::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  absl::string_view authority = rest, path = "/";
  if (size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    authority = rest.substr(0, slash);
    path = rest.substr(slash);
  }
  if (authority.empty()) {
    return Bad(root, url.scheme == SourceUrl::Scheme::kNfs
                         ? "no server host"
                         : "no file system name");
  }
  absl::StatusOr<std::string> norm = NormalisePath(root, path);
  if (!norm.ok()) return norm.status();
  url.path = *std::move(norm);
  if (absl::Status s = ParseQuery(root, query, &url); !s.ok()) return s;

  if (url.scheme == SourceUrl::Scheme::kNfs) {
    if (authority.find('@') != absl::string_view::npos) {
      return Bad(root, "nfs:// takes no user (use ?uid=&gid=)");
    }
    absl::string_view host = authority, port;
    if (absl::StartsWith(authority, "[")) {  // [IPv6]:port
      size_t close = authority.find(']');
      if (close == absl::string_view::npos) return Bad(root, "unclosed '['");
      host = authority.substr(1, close - 1);
      absl::string_view after = authority.substr(close + 1);
      if (!after.empty()) {
        if (after[0] != ':') return Bad(root, "junk after ']'");
        port = after.substr(1);
      }
    } else if (size_t colon = authority.rfind(':');
               colon != absl::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
    if (host.empty()) return Bad(root, "no server host");
    url.host = std::string(host);
    if (!port.empty() || authority.back() == ':') {
      int p = 0;
      if (!absl::SimpleAtoi(port, &p) || p < 1 || p > 65535) {
        return Bad(root, absl::StrCat("bad port '", LogEscape(port), "'"));
      }
      url.port = p;
    }
    return url;
  }

  // cephfs://[client.ID@]FS_NAME/PATH
  absl::string_view fs = authority;
  if (size_t at = authority.find('@'); at != absl::string_view::npos) {
    absl::string_view id = authority.substr(0, at);
    fs = authority.substr(at + 1);
    absl::ConsumePrefix(&id, "client.");
    if (id.empty()) return Bad(root, "empty client id before '@'");
    url.client_id = std::string(id);
  }
  if (fs.empty()) return Bad(root, "no file system name");
  if (fs.find(':') != absl::string_view::npos) {
    return Bad(root,
               "cephfs:// names a file system, not host:port "
               "(monitors come from ?conf= or ?mon_host=)");
  }
  url.fs_name = std::string(fs);
  return url;
}

absl::StatusOr<int64_t> UrlIntOption(const SourceUrl& url,
                                     const std::string& key, int64_t dflt,
                                     int64_t min, int64_t max) {
  auto it = url.options.find(key);
  if (it == url.options.end()) return dflt;
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("source option ", key, "='", LogEscape(it->second),
                     "': want an integer in [", min, ", ", max, "]"));
  }
  return v;
}

}  // namespace dlcache
