#!/usr/bin/env python3
"""How fast can a PyTorch trainer be fed? One run, same generated data:

  (a) stock DataLoader over the files (workers = cores - 2, pin_memory,
      prefetch_factor=4, persistent_workers), batches copied to the GPU;
  (b) dlcache's CacheDataset (client/python/dlcache/torch_data.py) in the
      same DataLoader configuration;
  (c) dlcache.torch_gpu.GpuLoader: straight from the registered shared
      memory into GPU memory (JPEGs: decoded on the GPU with nvjpeg);
  (d) the ceiling: pinned host memory -> GPU copies of the same bytes.

Workloads: raw 3x224x224 uint8 samples (150,528 B), and ~110 KB JPEGs
(500x375, noise + gradients) decoded with PIL in the workers for (a)/(b)
and on the GPU for (c). Then a short ResNet-50 loop (bf16 autocast,
channels_last, batch 256) fed by (a) and (c), against the same model on a
batch already on the GPU, with GPU busy fraction and data stall per step.

Starts its own dlcached on a temporary socket and directories. Prints
markdown tables (ratios against (d) and (a)), the machine and the date.

  python3 bench/trainer_feed.py                  # GPU machine, ~5 minutes
  python3 bench/trainer_feed.py --quick          # CPU smoke run, seconds
  DLCACHED=... DLCACHE_LIB=... select the binaries (else build*/ is searched)
"""

import argparse
import datetime
import glob
import io
import itertools
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import torch  # noqa: E402
import torch.utils.data  # noqa: E402

RAW_SHAPE = (3, 224, 224)
RAW_SIZE = 3 * 224 * 224
JPEG_W, JPEG_H = 500, 375

try:
    from PIL import Image
    HAVE_PIL = True
except ImportError:
    HAVE_PIL = False
try:
    import torchvision
    import torchvision.io as tio
    HAVE_TV = True
except ImportError:
    HAVE_TV = False


def log(*a):
    print("[trainer_feed %s]" % time.strftime("%H:%M:%S"), *a, flush=True)


# ---------------------------------------------------------------- data ----

def write_raw(root, n):
    """n files of 150,528 B: random bytes, the index in the first 8."""
    os.makedirs(os.path.join(root, "raw"), exist_ok=True)
    pool = os.urandom(RAW_SIZE + (1 << 20))
    keys = []
    for i in range(n):
        off = (i * 7919) % (1 << 20)
        data = i.to_bytes(8, "little") + pool[off + 8:off + RAW_SIZE]
        key = "raw/%06d.bin" % i
        with open(os.path.join(root, key), "wb") as f:
            f.write(data)
        keys.append(key)
    return keys


def _jpeg_bytes(seed, noise):
    g = torch.Generator().manual_seed(seed)
    yy = torch.linspace(0, 1, JPEG_H).view(JPEG_H, 1)
    xx = torch.linspace(0, 1, JPEG_W).view(1, JPEG_W)
    phase = torch.rand(3, generator=g)
    img = torch.stack([
        (0.5 + 0.5 * torch.sin(6.28 * (xx * (1 + c) + yy * (2 - c) + phase[c])))
        * 255 for c in range(3)])
    img = img + torch.randn(3, JPEG_H, JPEG_W, generator=g) * noise
    img = img.clamp(0, 255).to(torch.uint8)
    if HAVE_TV:
        return bytes(tio.encode_jpeg(img, quality=90).numpy().tobytes())
    buf = io.BytesIO()
    Image.fromarray(img.permute(1, 2, 0).contiguous().numpy()).save(
        buf, format="JPEG", quality=90)
    return buf.getvalue()


def _jpeg_job(args):
    root, start, end, noise = args
    torch.set_num_threads(1)  # a forked child: no OpenMP pool of its own
    total = 0
    for i in range(start, end):
        data = _jpeg_bytes(i, noise)
        with open(os.path.join(root, "jpeg/%06d.jpg" % i), "wb") as f:
            f.write(data)
        total += len(data)
    return total


