// Loading nvJPEG at run time (client/cuda/nvjpeg_decoder.cc) where it
// cannot work: a missing library, a library that is not nvJPEG, a bad
// backend name. Each must be a clear status, never a crash. Then the
// decoder's own logic over a stand-in libnvjpeg (fake_nvjpeg/fake_nvjpeg.c:
// no hardware engines, a batched call that fails on a corrupt image):
// backend choice and its reason, per-image statuses, the one-by-one
// fallback. The real decode needs a GPU:
// tests/gpu/jpeg_pipeline_on_device.py.

#include <dlfcn.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/cuda/jpeg_decoder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlcache::cuda::internal {
namespace {

using ::testing::HasSubstr;

const uint8_t kOk[] = {0xff, 0xd8, 0x00};  // a JPEG to the stand-in

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

absl::StatusOr<std::unique_ptr<JpegDecoder>> OpenFake(
    const std::string& backend) {
  NvjpegOptions o;
  o.library = FAKE_NVJPEG_PATH;
  o.backend = backend;
  return OpenNvjpegDecoder(o);
}

TEST(NvjpegDecoderTest, NoHardwareEnginesFallsBackToTheGpuBackendSayingWhy) {
  auto d = OpenFake("auto");
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string what = (*d)->Describe();
  // The version comes from the fake's dependency, loaded from its folder.
  EXPECT_THAT(what, HasSubstr("nvjpeg 13.0.1 gpu_hybrid"));
  EXPECT_THAT(what, HasSubstr("NVJPEG_STATUS_ARCH_MISMATCH"));
  EXPECT_THAT(what, HasSubstr(FAKE_NVJPEG_PATH));
}

TEST(NvjpegDecoderTest, HardwareOnlyWithoutEnginesIsUnavailable) {
  auto d = OpenFake("hardware");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(d.status().message(), HasSubstr("no backend usable"));
  EXPECT_THAT(d.status().message(), HasSubstr("hardware: nvjpegCreateEx"));
}

TEST(NvjpegDecoderTest, InspectRejectsWhatIsNotAJpeg) {
  auto d = OpenFake("gpu");
  ASSERT_TRUE(d.ok()) << d.status();
  const uint8_t png[] = {0x89, 'P', 'N', 'G'};
  auto bad = (*d)->Inspect(png, sizeof(png));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("NVJPEG_STATUS_BAD_JPEG"));
  EXPECT_FALSE((*d)->Inspect(nullptr, 0).ok());
  const uint8_t grey[] = {0xff, 0xd8, 0x01};
  auto info = (*d)->Inspect(grey, sizeof(grey));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 4);
  EXPECT_EQ(info->height, 2);
  EXPECT_EQ(info->components, 1);
}

