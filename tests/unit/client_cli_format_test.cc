// Formatting pieces of dlcachectl: numbers, tables, the warm-up progress
// line and bar, the argument parser and the JSON output.

#include <sstream>

#include "client/cli/admin_client.h"
#include "client/cli/args.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "client/cli/json.h"
#include "client/cli/progress_bar.h"
#include "client/cli/table.h"
#include "dlcache/v1/admin.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace cli {
namespace {

using testing::HasSubstr;
using testing::Not;
using testing::StartsWith;

TEST(FormatTest, Bytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(110000), "107 KiB");
  EXPECT_EQ(FormatBytes(12900000), "12.3 MiB");
  EXPECT_EQ(FormatBytes(1ull << 30), "1.00 GiB");
  EXPECT_EQ(FormatBytes((1ull << 40) - 1), "1.00 TiB");  // not "1024 GiB"
  EXPECT_EQ(FormatBytes(~0ull), "16.0 EiB");
}

TEST(FormatTest, RateCountPercentClock) {
  EXPECT_EQ(FormatRate(0), "0.0 MB/s");
  EXPECT_EQ(FormatRate(12.34e6), "12.3 MB/s");
  EXPECT_EQ(FormatRate(2.5e9), "2500 MB/s");
  EXPECT_EQ(FormatRate(-1), "0.0 MB/s");
  EXPECT_EQ(FormatCount(0), "0");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(1000), "1,000");
  EXPECT_EQ(FormatCount(1234567), "1,234,567");
  EXPECT_EQ(FormatPercent(1, 3), "33.3%");
  EXPECT_EQ(FormatPercent(5, 0), "-");
  EXPECT_EQ(FormatPercent(7, 7), "100.0%");
  EXPECT_EQ(FormatClock(7), "0:07");
  EXPECT_EQ(FormatClock(754), "12:34");
  EXPECT_EQ(FormatClock(3723), "1:02:03");
  EXPECT_EQ(FormatClock(-1), "--:--");
  EXPECT_EQ(FormatElapsed(0.42), "0.4s");
  EXPECT_EQ(FormatElapsed(59.9), "59.9s");
  EXPECT_EQ(FormatElapsed(75), "1:15");
  EXPECT_EQ(FormatUptime(45), "45s");
  EXPECT_EQ(FormatUptime(192), "3m 12s");
  EXPECT_EQ(FormatUptime(7500), "2h 5m");
  EXPECT_EQ(FormatUptime(3 * 86400 + 4 * 3600 + 5), "3d 4h");
}

TEST(TableTest, AlignsColumnsWithoutTrailingSpaces) {
  Table t({"NAME", "HITS", "RATE"},
          {Table::Align::kLeft, Table::Align::kRight, Table::Align::kRight});
  t.AddRow({"imagenet", "12,345", "95.2%"});
  t.AddRow({"c4", "7", "-"});
  EXPECT_EQ(t.Render(),
            "NAME        HITS   RATE\n"
            "imagenet  12,345  95.2%\n"
            "c4             7      -\n");
  EXPECT_EQ(t.rows(), 2u);
}

TEST(TableTest, PadsShortRowsAndCanHideHeader) {
  Table t({"K", "V"});
  t.AddRow({"socket"});
  t.AddRow({"arena", "1 GiB", "extra cell is cut"});
  EXPECT_EQ(t.Render(false),
            "socket\n"
            "arena   1 GiB\n");
}

WarmupSnapshot Listed(uint64_t done, uint64_t total, uint64_t bytes_done,
                      uint64_t bytes_total) {
  WarmupSnapshot s;
  s.files_done = done;
  s.files_total = total;
  s.bytes_done = bytes_done;
  s.bytes_total = bytes_total;
  s.listing_done = true;
  s.elapsed_s = 2;
  return s;
}

TEST(ProgressLineTest, ShowsPercentByBytesFilesRateEtaAndFailures) {
  WarmupSnapshot s = Listed(5, 12, 1 << 20, 4 << 20);
  s.files_failed = 1;
  std::string line = FormatProgressLine(s, 1e6, 120);
  EXPECT_THAT(line, StartsWith("[##########------------------------------]"));
  EXPECT_THAT(line, HasSubstr(" 25.0%"));
  EXPECT_THAT(line, HasSubstr("5/12 files"));
  EXPECT_THAT(line, HasSubstr("1.00 MiB/4.00 MiB"));
  EXPECT_THAT(line, HasSubstr("1.0 MB/s"));
  EXPECT_THAT(line, HasSubstr("ETA 0:03"));  // 3 MiB at 1 MB/s
  EXPECT_THAT(line, HasSubstr("1 failed"));
  EXPECT_LE(line.size(), 120u);
  // A narrower terminal gets a shorter bar, not a longer line.
  EXPECT_LE(FormatProgressLine(s, 1e6, 90).size(), 90u);
}

