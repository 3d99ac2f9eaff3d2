"""The GPU JPEG pipeline's Python side (issue 37): JpegTransform, the
ctypes view of dlcache_cuda_c.h's dlc_cuda_jpeg_* functions, and the
torch fallback that applies the very same crop to images decoded
elsewhere (an item nvJPEG could not decode, or no nvJPEG at all).

Used by GpuLoader(decode="nvjpeg"); see docs/jpeg_pipeline.md.
"""

import ctypes
import io
import os
from typing import Optional, Sequence, Tuple

import torch

c_int = ctypes.c_int
c_double = ctypes.c_double
c_float = ctypes.c_float
c_uint64 = ctypes.c_uint64
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_size_t = ctypes.c_size_t

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_DTYPES = {torch.uint8: 0, torch.float16: 1, torch.bfloat16: 2,
           torch.float32: 3}


class _JpegOptions(ctypes.Structure):
    # dlc_cuda_jpeg_options, filled by dlc_cuda_jpeg_options_init.
    _fields_ = [("device", c_int), ("backend", c_char_p),
                ("library", c_char_p), ("_spare", ctypes.c_char * 128)]


class _JpegTransform(ctypes.Structure):
    # dlc_cuda_jpeg_transform.
    _fields_ = [("out_h", c_int), ("out_w", c_int), ("train", c_int),
                ("scale_min", c_double), ("scale_max", c_double),
                ("ratio_min", c_double), ("ratio_max", c_double),
                ("flip_p", c_double), ("resize_size", c_int),
                ("dtype", c_int), ("channels_last", c_int),
                ("mean", c_float * 3), ("std", c_float * 3),
                ("seed", c_uint64), ("epoch", c_uint64),
                ("antialias", c_int)]


class _JpegItem(ctypes.Structure):
    # dlc_cuda_jpeg_item.
    _fields_ = [("code", c_int), ("width", c_int), ("height", c_int),
                ("components", c_int), ("crop_x", c_double),
                ("crop_y", c_double), ("crop_w", c_double),
                ("crop_h", c_double), ("flip", c_int), ("attempt", c_int)]


class _JpegStats(ctypes.Structure):
    # dlc_cuda_jpeg_stats.
    _fields_ = [("backend", c_char_p), ("batches", c_uint64),
                ("images", c_uint64), ("failed_images", c_uint64),
                ("batched_images", c_uint64), ("single_images", c_uint64),
                ("batch_failures", c_uint64), ("planar_images", c_uint64),
                ("parse_ns", c_uint64), ("stage_ns", c_uint64),
                ("drain_ns", c_uint64), ("decode_ns", c_uint64),
                ("run_ns", c_uint64)]


def signatures():
    """The dlc_cuda_jpeg_* declarations, for torch_gpu._load."""
    P = ctypes.POINTER
    return {
        "dlc_cuda_jpeg_options_init": (None, [P(_JpegOptions)]),
        "dlc_cuda_jpeg_transform_init": (None, [P(_JpegTransform)]),
        "dlc_cuda_jpeg_create": (c_int, [P(_JpegOptions), P(c_void_p)]),
        "dlc_cuda_jpeg_destroy": (None, [c_void_p]),
        "dlc_cuda_jpeg_get_stats": (c_int, [c_void_p, P(_JpegStats)]),
        "dlc_cuda_jpeg_decode_batch": (c_int, [
            c_void_p, c_void_p, P(c_char_p), P(c_uint64), P(_JpegTransform),
            c_void_p, c_uint64, c_void_p, P(_JpegItem), P(c_size_t)]),
        "dlc_cuda_jpeg_decode_host": (c_int, [
            c_void_p, P(c_void_p), P(c_size_t), c_size_t, P(c_uint64),
            P(_JpegTransform), c_void_p, c_uint64, c_void_p, P(_JpegItem),
            P(c_size_t)]),
        "dlc_cuda_jpeg_item_error": (c_char_p, [c_void_p, c_size_t]),
        "dlc_cuda_jpeg_wait": (c_int, [c_void_p]),
        "dlc_cuda_jpeg_crop": (c_int, [P(_JpegTransform), c_int, c_int,
                                       c_uint64, P(_JpegItem)]),
        # The pipeline inside the C++ feed (options: dlc_cuda_feed_options).
        "dlc_cuda_jpeg_feed_create": (c_int, [
            c_void_p, c_char_p, c_void_p, P(_JpegTransform), c_void_p,
            P(c_void_p)]),
        "dlc_cuda_jpeg_feed_create_workers": (c_int, [
            c_void_p, c_char_p, P(c_void_p), P(c_void_p), c_size_t,
            P(_JpegTransform), c_void_p, P(c_void_p)]),
        "dlc_cuda_jpeg_feed_submit": (c_int, [
            c_void_p, P(c_char_p), P(c_uint64), c_size_t, P(_JpegTransform),
            c_void_p, c_uint64, c_uint64]),
        "dlc_cuda_jpeg_feed_batch_items": (c_int, [
            c_void_p, P(_JpegItem), c_size_t, P(c_size_t)]),
        "dlc_cuda_jpeg_feed_batch_item_error": (c_char_p, [c_void_p,
                                                           c_size_t]),
    }