def write_jpegs(root, n, target=110_000, procs=8):
    """n JPEGs of 500x375 from gradients + noise, noise calibrated so that
    they average ~target bytes."""
    os.makedirs(os.path.join(root, "jpeg"), exist_ok=True)
    lo, hi = 0.0, 80.0
    for _ in range(7):
        mid = (lo + hi) / 2
        size = sum(len(_jpeg_bytes(s, mid)) for s in range(3)) / 3
        if size < target:
            lo = mid
        else:
            hi = mid
    noise = (lo + hi) / 2
    step = max(1, n // (procs * 4))
    jobs = [(root, s, min(n, s + step), noise) for s in range(0, n, step)]
    import multiprocessing as mp
    with mp.get_context("fork").Pool(procs) as pool:
        total = sum(pool.map(_jpeg_job, jobs))
    return ["jpeg/%06d.jpg" % i for i in range(n)], total / max(n, 1)


# ---------------------------------------------------------- the server ----

def find_binary(env, pattern):
    p = os.environ.get(env)
    if p:
        return p
    found = sorted(glob.glob(os.path.join(ROOT, pattern)),
                   key=os.path.getmtime, reverse=True)
    return found[0] if found else None


class Dlcached:
    def __init__(self, binary, datasets, arena_bytes, workdir, extra=()):
        self.dir = tempfile.mkdtemp(prefix="tf_srv_", dir=workdir)
        self.shm = tempfile.mkdtemp(prefix="tf_arena_", dir="/dev/shm")
        self.socket = os.path.join(self.dir, "d.sock")
        self.log = open(os.path.join(self.dir, "dlcached.log"), "wb")
        spec = ",".join("%s=%s" % kv for kv in datasets.items())
        self.proc = subprocess.Popen(
            [binary, "--socket=" + self.socket, "--shm_dir=" + self.shm,
             "--arena_bytes=%d" % arena_bytes, "--dataset=" + spec,
             "--metrics_address=", "--keep_arena=false"] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        # A client fails at once on a socket file that does not exist yet
        # (issue 30): wait for dlcached to create it.
        deadline = time.monotonic() + 60
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dlcached did not create %s (see %s)" % (
                    self.socket, os.path.join(self.dir, "dlcached.log")))
            time.sleep(0.02)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.shm, ignore_errors=True)


def warm(socket, dataset, keys):
    import dlcache
    with dlcache.Client(socket, connect_timeout=30.0) as c:
        for s in range(0, len(keys), 512):
            b = c.get_batch(dataset, keys[s:s + 512])
            bad = [it.key for it in b if not it.ok]
            if bad:
                raise RuntimeError("warm-up failed for %s" % bad[:3])
            b.release()


# ------------------------------------------------- DataLoader datasets ----
# Module-level so that DataLoader workers can unpickle them under any start
# method.

def raw_from_bytes(data):
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return t.view(RAW_SHAPE)


def raw_view(t):
    return t.view(RAW_SHAPE)


def pil_decode(data):
    import numpy as np
    img = Image.open(io.BytesIO(bytes(data))).convert("RGB")
    return torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1)


def pil_decode_tensor(t):
    return pil_decode(t.numpy().tobytes())


_AUG = None


def pil_train_aug(data):
    """What a stock ImageNet pipeline does in its workers: decode,
    RandomResizedCrop(224), horizontal flip, uint8 CHW."""
    global _AUG
    import numpy as np
    if _AUG is None:
        import torchvision.transforms as T
        _AUG = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    if isinstance(data, torch.Tensor):
        data = data.numpy().tobytes()
    img = _AUG(Image.open(io.BytesIO(bytes(data))).convert("RGB"))
    return torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1)


class FileDataset(torch.utils.data.Dataset):
    def __init__(self, root, keys, transform):
        self.root, self.keys, self.transform = root, keys, transform

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        with open(os.path.join(self.root, self.keys[i]), "rb") as f:
            return self.transform(f.read())


class ClientDataset(torch.utils.data.Dataset):
    """(b) when dlcache.torch_data.CacheDataset is not there: a Client per
    worker process, opened on first use."""

    def __init__(self, socket, dataset, keys, transform):
        self.socket, self.dataset = socket, dataset
        self.keys, self.transform = keys, transform
        self._client, self._pid = None, None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_client"] = d["_pid"] = None
        return d

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        import dlcache
        if self._pid != os.getpid():
            self._client = dlcache.Client(self.socket, connect_timeout=30.0)
            self._pid = os.getpid()
        b = self._client.get_batch(self.dataset, [self.keys[i]])
        out = self.transform(b[0].tobytes())
        b.release()
        return out