TEST(ProgressLineTest, NoPercentageOrEtaWhileListing) {
  WarmupSnapshot s;
  s.files_done = 3;
  s.files_total = 40;
  s.bytes_done = 2048;
  std::string line = FormatProgressLine(s, 0, 100);
  EXPECT_THAT(line, StartsWith("[listing...]"));
  EXPECT_THAT(line, HasSubstr("3/40+ files"));
  EXPECT_THAT(line, Not(HasSubstr("%")));
  EXPECT_THAT(line, Not(HasSubstr("ETA")));
}

TEST(ProgressLineTest, UnknownRateGivesNoEtaAndNarrowTerminalDropsTheBar) {
  WarmupSnapshot s = Listed(0, 10, 0, 1000);
  EXPECT_THAT(FormatProgressLine(s, 0, 120), HasSubstr("ETA --:--"));
  std::string narrow = FormatProgressLine(s, 0, 40);
  EXPECT_THAT(narrow, Not(HasSubstr("[")));
  EXPECT_THAT(narrow, StartsWith("  0.0%"));
}

TEST(ProgressLineTest, DoneAndEmptyDatasets) {
  WarmupSnapshot s = Listed(4, 4, 100, 100);
  s.done = true;
  std::string line = FormatProgressLine(s, 50, 100);
  EXPECT_THAT(line, HasSubstr("100.0%"));
  EXPECT_THAT(line, HasSubstr("in 2.0s"));
  EXPECT_THAT(line, Not(HasSubstr("ETA")));
  WarmupSnapshot empty = Listed(0, 0, 0, 0);
  EXPECT_THAT(FormatProgressLine(empty, 0, 100), HasSubstr("100.0%"));
}

TEST(ProgressBarTest, TtyRedrawsInPlaceAndWipesLongerLines) {
  std::ostringstream out;
  ProgressBar bar(out, /*tty=*/true, 100);
  WarmupSnapshot s;
  s.files_total = 100000;
  s.files_done = 99999;
  s.elapsed_s = 1;
  bar.Update(s);
  const std::string first = out.str();
  ASSERT_THAT(first, StartsWith("\r[listing...]"));
  EXPECT_EQ(first.find('\n'), std::string::npos);
  s.files_total = 1;
  s.files_done = 0;
  s.elapsed_s = 2;
  bar.Update(s);
  std::string second = out.str().substr(first.size());
  ASSERT_THAT(second, StartsWith("\r"));
  // The shorter line is padded to the previous length.
  EXPECT_EQ(second.size(), first.size());
  EXPECT_EQ(second.back(), ' ');
  s.listing_done = s.done = true;
  s.files_done = 1;
  bar.Finish(s);
  const std::string all = out.str();
  EXPECT_EQ(all.back(), '\n');
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 1);
}

TEST(ProgressBarTest, PlainOutputPrintsALineEveryInterval) {
  std::ostringstream out;
  ProgressBar bar(out, /*tty=*/false, 100, /*plain_interval_s=*/5);
  WarmupSnapshot s = Listed(0, 10, 0, 1000);
  for (int i = 0; i <= 60; ++i) {  // 12 s at 200 ms
    s.elapsed_s = i * 0.2;
    s.bytes_done = i * 10;
    bar.Update(s);
  }
  const std::string text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);  // 0 s, 5 s, 10 s
  s.done = true;
  bar.Update(s);  // the final state is left to Finish, printed once
  bar.Finish(s);
  const std::string all = out.str();
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 4);
}

TEST(ProgressBarTest, RateFollowsTheRecentSpeed) {
  std::ostringstream out;
  ProgressBar bar(out, false, 100);
  WarmupSnapshot s = Listed(0, 10, 0, 1ull << 40);
  for (int i = 1; i <= 50; ++i) {
    s.elapsed_s = i * 0.2;
    s.bytes_done = static_cast<uint64_t>(i * 0.2 * 100e6);  // 100 MB/s
    bar.Update(s);
  }
  EXPECT_NEAR(bar.rate(), 100e6, 1e6);
  for (int i = 51; i <= 100; ++i) {  // then 10 MB/s
    s.elapsed_s = i * 0.2;
    s.bytes_done += static_cast<uint64_t>(0.2 * 10e6);
    bar.Update(s);
  }
  EXPECT_NEAR(bar.rate(), 10e6, 1e6);
}