TEST(NvjpegDecoderTest, BatchedDecodeAndOneByOneFallbackWithPerImageStatus) {
  auto d = OpenFake("gpu");
  ASSERT_TRUE(d.ok()) << d.status();
  const uint8_t ok[] = {0xff, 0xd8, 0x00};
  const uint8_t corrupt[] = {0xff, 0xd8, 0xee};
  std::vector<JpegSource> src = {{ok, 3, 0}, {ok, 3, 0}};
  std::vector<JpegTarget> dst(2);  // the fake writes nothing
  std::vector<JpegDecodeResult> st(2);
  ASSERT_TRUE((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).ok());
  EXPECT_TRUE(st[0].status.ok() && st[1].status.ok());
  EXPECT_EQ((*d)->counters().batched_images, 2u);

  // One corrupt image fails the batched call: the batch is decoded image
  // by image, the corrupt one alone failing.
  src = {{ok, 3, 0}, {corrupt, 3, 0}, {ok, 3, 0}};
  dst.resize(3);
  st.assign(3, JpegDecodeResult{});
  ASSERT_TRUE((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).ok());
  EXPECT_TRUE(st[0].status.ok());
  EXPECT_EQ(st[1].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st[1].status.message(), HasSubstr("nvjpegDecode"));
  EXPECT_TRUE(st[2].status.ok());
  JpegDecoderCounters c = (*d)->counters();
  EXPECT_EQ(c.batch_failures, 1u);
  EXPECT_EQ(c.single_images, 2u);
  EXPECT_EQ(c.failed_images, 1u);

  // Batched decoding is still used afterwards (the data was at fault).
  src = {{ok, 3, 0}};
  dst.resize(1);
  st.assign(1, JpegDecodeResult{});
  ASSERT_TRUE((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).ok());
  EXPECT_EQ((*d)->counters().batched_images, 3u);

  // A 4-component image goes one by one from the start; the others still
  // go in one batched call.
  src = {{ok, 3, 3}, {ok, 3, 4}, {ok, 3, 3}};
  dst.resize(3);
  st.assign(3, JpegDecodeResult{absl::UnknownError("unset")});
  ASSERT_TRUE((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).ok());
  EXPECT_TRUE(st[0].status.ok() && st[1].status.ok() && st[2].status.ok());
  c = (*d)->counters();
  EXPECT_EQ(c.batched_images, 5u);
  EXPECT_EQ(c.single_images, 3u);
  EXPECT_EQ(c.batch_failures, 1u);

  // A greyscale image the batched call refuses: the colour ones are
  // batched again without it, it goes alone.
  const uint8_t grey[] = {0xff, 0xd8, 0x01};
  src = {{ok, 3, 3}, {grey, 3, 1}, {ok, 3, 3}};
  dst.resize(3);
  st.assign(3, JpegDecodeResult{absl::UnknownError("unset")});
  ASSERT_TRUE((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).ok());
  EXPECT_TRUE(st[0].status.ok() && st[1].status.ok() && st[2].status.ok());
  c = (*d)->counters();
  EXPECT_EQ(c.batched_images, 7u);
  EXPECT_EQ(c.single_images, 4u);
  EXPECT_EQ(c.batch_failures, 2u);

  // Spans of different sizes are the caller's error.
  st.resize(2);
  EXPECT_EQ((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NvjpegDecoderTest, PlanarOutputWhereOfferedAndRgbWhereRefused) {
  auto d = OpenFake("gpu");
  ASSERT_TRUE(d.ok()) << d.status();
  JpegInfo info = *(*d)->Inspect(kOk, 3);
  EXPECT_EQ(info.chroma_width, 2);
  EXPECT_EQ(info.chroma_height, 1);
  EXPECT_EQ(info.chroma_fx, 2);  // NVJPEG_CSS_420
  EXPECT_EQ(info.chroma_fy, 2);
  EXPECT_THAT((*d)->Describe(), HasSubstr("colour: libjpeg's"));

  // Targets with planes: decoded planar, batched and one by one.
  uint8_t planes[3];
  JpegTarget planar;
  for (int c = 0; c < 3; ++c) planar.planes[c] = &planes[c];
  const uint8_t corrupt[] = {0xff, 0xd8, 0xee};
  std::vector<JpegSource> src = {{kOk, 3, 3}, {kOk, 3, 3}};
  std::vector<JpegTarget> dst = {planar, planar};
  std::vector<JpegDecodeResult> st(2);
  ASSERT_TRUE((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).ok());
  EXPECT_TRUE(st[0].status.ok() && st[0].planar && st[1].planar);
  src = {{kOk, 3, 3}, {corrupt, 3, 3}};
  ASSERT_TRUE((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).ok());
  EXPECT_TRUE(st[0].status.ok() && st[0].planar);  // alone, planar
  EXPECT_FALSE(st[1].status.ok());
  EXPECT_EQ((*d)->counters().planar_images, 3u);

  // A target without planes gets RGB.
  dst = {planar, JpegTarget{}};
  src = {{kOk, 3, 3}, {kOk, 3, 3}};
  ASSERT_TRUE((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).ok());
  EXPECT_TRUE(st[0].status.ok() && !st[0].planar);
  EXPECT_TRUE(st[1].status.ok() && !st[1].planar);
}

TEST(NvjpegDecoderTest, EnginesThatRefusePlanarOutputGetRgbFromThenOn) {
  // The switch lives in the (process-wide) stand-in library.
  void* lib = dlopen(FAKE_NVJPEG_PATH, RTLD_NOW | RTLD_NOLOAD);
  auto d = OpenFake("gpu");
  ASSERT_TRUE(d.ok()) << d.status();
  if (lib == nullptr) lib = dlopen(FAKE_NVJPEG_PATH, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto refuse =
      reinterpret_cast<void (*)(int)>(dlsym(lib, "fake_nvjpeg_refuse_planar"));
  ASSERT_NE(refuse, nullptr);
  refuse(1);
  uint8_t planes[3];
  JpegTarget planar;
  for (int c = 0; c < 3; ++c) planar.planes[c] = &planes[c];
  std::vector<JpegSource> src = {{kOk, 3, 3}, {kOk, 3, 3}};
  std::vector<JpegTarget> dst = {planar, planar};
  std::vector<JpegDecodeResult> st(2);
  ASSERT_TRUE((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).ok());
  refuse(0);
  EXPECT_TRUE(st[0].status.ok() && !st[0].planar);
  EXPECT_TRUE(st[1].status.ok() && !st[1].planar);
  JpegDecoderCounters c = (*d)->counters();
  EXPECT_EQ(c.batched_images, 2u);  // no fallback to one by one
  EXPECT_EQ(c.batch_failures, 0u);
  EXPECT_THAT((*d)->Describe(), HasSubstr("colour: nvJPEG's RGB output"));
  // Later batches go straight to RGB, the planes unused.
  ASSERT_TRUE((*d)->Decode(src, dst, nullptr, absl::MakeSpan(st)).ok());
  EXPECT_FALSE(st[0].planar);
  dlclose(lib);
}

}  // namespace
}  // namespace dlcache::cuda::internal
