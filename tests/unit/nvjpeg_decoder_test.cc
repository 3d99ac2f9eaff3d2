// Loading nvJPEG at run time (client/cuda/nvjpeg_decoder.cc) where it
// cannot work: a missing library, a library that is not nvJPEG, a bad
// backend name. Each must be a clear status, never a crash. The decode
// itself needs a GPU: tests/gpu/jpeg_pipeline_on_device.py.

#include <string>

#include "absl/status/status.h"
#include "client/cuda/jpeg_decoder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlcache::cuda::internal {
namespace {

using ::testing::HasSubstr;

TEST(NvjpegDecoderTest, MissingLibraryIsUnavailableNamingIt) {
  NvjpegOptions o;
  o.library = "/nonexistent/dlcache-test/libnvjpeg.so.13";
  auto d = OpenNvjpegDecoder(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(d.status().message(), HasSubstr("nvJPEG not found"));
  EXPECT_THAT(d.status().message(), HasSubstr("/nonexistent/dlcache-test"));
}

TEST(NvjpegDecoderTest, LibraryWithoutNvjpegSymbolsIsUnavailable) {
  NvjpegOptions o;
  o.library = "libc.so.6";  // loads, but has none of nvJPEG's functions
  auto d = OpenNvjpegDecoder(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(d.status().message(), HasSubstr("no nvjpegGetProperty"));
  EXPECT_THAT(d.status().message(), HasSubstr("nvjpegDecodeBatched"));
}

TEST(NvjpegDecoderTest, UnknownBackendIsInvalidArgument) {
  NvjpegOptions o;
  o.backend = "cpu";
  auto d = OpenNvjpegDecoder(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("auto, hardware or gpu"));
}

}  // namespace
}  // namespace dlcache::cuda::internal
