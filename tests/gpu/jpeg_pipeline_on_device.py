#!/usr/bin/env python3
"""GPU machine check of the JPEG pipeline (issue 37): nvJPEG through
dlcache's C ABI (dlc_cuda_jpeg_*) and GpuLoader(decode="nvjpeg").

Prints one line per check, "OK", "FAIL" or "INFO", and exits 1 if any
check failed (77 without CUDA). Each check stands alone: a failure is
reported and the next one runs.

  1. which nvJPEG loads, which backend is chosen and why (hardware JPEG
     engines, else the GPU backend), with the forced "gpu" backend too;
  2. decoded pixels (identity eval transform) vs PIL's libjpeg decode:
     PSNR >= 40 dB on generated ImageNet-like JPEGs (4:2:0 and 4:4:4,
     500x375 and portrait), a greyscale JPEG as 3 equal channels; vs
     torchvision.io.decode_jpeg(device="cuda") too (INFO);
  3. bad and unusual items in one batch: a PNG and a corrupt file get a
     per-item error naming the problem (no crash), a progressive and a
     CMYK JPEG are decoded or reported; the good items of that batch are
     still right;
  4. the fused kernel against the torch reference of the same arithmetic
     (dlcache._jpeg.apply_crop) on the same decoded pixels, for
     RandomResizedCrop + flip, every dtype, NCHW and channels_last,
     antialiased and plain bilinear;
  5. the same crops for the same (seed, epoch) across two runs, other
     crops for another epoch;
  6. GpuLoader(decode="nvjpeg") through a dlcached started here, through
     the C++ feed and through producer threads: (x, y) batches, a PNG
     decoded on the CPU with the same crop, a corrupt file raising an error
     that names its key; both producers give the same batches.

On the GPU machine (bundle from tests/gpu/device_bundle.sh):
  LD_LIBRARY_PATH=.device/gpu/pylib DLCACHED=.device/gpu/bin/dlcached.sh \\
  DLCACHECTL=.device/gpu/bin/dlcachectl.sh \\
  DLCACHE_LIB=.device/gpu/pylib/libdlcache_c.so \\
  PYTHONPATH=client/python:tests/integration \\
  python3 tests/gpu/jpeg_pipeline_on_device.py --out $OUT/jpeg_check.md
"""

import argparse
import ctypes
import io
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

RESULTS = []


def report(status, name, detail=""):
    line = "%-4s %s%s" % (status, name, (": " + detail) if detail else "")
    RESULTS.append(line)
    print(line, flush=True)


def check(name):
    """Runs the decorated check now; an exception is its FAIL."""
    def wrap(fn):
        t = time.perf_counter()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 (report and go on)
            report("FAIL", name, "%s: %s" % (type(e).__name__, e))
            traceback.print_exc()
        print("     (%s: %.1f s)" % (name, time.perf_counter() - t),
              flush=True)
        return fn
    return wrap


# ------------------------------------------------------------ images ----

