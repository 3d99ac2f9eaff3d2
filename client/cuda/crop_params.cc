#include "client/cuda/crop_params.h"

#include <algorithm>
#include <cmath>

namespace dlcache::cuda {
namespace {

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Python's round() (half to even), which torchvision's get_params uses.
int64_t RoundHalfEven(double v) {
  return static_cast<int64_t>(std::nearbyint(v));
}

}  // namespace

SampleRng::SampleRng(uint64_t seed, uint64_t epoch, uint64_t index)
    // Each input goes through the mixer before the next is added, so that
    // (seed, epoch, index) triples that sum alike still differ.
    : state_(Mix(Mix(Mix(seed ^ 0x6a09e667f3bcc908ULL) + epoch) + index)) {}

uint64_t SampleRng::Next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  return Mix(state_);
}

double SampleRng::Uniform(double lo, double hi) {
  // 53 random bits: a double in [0, 1).
  const double u = static_cast<double>(Next() >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * u;
}

int64_t SampleRng::UniformInt(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(Next() % span);
}

CropBox SampleTrainCrop(int width, int height, const TrainCropSpec& spec,
                        uint64_t seed, uint64_t epoch, uint64_t index) {
  SampleRng rng(seed, epoch, index);
  CropBox box;
  box.clamp_to_box = true;
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(spec.ratio_min);
  const double log_hi = std::log(spec.ratio_max);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * rng.Uniform(spec.scale_min, spec.scale_max);
    const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
    const int64_t w = RoundHalfEven(std::sqrt(target * aspect));
    const int64_t h = RoundHalfEven(std::sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      box.y = static_cast<double>(rng.UniformInt(0, height - h));
      box.x = static_cast<double>(rng.UniformInt(0, width - w));
      box.w = static_cast<double>(w);
      box.h = static_cast<double>(h);
      box.attempt = attempt;
      found = true;
    }
  }
  if (!found) {
    const double in_ratio = static_cast<double>(width) / height;
    int64_t w = width;
    int64_t h = height;
    if (in_ratio < spec.ratio_min) {
      h = RoundHalfEven(w / spec.ratio_min);
    } else if (in_ratio > spec.ratio_max) {
      w = RoundHalfEven(h * spec.ratio_max);
    }
    h = std::clamp<int64_t>(h, 1, height);
    w = std::clamp<int64_t>(w, 1, width);
    box.y = static_cast<double>((height - h) / 2);
    box.x = static_cast<double>((width - w) / 2);
    box.w = static_cast<double>(w);
    box.h = static_cast<double>(h);
    box.attempt = -1;
  }
  // The flip draw comes after the crop's, from the same stream.
  box.flip = rng.Uniform(0.0, 1.0) < spec.flip_p;
  return box;
}

CropBox EvalCrop(int width, int height, int resize_size, int out_h, int out_w) {
  CropBox box;
  box.clamp_to_box = false;
  box.attempt = -2;
  if (resize_size <= 0) resize_size = std::max(out_h, out_w);
  // torchvision's Resize(int): the shorter side becomes resize_size, the
  // longer one int(resize_size * long / short).
  int64_t rw = 0;
  int64_t rh = 0;
  if (width <= height) {
    rw = resize_size;
    rh =
        static_cast<int64_t>(static_cast<double>(resize_size) * height / width);
  } else {
    rh = resize_size;
    rw =
        static_cast<int64_t>(static_cast<double>(resize_size) * width / height);
  }
  // CenterCrop: top = round((rh - out_h) / 2), left likewise (a crop
  // larger than the image pads in torchvision; here it samples the
  // clamped edge).
  const double top = std::nearbyint((rh - out_h) / 2.0);
  const double left = std::nearbyint((rw - out_w) / 2.0);
  const double sy = static_cast<double>(height) / rh;
  const double sx = static_cast<double>(width) / rw;
  box.y = top * sy;
  box.x = left * sx;
  box.h = out_h * sy;
  box.w = out_w * sx;
  return box;
}

}  // namespace dlcache::cuda