TEST(ArgsTest, ParsesFlagsAnywhere) {
  std::vector<FlagSpec> flags = {{"socket", "PATH", "", 0},
                                 {"json", "", "", 0},
                                 {"parallel", "N", "", 'j'}};
  std::vector<std::string> argv = {"--json", "warmup",      "ds", "-j",   "8",
                                   "pre",    "--socket=/s", "--", "--odd"};
  auto p = ParseArgs(argv, flags);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->positional,
            (std::vector<std::string>{"warmup", "ds", "pre", "--odd"}));
  EXPECT_TRUE(p->Has("json"));
  EXPECT_EQ(p->Get("parallel"), "8");
  EXPECT_EQ(p->Get("socket"), "/s");
  EXPECT_EQ(p->Get("address", "none"), "none");
}

TEST(ArgsTest, Errors) {
  std::vector<FlagSpec> flags = {{"socket", "PATH", "", 0},
                                 {"json", "", "", 0}};
  auto unknown = ParseArgs(std::vector<std::string>{"--sock", "x"}, flags);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown flag --sock"));
  auto missing = ParseArgs(std::vector<std::string>{"--socket"}, flags);
  EXPECT_THAT(missing.status().message(), HasSubstr("needs a value (PATH)"));
  auto valued = ParseArgs(std::vector<std::string>{"--json=1"}, flags);
  EXPECT_THAT(valued.status().message(), HasSubstr("takes no value"));
}

TEST(ArgsTest, HelpLinesAlign) {
  std::vector<FlagSpec> flags = {{"parallel", "N", "files at once", 'j'},
                                 {"json", "", "machine output", 0}};
  EXPECT_EQ(FormatFlagHelp(flags),
            "  -j, --parallel N   files at once\n"
            "      --json         machine output\n");
}

TEST(JsonTest, NumbersStayNumbersAndEveryFieldIsPresent) {
  v1::StatusResponse s;
  s.set_state("SERVING");
  s.set_arena_bytes(1ull << 40);
  s.set_uptime_s(1.5);
  v1::DatasetInfo* d = s.add_datasets();
  d->set_name("a\"b");
  d->set_source("/x\n");
  std::string json = ProtoToJson(s, {{"extra", "null"}});
  EXPECT_THAT(json, HasSubstr("\"arena_bytes\":1099511627776"));
  EXPECT_THAT(json, HasSubstr("\"uptime_s\":1.5"));
  EXPECT_THAT(json, HasSubstr("\"leases\":0"));  // default still present
  EXPECT_THAT(json, HasSubstr("\"datasets\":[{\"name\":\"a\\\"b\","
                              "\"source\":\"/x\\n\"}]"));
  EXPECT_THAT(json, HasSubstr(",\"extra\":null}"));
  EXPECT_EQ(JsonString(std::string("\x01", 1)), "\"\\u0001\"");
  EXPECT_EQ(JsonNumber(1.0 / 0.0), "null");
}

// File names are bytes: JSON keeps UTF-8 and maps other bytes to \udcNN
// (Python's surrogateescape); terminal output keeps UTF-8 text and escapes
// controls and other bytes as \xNN.
TEST(JsonTest, BytesThatAreNotUtf8BecomeLoneSurrogates) {
  EXPECT_EQ(JsonString("caf\xc3\xa9"), "\"caf\xc3\xa9\"");  // UTF-8 kept
  EXPECT_EQ(JsonString("caf\xe9"), "\"caf\\udce9\"");
  EXPECT_EQ(JsonString("\xff\xfe"), "\"\\udcff\\udcfe\"");
  EXPECT_EQ(JsonString("\xc3"), "\"\\udcc3\"");             // truncated
  EXPECT_EQ(JsonString("\xc0\xaf"), "\"\\udcc0\\udcaf\"");  // overlong '/'
  EXPECT_EQ(JsonString("\xed\xa0\x80"),
            "\"\\udced\\udca0\\udc80\"");  // surrogate
  EXPECT_EQ(JsonString("\xf0\x9f\x98\x80"), "\"\xf0\x9f\x98\x80\"");  // U+1F600
  EXPECT_EQ(JsonString("\xf4\x90\x80\x80"),
            "\"\\udcf4\\udc90\\udc80\\udc80\"");  // above U+10FFFF
  v1::JobProgress p;
  p.add_failures("caf\xe9/x: NOT_FOUND");
  EXPECT_THAT(ProtoToJson(p), HasSubstr("\"failures\":[\"caf\\udce9/x: "));
}

