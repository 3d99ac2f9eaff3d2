#include "client/cli/commands.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli/admin_client.h"
#include "client/cli/args.h"
#include "client/cli/format.h"
#include "client/cli/json.h"
#include "client/cli/progress_bar.h"
#include "client/cli/table.h"
#include "common/fd_passing.h"
#include "common/key.h"
#include "dlcache/client.h"
#include "dlcache/v1/admin.pb.h"

namespace dlcache {
namespace cli {
namespace {

// The name of group `gid`, or its number when it has no name here.
std::string GroupName(gid_t gid) {
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &g, buf.data(), buf.size(), &found) == 0 &&
      found != nullptr) {
    return absl::StrCat(found->gr_name, " (gid ", gid, ")");
  }
  return absl::StrCat("gid ", gid);
}

// A connect refused for lack of permission means the server runs but the
// caller may not use its admin socket; "is it running?" would send the
// user looking for a dead server. Returns the message to print, or "" when
// the failure is not about permissions.
std::string AdminSocketDenied(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != EACCES) return "";
    return absl::StrCat("permission denied: your uid ", ::getuid(),
                        " may not enter a directory on the way to ", path,
                        " (the admin socket); run dlcachectl as a member of "
                        "the group that owns that directory");
  }
  if (!S_ISSOCK(st.st_mode) || ::access(path.c_str(), W_OK) == 0 ||
      errno != EACCES) {
    return "";
  }
  return absl::StrCat(
      "permission denied: your uid ", ::getuid(), " is not in the admin group ",
      GroupName(st.st_gid), " of ", path, " (mode ",
      absl::StrFormat("%04o", st.st_mode & 07777),
      "); dlcached is running. Run dlcachectl as a member of that group "
      "(Kubernetes: supplementalGroups), as the server's user, or through "
      "--address with a token or certificate");
}

constexpr absl::Duration kDefaultTimeout = absl::Seconds(10);

const std::vector<FlagSpec>& GlobalFlags() {
  static const auto* flags = new std::vector<FlagSpec>{
      {"socket", "PATH",
       "dlcached's data socket (default $DLCACHE_SOCKET, else "
       "/run/dlcache/dlcached.sock); the admin API is on PATH.admin"},
      {"admin_socket", "PATH",
       "dlcached's admin socket, when not the --socket path + .admin"},
      {"address", "HOST:PORT",
       "talk to the TCP admin address instead of the socket"},
      {"tls_cert", "FILE",
       "with --address: PEM client certificate for mTLS (with --tls_key, "
       "--tls_ca)"},
      {"tls_key", "FILE", "with --address: PEM key of --tls_cert"},
      {"tls_ca", "FILE", "with --address: PEM CA the server must chain to"},
      {"tls_server_name", "NAME",
       "with --address: name the server certificate must carry (default "
       "dlcached)"},
      {"token_file", "FILE",
       "with --address: file whose first line is dlcached's "
       "--admin_token_file token"},
      {"json", "", "machine-readable output: one JSON object on stdout"},
      {"timeout", "DURATION",
       "connect and call deadline, e.g. 5s, 500ms, 2m (default 10s; warmup, "
       "sync, revalidate and evict have none unless given)"},
      {"help", "", "show help", 'h'},
  };
  return *flags;
}

struct Command {
  std::string name;
  std::string args;  // synopsis of the positionals
  std::string summary;
  std::string details;
  size_t min_positional;
  size_t max_positional;
  std::vector<FlagSpec> flags;
};

