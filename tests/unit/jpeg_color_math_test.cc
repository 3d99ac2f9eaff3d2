// The JPEG pipeline's YCbCr -> RGB step (client/cuda/jpeg_color_math.h,
// the code the conversion kernel runs) against libjpeg itself: each JPEG
// is decoded twice by libjpeg, once to its raw component planes (what the
// GPU decoder hands the kernel) and once to RGB with libjpeg's defaults
// (what PIL returns); the header's conversion of the planes must give
// libjpeg's RGB exactly, for every subsampling and for sizes that end in
// partial blocks. No GPU.

#include "client/cuda/jpeg_color_math.h"

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include "gtest/gtest.h"

namespace dlcache::cuda::internal {
namespace {

struct Sampling {
  const char* name;
  int components;
  int h, v;  // luma sampling factors (chroma's are 1, 1)
};

// Smooth gradients with noise: chroma that varies inside every block, so
// that the upsampler's every tap matters.
std::vector<uint8_t> MakeRgb(int w, int h, int seed) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  std::mt19937 rng(seed);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &px[(static_cast<size_t>(y) * w + x) * 3];
      const int n = static_cast<int>(rng() % 64) - 32;
      p[0] = static_cast<uint8_t>(
          std::clamp(x * 255 / std::max(w, 1) + n, 0, 255));
      p[1] = static_cast<uint8_t>(
          std::clamp(y * 255 / std::max(h, 1) - n, 0, 255));
      p[2] = static_cast<uint8_t>(std::clamp(
          ((x + y) * 97 + static_cast<int>(rng() % 40)) % 256, 0, 255));
    }
  }
  return px;
}

std::vector<uint8_t> Encode(const std::vector<uint8_t>& rgb, int w, int h,
                            const Sampling& s) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = w;
  c.image_height = h;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  if (s.components == 1) {
    jpeg_set_colorspace(&c, JCS_GRAYSCALE);
  } else {
    c.comp_info[0].h_samp_factor = s.h;
    c.comp_info[0].v_samp_factor = s.v;
    for (int i = 1; i < 3; ++i) {
      c.comp_info[i].h_samp_factor = 1;
      c.comp_info[i].v_samp_factor = 1;
    }
  }
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(
        &rgb[static_cast<size_t>(c.next_scanline) * w * 3]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  free(buf);
  return out;
}

// A libjpeg decompressor over `jpeg`, its header read.
struct Decompressor {
  jpeg_decompress_struct d{};
  jpeg_error_mgr err{};
  explicit Decompressor(const std::vector<uint8_t>& jpeg) {
    d.err = jpeg_std_error(&err);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, jpeg.data(), jpeg.size());
    jpeg_read_header(&d, TRUE);
  }
  ~Decompressor() { jpeg_destroy_decompress(&d); }
};

// libjpeg's RGB, with its defaults (fancy upsampling, the slow integer
// inverse DCT): what PIL returns.
std::vector<uint8_t> DecodeRgb(const std::vector<uint8_t>& jpeg) {
  Decompressor dec(jpeg);
  jpeg_decompress_struct& d = dec.d;
  d.out_color_space = JCS_RGB;
  jpeg_start_decompress(&d);
  std::vector<uint8_t> px(static_cast<size_t>(d.output_width) *
                          d.output_height * 3);
  while (d.output_scanline < d.output_height) {
    JSAMPROW row =
        &px[static_cast<size_t>(d.output_scanline) * d.output_width * 3];
    jpeg_read_scanlines(&d, &row, 1);
  }
  jpeg_finish_decompress(&d);
  return px;
}

struct Planes {
  int components = 0;
  int hx = 1, hy = 1;  // chroma subsampling factors
  struct Plane {
    int w = 0, h = 0;  // downsampled size (real samples)
    int pitch = 0;
    std::vector<uint8_t> px;
  } p[3];
};

