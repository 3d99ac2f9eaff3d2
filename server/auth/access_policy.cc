#include "server/auth/access_policy.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dlcache {
namespace {

bool In(const std::vector<uint32_t>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

bool PrincipalSet::Contains(const PeerCredentials& who) const {
  if (everyone) return true;
  if (In(uids, who.uid) || In(gids, who.gid)) return true;
  for (uint32_t g : who.groups) {
    if (In(gids, g)) return true;
  }
  return false;
}

std::string PrincipalSet::DebugString() const {
  if (everyone) return "*";
  if (uids.empty() && gids.empty()) return "none";
  std::vector<std::string> parts;
  for (uint32_t u : uids) parts.push_back(absl::StrCat("uid:", u));
  for (uint32_t g : gids) parts.push_back(absl::StrCat("gid:", g));
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<PrincipalSet> ParsePrincipalSet(absl::string_view text,
                                               absl::string_view flag) {
  PrincipalSet set;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty() || text == "none") return set;
  if (text == "*") {
    set.everyone = true;
    return set;
  }
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    std::vector<uint32_t>* into = nullptr;
    if (absl::ConsumePrefix(&entry, "uid:")) {
      into = &set.uids;
    } else if (absl::ConsumePrefix(&entry, "gid:")) {
      into = &set.gids;
    }
    uint32_t id;
    if (into == nullptr || !absl::SimpleAtoi(entry, &id) ||
        id == static_cast<uint32_t>(-1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad ", flag, " entry '", entry,
                       "': want '*', 'none' or comma-separated uid:N / gid:N"));
    }
    into->push_back(id);
  }
  return set;
}

AccessPolicy AccessPolicy::AllowAll(uint32_t server_uid) {
  return AccessPolicy(server_uid);
}

absl::StatusOr<AccessPolicy> AccessPolicy::FromConfig(
    const AccessConfig& config, uint32_t server_uid,
    const std::vector<std::string>& datasets) {
  AccessPolicy p(server_uid);
  p.admins_.uids = config.admin_uids;
  p.admins_.gids = config.admin_gids;
  absl::StatusOr<PrincipalSet> def =
      ParsePrincipalSet(config.default_readers, "--default_readers");
  if (!def.ok()) return def.status();
  p.default_readers_ = *std::move(def);
  for (absl::string_view item :
       absl::StrSplit(config.dataset_readers, ';', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    std::string name(absl::StripAsciiWhitespace(kv[0]));
    if (kv.size() != 2 || name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --dataset_readers entry '", item,
                       "': want DATASET=PRINCIPALS, e.g. imagenet=gid:2000"));
    }
    if (std::find(datasets.begin(), datasets.end(), name) == datasets.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dataset_readers names dataset '", name,
                       "', which is not served (--dataset/--source)"));
    }
    if (p.readers_.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dataset_readers names dataset '", name, "' twice"));
    }
    absl::StatusOr<PrincipalSet> set =
        ParsePrincipalSet(kv[1], "--dataset_readers");
    if (!set.ok()) return set.status();
    p.readers_.emplace(std::move(name), *std::move(set));
  }
  return p;
}

bool AccessPolicy::IsAdmin(const PeerCredentials& who) const {
  return who.uid == 0 || who.uid == server_uid_ || admins_.Contains(who);
}

absl::Status AccessPolicy::CheckRead(const PeerCredentials& who,
                                     absl::string_view dataset) const {
  auto it = readers_.find(dataset);
  const PrincipalSet& readers =
      it == readers_.end() ? default_readers_ : it->second;
  if (readers.Contains(who) || IsAdmin(who)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      who.DebugString(), " may not read dataset '", dataset,
      "': its readers are ", readers.DebugString(),
      it == readers_.end() ? " (--default_readers)" : " (--dataset_readers)"));
}

absl::Status AccessPolicy::CheckAdmin(const PeerCredentials& who,
                                      absl::string_view what) const {
  if (IsAdmin(who)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      who.DebugString(), " may not ", what,
      ": only the server's uid, root, --admin_uids and --admin_gids may"));
}

std::string AccessPolicy::DebugString() const {
  std::string out = absl::StrCat(
      "admins: root, uid:", server_uid_, admins_.empty() ? "" : ",",
      admins_.empty() ? "" : admins_.DebugString(),
      "; default readers: ", default_readers_.DebugString());
  for (const auto& [name, set] : readers_) {
    absl::StrAppend(&out, "; ", name, ": ", set.DebugString());
  }
  return out;
}

}  // namespace dlcache
