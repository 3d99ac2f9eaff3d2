"""GpuLoader(decode="nvjpeg") against a real dlcached: the parts that run
without a GPU (issue 37).

Without CUDA (or without nvJPEG) decode="nvjpeg" decodes with torchvision
or PIL and applies the pipeline's very crops (dlc_cuda_jpeg_crop) in torch
ops, with one warning. These tests check that path end to end: shapes,
dtypes, layout, (x, y) batches, the same crops for the same (seed, epoch),
the eval transform's arithmetic, greyscale/CMYK/PNG items as 3 channels,
and a corrupt file reported naming its key. The GPU path itself (nvJPEG
and the fused kernel, against PIL's decode) is checked on the GPU machine
by tests/gpu/jpeg_pipeline_on_device.py.

  DLCACHED=build/server/dlcached DLCACHE_LIB=build/client/libdlcache_c.so \\
  PYTHONPATH=client/python python3 tests/integration/python_jpeg_pipeline_test.py
Exit code 77 (ctest: skipped) when torch, PIL or the server is missing.
"""

import io
import os
import random
import sys
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
sys.path.insert(0, HERE)

if __name__ == "__main__":
    from python_gpu_loader_test import _reexec_with_torch
    _reexec_with_torch()

import torch  # noqa: E402

from python_server import run_tests  # noqa: E402

try:
    import numpy as np  # noqa: F401
    from PIL import Image
    HAVE_PIL = True
except ImportError:
    HAVE_PIL = False


def _jpeg(img, **kw):
    buf = io.BytesIO()
    img.save(buf, format="JPEG", **kw)
    return buf.getvalue()


def make_images():
    """name -> bytes: RGB JPEGs of several sizes, a greyscale and a CMYK
    JPEG, a PNG, and a corrupt file."""
    rng = random.Random(5)
    files = {}
    for i in range(10):
        w, h = 48 + 8 * i, 40 + 5 * i
        img = Image.new("RGB", (w, h))
        px = img.load()
        for y in range(h):
            for x in range(w):
                px[x, y] = ((x * 255) // w, (y * 255) // h,
                            rng.randrange(100, 140))
        files["rgb/%02d.jpg" % i] = _jpeg(img, quality=92)
    files["odd/grey.jpg"] = _jpeg(Image.linear_gradient("L").resize((60, 50)),
                                  quality=92)
    files["odd/cmyk.jpg"] = _jpeg(Image.new("CMYK", (50, 40),
                                            (10, 200, 30, 0)), quality=92)
    buf = io.BytesIO()
    Image.new("RGB", (30, 20), (200, 10, 10)).save(buf, format="PNG")
    files["odd/red.png"] = buf.getvalue()
    return files


FILES = make_images() if HAVE_PIL else {}
RGB = sorted(k for k in FILES if k.startswith("rgb/"))
ODD = ["odd/grey.jpg", "odd/cmyk.jpg", "odd/red.png"]
BAD = b"\xff\xd8\xff\xe0" + bytes(random.Random(1).randrange(256)
                                  for _ in range(300))


def setUpModule():
    global SERVER, GpuLoader, JpegTransform, DlcacheError
    from python_gpu_loader_test import Server
    from dlcache.torch_gpu import GpuLoader, JpegTransform
    from dlcache._client import DlcacheError
    files = dict(FILES)
    files["bad/corrupt.jpg"] = BAD
    SERVER = Server({"img": files})


def tearDownModule():
    SERVER.stop()


