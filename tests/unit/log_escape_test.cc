#include "common/log_escape.h"

#include <string>

#include "gtest/gtest.h"

namespace dlcache {
namespace {

TEST(LogEscapeTest, KeepsPrintableAscii) {
  EXPECT_EQ(LogEscape("train/n01440764/x.JPEG"), "train/n01440764/x.JPEG");
  EXPECT_EQ(LogEscape(""), "");
  EXPECT_EQ(LogEscape("a b~"), "a b~");
}

TEST(LogEscapeTest, NewlinesNeverRaw) {
  const std::string forged = "trainer\nI1203 dlcached: admin granted\r\n";
  const std::string out = LogEscape(forged);
  EXPECT_EQ(out.find('\n'), std::string::npos);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(out, "trainer\\x0aI1203 dlcached: admin granted\\x0d\\x0a");
}

TEST(LogEscapeTest, ControlNulHighBytesAndBackslash) {
  EXPECT_EQ(LogEscape(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(LogEscape("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(LogEscape("\x7f\x80\xff"), "\\x7f\\x80\\xff");
  // A backslash is escaped too, so a literal "\x0a" in a name cannot pass
  // for an escaped newline.
  EXPECT_EQ(LogEscape("\\x0a"), "\\\\x0a");
  EXPECT_NE(LogEscape("\\x0a"), LogEscape("\n"));
}

TEST(LogEscapeTest, EveryByteGivesPrintableOutput) {
  for (int c = 0; c < 256; ++c) {
    const std::string out = LogEscape(std::string(1, static_cast<char>(c)));
    for (char o : out) {
      EXPECT_GE(static_cast<unsigned char>(o), 0x20) << c;
      EXPECT_LT(static_cast<unsigned char>(o), 0x7f) << c;
    }
  }
}

TEST(LogEscapeTest, LongInputIsCut) {
  const std::string big(10000, 'a');
  const std::string out = LogEscape(big, 16);
  EXPECT_EQ(out, std::string(16, 'a') + "...(10000 bytes)");
}

}  // namespace
}  // namespace dlcache