def cache_dataset(socket, dataset, keys, transform_tensor, transform_bytes):
    try:
        from dlcache.torch_data import CacheDataset
        return CacheDataset(keys, dataset=dataset, socket=socket,
                            transform=transform_tensor), "CacheDataset"
    except (ImportError, TypeError):
        return ClientDataset(socket, dataset, keys,
                             transform_bytes), "Client in workers"


def make_loader(ds, args):
    kw = dict(batch_size=args.batch, shuffle=True, drop_last=True,
              num_workers=args.workers, pin_memory=torch.cuda.is_available())
    if args.workers > 0:
        kw.update(prefetch_factor=4, persistent_workers=True)
    return torch.utils.data.DataLoader(ds, **kw)


# ------------------------------------------------------------ measuring ----

def forever(loader):
    while True:
        for x in loader:
            yield x


def to_device(x, device):
    if device.type != "cuda":
        return x
    if isinstance(x, list):
        return [t.to(device, non_blocking=True) for t in x]
    return x.to(device, non_blocking=True)


def count(x):
    if isinstance(x, list):
        return len(x), sum(t.numel() * t.element_size() for t in x)
    return x.shape[0], x.numel() * x.element_size()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(batches, device, warmup, steps, max_seconds, file_bytes=None):
    """Takes warmup + up to `steps` batches from `batches` (an iterator),
    each delivered into `device` memory. Returns samples/s and GB/s (of the
    delivered bytes, or file_bytes per sample when given)."""
    for _ in range(warmup):
        to_device(next(batches), device)
    sync(device)
    t0 = time.perf_counter()
    n = nbytes = 0
    done = 0
    while done < steps:
        x = to_device(next(batches), device)
        k, b = count(x)
        n += k
        nbytes += b
        done += 1
        if time.perf_counter() - t0 > max_seconds:
            break
    sync(device)
    dt = time.perf_counter() - t0
    if file_bytes is not None:
        nbytes = n * file_bytes
    return {"samples_s": n / dt, "gbs": nbytes / dt / 1e9, "batches": done,
            "seconds": dt}


def ceiling(device, nbytes_per_batch, steps, max_seconds):
    """(d): pinned host buffers -> device, the same bytes per batch."""
    nb = 4
    pin = device.type == "cuda"
    host = [torch.empty(nbytes_per_batch, dtype=torch.uint8,
                        pin_memory=pin).fill_(i) for i in range(nb)]
    if device.type == "cuda":
        dev = [torch.empty(nbytes_per_batch, dtype=torch.uint8, device=device)
               for _ in range(2)]
    else:
        dev = [torch.empty(nbytes_per_batch, dtype=torch.uint8)
               for _ in range(2)]
    for i in range(4):
        dev[i % 2].copy_(host[i % nb], non_blocking=True)
    sync(device)
    t0 = time.perf_counter()
    done = 0
    while done < steps:
        dev[done % 2].copy_(host[done % nb], non_blocking=True)
        done += 1
        if done % 16 == 0 and time.perf_counter() - t0 > max_seconds:
            break
    sync(device)
    dt = time.perf_counter() - t0
    return {"gbs": done * nbytes_per_batch / dt / 1e9, "batches": done,
            "seconds": dt}


# ------------------------------------------------------------- ResNet ----

def gpu_augment(imgs, out=224):
    """Per-image RandomResizedCrop + flip on the GPU, one roi_align call
    (uint8 [3, H, W] list of equal sizes -> float [B, 3, out, out])."""
    from torchvision.ops import roi_align
    x = torch.stack(imgs).float()
    b, _, h, w = x.shape
    area = h * w * torch.empty(b, device=x.device).uniform_(0.08, 1.0)
    logr = torch.empty(b, device=x.device).uniform_(-0.2877, 0.2877)
    ratio = torch.exp(logr)
    cw = torch.sqrt(area * ratio).clamp(8, w)
    ch = torch.sqrt(area / ratio).clamp(8, h)
    x0 = torch.rand(b, device=x.device) * (w - cw)
    y0 = torch.rand(b, device=x.device) * (h - ch)
    boxes = torch.stack([torch.arange(b, device=x.device, dtype=x.dtype),
                         x0, y0, x0 + cw, y0 + ch], dim=1)
    y = roi_align(x, boxes, output_size=out, aligned=True)
    flip = torch.rand(b, device=x.device) < 0.5
    # torch.where, not y[flip] = ...: boolean indexing syncs the host.
    return torch.where(flip.view(b, 1, 1, 1), y.flip(-1), y)