def loader(keys, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("device", "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return GpuLoader(keys, dataset="img", socket=SERVER.socket,
                         decode="nvjpeg", **kw)


def decoded(key):
    from dlcache import _jpeg
    return _jpeg.cpu_decode(FILES[key])


class JpegFallbackTest(unittest.TestCase):

    def test_batches_are_ready_tensors_with_targets(self):
        t = JpegTransform(size=(24, 32), dtype=torch.float16,
                          mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25),
                          channels_last=True)
        with loader(RGB, jpeg=t, targets=list(range(len(RGB))),
                    shuffle=False) as ld:
            self.assertIsNotNone(ld.jpeg_stats()["fallback_reason"])
            n = 0
            for x, y in ld:
                self.assertEqual(x.dtype, torch.float16)
                self.assertEqual(tuple(x.shape[1:]), (3, 24, 32))
                self.assertTrue(x.is_contiguous(
                    memory_format=torch.channels_last))
                self.assertEqual(y.tolist(), list(range(n, n + len(y))))
                # (v / 255 - 0.5) / 0.25 lies in [-2, 2].
                self.assertLessEqual(float(x.abs().max()), 2.0)
                n += len(y)
            self.assertEqual(n, len(RGB))

    def test_same_seed_and_epoch_same_crops_other_epoch_others(self):
        def epoch(e, seed=3):
            with loader(RGB, seed=seed, shuffle=False,
                        jpeg=JpegTransform(size=16)) as ld:
                ld.set_epoch(e)
                return torch.cat(list(ld))
        a, b = epoch(1), epoch(1)
        self.assertTrue(torch.equal(a, b))
        self.assertFalse(torch.equal(a, epoch(2)))
        self.assertFalse(torch.equal(a, epoch(1, seed=4)))

    def test_crop_depends_on_the_sample_not_on_its_batch(self):
        # Shuffled vs. in order, batch 3 vs. 4: sample k's output is the
        # same, its crop being seeded by (seed, epoch, index of k).
        t = JpegTransform(size=16)
        with loader(RGB, seed=9, shuffle=False, batch_size=3, jpeg=t,
                    return_keys=True) as ld:
            ld.set_epoch(0)
            ordered = {}
            for keys, x in ld:
                ordered.update(zip(keys, x))
        with loader(RGB, seed=9, shuffle=True, batch_size=4, jpeg=t,
                    return_keys=True) as ld:
            ld.set_epoch(0)
            for keys, x in ld:
                for k, xi in zip(keys, x):
                    self.assertTrue(torch.equal(ordered[k], xi), k)

    def test_eval_identity_and_normalisation_arithmetic(self):
        key = RGB[0]  # 48 x 40
        img = decoded(key)
        h, w = img.shape[1:]
        # Resize(shorter side = h) then CenterCrop(h, w): the image itself.
        t = JpegTransform(size=(h, w), train=False, resize_size=h)
        with loader([key], jpeg=t, batch_size=1) as ld:
            x = next(iter(ld))
        self.assertTrue(torch.equal(x[0], img))
        t = JpegTransform(size=(h, w), train=False, resize_size=h,
                          dtype=torch.float32, mean=(0.1, 0.2, 0.3),
                          std=(0.5, 0.25, 2.0))
        with loader([key], jpeg=t, batch_size=1) as ld:
            x = next(iter(ld))
        mean = torch.tensor([0.1, 0.2, 0.3]).view(3, 1, 1)
        std = torch.tensor([0.5, 0.25, 2.0]).view(3, 1, 1)
        want = (img.float() / 255 - mean) / std
        self.assertTrue(torch.allclose(x[0], want, atol=1e-5))

    def test_eval_centre_crop_of_a_larger_image(self):
        # 2x downscale, centre: output pixel (i, j) samples between source
        # pixels 2i and 2i+1 (half-pixel centres): their mean, +-1.
        key = RGB[-1]  # 120 x 85
        img = decoded(key).float()
        t = JpegTransform(size=(20, 20), train=False, resize_size=42)
        with loader([key], jpeg=t, batch_size=1) as ld:
            x = next(iter(ld))[0].float()
        # Resize(42): 59x42 (int(42 * 120 / 85) = 59); crop 20x20 at
        # top 11, left round(19.5) = 20: source scale 85/42 ~ 2.02.
        self.assertEqual(tuple(x.shape), (3, 20, 20))
        s = 85 / 42
        cy = (11 + 10) * s
        cx = (20 + 10) * (120 / 59)
        centre = img[:, int(cy) - 1:int(cy) + 2, int(cx) - 1:int(cx) + 2]
        got = x[:, 9:12, 9:12]
        self.assertLess(float((got.mean() - centre.mean()).abs()), 6.0)

    def test_grey_cmyk_and_png_come_out_as_three_channels(self):
        t = JpegTransform(size=(10, 10), train=False, resize_size=10)
        with loader(ODD, jpeg=t, batch_size=3, shuffle=False) as ld:
            x = next(iter(ld))
        self.assertEqual(tuple(x.shape), (3, 3, 10, 10))
        grey, _, red = x
        self.assertTrue(torch.equal(grey[0], grey[1]))
        self.assertTrue(torch.equal(grey[1], grey[2]))
        self.assertEqual(red[:, 5, 5].tolist(), [200, 10, 10])

    def test_corrupt_file_raises_naming_its_key(self):
        with loader(RGB[:3] + ["bad/corrupt.jpg"], batch_size=4,
                    shuffle=False) as ld:
            with self.assertRaises(DlcacheError) as cm:
                next(iter(ld))
        self.assertIn("bad/corrupt.jpg", str(cm.exception))

    def test_train_crops_lie_in_the_image_and_match_the_c_sampler(self):
        from dlcache import _jpeg, torch_gpu
        _, fns = torch_gpu._load()
        ct = JpegTransform(size=224).to_c(seed=1, epoch=2)
        seen = set()
        for i in range(200):
            b = _jpeg.crop_box(fns, ct, 500, 375, i)
            self.assertGreaterEqual(b.crop_x, 0)
            self.assertGreaterEqual(b.crop_y, 0)
            self.assertLessEqual(b.crop_x + b.crop_w, 500)
            self.assertLessEqual(b.crop_y + b.crop_h, 375)
            c = _jpeg.crop_box(fns, ct, 500, 375, i)
            self.assertEqual((b.crop_x, b.crop_y, b.crop_w, b.crop_h, b.flip),
                             (c.crop_x, c.crop_y, c.crop_w, c.crop_h, c.flip))
            seen.add((b.crop_x, b.crop_y, b.crop_w, b.crop_h))
        self.assertGreater(len(seen), 190)

    def test_antialias_matches_torch_and_bilinear_when_enlarging(self):
        # The kernel's arithmetic (apply_crop, the fallback and the GPU
        # check's reference) against torch's own resize: antialiased when
        # shrinking, plain bilinear when enlarging.
        from dlcache._jpeg import _JpegItem, apply_crop
        import torch.nn.functional as F
        g = torch.Generator().manual_seed(0)
        img = (torch.rand(3, 40, 50, generator=g) * 255).to(torch.uint8)
        box = _JpegItem()
        box.crop_w, box.crop_h, box.attempt = 50, 40, 0
        for size in ((20, 25), (13, 17), (80, 100)):
            out = torch.empty((3,) + size)
            apply_crop(img, box, JpegTransform(size=size,
                                               dtype=torch.float32), out)
            ref = F.interpolate(img.float()[None], size=size,
                                mode="bilinear", align_corners=False,
                                antialias=size[0] < 40)[0] / 255
            self.assertLess(float((out - ref).abs().max()), 1e-5, size)
        out = torch.empty(3, 80, 100)
        apply_crop(img, box, JpegTransform(size=(80, 100),
                                           dtype=torch.float32,
                                           antialias=False), out)
        self.assertLess(float((out - ref).abs().max()), 1e-5)

    def test_a_feed_that_gives_no_batch_is_reported(self):
        # A decode thread stuck inside nvJPEG (docs/jpeg_pipeline.md,
        # Limits) would leave the loop waiting with no word: the loader
        # warns while it waits. The feed is a stand-in here (no GPU).
        import ctypes
        import time
        from dlcache import torch_gpu
        ld = loader(RGB[:4])
        calls = []

        def next_batch(feed, timeout, out):
            calls.append(timeout)
            if len(calls) < 6:
                time.sleep(0.02)
                return torch_gpu._DEADLINE_EXCEEDED
            return torch_gpu._OK
        fns, feed = ld._fns, ld._feed
        ld._fns = dict(fns, dlc_cuda_feed_next=next_batch)
        ld._feed = ctypes.c_void_p(1)
        ld.feed_stats = lambda: {"started": 2, "returned": 0}
        saved = torch_gpu.FEED_SILENT_WARN_S
        torch_gpu.FEED_SILENT_WARN_S = 0.03
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                ld._feed_take()
        finally:
            torch_gpu.FEED_SILENT_WARN_S = saved
            ld._fns, ld._feed = fns, feed
            del ld.feed_stats
            ld.close()
        msgs = [str(w.message) for w in seen
                if "no batch from the feed" in str(w.message)]
        self.assertGreaterEqual(len(msgs), 1)
        self.assertIn("'started': 2", msgs[0])
        self.assertIn("nvJPEG", msgs[0])
        self.assertEqual(len(calls), 6)

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            JpegTransform(dtype=torch.int32)
        with self.assertRaises(ValueError):
            JpegTransform(mean=(0.5, 0.5, 0.5))  # uint8 takes none
        with self.assertRaises(ValueError):
            GpuLoader(["x"], dataset="img", socket=SERVER.socket,
                      device="cpu", jpeg=JpegTransform())
        with self.assertRaises(ValueError):
            GpuLoader(["x"], dataset="img", socket=SERVER.socket,
                      device="cpu", decode="nvjpeg", nvjpeg_backend="cpu")


if __name__ == "__main__":
    run_tests(__name__, require=[("PIL and numpy", HAVE_PIL)])