class JpegTransform:
    """What decode="nvjpeg" makes of each JPEG.

    train=True: torchvision's RandomResizedCrop(size, scale, ratio) and
    RandomHorizontalFlip(flip_p), each sample's parameters drawn from its
    own stream seeded by (loader seed, epoch, the sample's index in keys),
    so the same sample gets the same crop in the same epoch on every run.
    train=False: Resize(resize_size) (shorter side) + CenterCrop(size).
    Then bilinear resampling (half-pixel centres; antialias=True, the
    default, widens the filter to the scale when shrinking, as PIL and
    torchvision's antialiased resize do), and for
    float dtypes (pixel / 255 - mean) / std (mean 0, std 1 by default:
    [0, 1]); uint8 keeps 0..255. channels_last=True yields tensors in
    torch.channels_last memory format (shape still [B, 3, H, W]).
    """

    def __init__(self, size=224, train: bool = True,
                 scale: Tuple[float, float] = (0.08, 1.0),
                 ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
                 flip_p: float = 0.5, resize_size: int = 256,
                 mean: Optional[Sequence[float]] = None,
                 std: Optional[Sequence[float]] = None,
                 dtype: torch.dtype = torch.uint8,
                 channels_last: bool = False,
                 antialias: bool = True) -> None:
        if isinstance(size, int):
            size = (size, size)
        self.size = (int(size[0]), int(size[1]))
        self.train = bool(train)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.flip_p = float(flip_p)
        self.resize_size = int(resize_size)
        if dtype not in _DTYPES:
            raise ValueError("dtype must be uint8, float16, bfloat16 or "
                             "float32")
        if dtype == torch.uint8 and (mean is not None or std is not None):
            raise ValueError("uint8 output takes no mean/std")
        self.mean = tuple(float(m) for m in (mean or (0.0, 0.0, 0.0)))
        self.std = tuple(float(s) for s in (std or (1.0, 1.0, 1.0)))
        if len(self.mean) != 3 or len(self.std) != 3 or 0.0 in self.std:
            raise ValueError("mean and std: 3 values, std non-zero")
        self.dtype = dtype
        self.channels_last = bool(channels_last)
        self.antialias = bool(antialias)

    @classmethod
    def imagenet(cls, train: bool = True, size=224,
                 dtype: torch.dtype = torch.float32,
                 channels_last: bool = False) -> "JpegTransform":
        """The usual ImageNet recipe with ImageNet's mean and std."""
        return cls(size=size, train=train, mean=IMAGENET_MEAN,
                   std=IMAGENET_STD, dtype=dtype,
                   channels_last=channels_last)

    def to_c(self, seed: int, epoch: int) -> _JpegTransform:
        t = _JpegTransform()
        t.out_h, t.out_w = self.size
        t.train = 1 if self.train else 0
        t.scale_min, t.scale_max = self.scale
        t.ratio_min, t.ratio_max = self.ratio
        t.flip_p = self.flip_p
        t.resize_size = self.resize_size
        t.dtype = _DTYPES[self.dtype]
        t.channels_last = 1 if self.channels_last else 0
        for c in range(3):
            t.mean[c] = self.mean[c]
            t.std[c] = self.std[c]
        t.seed = int(seed) & (2 ** 64 - 1)
        t.epoch = int(epoch) & (2 ** 64 - 1)
        t.antialias = 1 if self.antialias else 0
        return t

    def empty(self, n: int, device) -> torch.Tensor:
        """An output batch: [n, 3, H, W] of dtype (channels_last if so)."""
        h, w = self.size
        if self.channels_last:
            return torch.empty((n, 3, h, w), dtype=self.dtype, device=device,
                               memory_format=torch.channels_last)
        return torch.empty((n, 3, h, w), dtype=self.dtype, device=device)

    def __repr__(self):
        return ("JpegTransform(size=%r, train=%r, scale=%r, ratio=%r, "
                "flip_p=%r, resize_size=%r, mean=%r, std=%r, dtype=%r, "
                "channels_last=%r, antialias=%r)" % (
                    self.size, self.train, self.scale, self.ratio,
                    self.flip_p, self.resize_size, self.mean, self.std,
                    self.dtype, self.channels_last, self.antialias))