// The component planes before upsampling and colour conversion (what
// nvJPEG's YUV output holds).
Planes DecodeRaw(const std::vector<uint8_t>& jpeg) {
  Decompressor dec(jpeg);
  jpeg_decompress_struct& d = dec.d;
  d.raw_data_out = TRUE;
  jpeg_start_decompress(&d);
  Planes out;
  out.components = d.num_components;
  if (d.num_components == 3) {
    out.hx = d.max_h_samp_factor / d.comp_info[1].h_samp_factor;
    out.hy = d.max_v_samp_factor / d.comp_info[1].v_samp_factor;
  }
  const int rows_per_imcu = d.max_v_samp_factor * DCTSIZE;
  std::vector<std::vector<JSAMPROW>> rows(d.num_components);
  for (int c = 0; c < d.num_components; ++c) {
    jpeg_component_info& ci = d.comp_info[c];
    Planes::Plane& p = out.p[c];
    p.w = static_cast<int>(ci.downsampled_width);
    p.h = static_cast<int>(ci.downsampled_height);
    p.pitch = static_cast<int>(ci.width_in_blocks) * DCTSIZE;
    const int padded_h =
        static_cast<int>((d.total_iMCU_rows * ci.v_samp_factor) * DCTSIZE);
    p.px.assign(static_cast<size_t>(p.pitch) * padded_h, 0);
  }
  for (JDIMENSION imcu = 0; imcu < d.total_iMCU_rows; ++imcu) {
    JSAMPARRAY arrays[3];
    for (int c = 0; c < d.num_components; ++c) {
      jpeg_component_info& ci = d.comp_info[c];
      const int n = ci.v_samp_factor * DCTSIZE;
      rows[c].resize(n);
      for (int r = 0; r < n; ++r) {
        rows[c][r] =
            &out.p[c].px[(static_cast<size_t>(imcu) * n + r) * out.p[c].pitch];
      }
      arrays[c] = rows[c].data();
    }
    jpeg_read_raw_data(&d, arrays, rows_per_imcu);
  }
  jpeg_finish_decompress(&d);
  return out;
}

// Pixels where the header's conversion differs from libjpeg's RGB.
int Mismatches(const Sampling& s, int w, int h, int seed, std::string* first) {
  const std::vector<uint8_t> jpeg = Encode(MakeRgb(w, h, seed), w, h, s);
  const std::vector<uint8_t> want = DecodeRgb(jpeg);
  const Planes planes = DecodeRaw(jpeg);
  ColorSample cs{};
  cs.y = planes.p[0].px.data();
  cs.y_pitch = static_cast<uint32_t>(planes.p[0].pitch);
  if (planes.components == 3) {
    cs.cb = planes.p[1].px.data();
    cs.cr = planes.p[2].px.data();
    cs.c_pitch = static_cast<uint32_t>(planes.p[1].pitch);
    cs.c_width = planes.p[1].w;
    cs.c_height = planes.p[1].h;
  }
  cs.width = w;
  cs.height = h;
  cs.layout = ChromaLayoutFor(planes.components, planes.hx, planes.hy,
                              cs.c_width, &cs.fx, &cs.fy);
  int bad = 0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t rgb[3];
      ColorPixel(cs, x, y, rgb);
      const uint8_t* ref = &want[(static_cast<size_t>(y) * w + x) * 3];
      if (rgb[0] != ref[0] || rgb[1] != ref[1] || rgb[2] != ref[2]) {
        if (bad++ == 0) {
          *first = "(" + std::to_string(x) + "," + std::to_string(y) +
                   "): got " + std::to_string(rgb[0]) + "," +
                   std::to_string(rgb[1]) + "," + std::to_string(rgb[2]) +
                   " libjpeg " + std::to_string(ref[0]) + "," +
                   std::to_string(ref[1]) + "," + std::to_string(ref[2]);
        }
      }
    }
  }
  return bad;
}