const std::vector<Command>& Commands() {
  static const auto* commands = new std::vector<Command>{
      {"status",
       "",
       "server state, arena use, sessions and datasets",
       "Shows dlcached's state, version and uptime, how much of the shared-"
       "memory arena\nis used and leased, the open sessions and the "
       "configured datasets.\n",
       0,
       0,
       {}},
      {"stats",
       "[DATASET]",
       "hit rate and traffic per dataset",
       "Shows per-dataset counters since the server started: hit rate "
       "(chunks served\nfrom memory / all chunks served), bytes served, "
       "cached bytes and chunks,\nleased bytes, evictions, source reads and "
       "fill errors. DATASET limits the\noutput to one dataset.\n",
       0,
       1,
       {}},
      {"warmup",
       "DATASET [PREFIX]",
       "fill the cache from the source",
       "Lists DATASET (or PREFIX, a directory or file prefix inside it) at "
       "the source and\nfills every file into the cache; files already "
       "cached are skipped, so running\nit again resumes. Shows a live "
       "progress line on a terminal (a line every few\nseconds otherwise) "
       "and the first failures at the end. Exits 1 if any file\nfailed.\n",
       1,
       2,
       {{"parallel", "N", "files filled at once (default: the server's)", 'j'},
        {"interval", "SECONDS",
         "seconds between progress lines when not on a terminal (default "
         "5)"},
        {"cluster", "",
         "every node of the cluster fills the chunks it owns, so the source "
         "is read once per chunk; progress is the whole cluster's"}}},
      {"sync",
       "DATASET [PREFIX]",
       "copy from the source to the SSD tier",
       "Copies DATASET (or PREFIX inside it) from the source to the server's "
       "SSD tier,\nskipping chunks that are there and up to date, so that a "
       "restarted or cold\nnode serves them without the source. Progress as "
       "for warmup. Fails when the\nserver runs without an SSD tier "
       "(dlcached --ssd_dir). Exits 1 if any file\nfailed.\n",
       1,
       2,
       {{"parallel", "N", "files copied at once (default: the server's)", 'j'},
        {"interval", "SECONDS",
         "seconds between progress lines when not on a terminal (default "
         "5)"}}},
      {"revalidate",
       "DATASET [PREFIX]",
       "drop cached data that changed at the source",
       "Compares the cached files of DATASET (or under PREFIX) with the "
       "source (size and\nmtime) and drops the chunks of files that changed "
       "or vanished, in memory and\non SSD; anything served afterwards is "
       "current. Prints how many files were\nchecked, changed and missing "
       "and how many chunks were dropped.\n",
       1,
       2,
       {{"verify-checksums", "",
         "also re-read every SSD chunk from the source and check its "
         "checksum (slow)"}}},
      {"evict",
       "DATASET [PREFIX]",
       "drop cached chunks",
       "Drops the cached chunks of DATASET, or only of files under PREFIX. "
       "Chunks that\nclients still hold are dropped from the index now and "
       "freed when released.\n",
       1,
       2,
       {}},
      {"ls",
       "DATASET [PREFIX]",
       "list a dataset's files through the cache",
       "Lists the files of DATASET (or under PREFIX, a directory or file "
       "inside it) as\ndlcached's listing of the source holds them: size, "
       "modification time (UTC)\nand name (the key clients read it by), "
       "sorted by name. Goes through the data\nsocket, checked like a read "
       "(a caller who may not read the dataset gets\nPERMISSION_DENIED); "
       "needs no access to the source.\n",
       1,
       2,
       {{"refresh", "", "have dlcached list its source again first"}}},
      {"help",
       "[COMMAND]",
       "show help for dlcachectl or a command",
       "",
       0,
       1,
       {}},
  };
  return *commands;
}

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string MainHelp() {
  std::string s =
      "Usage: dlcachectl [FLAGS] COMMAND [ARGS]\n\n"
      "Administers the node's dlcached cache server.\n\nCommands:\n";
  Table t({"", "", ""});
  for (const Command& c : Commands()) {
    t.AddRow({"", absl::StrCat(c.name, c.args.empty() ? "" : " ", c.args),
              c.summary});
  }
  absl::StrAppend(&s, t.Render(false), "\nFlags:\n",
                  FormatFlagHelp(GlobalFlags()),
                  "\nEnvironment:\n"
                  "  DLCACHE_SOCKET   default of --socket (the data socket; "
                  "admin on PATH.admin)\n"
                  "\nExit status: 0 success; 1 the command failed or a file "
                  "failed to warm up or\nsync; 2 bad command line; 3 dlcached "
                  "could not be reached.\n\n"
                  "Run 'dlcachectl COMMAND --help' for a command's help.\n");
  return s;
}

std::string CommandHelp(const Command& c) {
  std::string s = absl::StrCat(
      "Usage: dlcachectl [FLAGS] ", c.name, c.args.empty() ? "" : " ", c.args,
      c.flags.empty() ? "" : " [COMMAND FLAGS]", "\n\n",
      c.details.empty() ? c.summary + "\n" : c.details);
  if (!c.flags.empty()) {
    absl::StrAppend(&s, "\nCommand flags:\n", FormatFlagHelp(c.flags));
  }
  absl::StrAppend(&s, "\nFlags:\n", FormatFlagHelp(GlobalFlags()));
  return s;
}

// Everything a command needs once the command line is parsed.
struct Context {
  const CliEnv* env;
  ParsedArgs args;
  const Command* command;
  std::string target;
  absl::Duration timeout = kDefaultTimeout;
  bool timeout_given = false;
  bool json = false;
  std::ostream& out() const { return *env->out; }
  std::ostream& err() const { return *env->err; }
};