def nvjpeg_candidates():
    """(mapped, others): libnvjpeg paths to try beyond the C library's own
    search. mapped: copies this process has loaded already (torchvision's
    image extension links one); others: torchvision's bundled copy and
    NVIDIA's pip wheels."""
    import glob
    import sys
    mapped = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if "/" in line else ""
                if (os.path.basename(path).startswith("libnvjpeg")
                        and path not in mapped):
                    mapped.append(path)
    except OSError:
        pass
    others = []
    for d in sys.path:
        if not d or not os.path.isdir(d):
            continue
        for pattern in ("torchvision.libs/libnvjpeg*.so*",
                        "nvidia/*/lib/libnvjpeg.so*",
                        "nvidia/*/lib64/libnvjpeg.so*"):
            for p in sorted(glob.glob(os.path.join(d, pattern))):
                if p not in mapped and p not in others:
                    others.append(p)
    return mapped, others


def open_handle(fns, device, backend="auto"):
    """(handle, code, reason): a dlc_cuda_jpeg handle on `device`, trying
    the library's own search ($DLCACHE_NVJPEG_LIB, libnvjpeg.so.13 ...),
    then nvjpeg_candidates(); handle None with the last non-OK code and
    every reason when none works."""
    def create(library):
        o = _JpegOptions()
        fns["dlc_cuda_jpeg_options_init"](ctypes.byref(o))
        o.device = int(device)
        o.backend = backend.encode()
        o.library = library.encode() if library else None
        h = c_void_p()
        rc = fns["dlc_cuda_jpeg_create"](ctypes.byref(o), ctypes.byref(h))
        msg = "" if rc == 0 else (fns["dlc_cuda_last_error"]() or
                                  b"").decode(errors="replace")
        return (h if rc == 0 else None), rc, msg

    if os.environ.get("DLCACHE_NVJPEG_LIB"):
        return create(None)
    mapped, others = nvjpeg_candidates()
    reasons = []
    code = 14
    # A copy already in the process first (no second nvJPEG), then the
    # library's search, then the other copies found.
    for lib in mapped[:1] + [None] + others:
        h, code, msg = create(lib)
        if h is not None:
            return h, 0, ""
        reasons.append(msg)
        if code != 14 or "not found" not in msg:
            break  # nvJPEG loaded but refused: another copy won't help
    return None, code, "; ".join(reasons)


def crop_box(fns, ct: _JpegTransform, width: int, height: int,
             index: int) -> _JpegItem:
    """The pipeline's crop for sample `index` of a width x height image."""
    out = _JpegItem()
    rc = fns["dlc_cuda_jpeg_crop"](ctypes.byref(ct), int(width), int(height),
                                   int(index), ctypes.byref(out))
    if rc != 0:
        msg = (fns["dlc_cuda_last_error"]() or b"").decode(errors="replace")
        raise ValueError("dlc_cuda_jpeg_crop: %s" % msg)
    return out


