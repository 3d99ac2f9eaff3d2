// Label values reach scrapers from client-chosen names (plans, datasets):
// nothing raw may get through (issue 32, finding 8).
#include <string>

#include "gtest/gtest.h"
#include "server/metrics/prometheus_text.h"

namespace dlcache {
namespace {

TEST(PrometheusLabelValueTest, PrintableUtf8IsKeptWithTheFormatsEscapes) {
  EXPECT_EQ(PrometheusLabelValue("imagenet-train"), "imagenet-train");
  EXPECT_EQ(PrometheusLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(PrometheusLabelValue("entraînement"), "entraînement");
  EXPECT_EQ(PrometheusLabelValue("数据"), "数据");
  EXPECT_EQ(PrometheusLabelValue(""), "");
}

TEST(PrometheusLabelValueTest, ControlBytesAndBrokenUtf8BecomeHex) {
  EXPECT_EQ(PrometheusLabelValue("x\x1b[2J"), "hex:781b5b324a");
  EXPECT_EQ(PrometheusLabelValue(std::string("a\0b", 3)), "hex:610062");
  EXPECT_EQ(PrometheusLabelValue("\x7f"), "hex:7f");
  EXPECT_EQ(PrometheusLabelValue("\xff\xfe"), "hex:fffe");
  EXPECT_EQ(PrometheusLabelValue("\xc3"), "hex:c3");        // cut short
  EXPECT_EQ(PrometheusLabelValue("\xc0\xaf"), "hex:c0af");  // overlong '/'
  EXPECT_EQ(PrometheusLabelValue("\xed\xa0\x80"), "hex:eda080");  // surrogate
  EXPECT_EQ(PrometheusLabelValue("\xc2\x85"), "hex:c285");        // C1 NEL
  // A forged sample line cannot be made.
  const std::string v = PrometheusLabelValue("p\"} 1\ndlcache_hits_total 9");
  EXPECT_EQ(v.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace dlcache