int Usage(const CliEnv& env, absl::string_view message,
          const Command* command) {
  *env.err << "dlcachectl: " << message << "\nRun 'dlcachectl "
           << (command != nullptr && command->name != "help"
                   ? command->name + " "
                   : std::string())
           << "--help' for usage.\n";
  return kExitUsage;
}

// Reports a failed call; in --json mode also as {"error": ...} on stdout.
int Fail(const Context& ctx, absl::string_view what, const absl::Status& st) {
  ctx.err() << "dlcachectl: " << what << ": "
            << absl::StatusCodeToString(st.code()) << ": " << st.message()
            << "\n";
  if (ctx.json) {
    ctx.out() << "{\"error\":{\"code\":"
              << JsonString(absl::StatusCodeToString(st.code()))
              << ",\"message\":" << JsonString(st.message()) << "}}\n";
  }
  return kExitFailed;
}

absl::StatusOr<absl::Duration> ParseTimeout(const std::string& text) {
  absl::Duration d;
  double seconds;
  if (absl::SimpleAtod(text, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &d)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--timeout: cannot parse '", text, "' (e.g. 5s, 500ms, 2m)"));
  }
  if (d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  return d;
}

int RunStatus(const Context& ctx, AdminClient& admin) {
  absl::StatusOr<v1::StatusResponse> st = admin.Status(ctx.timeout);
  if (!st.ok()) return Fail(ctx, "status", st.status());
  if (ctx.json) {
    ctx.out() << ProtoToJson(*st) << "\n";
    return kExitOk;
  }
  const v1::StatusResponse& s = *st;
  ctx.out() << "dlcached " << (s.version().empty() ? "?" : s.version())
            << " at " << admin.target() << ": " << s.state() << ", up "
            << FormatUptime(s.uptime_s()) << "\n\n";
  Table kv({"", ""});
  kv.AddRow({"socket", TerminalSafe(s.socket_path())});
  kv.AddRow({"arena",
             absl::StrCat(FormatBytes(s.arena_used_bytes()), " of ",
                          FormatBytes(s.arena_bytes()), " used (",
                          FormatPercent(s.arena_used_bytes(), s.arena_bytes()),
                          "), ", FormatBytes(s.leased_bytes()), " leased")});
  kv.AddRow({"segments",
             absl::StrCat(s.segments(), " in ", TerminalSafe(s.shm_dir()))});
  kv.AddRow({"chunks", absl::StrCat(FormatCount(s.cached_chunks()),
                                    " cached, chunk size ",
                                    FormatBytes(s.chunk_size()))});
  kv.AddRow({"sessions", absl::StrCat(s.sessions(), " open, ",
                                      FormatCount(s.leases()), " leases")});
  kv.AddRow({"datasets", absl::StrCat(s.datasets_size())});
  if (s.plans().enabled()) {
    const v1::PlanStatus& p = s.plans();
    kv.AddRow({"epoch plans",
               absl::StrCat(
                   p.plans(), " (", FormatCount(p.planned_positions()),
                   " planned reads held), ", FormatCount(p.consumed()),
                   " reads consumed, ", FormatCount(p.refusals()), " refused",
                   p.progress_dropped() == 0
                       ? ""
                       : absl::StrCat(", ", FormatCount(p.progress_dropped()),
                                      " progress reports dropped"))});
    kv.AddRow(
        {"look-ahead",
         absl::StrCat(FormatCount(p.lookahead_cached()),
                      " planned reads found cached, ",
                      FormatCount(p.lookahead_issued()), " fills issued, ",
                      FormatCount(p.lookahead_skipped()), " skipped, ",
                      FormatCount(p.lookahead_failed()), " failed, ",
                      p.lookahead_in_flight(), " in flight")});
  }
  ctx.out() << kv.Render(false);
  if (s.datasets_size() > 0) {
    Table ds({"  NAME", "SOURCE"});
    for (const v1::DatasetInfo& d : s.datasets()) {
      ds.AddRow({absl::StrCat("  ", TerminalSafe(d.name())),
                 TerminalSafe(d.source())});
    }
    ctx.out() << "\n" << ds.Render();
  }
  if (s.plans().plan_list_size() > 0) {
    using A = Table::Align;
    Table pl(
        {"  PLAN", "DATASET", "SESSIONS", "FRONTIER", "END", "HELD", "RANKS"},
        {A::kLeft, A::kLeft, A::kRight, A::kRight, A::kRight, A::kRight,
         A::kLeft});
    for (const v1::PlanInfo& p : s.plans().plan_list()) {
      // A job plan: its world size and the ranks attached on this node.
      std::string ranks = "-";
      if (p.world_size() > 0) {
        ranks = absl::StrCat(
            p.world_size(), ": ",
            absl::StrJoin(p.ranks(), ",",
                          [](std::string* out, const v1::PlanRank& r) {
                            absl::StrAppend(out, r.rank());
                          }));
      }
      pl.AddRow({absl::StrCat("  ", TerminalSafe(p.name())),
                 TerminalSafe(p.dataset()), absl::StrCat(p.sessions()),
                 absl::StrCat(p.frontier()), absl::StrCat(p.end()),
                 absl::StrCat(p.planned_positions()), ranks});
    }
    ctx.out() << "\n" << pl.Render();
  }
  if (s.stalls().jobs_size() > 0) {
    // The stall each job sees (issue 34), as its loaders measured it.
    using A = Table::Align;
    Table st({"  JOB (PLAN)", "DATASET", "OWNER", "BATCHES", "WAIT", "STEP",
              "STALL"},
             {A::kLeft, A::kLeft, A::kLeft, A::kRight, A::kRight, A::kRight,
              A::kRight});
    for (const v1::JobStall& j : s.stalls().jobs()) {
      const double total = j.wait_s() + j.step_s();
      st.AddRow(
          {absl::StrCat("  ", j.plan().empty() ? "-" : TerminalSafe(j.plan())),
           TerminalSafe(j.dataset()), TerminalSafe(j.owner()),
           FormatCount(j.batches()), absl::StrFormat("%.1fs", j.wait_s()),
           absl::StrFormat("%.1fs", j.step_s()),
           total > 0 ? absl::StrFormat("%.1f%%", 100 * j.wait_s() / total)
                     : "-"});
    }
    ctx.out() << "\n" << st.Render();
  }
  return kExitOk;
}

int RunStats(const Context& ctx, AdminClient& admin) {
  const std::string dataset =
      ctx.args.positional.size() > 1 ? ctx.args.positional[1] : "";
  absl::StatusOr<v1::StatsResponse> st = admin.Stats(dataset, ctx.timeout);
  if (!st.ok()) return Fail(ctx, "stats", st.status());
  if (ctx.json) {
    std::vector<std::string> items;
    for (const v1::DatasetStats& d : st->datasets()) {
      uint64_t served = d.hits() + d.misses();
      std::string rate = served == 0
                             ? "null"
                             : JsonNumber(static_cast<double>(d.hits()) /
                                          static_cast<double>(served));
      items.push_back(ProtoToJson(d, {{"hit_rate", rate}}));
    }
    ctx.out() << "{\"datasets\":[" << absl::StrJoin(items, ",") << "]}\n";
    return kExitOk;
  }
  if (st->datasets_size() == 0) {
    ctx.out() << "no datasets\n";
    return kExitOk;
  }
  using A = Table::Align;
  Table t({"DATASET", "HIT RATE", "HITS", "MISSES", "WARM-UP FILLS",
           "LOOK-AHEAD FILLS", "SERVED", "CACHED", "CHUNKS", "LEASED",
           "EVICTIONS", "SOURCE READS", "SOURCE BYTES", "FILL ERRORS"},
          {A::kLeft, A::kRight, A::kRight, A::kRight, A::kRight, A::kRight,
           A::kRight, A::kRight, A::kRight, A::kRight, A::kRight, A::kRight,
           A::kRight, A::kRight});
  for (const v1::DatasetStats& d : st->datasets()) {
    t.AddRow({TerminalSafe(d.dataset()),
              FormatPercent(d.hits(), d.hits() + d.misses()),
              FormatCount(d.hits()), FormatCount(d.misses()),
              FormatCount(d.warmup_fills()), FormatCount(d.lookahead_fills()),
              FormatBytes(d.bytes_served()), FormatBytes(d.cached_bytes()),
              FormatCount(d.cached_chunks()), FormatBytes(d.leased_bytes()),
              FormatCount(d.evictions()), FormatCount(d.source_reads()),
              FormatBytes(d.source_bytes()), FormatCount(d.fill_errors())});
  }
  ctx.out() << t.Render();
  return kExitOk;
}

WarmupSnapshot ToSnapshot(const v1::JobProgress& p) {
  WarmupSnapshot s;
  s.files_total = p.files_total();
  s.files_done = p.files_done();
  s.files_skipped = p.files_skipped();
  s.files_failed = p.files_failed();
  s.bytes_total = p.bytes_total();
  s.bytes_done = p.bytes_done();
  s.listing_done = p.listing_done();
  s.elapsed_s = p.elapsed_s();
  s.done = p.done();
  return s;
}

// Warm-up (into memory) and sync (to the SSD tier) stream the same
// progress messages and are shown alike.
int RunFill(const Context& ctx, AdminClient& admin, bool sync) {
  const std::string& dataset = ctx.args.positional[1];
  const std::string prefix =
      ctx.args.positional.size() > 2 ? ctx.args.positional[2] : "";
  // CheckArgs() validated the numbers already.
  uint32_t parallel = 0;
  if (ctx.args.Has("parallel")) {
    (void)absl::SimpleAtoi(ctx.args.Get("parallel"), &parallel);
  }
  double interval = 5.0;
  if (ctx.args.Has("interval")) {
    (void)absl::SimpleAtod(ctx.args.Get("interval"), &interval);
  }

  // Shown to a person: escaped (a prefix is a file name, any bytes).
  const std::string what = TerminalSafe(
      prefix.empty() ? dataset : absl::StrCat(dataset, "/", prefix));
  const char* verb = sync ? "sync" : "warmup";
  std::unique_ptr<ProgressBar> bar;
  if (!ctx.json) {
    ctx.out() << (sync ? "syncing " : "warming up ") << what
              << (sync ? " to the SSD tier" : "")
              << (!sync && ctx.args.Has("cluster") ? " on the whole cluster"
                                                   : "")
              << " via " << admin.target() << "\n";
    bar = std::make_unique<ProgressBar>(ctx.out(), ctx.env->out_is_tty,
                                        ctx.env->terminal_width, interval);
  }
  v1::JobProgress last;
  bool got_any = false;
  auto on_progress = [&](const v1::JobProgress& p) {
    last = p;
    got_any = true;
    if (bar != nullptr) bar->Update(ToSnapshot(p));
  };
  const absl::Duration timeout =
      ctx.timeout_given ? ctx.timeout : absl::InfiniteDuration();
  absl::Status st;
  if (sync) {
    v1::SyncRequest req;
    req.set_dataset(dataset);
    req.set_prefix(prefix);
    req.set_parallelism(parallel);
    st = admin.Sync(req, timeout, on_progress);
  } else {
    v1::WarmupRequest req;
    req.set_dataset(dataset);
    req.set_prefix(prefix);
    req.set_parallelism(parallel);
    req.set_cluster(ctx.args.Has("cluster"));
    st = admin.Warmup(req, timeout, on_progress);
  }
  if (bar != nullptr && got_any) bar->Finish(ToSnapshot(last));
  if (!st.ok()) {
    if (sync && absl::IsFailedPrecondition(st)) {
      // The one way a sync fails before it starts: say so plainly.
      return Fail(ctx, absl::StrCat("cannot sync ", what), st);
    }
    return Fail(ctx, absl::StrCat(verb, " of ", what), st);
  }
  if (!last.done()) {
    return Fail(
        ctx, absl::StrCat(verb, " of ", what),
        absl::UnavailableError(absl::StrCat(
            "the progress stream ended before the ", verb, " was done")));
  }
  if (ctx.json) {
    ctx.out() << ProtoToJson(last) << "\n";
  } else {
    const double rate =
        last.elapsed_s() > 0 ? last.bytes_done() / last.elapsed_s() : 0;
    ctx.out() << "done: " << FormatCount(last.files_done()) << " files ("
              << FormatCount(last.files_skipped())
              << (sync ? " already on SSD), " : " already cached), ")
              << FormatBytes(last.bytes_done()) << " in "
              << FormatElapsed(last.elapsed_s()) << " (" << FormatRate(rate)
              << "), " << FormatCount(last.files_failed()) << " failed\n";
    if (last.files_failed() > 0) {
      ctx.out() << "first failures:\n";
      for (const std::string& f : last.failures()) {
        ctx.out() << "  " << TerminalSafe(f) << "\n";
      }
      if (last.files_failed() > static_cast<uint64_t>(last.failures_size())) {
        ctx.out() << "  ... and "
                  << FormatCount(last.files_failed() - last.failures_size())
                  << " more\n";
      }
    }
  }
  return last.files_failed() > 0 ? kExitFailed : kExitOk;
}

int RunRevalidate(const Context& ctx, AdminClient& admin) {
  v1::RevalidateRequest req;
  req.set_dataset(ctx.args.positional[1]);
  if (ctx.args.positional.size() > 2) req.set_prefix(ctx.args.positional[2]);
  req.set_verify_checksums(ctx.args.Has("verify-checksums"));
  const std::string what = TerminalSafe(
      req.prefix().empty() ? req.dataset()
                           : absl::StrCat(req.dataset(), "/", req.prefix()));
  absl::StatusOr<v1::RevalidateResponse> r = admin.Revalidate(
      req, ctx.timeout_given ? ctx.timeout : absl::InfiniteDuration());
  if (!r.ok()) return Fail(ctx, absl::StrCat("revalidate ", what), r.status());
  if (ctx.json) {
    ctx.out() << ProtoToJson(*r) << "\n";
    return kExitOk;
  }
  ctx.out() << "revalidated " << what << ": " << FormatCount(r->files_checked())
            << " files checked, " << FormatCount(r->files_changed())
            << " changed, " << FormatCount(r->files_missing()) << " missing; "
            << FormatCount(r->chunks_dropped()) << " chunks dropped";
  if (req.verify_checksums()) {
    ctx.out() << "; " << FormatCount(r->ssd_corrupt()) << " corrupt SSD chunks";
  }
  ctx.out() << "\n";
  return kExitOk;
}

int RunEvict(const Context& ctx, AdminClient& admin) {
  const std::string& dataset = ctx.args.positional[1];
  const std::string prefix =
      ctx.args.positional.size() > 2 ? ctx.args.positional[2] : "";
  // Shown to a person: escaped (a prefix is a file name, any bytes).
  const std::string what = TerminalSafe(
      prefix.empty() ? dataset : absl::StrCat(dataset, "/", prefix));
  absl::StatusOr<v1::EvictResponse> st =
      admin.Evict(dataset, prefix,
                  // Dropping millions of files takes seconds (the SSD tier's
                  // index too): like warmup, no deadline unless given.
                  ctx.timeout_given ? ctx.timeout : absl::InfiniteDuration());
  if (!st.ok()) return Fail(ctx, absl::StrCat("evict ", what), st.status());
  if (ctx.json) {
    ctx.out() << ProtoToJson(*st) << "\n";
    return kExitOk;
  }
  ctx.out() << "evicted " << FormatCount(st->evicted_chunks()) << " chunks ("
            << FormatBytes(st->evicted_bytes()) << ") of " << what;
  if (st->deferred_chunks() > 0) {
    ctx.out() << "; " << FormatCount(st->deferred_chunks())
              << " leased chunks are freed when released";
  }
  ctx.out() << "\n";
  return kExitOk;
}

// `ls`: pages through the listing on the data socket (not the admin API:
// it is a reader's call, checked like a read), printing each page as it
// comes, so 1.3M names need one page of memory.
int RunList(const Context& ctx, const std::string& socket) {
  ClientOptions o;
  o.socket_path = socket;
  o.client_name = "dlcachectl";
  o.connect_timeout = ctx.timeout;
  o.rpc_timeout = ctx.timeout_given ? ctx.timeout : absl::Seconds(120);
  o.reconnect = false;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
  if (!client.ok()) {
    ctx.err() << "dlcachectl: " << client.status().message() << "\n";
    if (ctx.json) {
      ctx.out() << "{\"error\":{\"code\":\"UNAVAILABLE\",\"message\":"
                << JsonString(client.status().message()) << "}}\n";
    }
    return kExitUnreachable;
  }
  const std::string& dataset = ctx.args.positional[1];
  const std::string prefix =
      ctx.args.positional.size() > 2 ? ctx.args.positional[2] : "";
  std::string token;
  bool first = true;
  uint64_t files = 0;
  uint64_t bytes = 0;
  if (ctx.json) {
    ctx.out() << "{\"dataset\":" << JsonString(dataset) << ",\"files\":[";
  }
  do {
    absl::StatusOr<FileListPage> page = (*client)->ListPage(
        dataset, prefix, token, 0, first && ctx.args.Has("refresh"));
    if (!page.ok()) {
      const absl::Status& st = page.status();
      ctx.err() << "dlcachectl: ls: " << absl::StatusCodeToString(st.code())
                << ": " << st.message() << "\n";
      if (ctx.json) {
        // One JSON object whatever happened: the files so far, the error.
        ctx.out() << "],\"error\":{\"code\":"
                  << JsonString(absl::StatusCodeToString(st.code()))
                  << ",\"message\":" << JsonString(st.message()) << "}}\n";
      }
      return kExitFailed;
    }
    for (const FileEntry& e : page->entries) {
      if (ctx.json) {
        ctx.out() << (files == 0 ? "" : ",")
                  << "{\"name\":" << JsonString(e.name)
                  << ",\"size\":" << e.size << ",\"mtime_ns\":" << e.mtime_ns
                  << "}";
      } else {
        ctx.out() << absl::StrFormat(
            "%12d  %s  %s\n", e.size,
            absl::FormatTime("%Y-%m-%d %H:%M:%S",
                             absl::FromUnixNanos(e.mtime_ns),
                             absl::UTCTimeZone()),
            e.name);
      }
      ++files;
      bytes += e.size;
    }
    token = std::move(page->next_page_token);
    first = false;
  } while (!token.empty());
  if (ctx.json) {
    ctx.out() << "],\"count\":" << files << ",\"bytes\":" << bytes << "}\n";
  } else if (ctx.env->out_is_tty) {
    ctx.out() << FormatCount(files) << " files, " << FormatBytes(bytes) << "\n";
  }
  return kExitOk;
}

// Checks a command's positionals and flags before anything is sent, so a
// bad command line is a usage error even when the server is down.
absl::Status CheckArgs(const Context& ctx) {
  const std::string& name = ctx.command->name;
  if (name == "warmup" || name == "evict" || name == "sync" ||
      name == "revalidate" || name == "ls") {
    if (absl::Status st = ValidateDatasetName(ctx.args.positional[1]);
        !st.ok()) {
      return st;
    }
    if (ctx.args.positional.size() > 2) {
      absl::StatusOr<std::string> p = NormalizePrefix(ctx.args.positional[2]);
      if (!p.ok()) return p.status();
    }
  }
  if (ctx.args.Has("parallel")) {
    uint32_t n;
    if (!absl::SimpleAtoi(ctx.args.Get("parallel"), &n) || n == 0) {
      return absl::InvalidArgumentError("--parallel needs a positive integer");
    }
  }
  if (ctx.args.Has("interval")) {
    double interval;
    if (!absl::SimpleAtod(ctx.args.Get("interval"), &interval) ||
        !(interval >= 0)) {
      return absl::InvalidArgumentError(
          "--interval needs a number of seconds >= 0");
    }
  }
  return absl::OkStatus();
}

int Dispatch(absl::Span<const std::string> argv, const CliEnv& env) {
  // Parse once with every flag any command knows, so values of command
  // flags are not mistaken for positionals; check per command below.
  std::vector<FlagSpec> all = GlobalFlags();
  for (const Command& c : Commands()) {
    all.insert(all.end(), c.flags.begin(), c.flags.end());
  }
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(argv, all);
  if (!parsed.ok()) return Usage(env, parsed.status().message(), nullptr);

  Context ctx;
  ctx.env = &env;
  ctx.args = *std::move(parsed);
  const bool help = ctx.args.Has("help");
  if (ctx.args.positional.empty()) {
    if (help) {
      *env.out << MainHelp();
      return kExitOk;
    }
    *env.err << MainHelp();
    return kExitUsage;
  }
  const std::string& name = ctx.args.positional[0];
  ctx.command = FindCommand(name);
  if (ctx.command == nullptr) {
    return Usage(env, absl::StrCat("unknown command '", name, "'"), nullptr);
  }
  if (name == "help") {
    if (ctx.args.positional.size() < 2) {
      *env.out << MainHelp();
      return kExitOk;
    }
    const Command* c = FindCommand(ctx.args.positional[1]);
    if (c == nullptr || ctx.args.positional.size() > 2) {
      return Usage(env,
                   absl::StrCat("no help for '",
                                absl::StrJoin(ctx.args.positional.begin() + 1,
                                              ctx.args.positional.end(), " "),
                                "'"),
                   nullptr);
    }
    *env.out << CommandHelp(*c);
    return kExitOk;
  }
  for (const auto& flag_value : ctx.args.flags) {
    const auto& flag = flag_value.first;
    auto matches = [&](const FlagSpec& f) { return f.name == flag; };
    if (std::none_of(GlobalFlags().begin(), GlobalFlags().end(), matches) &&
        std::none_of(ctx.command->flags.begin(), ctx.command->flags.end(),
                     matches)) {
      return Usage(env,
                   absl::StrCat("--", flag, " is not a flag of '", name, "'"),
                   ctx.command);
    }
  }
  if (help) {
    *env.out << CommandHelp(*ctx.command);
    return kExitOk;
  }
  const size_t n = ctx.args.positional.size() - 1;
  if (n < ctx.command->min_positional || n > ctx.command->max_positional) {
    return Usage(env,
                 absl::StrCat(name, " takes ",
                              ctx.command->args.empty() ? "no arguments"
                                                        : ctx.command->args),
                 ctx.command);
  }

  if (absl::Status st = CheckArgs(ctx); !st.ok()) {
    return Usage(env, st.message(), ctx.command);
  }
  ctx.json = ctx.args.Has("json");
  if (ctx.args.Has("timeout")) {
    absl::StatusOr<absl::Duration> t = ParseTimeout(ctx.args.Get("timeout"));
    if (!t.ok()) return Usage(env, t.status().message(), ctx.command);
    ctx.timeout = *t;
    ctx.timeout_given = true;
  }
  if (ctx.args.Has("address")) {
    if (ctx.args.Has("socket") || ctx.args.Has("admin_socket")) {
      return Usage(env, "give either --socket or --address, not both",
                   ctx.command);
    }
    const std::string address = ctx.args.Get("address");
    if (address.find(':') == std::string::npos) {
      return Usage(env, "--address must be HOST:PORT", ctx.command);
    }
    ctx.target = AdminTarget("", "", address);
  } else if (ctx.args.Has("admin_socket")) {
    const std::string admin_socket = ctx.args.Get("admin_socket");
    if (admin_socket.empty()) {
      return Usage(env, "--admin_socket is empty", ctx.command);
    }
    ctx.target = AdminTarget("", admin_socket, "");
  } else {
    // --socket names the data socket (as for the client library); the
    // admin API listens next to it.
    std::string socket = ctx.args.Get("socket", env.default_socket);
    if (socket.empty()) return Usage(env, "--socket is empty", ctx.command);
    ctx.target = AdminTarget(socket, "", "");
  }

  if (name == "ls") {
    if (!absl::StartsWith(ctx.target, "unix:") ||
        ctx.args.Has("admin_socket")) {
      return Usage(env,
                   "ls reads through the data socket: give --socket (or "
                   "DLCACHE_SOCKET), not --address or --admin_socket",
                   ctx.command);
    }
    return RunList(ctx, ctx.args.Get("socket", env.default_socket));
  }

  absl::StatusOr<std::unique_ptr<AdminClient>> admin =
      absl::UnavailableError("");
  if (absl::StartsWith(ctx.target, "unix:")) {
    // A missing or dead socket fails at once here instead of after gRPC
    // retried for the whole timeout.
    absl::StatusOr<UniqueFd> probe =
        ConnectUnix(ctx.target.substr(5), SOCK_STREAM);
    if (!probe.ok()) {
      if (std::string denied = AdminSocketDenied(ctx.target.substr(5));
          !denied.empty()) {
        admin = absl::PermissionDeniedError(denied);
      } else {
        admin = absl::UnavailableError(
            absl::StrCat("cannot reach dlcached at ", ctx.target,
                         ": is it running? (", probe.status().message(), ")"));
      }
    }
  }
  if (admin.status().message().empty()) {
    AdminAuthOptions auth;
    auth.tls_cert = ctx.args.Get("tls_cert", "");
    auth.tls_key = ctx.args.Get("tls_key", "");
    auth.tls_ca = ctx.args.Get("tls_ca", "");
    auth.tls_server_name = ctx.args.Get("tls_server_name", "dlcached");
    if (ctx.args.Has("token_file")) {
      std::ifstream in(ctx.args.Get("token_file"));
      if (!in || !std::getline(in, auth.token) || auth.token.empty()) {
        return Usage(env, "cannot read a token from --token_file", ctx.command);
      }
    }
    admin = AdminClient::Connect(ctx.target, ctx.timeout, auth);
  }
  if (!admin.ok()) {
    *env.err << "dlcachectl: " << admin.status().message() << "\n";
    if (ctx.json) {
      *env.out << "{\"error\":{\"code\":\""
               << (absl::IsPermissionDenied(admin.status())
                       ? "PERMISSION_DENIED"
                       : "UNAVAILABLE")
               << "\",\"message\":" << JsonString(admin.status().message())
               << "}}\n";
    }
    return kExitUnreachable;
  }
  if (name == "status") return RunStatus(ctx, **admin);
  if (name == "stats") return RunStats(ctx, **admin);
  if (name == "warmup") return RunFill(ctx, **admin, /*sync=*/false);
  if (name == "sync") return RunFill(ctx, **admin, /*sync=*/true);
  if (name == "revalidate") return RunRevalidate(ctx, **admin);
  if (name == "evict") return RunEvict(ctx, **admin);
  return Usage(env, absl::StrCat("unknown command '", name, "'"), nullptr);
}

}  // namespace

int RunDlcachectl(absl::Span<const std::string> args, const CliEnv& env) {
  try {
    return Dispatch(args, env);
  } catch (const std::exception& e) {
    *env.err << "dlcachectl: internal error: " << e.what() << "\n";
    return kExitFailed;
  }
}

}  // namespace cli
}  // namespace dlcache