def _filter_matrix(n_out, x0, scale, lo, hi, size, flip, dev):
    """[n_out, size] weights of the antialiased filter along one axis:
    output i centred at x0 + (i + 0.5) * scale, a triangle of half-width
    max(scale, 1) over the pixels lo..hi (centres j + 0.5), rows
    normalised; rows reversed for a flip."""
    f32 = torch.float32
    i = torch.arange(n_out, device=dev, dtype=f32)
    if flip:
        i = (n_out - 1) - i
    c = x0 + (i + 0.5) * scale
    half = max(scale, 1.0)
    j = torch.arange(size, device=dev, dtype=f32)
    w = (1.0 - ((j[None, :] + 0.5 - c[:, None]) / half).abs()).clamp(min=0)
    inside = (j >= lo) & (j <= hi)
    w = w * inside[None, :].to(f32)
    return w / w.sum(dim=1, keepdim=True)


def apply_crop(img: torch.Tensor, box: _JpegItem, t: JpegTransform,
               out: torch.Tensor) -> None:
    """Writes the pipeline's augmentation of `img` (uint8 [3, H, W], on
    out's device) for `box` into `out` ([3, h, w] view): the kernel's
    arithmetic in torch ops (the fallback path, and the GPU check's
    reference)."""
    img = img.to(out.device)
    _, H, W = img.shape
    oh, ow = t.size
    dev = out.device
    f32 = torch.float32
    if box.attempt == -2:  # eval: clamped to the image
        lox, loy, hix, hiy = 0.0, 0.0, float(W - 1), float(H - 1)
    else:  # train: clamped to the crop
        lox, loy = box.crop_x, box.crop_y
        hix = box.crop_x + box.crop_w - 1
        hiy = box.crop_y + box.crop_h - 1
    f = img.to(f32)
    if t.antialias:
        # Only the pixels that may be read: [lo, hi] on each axis.
        xl, xh = int(lox), int(hix)
        yl, yh = int(loy), int(hiy)
        sub = f[:, yl:yh + 1, xl:xh + 1]
        wx = _filter_matrix(ow, box.crop_x - xl, box.crop_w / ow, 0,
                            xh - xl, xh - xl + 1, bool(box.flip), dev)
        wy = _filter_matrix(oh, box.crop_y - yl, box.crop_h / oh, 0,
                            yh - yl, yh - yl + 1, False, dev)
        v = torch.matmul(torch.matmul(wy, sub), wx.t())
    else:
        xs = torch.arange(ow, device=dev, dtype=f32)
        if box.flip:
            xs = (ow - 1) - xs
        fx = box.crop_x + (xs + 0.5) * (box.crop_w / ow) - 0.5
        fy = box.crop_y + (torch.arange(oh, device=dev, dtype=f32) + 0.5) * (
            box.crop_h / oh) - 0.5
        fx = fx.clamp(lox, hix)
        fy = fy.clamp(loy, hiy)
        x0 = fx.floor().long()
        y0 = fy.floor().long()
        x1 = (x0 + 1).clamp(max=int(hix))
        y1 = (y0 + 1).clamp(max=int(hiy))
        ax = fx - x0
        ay = (fy - y0)[:, None]
        r0 = f[:, y0]
        r1 = f[:, y1]
        top = r0[:, :, x0] + (r0[:, :, x1] - r0[:, :, x0]) * ax
        bot = r1[:, :, x0] + (r1[:, :, x1] - r1[:, :, x0]) * ax
        v = top + (bot - top) * ay
    if t.dtype == torch.uint8:
        v = v.round().clamp(0, 255)
    else:
        mean = torch.tensor(t.mean, device=dev, dtype=f32)[:, None, None]
        std = torch.tensor(t.std, device=dev, dtype=f32)[:, None, None]
        v = (v / 255.0 - mean) / std
    out.copy_(v.to(out.dtype))


def cpu_decode(data: bytes) -> torch.Tensor:
    """uint8 [3, H, W] of any image PIL reads (PNG, CMYK JPEG, ...);
    raises what PIL raises."""
    import numpy as np
    from PIL import Image
    with Image.open(io.BytesIO(data)) as im:
        im = im.convert("RGB")
        arr = np.asarray(im).copy()
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous()