const Sampling kSamplings[] = {
    {"4:2:0", 3, 2, 2}, {"4:2:2", 3, 2, 1}, {"4:4:0", 3, 1, 2},
    {"4:4:4", 3, 1, 1}, {"4:1:1", 3, 4, 1}, {"grey", 1, 1, 1},
};

TEST(JpegColorMathTest, EqualsLibjpegForEverySubsamplingAndSize) {
  // Whole blocks, partial blocks, odd sizes, chroma planes of 1-3 columns
  // (where libjpeg replicates instead), a photo-sized one.
  const int sizes[][2] = {{64, 48}, {33, 17}, {500, 375}, {37, 5},
                          {5, 3},   {2, 2},   {1, 1},     {9, 40}};
  int seed = 1;
  for (const Sampling& s : kSamplings) {
    for (const auto& wh : sizes) {
      std::string first;
      const int bad = Mismatches(s, wh[0], wh[1], seed++, &first);
      EXPECT_EQ(bad, 0) << s.name << " " << wh[0] << "x" << wh[1] << ", first "
                        << first;
    }
  }
}

TEST(JpegColorMathTest, ReplicatingChromaIsNotWhatLibjpegDoes) {
  // The check above can fail: chroma repeated over its 2x2 pixels (what
  // nvJPEG's RGB output does) differs from libjpeg's 4:2:0 decode.
  const std::vector<uint8_t> jpeg =
      Encode(MakeRgb(64, 48, 7), 64, 48, kSamplings[0]);
  const std::vector<uint8_t> want = DecodeRgb(jpeg);
  const Planes planes = DecodeRaw(jpeg);
  ColorSample cs{};
  cs.y = planes.p[0].px.data();
  cs.cb = planes.p[1].px.data();
  cs.cr = planes.p[2].px.data();
  cs.y_pitch = static_cast<uint32_t>(planes.p[0].pitch);
  cs.c_pitch = static_cast<uint32_t>(planes.p[1].pitch);
  cs.width = 64;
  cs.height = 48;
  cs.c_width = planes.p[1].w;
  cs.c_height = planes.p[1].h;
  cs.layout = kChromaReplicate;
  cs.fx = 2;
  cs.fy = 2;
  int bad = 0;
  for (int y = 0; y < 48; ++y) {
    for (int x = 0; x < 64; ++x) {
      uint8_t rgb[3];
      ColorPixel(cs, x, y, rgb);
      const uint8_t* ref = &want[(static_cast<size_t>(y) * 64 + x) * 3];
      bad += rgb[0] != ref[0] || rgb[1] != ref[1] || rgb[2] != ref[2];
    }
  }
  EXPECT_GT(bad, 64 * 48 / 4);
}

TEST(JpegColorMathTest, LayoutFollowsLibjpegsChoice) {
  int fx = 0, fy = 0;
  EXPECT_EQ(ChromaLayoutFor(1, 1, 1, 0, &fx, &fy), kChromaGrey);
  EXPECT_EQ(ChromaLayoutFor(3, 1, 1, 100, &fx, &fy), kChromaFull);
  EXPECT_EQ(ChromaLayoutFor(3, 2, 2, 100, &fx, &fy), kChromaFancyHV);
  EXPECT_EQ(ChromaLayoutFor(3, 2, 1, 100, &fx, &fy), kChromaFancyH);
  EXPECT_EQ(ChromaLayoutFor(3, 1, 2, 100, &fx, &fy), kChromaFancyV);
  // Two chroma columns or fewer: libjpeg replicates.
  EXPECT_EQ(ChromaLayoutFor(3, 2, 2, 2, &fx, &fy), kChromaReplicate);
  EXPECT_EQ(fx, 2);
  EXPECT_EQ(fy, 2);
  EXPECT_EQ(ChromaLayoutFor(3, 4, 1, 100, &fx, &fy), kChromaReplicate);
  EXPECT_EQ(fx, 4);
  EXPECT_EQ(fy, 1);
}

}  // namespace
}  // namespace dlcache::cuda::internal