def natural(w, h, seed, noise=4.0):
    """An ImageNet-like test picture: smooth colour fields, edges, mild
    noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        fx, fy, ph = rng.uniform(0.5, 4, 3)
        img[..., c] = 128 + 90 * np.sin(6.28 * (fx * xx / w + fy * yy / h)
                                        + ph)
    # A few flat rectangles: edges as in photographs.
    for _ in range(6):
        x0, y0 = rng.integers(0, w - 20), rng.integers(0, h - 20)
        img[y0:y0 + rng.integers(10, h // 2), x0:x0 + rng.integers(10, w // 2)] \
            = rng.uniform(0, 255, 3)
    img += rng.normal(0, noise, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def to_jpeg(arr, mode="RGB", **kw):
    buf = io.BytesIO()
    Image.fromarray(arr).convert(mode).save(buf, format="JPEG", **kw)
    return buf.getvalue()


def pil_rgb(data):
    with Image.open(io.BytesIO(data)) as im:
        return torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(
            2, 0, 1).contiguous()


def psnr(a, b):
    mse = float(((a.float() - b.float()) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


# ------------------------------------------------------- the C ABI ----

class Pipeline:
    """A dlc_cuda_jpeg handle over decode_host."""

    def __init__(self, backend="auto"):
        from dlcache import _jpeg, torch_gpu
        self.j = _jpeg
        _, self.fns = torch_gpu._load()
        if self.fns.get("dlc_cuda_jpeg_create") is None:
            raise RuntimeError("libdlcache_c.so has no dlc_cuda_jpeg_create")
        self.h, rc, msg = _jpeg.open_handle(
            self.fns, torch.cuda.current_device(), backend)
        if self.h is None:
            self.h = ctypes.c_void_p()
            raise RuntimeError("dlc_cuda_jpeg_create(%s): %d %s" % (
                backend, rc, msg))

    def last_error(self):
        return (self.fns["dlc_cuda_last_error"]() or b"").decode(
            errors="replace")

    def stats(self):
        s = self.j._JpegStats()
        rc = self.fns["dlc_cuda_jpeg_get_stats"](self.h, ctypes.byref(s))
        assert rc == 0, self.last_error()
        d = {k: getattr(s, k) for k, _ in s._fields_}
        d["backend"] = (d["backend"] or b"").decode()
        return d

    def run(self, blobs, t, seed=0, epoch=0, indices=None):
        """(x, items, messages) for the JPEG bytes `blobs` under
        JpegTransform t; synchronises."""
        n = len(blobs)
        keep = [ctypes.create_string_buffer(b, len(b)) for b in blobs]
        data = (ctypes.c_void_p * n)(*[ctypes.cast(b, ctypes.c_void_p).value
                                       for b in keep])
        sizes = (ctypes.c_size_t * n)(*[len(b) for b in blobs])
        idx = (ctypes.c_uint64 * n)(*(indices if indices is not None
                                      else range(n)))
        ct = t.to_c(seed, epoch)
        x = t.empty(n, "cuda")
        x.fill_(7)  # not zeros: a slot left unwritten shows
        items = (self.j._JpegItem * n)()
        failed = ctypes.c_size_t()
        stream = torch.cuda.current_stream()
        rc = self.fns["dlc_cuda_jpeg_decode_host"](
            self.h, data, sizes, n, idx, ctypes.byref(ct),
            ctypes.c_void_p(x.data_ptr()), x.numel() * x.element_size(),
            ctypes.c_void_p(stream.cuda_stream), items, ctypes.byref(failed))
        if rc != 0:
            raise RuntimeError("decode_host: %d %s" % (rc, self.last_error()))
        torch.cuda.synchronize()
        msgs = [(self.fns["dlc_cuda_jpeg_item_error"](self.h, i) or b"")
                .decode(errors="replace") for i in range(n)]
        del keep
        return x, list(items), msgs

    def identity(self, blob):
        """The decoded image, uint8 [3, H, W] (eval transform that keeps
        every pixel)."""
        w, h = Image.open(io.BytesIO(blob)).size
        t = self.j.JpegTransform(size=(h, w), train=False,
                                 resize_size=min(h, w))
        x, items, msgs = self.run([blob], t)
        if items[0].code != 0:
            raise RuntimeError("decode failed: " + msgs[0])
        return x[0]

    def close(self):
        if self.h:
            self.fns["dlc_cuda_jpeg_destroy"](self.h)
            self.h = ctypes.c_void_p()


def loaded_nvjpeg():
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f
                       if "libnvjpeg" in line and "/" in line})


# ------------------------------------------------------------- main ----

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="also write the report here (markdown)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device")
        return 77
    from dlcache._jpeg import JpegTransform, apply_crop
    import dlcache
    print("GPU %s, torch %s, dlcache %s, %s" % (
        torch.cuda.get_device_name(0), torch.__version__,
        getattr(dlcache, "__version__", "?"),
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())), flush=True)
    torch.cuda.init()
    try:
        import torchvision.io as tio
    except ImportError:
        tio = None

    imgs = {}
    for i in range(6):
        imgs["rgb420_%d" % i] = to_jpeg(natural(500, 375, i), quality=90)
    for i in range(2):
        imgs["rgb444_%d" % i] = to_jpeg(natural(500, 375, 10 + i),
                                        quality=95, subsampling=0)
    imgs["portrait"] = to_jpeg(natural(375, 500, 20), quality=90)
    imgs["odd_size"] = to_jpeg(natural(333, 251, 21), quality=90)
    imgs["grey"] = to_jpeg(natural(320, 240, 30), mode="L", quality=92)
    good = list(imgs)
    imgs["progressive"] = to_jpeg(natural(500, 375, 40), quality=90,
                                  progressive=True)
    imgs["cmyk"] = to_jpeg(natural(200, 150, 41), mode="CMYK", quality=90)
    buf = io.BytesIO()
    Image.fromarray(natural(64, 48, 42)).save(buf, format="PNG")
    imgs["png"] = buf.getvalue()
    rng = np.random.default_rng(43)
    imgs["corrupt"] = b"\xff\xd8\xff\xe0" + rng.integers(
        0, 256, 4000, dtype=np.uint8).tobytes()
    full = imgs["rgb420_0"]
    imgs["truncated"] = full[:len(full) * 6 // 10]

    state = {}

    @check("1. nvJPEG loads, backend chosen")
    def _():
        p = Pipeline("auto")
        state["p"] = p
        d = p.stats()["backend"]
        report("OK", "backend (auto)", d)
        report("INFO", "libnvjpeg mapped", ", ".join(loaded_nvjpeg()) or
               "(none visible in /proc/self/maps)")
        try:
            g = Pipeline("gpu")
            state["g"] = g
            report("OK", "backend (gpu forced)", g.stats()["backend"])
        except Exception as e:  # noqa: BLE001
            report("FAIL", "backend (gpu forced)", str(e))

    p = state.get("p")
    if p is None:
        report("FAIL", "no pipeline: the checks below need one")
        return finish(args)

    @check("2. pixels vs PIL (libjpeg), PSNR >= 40 dB")
    def _():
        worst = (float("inf"), "all exact")
        rows = []
        for name in good:
            ours = p.identity(imgs[name]).cpu()
            ref = pil_rgb(imgs[name])
            if ours.shape != ref.shape:
                raise AssertionError("%s: shape %s vs %s" % (
                    name, tuple(ours.shape), tuple(ref.shape)))
            v = psnr(ours, ref)
            diff = int((ours.int() - ref.int()).abs().max())
            rows.append("%s %.1f (max diff %d)" % (name, v, diff))
            if v < worst[0]:  # (ties: inf == inf, the names not compared)
                worst = (v, name)
            if name == "grey" and not (torch.equal(ours[0], ours[1]) and
                                       torch.equal(ours[1], ours[2])):
                raise AssertionError("grey: channels differ")
        report("OK" if worst[0] >= 40 else "FAIL",
               "PSNR vs PIL, worst %.1f dB (%s)" % worst, ", ".join(rows))
        if "g" in state:
            w2 = min(psnr(state["g"].identity(imgs[n]).cpu(),
                          pil_rgb(imgs[n])) for n in good)
            report("OK" if w2 >= 40 else "FAIL",
                   "PSNR vs PIL with the gpu backend, worst %.1f dB" % w2)
        # The progressive JPEG takes the one-by-one path (the engines do
        # not decode progressive); nvJPEG's own RGB conversion, for
        # comparison (DLCACHE_JPEG_COLOR=nvjpeg).
        prog = p.identity(imgs["progressive"]).cpu()
        report("INFO", "PSNR vs PIL, progressive (one by one): %.1f dB" %
               psnr(prog, pil_rgb(imgs["progressive"])))
        os.environ["DLCACHE_JPEG_COLOR"] = "nvjpeg"
        try:
            nv = Pipeline("auto")
            vals = ["%s %.1f" % (n, psnr(nv.identity(imgs[n]).cpu(),
                                         pil_rgb(imgs[n]))) for n in good]
            nv.close()
            report("INFO", "PSNR vs PIL with nvJPEG's own RGB conversion "
                   "(DLCACHE_JPEG_COLOR=nvjpeg)", ", ".join(vals))
        finally:
            del os.environ["DLCACHE_JPEG_COLOR"]
        if tio is not None:
            vals = []
            for name in good:
                t = torch.frombuffer(bytearray(imgs[name]), dtype=torch.uint8)
                tv = tio.decode_jpeg(t, mode=tio.ImageReadMode.RGB,
                                     device="cuda").cpu()
                vals.append(psnr(p.identity(imgs[name]).cpu(), tv))
            report("INFO", "PSNR vs torchvision decode_jpeg(cuda), worst "
                   "%.1f dB" % min(vals))

    @check("3. bad and unusual items in one batch")
    def _():
        names = ["rgb420_1", "png", "corrupt", "grey", "progressive",
                 "cmyk", "truncated", "rgb444_0"]
        t = JpegTransform(size=(64, 64), train=False, resize_size=64)
        before = p.stats()
        x, items, msgs = p.run([imgs[n] for n in names], t)
        after = p.stats()
        for n, it, m in zip(names, items, msgs):
            report("INFO", "item %s" % n, "code %d %dx%dx%d %s" % (
                it.code, it.width, it.height, it.components, m or "ok"))
        by = dict(zip(names, zip(items, msgs, x)))
        ok = True
        for n in ("png", "corrupt"):
            it, m, xi = by[n]
            if it.code == 0 or not m:
                ok = False
                report("FAIL", "%s must fail with a message" % n)
            elif int((xi != 0).sum()) != 0:
                ok = False
                report("FAIL", "%s: failed item's output not zeros" % n)
        for n in ("rgb420_1", "grey", "rgb444_0"):
            it, m, xi = by[n]
            if it.code != 0:
                ok = False
                report("FAIL", "%s failed in a mixed batch: %s" % (n, m))
                continue
            # The same item alone must give the same output.
            alone, _, _ = p.run([imgs[n]], t)
            if not torch.equal(alone[0], xi):
                ok = False
                report("FAIL", "%s differs alone vs in the mixed batch" % n)
        report("OK" if ok else "FAIL", "mixed batch: per-item errors, good "
               "items right", "decoder counters %s -> %s" % (
                   {k: before[k] for k in ("batched_images", "single_images",
                                           "batch_failures")},
                   {k: after[k] for k in ("batched_images", "single_images",
                                          "batch_failures")}))
        # Batch sizes that change (nvjpegDecodeBatchedInitialize again).
        for n in (3, 11, 3, 16):
            blobs = [imgs[good[i % 6]] for i in range(n)]
            xs, its, ms = p.run(blobs, t)
            bad = [m for it, m in zip(its, ms) if it.code != 0]
            if bad:
                raise AssertionError("batch of %d: %s" % (n, bad[:2]))
        report("OK", "batch sizes 3, 11, 3, 16 decode", str(p.stats()))

    @check("4. fused kernel vs the torch reference")
    def _():
        names = good[:8]
        blobs = [imgs[n] for n in names]
        decoded = [p.identity(b) for b in blobs]
        worst = []
        cases = [(d, cl, True) for d in (torch.float32, torch.bfloat16,
                                         torch.float16, torch.uint8)
                 for cl in (False, True)]
        cases += [(torch.float32, False, False), (torch.uint8, True, False)]
        for dtype, cl, aa in cases:
            if True:
                norm = dtype != torch.uint8
                t = JpegTransform(size=(224, 224), dtype=dtype,
                                  channels_last=cl, antialias=aa,
                                  mean=(0.485, 0.456, 0.406) if norm else None,
                                  std=(0.229, 0.224, 0.225) if norm else None)
                x, items, msgs = p.run(blobs, t, seed=5, epoch=1)
                assert all(it.code == 0 for it in items), msgs
                if cl:
                    assert x.is_contiguous(memory_format=torch.channels_last)
                ref = torch.empty_like(x)
                for i, it in enumerate(items):
                    apply_crop(decoded[i], it, t, ref[i])
                d = float((x.float() - ref.float()).abs().max())
                tol = {torch.float32: 1e-3, torch.bfloat16: 0.05,
                       torch.float16: 0.01, torch.uint8: 1.0}[dtype]
                worst.append("%s%s%s %.4g" % (str(dtype)[6:],
                                              "/cl" if cl else "",
                                              "" if aa else "/bilinear", d))
                if d > tol:
                    raise AssertionError("%s channels_last=%s: max diff %g > "
                                         "%g" % (dtype, cl, d, tol))
        flips = sum(it.flip for it in items)
        report("OK", "kernel == reference (max abs diff)", ", ".join(worst) +
               "; flips %d of %d" % (flips, len(items)))
        # Eval transform too.
        t = JpegTransform.imagenet(train=False)
        x, items, msgs = p.run(blobs, t)
        ref = torch.empty_like(x)
        for i, it in enumerate(items):
            apply_crop(decoded[i], it, t, ref[i])
        d = float((x - ref).abs().max())
        report("OK" if d < 1e-3 else "FAIL", "eval transform == reference",
               "max diff %.3g" % d)

    @check("5. same crops for the same seed and epoch")
    def _():
        blobs = [imgs[good[i % 6]] for i in range(32)]
        t = JpegTransform(size=224)
        a, ia, _ = p.run(blobs, t, seed=11, epoch=3, indices=range(100, 132))
        b, ib, _ = p.run(blobs, t, seed=11, epoch=3, indices=range(100, 132))
        c, ic, _ = p.run(blobs, t, seed=11, epoch=4, indices=range(100, 132))
        box = lambda it: (it.crop_x, it.crop_y, it.crop_w, it.crop_h,  # noqa
                          it.flip)
        same = torch.equal(a, b) and [box(i) for i in ia] == [box(i)
                                                              for i in ib]
        other = sum(box(x) != box(y) for x, y in zip(ia, ic))
        report("OK" if same and other >= 28 else "FAIL",
               "repeatable crops", "identical: %s; epoch 4 differs on %d/32"
               % (same, other))

    @check("6. GpuLoader(decode='nvjpeg') through dlcached")
    def _():
        from python_server import Server
        from dlcache.torch_gpu import GpuLoader
        from dlcache._client import DlcacheError
        files = {}
        for i in range(40):
            files["train/c%d/%03d.jpg" % (i % 4, i)] = imgs[good[i % 8]]
        files["train/c0/zz.png"] = imgs["png"]
        server = Server(files, arena="256MiB", chunk="1MiB")
        try:
            keys = sorted(files)
            targets = [int(k.split("/")[1][1:]) for k in keys]
            t = JpegTransform.imagenet(dtype=torch.bfloat16,
                                       channels_last=True)
            got = {}
            for producer in ("feed", "thread"):
                with GpuLoader(keys, dataset="ds", socket=server.socket,
                               batch_size=8, decode="nvjpeg", jpeg=t,
                               targets=targets, decode_workers=2,
                               producer=producer, seed=1) as ld:
                    assert ld.producer == producer, ld.producer
                    n = 0
                    xs = []
                    for x, y in ld:
                        assert x.dtype == torch.bfloat16 and x.is_cuda
                        assert x.shape[1:] == (3, 224, 224)
                        assert x.is_contiguous(
                            memory_format=torch.channels_last)
                        assert torch.isfinite(x.float()).all()
                        xs.append(x.float().cpu())
                        n += len(y)
                    s = ld.jpeg_stats()
                got[producer] = torch.cat(xs)
                assert n == len(keys), n
                assert s["fallback_reason"] is None, s
                report("OK" if s["cpu_decoded"] == 1 else "FAIL",
                       "GpuLoader (producer=%s) epoch of %d, PNG decoded on "
                       "the CPU" % (producer, n), str(s))
            same = torch.equal(got["feed"], got["thread"])
            report("OK" if same else "FAIL",
                   "the C++ feed's batches == the producer thread's",
                   "max abs diff %.3g" % (got["feed"] - got["thread"]).abs()
                   .max().item())
            bad = dict(files)
            bad["train/c1/corrupt.jpg"] = imgs["corrupt"]
        finally:
            server.stop(cleanup=True)
        server = Server(bad, arena="256MiB", chunk="1MiB")
        try:
            for producer in ("feed", "thread"):
                with GpuLoader(sorted(bad), dataset="ds",
                               socket=server.socket, batch_size=64,
                               decode="nvjpeg", producer=producer) as ld:
                    try:
                        next(iter(ld))
                        report("FAIL", "corrupt file (%s): no error" %
                               producer)
                    except DlcacheError as e:
                        report("OK" if "corrupt.jpg" in str(e) else "FAIL",
                               "corrupt file raises naming its key (%s)" %
                               producer, str(e)[:300])
        finally:
            server.stop(cleanup=True)

    for k in ("p", "g"):
        if k in state:
            state[k].close()
    return finish(args)


def finish(args):
    failed = sum(r.startswith("FAIL") for r in RESULTS)
    summary = "%d checks failed" % failed if failed else "all checks passed"
    print(summary)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# JPEG pipeline check (%s, %s)\n\n```\n%s\n%s\n```\n" % (
                torch.cuda.get_device_name(0) if torch.cuda.is_available()
                else "no GPU", time.strftime("%Y-%m-%d %H:%M UTC",
                                              time.gmtime()),
                "\n".join(RESULTS), summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
