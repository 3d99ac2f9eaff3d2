#ifndef DLCACHE_CLIENT_CUDA_CROP_PARAMS_H_
#define DLCACHE_CLIENT_CUDA_CROP_PARAMS_H_

// Host-side parameters of the JPEG pipeline's augmentation (issue 37):
// where each sample's crop lies in its decoded image and whether it is
// flipped. Pure arithmetic, no CUDA: the fused kernel (jpeg_augment_kernel)
// only reads what is computed here, so the sampling is reproducible and
// tested on any machine.
//
// Train (RandomResizedCrop + horizontal flip) follows torchvision's
// RandomResizedCrop.get_params: up to 10 tries of an area fraction drawn
// uniformly from `scale` and a log-uniform aspect ratio from `ratio`, the
// first whose rounded size fits the image wins, at a uniform offset; else
// the centre crop clamped to the ratio range. The random numbers come from
// a per-sample stream seeded by (seed, epoch, sample index), not from a
// global generator: a sample's crop depends on nothing else (not on the
// batch it is in, nor on the thread that decodes it).
//
// Eval: torchvision's Resize(resize_size) (shorter side to resize_size,
// the longer one scaled and truncated) then CenterCrop(out), expressed as
// the box of the source image that the output covers.

#include <cstdint>

namespace dlcache::cuda {

// A crop box in source pixels (fractional for eval), plus the flip.
struct CropBox {
  double x = 0;  // left edge
  double y = 0;  // top edge
  double w = 0;  // width (> 0)
  double h = 0;  // height (> 0)
  bool flip = false;
  // Bilinear taps are clamped to the box (train: torchvision crops first,
  // then resizes) or to the whole image (eval: it resizes, then crops).
  bool clamp_to_box = true;
  // Which path chose the box (tests, diagnostics): 0-9 = the try that
  // succeeded, -1 = the centre-crop fallback, -2 = eval.
  int attempt = 0;
};

struct TrainCropSpec {
  double scale_min = 0.08;
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;
  double ratio_max = 4.0 / 3.0;
  double flip_p = 0.5;
};

// A small deterministic generator (splitmix64) for one sample's stream.
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t index);
  uint64_t Next();
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi);
  // Uniform integer in [lo, hi] (hi >= lo).
  int64_t UniformInt(int64_t lo, int64_t hi);

 private:
  uint64_t state_;
};

// RandomResizedCrop + flip for an image of width x height (both > 0).
CropBox SampleTrainCrop(int width, int height, const TrainCropSpec& spec,
                        uint64_t seed, uint64_t epoch, uint64_t index);

// Resize(resize_size) + CenterCrop(out_h, out_w) for an image of width x
// height. resize_size <= 0 means resize the shorter side to the crop's
// larger side (a plain centre crop at the output's scale).
CropBox EvalCrop(int width, int height, int resize_size, int out_h, int out_w);

}  // namespace dlcache::cuda

#endif  // DLCACHE_CLIENT_CUDA_CROP_PARAMS_H_