TEST(FormatTest, TerminalSafeEscapesControlsAndBytesThatAreNotUtf8) {
  EXPECT_EQ(TerminalSafe("train/a.jpg"), "train/a.jpg");
  EXPECT_EQ(TerminalSafe("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(TerminalSafe("caf\xe9"), "caf\\xe9");
  EXPECT_EQ(TerminalSafe("a\nb\x1b[2J\x7f"), "a\\x0ab\\x1b[2J\\x7f");
  EXPECT_EQ(TerminalSafe("\xc2\x9b"
                         "31m"),
            "\\xc2\\x9b31m");                     // C1 CSI
  EXPECT_EQ(TerminalSafe("a\\xe9"), "a\\\\xe9");  // stays distinct
  EXPECT_EQ(TerminalSafe(std::string("\0", 1)), "\\x00");
  for (int b = 0; b < 256; ++b) {
    const std::string out = TerminalSafe(std::string(1, static_cast<char>(b)));
    for (char c : out) {
      const unsigned char u = static_cast<unsigned char>(c);
      EXPECT_TRUE(u >= 0x20 && u < 0x7f) << "byte " << b << ": " << out;
    }
  }
}

TEST(CommandsTest, HelpAndUsageErrorsNeedNoServer) {
  auto run = [](std::vector<std::string> args, std::string* out,
                std::string* err) {
    std::ostringstream o, e;
    CliEnv env;
    env.out = &o;
    env.err = &e;
    env.default_socket = "/nonexistent/dlcached.sock";
    int rc = RunDlcachectl(args, env);
    *out = o.str();
    *err = e.str();
    return rc;
  };
  std::string out, err;
  EXPECT_EQ(run({"--help"}, &out, &err), kExitOk);
  EXPECT_THAT(out, HasSubstr("warmup DATASET [PREFIX]"));
  for (const char* cmd : {"status", "stats", "warmup", "evict"}) {
    EXPECT_EQ(run({cmd, "--help"}, &out, &err), kExitOk) << cmd;
    EXPECT_THAT(out,
                HasSubstr(absl::StrCat("Usage: dlcachectl [FLAGS] ", cmd)));
    EXPECT_THAT(out, HasSubstr("--socket PATH"));
    EXPECT_EQ(run({"help", cmd}, &out, &err), kExitOk) << cmd;
  }
  EXPECT_THAT(out, Not(HasSubstr("--parallel")));  // evict has none
  EXPECT_EQ(run({}, &out, &err), kExitUsage);
  EXPECT_EQ(run({"frobnicate"}, &out, &err), kExitUsage);
  EXPECT_THAT(err, HasSubstr("unknown command 'frobnicate'"));
  EXPECT_EQ(run({"warmup"}, &out, &err), kExitUsage);
  EXPECT_THAT(err, HasSubstr("warmup takes DATASET [PREFIX]"));
  EXPECT_EQ(run({"status", "--parallel", "2"}, &out, &err), kExitUsage);
  EXPECT_EQ(run({"warmup", "ds", "../up"}, &out, &err), kExitUsage);
  EXPECT_EQ(run({"warmup", "ds", "-j", "zero"}, &out, &err), kExitUsage);
  EXPECT_EQ(run({"status", "--timeout", "soon"}, &out, &err), kExitUsage);
  EXPECT_EQ(run({"status", "--socket", "/a", "--address", "h:1"}, &out, &err),
            kExitUsage);
  EXPECT_EQ(
      run({"status", "--admin_socket", "/a", "--address", "h:1"}, &out, &err),
      kExitUsage);
  // --socket is the data socket: the admin API is next to it.
  EXPECT_EQ(run({"status"}, &out, &err), kExitUnreachable);
  EXPECT_THAT(err, HasSubstr("cannot reach dlcached at "
                             "unix:/nonexistent/dlcached.sock.admin: is it "
                             "running?"));
  EXPECT_EQ(
      run({"status", "--admin_socket", "/nonexistent/adm.sock"}, &out, &err),
      kExitUnreachable);
  EXPECT_THAT(err, HasSubstr("unix:/nonexistent/adm.sock: is it running?"));
}

TEST(CommandsTest, AdminTargetFollowsTheSocketFlags) {
  EXPECT_EQ(AdminTarget("/run/d.sock", "", ""), "unix:/run/d.sock.admin");
  EXPECT_EQ(AdminTarget("/run/d.sock", "/run/adm", ""), "unix:/run/adm");
  EXPECT_EQ(AdminTarget("/run/d.sock", "/run/adm", "h:7"), "h:7");
}

}  // namespace
}  // namespace cli
}  // namespace dlcache