def resnet_run(name, batches, device, steps, warmup, prep):
    """Trains ResNet-50 for warmup + steps steps on batches from `batches`;
    returns img/s, GPU busy fraction and data stall per step."""
    import torchvision
    model = torchvision.models.resnet50().to(device).to(
        memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    crit = torch.nn.CrossEntropyLoss()
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(
        1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(
        1, 3, 1, 1) * 255
    events = []
    wait = 0.0
    n = 0
    t0 = None
    for step in range(warmup + steps):
        if step == warmup:
            sync(device)
            t0 = time.perf_counter()
            events, wait, n = [], 0.0, 0
        tw = time.perf_counter()
        x = prep(next(batches))  # float [B, 3, 224, 224] on the device
        wait += time.perf_counter() - tw
        bsz = x.shape[0]
        labels = torch.randint(0, 1000, (bsz,), device=device)
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = crit(model(x), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        e1.record()
        events.append((e0, e1))
        n += bsz
    sync(device)
    wall = time.perf_counter() - t0
    busy = sum(a.elapsed_time(b) for a, b in events) / 1e3
    del model, opt
    return {"name": name, "img_s": n / wall, "busy": busy / wall,
            "stall_ms": (wall - busy) / steps * 1e3,
            "host_wait_ms": wait / steps * 1e3, "wall": wall}


# --------------------------------------------------------------- main ----

def fmt_ratio(v, ref):
    return "%.2fx" % (v / ref) if ref else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="tiny CPU-friendly smoke run (seconds)")
    ap.add_argument("--raw", type=int, default=8192, help="raw samples")
    ap.add_argument("--jpegs", type=int, default=3072, help="JPEG files")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=None,
                    help="DataLoader workers (default cores - 2)")
    ap.add_argument("--steps", type=int, default=60,
                    help="batches measured per case (at most)")
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="time limit of one case's measurement")
    ap.add_argument("--resnet-steps", type=int, default=30)
    ap.add_argument("--resnet-data", default="jpeg,raw",
                    help="workloads of the ResNet loop ('' = none)")
    ap.add_argument("--prefetch", type=int, default=4,
                    help="GpuLoader batches in flight")
    ap.add_argument("--producers", default="feed,thread",
                    help="GpuLoader producers measured on the raw workload: "
                         "feed (the C++ feed, row (c)) and/or thread (the "
                         "Python producer thread, row (c0))")
    ap.add_argument("--workdir", default=None,
                    help="where the source files go (default a temp dir "
                         "under /tmp; the arena is under /dev/shm)")
    ap.add_argument("--out", default=None, help="also write the tables here")
    ap.add_argument("--skip", default="", help="comma list of a,b,c,d,jpeg")
    ap.add_argument("--decode-workers", default="1,2",
                    help="GpuLoader decode_workers measured on the JPEG "
                    "workloads, one row each (comma list)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    cores = os.cpu_count() or 2
    if args.workers is None:
        args.workers = max(1, cores - 2)
    if args.quick:
        args.raw, args.jpegs = min(args.raw, 512), min(args.jpegs, 96)
        args.batch = min(args.batch, 32)
        args.workers = min(args.workers, 2)
        args.steps, args.seconds = min(args.steps, 8), min(args.seconds, 2.0)
        args.resnet_steps = min(args.resnet_steps, 5)
        if not cuda:
            args.resnet_data = ""
    skip = set(s for s in args.skip.split(",") if s)
    decode_workers = [int(w) for w in args.decode_workers.split(",") if w]
    if not decode_workers or min(decode_workers) < 1:
        sys.exit("--decode-workers: a comma list of numbers >= 1")
    do_jpeg = "jpeg" not in skip and (HAVE_PIL or HAVE_TV)
    if "jpeg" not in skip and not do_jpeg:
        log("JPEG workload skipped: neither PIL nor torchvision installed")
    if do_jpeg and not HAVE_PIL:
        skip.update(["a_jpeg", "b_jpeg"])
        log("JPEG (a)/(b) skipped: PIL (their decoder) not installed")

    dlcached = find_binary("DLCACHED", "build*/server/dlcached")
    if not os.environ.get("DLCACHE_LIB"):
        lib = find_binary("DLCACHE_LIB", "build*/client/libdlcache_c.so")
        if lib:
            os.environ["DLCACHE_LIB"] = lib
    if not dlcached or not os.access(dlcached, os.X_OK):
        sys.exit("dlcached not found: set DLCACHED")
    from dlcache import torch_gpu

    gpu_name = torch.cuda.get_device_name(0) if cuda else "none"
    date = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    log("device %s, %d cores, torch %s, workers %d" % (
        gpu_name, cores, torch.__version__, args.workers))

    work = tempfile.mkdtemp(prefix="trainer_feed_", dir=args.workdir)
    src = os.path.join(work, "src")
    server = None
    results = []   # (workload, path, label, dict)
    resnet = []
    try:
        t = time.perf_counter()
        raw_keys = write_raw(src, args.raw)
        jpeg_keys, jpeg_mean = [], 0
        if do_jpeg:
            jpeg_keys, jpeg_mean = write_jpegs(src, args.jpegs,
                                               procs=min(16, cores))
        data_bytes = args.raw * RAW_SIZE + len(jpeg_keys) * jpeg_mean
        log("data: %d raw + %d JPEGs (mean %.0f B), %.2f GB, %.1f s" % (
            len(raw_keys), len(jpeg_keys), jpeg_mean, data_bytes / 1e9,
            time.perf_counter() - t))
        arena = int(data_bytes * 1.25) + (256 << 20)
        arena = (arena + (1 << 28) - 1) // (1 << 28) * (1 << 28)
        server = Dlcached(dlcached, {"raw": src, "jpeg": src}, arena, work)
        t = time.perf_counter()
        warm(server.socket, "raw", raw_keys)
        if jpeg_keys:
            warm(server.socket, "jpeg", jpeg_keys)
        log("cache warmed in %.1f s" % (time.perf_counter() - t))
        B = args.batch
        W = 3 if not args.quick else 1

        # ---------------- raw ----------------
        if "d" not in skip:
            r = ceiling(device, B * RAW_SIZE, args.steps * 4, args.seconds)
            r["samples_s"] = r["gbs"] * 1e9 / RAW_SIZE
            results.append(("raw 150,528 B", "d", "pinned host -> GPU copies "
                            "(ceiling)", r))
            log("raw (d):", r)
        if "a" not in skip:
            ld = make_loader(FileDataset(src, raw_keys, raw_from_bytes), args)
            r = measure(forever(ld), device, W, args.steps, args.seconds)
            results.append(("raw 150,528 B", "a", "DataLoader over files, "
                            "%d workers" % args.workers, r))
            log("raw (a):", r)
            del ld
        if "b" not in skip:
            ds, how = cache_dataset(server.socket, "raw", raw_keys, raw_view,
                                    raw_from_bytes)
            ld = make_loader(ds, args)
            r = measure(forever(ld), device, W, args.steps, args.seconds)
            results.append(("raw 150,528 B", "b", "dlcache %s in %d DataLoader "
                            "workers" % (how, args.workers), r))
            log("raw (b):", r)
            del ld
        producers = [p for p in args.producers.split(",") if p]
        for prod in producers if "c" not in skip else []:
            path = "c" if prod == "feed" else "c0"
            with torch_gpu.GpuLoader(raw_keys, dataset="raw",
                                     socket=server.socket, batch_size=B,
                                     sample_shape=RAW_SHAPE, drop_last=True,
                                     prefetch=args.prefetch,
                                     producer=prod) as gl:
                r = measure(forever(gl), device, W, args.steps * 4,
                            args.seconds)
                r["on_gpu"] = gl.on_gpu
                used = gl.producer
            how = ("C++ feed" if used == "feed" else
                   "Python producer thread")
            results.append(("raw 150,528 B", path, "dlcache GpuLoader "
                            "(registered shm -> GPU, %s)" % how
                            if r["on_gpu"] else
                            "dlcache GpuLoader (CPU fallback)", r))
            log("raw (%s):" % path, r)

        # ---------------- JPEG ----------------
        if do_jpeg:
            wl = "JPEG ~%d KB" % round(jpeg_mean / 1000)
            if "d" not in skip:
                r = ceiling(device, int(B * jpeg_mean), args.steps * 4,
                            args.seconds)
                r["samples_s"] = r["gbs"] * 1e9 / jpeg_mean
                results.append((wl, "d", "pinned host -> GPU copies of the "
                                "file bytes (ceiling)", r))
                log("jpeg (d):", r)
            if "a" not in skip and "a_jpeg" not in skip:
                ld = make_loader(FileDataset(src, jpeg_keys, pil_decode), args)
                r = measure(forever(ld), device, W, args.steps, args.seconds,
                            file_bytes=jpeg_mean)
                results.append((wl, "a", "DataLoader over files, PIL decode "
                                "in %d workers" % args.workers, r))
                log("jpeg (a):", r)
                del ld
            if "b" not in skip and "b_jpeg" not in skip:
                ds, how = cache_dataset(server.socket, "jpeg", jpeg_keys,
                                        pil_decode_tensor, pil_decode)
                ld = make_loader(ds, args)
                r = measure(forever(ld), device, W, args.steps, args.seconds,
                            file_bytes=jpeg_mean)
                results.append((wl, "b", "dlcache %s, PIL decode in %d "
                                "workers" % (how, args.workers), r))
                log("jpeg (b):", r)
                del ld
            for dw in (decode_workers if "c" not in skip and
                       (HAVE_TV or not cuda) else []):
                with torch_gpu.GpuLoader(jpeg_keys, dataset="jpeg",
                                         socket=server.socket, batch_size=B,
                                         decode="jpeg", drop_last=True,
                                         prefetch=args.prefetch,
                                         decode_workers=dw) as gl:
                    r = measure(forever(gl), device, W, args.steps,
                                args.seconds, file_bytes=jpeg_mean)
                    r["on_gpu"] = gl.on_gpu
                results.append((wl, "c" if dw == 1 else "c%dw" % dw,
                                ("dlcache GpuLoader, nvjpeg decode "
                                "on the GPU" if r["on_gpu"] else "dlcache "
                                "GpuLoader (CPU fallback, decode on the CPU)")
                                + ", %d decode worker%s" % (
                                    dw, "" if dw == 1 else "s"), r))
                log("jpeg (c, %d decode workers):" % dw, r)

        # ---------------- ResNet-50 ----------------
        rn_data = [s for s in args.resnet_data.split(",") if s]
        if rn_data and cuda and HAVE_TV:
            torch.backends.cudnn.benchmark = True
            S, Wr = args.resnet_steps, 5
            fixed = torch.randint(0, 256, (B,) + RAW_SHAPE, dtype=torch.uint8,
                                  device=device)
            r = resnet_run("batch already on the GPU (compute-bound)",
                           itertools.repeat(fixed), device, S, Wr,
                           lambda x: x.float())
            r["data"] = "-"
            resnet.append(r)
            log("resnet:", r)
            for kind in rn_data:
                if kind == "raw":
                    ld = make_loader(FileDataset(src, raw_keys,
                                                 raw_from_bytes), args)
                    r = resnet_run("(a) DataLoader, raw samples", forever(ld),
                                   device, S, Wr, lambda x: x.to(
                                       device, non_blocking=True).float())
                    r["data"] = "raw"
                    resnet.append(r)
                    log("resnet:", r)
                    del ld
                    with torch_gpu.GpuLoader(
                            raw_keys, dataset="raw", socket=server.socket,
                            batch_size=B, sample_shape=RAW_SHAPE,
                            drop_last=True, prefetch=args.prefetch) as gl:
                        r = resnet_run("(c) GpuLoader, raw samples",
                                       forever(gl), device, S, Wr,
                                       lambda x: x.float())
                    r["data"] = "raw"
                    resnet.append(r)
                    log("resnet:", r)
                elif kind == "jpeg" and do_jpeg and HAVE_PIL:
                    ld = make_loader(FileDataset(src, jpeg_keys,
                                                 pil_train_aug), args)
                    r = resnet_run("(a) DataLoader, PIL decode + "
                                   "RandomResizedCrop + flip in workers",
                                   forever(ld), device, S, Wr,
                                   lambda x: x.to(device,
                                                  non_blocking=True).float())
                    r["data"] = "jpeg"
                    resnet.append(r)
                    log("resnet:", r)
                    del ld
                    # Decode and crop/flip in the loader's producer, on
                    # its own stream, prefetch batches ahead.
                    for dw in decode_workers:
                        with torch_gpu.GpuLoader(
                                jpeg_keys, dataset="jpeg",
                                socket=server.socket, batch_size=B,
                                decode="jpeg", drop_last=True,
                                prefetch=args.prefetch,
                                transform=gpu_augment,
                                decode_workers=dw) as gl:
                            r = resnet_run(
                                "(c) GpuLoader, nvjpeg decode + crop/flip on "
                                "the GPU (%d producer stream%s)" % (
                                    dw, "" if dw == 1 else "s"),
                                forever(gl), device, S, Wr, lambda x: x)
                        r["data"] = "jpeg"
                        resnet.append(r)
                        log("resnet:", r)
        elif rn_data:
            log("ResNet-50 loop skipped: needs CUDA and torchvision")
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)

    # ---------------- tables ----------------
    lines = []
    lines.append("Machine: %s, %d CPU cores, %s; torch %s%s; %s" % (
        gpu_name, cores, platform.platform(terse=True), torch.__version__,
        ", torchvision " + torchvision.__version__ if HAVE_TV else "", date))
    lines.append("Batch %d; DataLoader: %d workers, %sprefetch_factor=4, "
                 "persistent_workers; GpuLoader prefetch %d. GB/s = file "
                 "bytes delivered into %s memory per second."
                 % (args.batch, args.workers,
                    "pin_memory, " if cuda else "", args.prefetch,
                    "GPU" if cuda else "(no CUDA: CPU fallback) host"))
    lines.append("")
    lines.append("| workload | path | how | samples/s | GB/s | vs (d) | "
                 "vs (a) |")
    lines.append("|---|---|---|---:|---:|---:|---:|")
    for wl in dict.fromkeys(w for w, _, _, _ in results):
        rows = {p: (lab, r) for w, p, lab, r in results if w == wl}
        d = rows.get("d", (None, {}))[1].get("samples_s")
        a = rows.get("a", (None, {}))[1].get("samples_s")
        order = ["d", "a", "b", "c", "c0"] + sorted(
            p for p in rows if p.startswith("c") and p[1:-1].isdigit())
        for p in order:
            if p not in rows:
                continue
            lab, r = rows[p]
            lines.append("| %s | (%s) | %s | %.0f | %.2f | %s | %s |" % (
                wl, p, lab, r["samples_s"], r["gbs"],
                fmt_ratio(r["samples_s"], d) if p != "d" else "1x",
                fmt_ratio(r["samples_s"], a) if a else "-"))
    if resnet:
        lines.append("")
        lines.append("ResNet-50, bf16 autocast, channels_last, batch %d, %d "
                     "steps after 5 warm-up steps, synthetic labels. GPU busy "
                     "= time inside the step's CUDA events / wall time; stall "
                     "= GPU idle per step." % (args.batch, args.resnet_steps))
        lines.append("")
        lines.append("| feeder | img/s | vs compute-bound | GPU busy | "
                     "stall ms/step | host wait ms/step |")
        lines.append("|---|---:|---:|---:|---:|---:|")
        ref = resnet[0]["img_s"]
        for r in resnet:
            lines.append("| %s | %.0f | %.0f%% | %.0f%% | %.1f | %.1f |" % (
                r["name"], r["img_s"], 100 * r["img_s"] / ref,
                100 * r["busy"], r["stall_ms"], r["host_wait_ms"]))
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
