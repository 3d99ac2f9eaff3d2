#!/usr/bin/env python3
"""JPEG training feeds, one run (issue 37): how close does each feed get a
compute-bound ResNet-50 to its compute-bound speed, with all the cores and
with 4?

Same generated data for every feed: ImageNet-like JPEGs (500x375, ~100 KB,
gradients + noise, ImageFolder layout train/cNNN/NNNNNN.jpg) served warm by
a dlcached started here. ResNet-50, bf16 autocast, channels_last, SGD,
batch 256, with:

  compute-bound   the same batch already on the GPU, normalised bf16
                  channels_last (the model's own speed), every step
  stock           torchvision ImageFolder + DataLoader: PIL decode +
                  RandomResizedCrop(224) + flip in `workers` processes
                  (cores - 2; 3 at 4 cores), pin_memory, prefetch 4
  gpu_jpeg        GpuLoader(decode="jpeg", decode_workers=2):
                  torchvision.io.decode_jpeg(device="cuda") + a batched GPU
                  RandomResizedCrop/flip (roi_align) in the producer
  nvjpeg/feedNw   GpuLoader(decode="nvjpeg", decode_workers=N,
                  jpeg=JpegTransform.imagenet(bf16, channels_last)):
                  dlcache's JPEG pipeline (docs/jpeg_pipeline.md) inside
                  the C++ feed, N decode threads (--feed-workers, a list;
                  no Python code per batch but submit/take)
  nvjpeg/threadNw the same pipeline called from Python producer threads
                  (producer="thread", --decode-workers of them)

Columns: img/s, fraction of compute-bound, GPU utilisation (NVML, through
torch.cuda.utilization, sampled every 50 ms while measuring; "-" without
pynvml) and GPU busy fraction (CUDA events around each step), host wait per
step, and the JPEG engines' utilisation (NVML). Each nvjpeg row also
logs the host time per batch in each step (fetch, parse, drain, the
decode call). --repeat K makes each nvjpeg row K times, a new loader
each time (a probe for start-up hangs). --cores runs the feeds once per CPU set: "all", or a list such as
"0-3" (every thread of this process is pinned, as `taskset -c 0-3` would;
dlcached, a separate daemon, is not; default "all;0-3"). Then decode-only img/s of the
pipeline (hardware and GPU backends) against
torchvision.io.decode_jpeg(device="cuda") on the same files, and decode +
RandomResizedCrop + normalise of each, with the GPU kernel time (SM time)
per batch from torch.profiler and the JPEG engines' utilisation, and the
pipeline on two threads (two handles), as the feed's decode threads run.

  python3 bench/jpeg_pipeline_bench.py            # GPU machine, ~4 min
  python3 bench/jpeg_pipeline_bench.py --quick    # ~90 s
  DLCACHED=... DLCACHE_LIB=... select the binaries (else build*/)
  --out FILE also writes the tables (markdown) there.
  --stall-dump S: when a feed makes no training step for S seconds, print
  every thread's Python stack and, where cuda-gdb or gdb is on PATH, its
  native stack, then exit 3 (default 120; 0: off).
"""

import argparse
import ctypes
import datetime
import faulthandler
import io
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.utils.data  # noqa: E402

import trainer_feed as tf  # noqa: E402  (data, server and aug helpers)

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def log(*a):
    print("[jpeg_bench %s]" % time.strftime("%H:%M:%S"), *a, flush=True)


# ---------------------------------------------------------------- data ----

def _gen_job(args):
    root, start, end, noise, classes = args
    torch.set_num_threads(1)
    total = 0
    for i in range(start, end):
        data = tf._jpeg_bytes(i, noise)
        d = os.path.join(root, "train", "c%03d" % (i % classes))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "%06d.jpg" % i), "wb") as f:
            f.write(data)
        total += len(data)
    return total


def write_dataset(root, n, classes, target=100_000):
    lo, hi = 0.0, 80.0
    for _ in range(7):
        mid = (lo + hi) / 2
        size = sum(len(tf._jpeg_bytes(s, mid)) for s in range(3)) / 3
        lo, hi = (mid, hi) if size < target else (lo, mid)
    noise = (lo + hi) / 2
    procs = max(1, min(16, os.cpu_count() or 1))
    step = max(1, n // (procs * 4))
    jobs = [(root, s, min(n, s + step), noise, classes)
            for s in range(0, n, step)]
    import multiprocessing as mp
    with mp.get_context("fork").Pool(procs) as pool:
        total = sum(pool.map(_gen_job, jobs))
    keys = sorted(os.path.relpath(os.path.join(dp, f), root)
                  for dp, _, fs in os.walk(os.path.join(root, "train"))
                  for f in fs)
    return keys, total / max(n, 1)


# ------------------------------------------------------------- cores ----

def parse_cpus(spec):
    if spec == "all":
        return sorted(os.sched_getaffinity(0))
    out = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return sorted(out)


def pin(cpus):
    """Every thread of this process on `cpus` (threads made later
    inherit the creating thread's set)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that just ended
            pass


# ------------------------------------------------------------ the loop ----

# Monotonic time of the last training step (the stall watchdog's).
LAST_STEP = [time.monotonic()]


def stall_watchdog(seconds):
    """Dumps every thread's stacks (Python, then native where a debugger
    is on PATH) and exits 3 when no step was made for `seconds`."""
    def run():
        while True:
            time.sleep(min(5.0, seconds / 4))
            idle = time.monotonic() - LAST_STEP[0]
            if idle < seconds:
                continue
            log("STALL: no training step for %.0f s; stacks follow" % idle)
            sys.stderr.flush()
            faulthandler.dump_traceback(all_threads=True)
            dbg = shutil.which("cuda-gdb") or shutil.which("gdb")
            if dbg:
                subprocess.run(
                    [dbg, "-q", "-batch", "-p", str(os.getpid()),
                     "-ex", "set pagination off", "-ex", "info threads",
                     "-ex", "thread apply all bt 40"],
                    stdout=sys.stderr, stderr=subprocess.STDOUT, timeout=120,
                    check=False)
            else:
                log("no cuda-gdb or gdb on PATH: no native stacks")
            sys.stderr.flush()
            os._exit(3)
    threading.Thread(target=run, name="stall-watchdog", daemon=True).start()


def _jpg_engine_reader():
    """A function returning the JPEG engines' (NVJPG) utilisation in %,
    from NVML (pynvml), or None where NVML cannot tell."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        pynvml.nvmlDeviceGetJpgUtilization(h)
    except Exception:  # no pynvml, an old driver, no engines
        return None

    def read():
        return pynvml.nvmlDeviceGetJpgUtilization(h)[0]
    return read


class UtilSampler:
    """torch.cuda.utilization() (SMs) and the JPEG engines' utilisation
    every 50 ms while running."""

    def __init__(self):
        self.samples = []
        self.jpg = []
        self._stop = threading.Event()
        self.ok = True
        try:
            torch.cuda.utilization()
        except Exception:  # no pynvml
            self.ok = False
        self._jpg_read = _jpg_engine_reader() if self.ok else None
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.05):
            try:
                self.samples.append(torch.cuda.utilization())
                if self._jpg_read is not None:
                    self.jpg.append(self._jpg_read())
            except Exception:
                return

    def __enter__(self):
        if self.ok:
            self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.ok:
            self._t.join()

    def mean(self):
        return (sum(self.samples) / len(self.samples) / 100.0
                if self.samples else None)

    def jpg_mean(self):
        return sum(self.jpg) / len(self.jpg) / 100.0 if self.jpg else None


def make_model(device, smoke):
    if smoke:
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Linear(8, 1000))
    else:
        import torchvision
        net = torchvision.models.resnet50()
    net = net.to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    return net, opt


def train(name, batches, prep, args, device, model):
    """warmup + steps training steps on `batches` ((x, y) pairs); img/s,
    GPU utilisation and busy fraction, host wait per step."""
    net, opt = model
    crit = torch.nn.CrossEntropyLoss()
    cuda = device.type == "cuda"
    events = []
    wait = 0.0
    n = 0
    t0 = None
    sampler = UtilSampler() if cuda else None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if cuda:
                torch.cuda.synchronize()
                sampler.__enter__()
            t0 = time.perf_counter()
            events, wait, n = [], 0.0, 0
        LAST_STEP[0] = time.monotonic()
        tw = time.perf_counter()
        x, y = next(batches)
        wait += time.perf_counter() - tw
        if cuda:
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
        x = prep(x)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = crit(net(x), y.to(device, non_blocking=True) % 1000)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cuda:
            e1.record()
            events.append((e0, e1))
        n += x.shape[0]
    if cuda:
        torch.cuda.synchronize()
        sampler.__exit__()
    wall = time.perf_counter() - t0
    busy = (sum(a.elapsed_time(b) for a, b in events) / 1e3 / wall
            if cuda else None)
    r = {"name": name, "img_s": n / wall, "busy": busy,
         "util": sampler.mean() if cuda else None,
         "jpg": sampler.jpg_mean() if cuda else None,
         "wait_ms": wait / args.steps * 1e3}
    log("%-14s %8.0f img/s  busy %s  util %s  jpg %s  wait %.1f ms/step" % (
        name, r["img_s"], cell(busy), cell(r["util"]), cell(r["jpg"]),
        r["wait_ms"]))
    return r


def cell(v):
    """A table cell: two decimals, "-" when not measured."""
    return "%.2f" % v if v is not None else "-"


def time_split(js, fs):
    """Host ms per batch in each step of the JPEG pipeline (summed over
    its threads: a thread's share of a batch), from jpeg_stats() and
    feed_stats()."""
    n = max(js.get("batches") or 0, 1)
    out = {}
    for k in ("fetch_ns", "copy_ns"):
        if fs.get(k) is not None:
            out["feed_" + k[:-3]] = round(fs[k] / 1e6 / n, 2)
    for k in ("parse_ns", "stage_ns", "drain_ns", "decode_ns", "run_ns"):
        if js.get(k) is not None:
            out[k[:-3]] = round(js[k] / 1e6 / n, 2)
    return out


def normaliser(device):
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def prep(x):
        x = x.to(device, non_blocking=True).float()
        return ((x - mean) / std).contiguous(memory_format=torch.channels_last)
    return prep


def forever(it_factory):
    while True:
        for b in it_factory():
            yield b


# ------------------------------------------------------------ the feeds ----

class SmokeDataset(torch.utils.data.Dataset):
    """--cpu-smoke's stand-in for ImageFolder + torchvision transforms:
    PIL decode and a corner crop (no torchvision needed)."""

    def __init__(self, root, keys):
        self.root, self.keys = root, keys

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        with open(os.path.join(self.root, self.keys[i]), "rb") as f:
            x = tf.pil_decode(f.read())[:, :224, :224].contiguous()
        return x, int(self.keys[i].split("/")[1][1:])


def stock_loader(root, workers, batch, smoke):
    if smoke:
        ds = SmokeDataset(root, SMOKE_KEYS)
    else:
        import torchvision
        import torchvision.transforms as T
        ds = torchvision.datasets.ImageFolder(
            os.path.join(root, "train"),
            T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                       T.PILToTensor()]))
    kw = dict(batch_size=batch, shuffle=True, drop_last=True,
              num_workers=workers, pin_memory=torch.cuda.is_available())
    if workers > 0:
        kw.update(prefetch_factor=4, persistent_workers=True)
    return torch.utils.data.DataLoader(ds, **kw)


SMOKE_KEYS = []


def gpu_jpeg_transform(imgs):
    return tf.gpu_augment(imgs)


# ------------------------------------------------------- decode only ----

class HostPipeline:
    """dlc_cuda_jpeg_decode_host over file bytes held in memory."""

    def __init__(self, backend, blobs):
        from dlcache import _jpeg, torch_gpu
        self.j = _jpeg
        _, self.fns = torch_gpu._load()
        self.h, rc, msg = _jpeg.open_handle(
            self.fns, torch.cuda.current_device(), backend)
        if self.h is None:
            raise RuntimeError("%d %s" % (rc, msg))
        s = _jpeg._JpegStats()
        self.fns["dlc_cuda_jpeg_get_stats"](self.h, ctypes.byref(s))
        self.backend = (s.backend or b"").decode()
        self.keep = [ctypes.create_string_buffer(b, len(b)) for b in blobs]
        self.ptrs = [ctypes.cast(b, ctypes.c_void_p).value for b in self.keep]
        self.sizes = [len(b) for b in blobs]

    def run(self, start, n, t, out):
        ct = t.to_c(0, 0)
        data = (ctypes.c_void_p * n)(*self.ptrs[start:start + n])
        sizes = (ctypes.c_size_t * n)(*self.sizes[start:start + n])
        items = (self.j._JpegItem * n)()
        failed = ctypes.c_size_t()
        rc = self.fns["dlc_cuda_jpeg_decode_host"](
            self.h, data, sizes, n, None, ctypes.byref(ct),
            ctypes.c_void_p(out.data_ptr()), out.numel() * out.element_size(),
            ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), items,
            ctypes.byref(failed))
        if rc != 0 or failed.value:
            raise RuntimeError("decode_host: rc %d, %d failed: %s" % (
                rc, failed.value,
                (self.fns["dlc_cuda_last_error"]() or b"").decode()))

    def close(self):
        self.fns["dlc_cuda_jpeg_destroy"](self.h)


JPG_UTIL = {}  # decode-only row name -> mean JPEG engine utilisation


def timed_threads(pipes, t, total, batch, seconds, name):
    """img/s of len(pipes) threads, thread k decoding batches k, k + K, ...
    with pipes[k] on a stream of its own (as the JPEG feed's decode
    threads do); the JPEG engines' utilisation goes to JPG_UTIL[name]."""
    k = len(pipes)
    outs = [t.empty(batch, "cuda") for _ in range(k)]
    streams = [torch.cuda.Stream() for _ in range(k)]
    starts = list(range(0, total - batch + 1, batch))
    for j in range(k):  # warm
        with torch.cuda.stream(streams[j]):
            pipes[j].run(starts[j % len(starts)], batch, t, outs[j])
    torch.cuda.synchronize()
    done = [0] * k
    stop = threading.Event()
    errors = []

    def work(j):
        try:
            with torch.cuda.stream(streams[j]):
                i = j
                while not stop.is_set():
                    pipes[j].run(starts[i % len(starts)], batch, t, outs[j])
                    done[j] += batch
                    i += k
                streams[j].synchronize()
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)
    sampler = UtilSampler()
    with sampler:
        t0 = time.perf_counter()
        threads = [threading.Thread(target=work, args=(j,)) for j in range(k)]
        for th in threads:
            th.start()
        time.sleep(seconds)
        stop.set()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    JPG_UTIL[name] = sampler.jpg_mean()
    return sum(done) / wall


def timed(fn, total, batch, seconds, name):
    """img/s of fn(start, n) over batches, for at least `seconds`; the
    JPEG engines' mean utilisation meanwhile goes to JPG_UTIL[name]."""
    fn(0, batch)  # warm
    torch.cuda.synchronize()
    sampler = UtilSampler()
    with sampler:
        t0 = time.perf_counter()
        n = 0
        while True:
            for s in range(0, total - batch + 1, batch):
                fn(s, batch)
                n += batch
            torch.cuda.synchronize()
            if time.perf_counter() - t0 >= seconds:
                break
        rate = n / (time.perf_counter() - t0)
    JPG_UTIL[name] = sampler.jpg_mean()
    return rate


def kernel_ms(fn, batch, reps=4):
    """GPU kernel time (all kernels, any library) per call of fn(0,
    batch), from torch.profiler (CUPTI); None where it cannot tell."""
    try:
        from torch.profiler import ProfilerActivity, profile
        fn(0, batch)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                fn(0, batch)
            torch.cuda.synchronize()
        # The self device times sum to the GPU time (each kernel counted
        # once, launched by torch or not); copies and fills are left out.
        total_us = 0.0
        for e in prof.key_averages():
            if "Memcpy" in e.key or "Memset" in e.key:
                continue
            t = getattr(e, "self_device_time_total", None)
            if t is None:
                t = getattr(e, "self_cuda_time_total", 0.0)
            total_us += t or 0.0
        return total_us / 1e3 / reps if total_us > 0 else None
    except Exception as e:  # no CUPTI, an older profiler API
        log("kernel time not measured: %s" % e)
        return None


def decode_only(blobs, batch, seconds):
    from dlcache._jpeg import JpegTransform
    import torchvision.io as tio
    rows = []
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8)
               for b in blobs]
    total = len(blobs)

    def tv_decode(s, n):
        return tio.decode_jpeg(tensors[s:s + n], mode=tio.ImageReadMode.RGB,
                               device="cuda")
    name = "torchvision.io.decode_jpeg(device='cuda'), list"
    tv = timed(tv_decode, total, batch, seconds, name)
    rows.append((name, tv, tv, kernel_ms(tv_decode, batch)))
    log("decode-only torchvision %.0f img/s" % tv)

    def tv_full(s, n):
        x = tf.gpu_augment(tv_decode(s, n))
        return (x / 255.0 - 0.45) / 0.225
    name = "torchvision decode + roi_align RRC/flip + normalise"
    tvf = timed(tv_full, total, batch, seconds, name)
    rows.append((name, tvf, tv, kernel_ms(tv_full, batch)))
    ident = JpegTransform(size=(tf.JPEG_H, tf.JPEG_W), train=False,
                          resize_size=min(tf.JPEG_H, tf.JPEG_W))
    full = JpegTransform.imagenet(dtype=torch.bfloat16, channels_last=True)
    for backend in ("auto", "gpu"):
        try:
            p = HostPipeline(backend, blobs)
        except RuntimeError as e:
            log("pipeline %s: %s" % (backend, e))
            continue
        log("pipeline %s: %s" % (backend, p.backend))
        out = ident.empty(batch, "cuda")
        name = "pipeline %s: decode only (%s)" % (
            backend, p.backend.split(" (")[0])
        v = timed(lambda s, n: p.run(s, n, ident, out), total, batch,
                  seconds, name)
        rows.append((name, v, tv,
                     kernel_ms(lambda s, n: p.run(s, n, ident, out), batch)))
        log("decode-only pipeline %s %.0f img/s" % (backend, v))
        if backend == "auto":
            # Two handles on two threads, as the JPEG feed's default two
            # decode threads work.
            p2 = HostPipeline(backend, blobs)
            name = "pipeline auto: decode only, 2 threads"
            v = timed_threads([p, p2], ident, total, batch, seconds, name)
            rows.append((name, v, tv, None))
            log("decode-only pipeline auto, 2 threads %.0f img/s" % v)
            name = ("pipeline auto: decode + RRC/flip + normalise, bf16 "
                    "channels_last, 2 threads")
            v = timed_threads([p, p2], full, total, batch, seconds, name)
            rows.append((name, v, tv, None))
            p2.close()
        out2 = full.empty(batch, "cuda")
        name = ("pipeline %s: decode + RRC/flip + normalise, bf16 "
                "channels_last" % backend)
        v2 = timed(lambda s, n: p.run(s, n, full, out2), total, batch,
                   seconds, name)
        rows.append((name, v2, tv,
                     kernel_ms(lambda s, n: p.run(s, n, full, out2), batch)))
        p.close()
    return rows


# ------------------------------------------------------------- main ----

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="~90 s on a GPU")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="every path at toy sizes on the CPU (no figures)")
    ap.add_argument("--images", type=int, default=8192)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--cores", default="all;0-3",
                    help="CPU sets to run the feeds under, ';'-separated: "
                         "\"all\" or taskset-style lists (\"0-3\", "
                         "\"0,2,4,6\")")
    ap.add_argument("--decode-seconds", type=float, default=4.0)
    ap.add_argument("--decode-workers", type=int, default=2,
                    help="producer threads of gpu_jpeg and nvjpeg/thread")
    ap.add_argument("--feed-workers", default="2",
                    help="nvjpeg/feed rows: the feed's decode threads, a "
                         "comma list (one row each)")
    ap.add_argument("--nvjpeg-producers", default="feed,thread",
                    help="nvjpeg rows: feed (the C++ feed), thread")
    ap.add_argument("--stall-dump", type=float, default=120.0)
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each nvjpeg row this many times, a new "
                         "loader each time (its start-up included)")
    ap.add_argument("--skip", default="",
                    help="comma list of stock,gpu_jpeg,nvjpeg,decode")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    core_sets = [c.strip() for c in args.cores.split(";") if c.strip()]
    if args.quick:
        args.images = min(args.images, 3072)
        args.steps, args.warmup = min(args.steps, 15), min(args.warmup, 4)
        args.decode_seconds = min(args.decode_seconds, 2.0)
    smoke = args.cpu_smoke
    if smoke:
        args.images, args.classes, args.batch = 48, 4, 8
        args.steps, args.warmup = 3, 1
        core_sets = core_sets[:1]
    skip = set(s for s in args.skip.split(",") if s)
    if args.stall_dump > 0:
        stall_watchdog(args.stall_dump)
    cuda = torch.cuda.is_available() and not smoke
    if not cuda and not smoke:
        print("SKIPPED: no CUDA device (--cpu-smoke runs the paths on the "
              "CPU)")
        return 77
    device = torch.device("cuda" if cuda else "cpu")
    dlcached = tf.find_binary("DLCACHED", "build*/server/dlcached")
    if not os.environ.get("DLCACHE_LIB"):
        lib = tf.find_binary("DLCACHE_LIB", "build*/client/libdlcache_c.so")
        if lib:
            os.environ["DLCACHE_LIB"] = lib
    if not dlcached:
        sys.exit("dlcached not found: set DLCACHED")
    from dlcache.torch_gpu import GpuLoader
    from dlcache._jpeg import JpegTransform
    torch.backends.cudnn.benchmark = True
    date = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    gpu = torch.cuda.get_device_name(0) if cuda else "CPU smoke"
    ncores = len(os.sched_getaffinity(0))
    log("%s, %d cores, torch %s, %s" % (gpu, ncores, torch.__version__, date))

    work = tempfile.mkdtemp(prefix="jpeg_bench_")
    t = time.perf_counter()
    keys, avg = write_dataset(work, args.images, args.classes)
    SMOKE_KEYS[:] = keys
    targets = [int(k.split("/")[1][1:]) for k in keys]
    total_mb = avg * len(keys) / 1e6
    log("%d JPEGs, %.0f KB average, %.1f s" % (len(keys), avg / 1e3,
                                                time.perf_counter() - t))
    arena = int(avg * len(keys) * 1.5) + (256 << 20)
    server = tf.Dlcached(dlcached, {"ds": work}, arena, None)
    rows = []
    dec_rows = []
    try:
        tf.warm(server.socket, "ds", keys)
        log("warm: %.0f MB in dlcached" % total_mb)
        model = make_model(device, smoke)
        prep_norm = normaliser(device)
        # The batch as the model takes it (normalised bf16, channels_last),
        # already on the GPU: the model's own speed.
        x0 = prep_norm(torch.randint(0, 256, (args.batch, 3, 224, 224),
                                     dtype=torch.uint8, device=device)).to(
            torch.bfloat16).contiguous(memory_format=torch.channels_last)
        y0 = torch.randint(0, 1000, (args.batch,), device=device)

        def fixed():
            while True:
                yield x0, y0
        base = train("compute-bound", fixed(), lambda x: x, args, device,
                     model)
        base["cores"] = "-"
        rows.append(base)
        all_cpus = sorted(os.sched_getaffinity(0))
        for spec in core_sets:
            cpus = parse_cpus(spec)
            pin(cpus)
            label = "%d (%s)" % (len(cpus), spec)
            workers = max(1, len(cpus) - 2 if len(cpus) >= 8
                          else len(cpus) - 1)
            try:
                if "stock" not in skip:
                    dl = stock_loader(work, workers, args.batch, smoke)
                    r = train("stock/%dw" % workers, forever(lambda: dl),
                              prep_norm, args, device, model)
                    r["cores"] = label
                    rows.append(r)
                    del dl
                if "gpu_jpeg" not in skip:
                    with GpuLoader(keys, dataset="ds", socket=server.socket,
                                   batch_size=args.batch, device=device,
                                   decode="jpeg", targets=targets,
                                   decode_workers=args.decode_workers,
                                   transform=tf.gpu_augment if cuda else
                                   (lambda imgs: torch.stack(
                                       [i[:, :224, :224] for i in imgs])),
                                   drop_last=True, prefetch=4) as ld:
                        r = train("gpu_jpeg/%dw" % args.decode_workers,
                                  forever(lambda: ld), prep_norm, args,
                                  device, model)
                    r["cores"] = label
                    rows.append(r)
                runs = []
                for producer in ([] if "nvjpeg" in skip else
                                 args.nvjpeg_producers.split(",")):
                    for w in (args.feed_workers.split(",")
                              if producer == "feed"
                              else [str(args.decode_workers)]):
                        runs += [(producer, int(w), k)
                                 for k in range(args.repeat)]
                for producer, nw, rep in runs:
                    jt = JpegTransform.imagenet(dtype=torch.bfloat16,
                                                channels_last=True)
                    name = "nvjpeg/%s%dw" % (producer, nw)
                    if args.repeat > 1:
                        name += "#%d" % (rep + 1)
                    with GpuLoader(keys, dataset="ds", socket=server.socket,
                                   batch_size=args.batch, device=device,
                                   decode="nvjpeg", jpeg=jt, targets=targets,
                                   decode_workers=nw, producer=producer,
                                   drop_last=True, prefetch=4) as ld:
                        r = train(name, forever(lambda: ld), lambda x: x,
                                  args, device, model)
                        r["stats"] = ld.jpeg_stats()
                        r["time"] = time_split(r["stats"], ld.feed_stats())
                    log("%s stats: %s" % (name, r["stats"]))
                    log("%s host ms per batch: %s" % (name, r["time"]))
                    r["cores"] = label
                    rows.append(r)
            finally:
                pin(all_cpus)
        if cuda and "decode" not in skip:
            n = min(len(keys), 2048)
            blobs = []
            for k in keys[:n]:
                with open(os.path.join(work, k), "rb") as f:
                    blobs.append(f.read())
            dec_rows = decode_only(blobs, min(args.batch, n),
                                   args.decode_seconds)
    finally:
        server.stop()
        import shutil
        shutil.rmtree(work, ignore_errors=True)

    ref = rows[0]["img_s"]
    out = ["## JPEG feeds for ResNet-50 (bf16, channels_last, batch %d)"
           % args.batch, "",
           "%s, %d cores, %s, torch %s; %d JPEGs of ~%.0f KB (500x375), "
           "warm in dlcached; %s." % (gpu, ncores, platform.node(),
                                      torch.__version__, len(keys),
                                      avg / 1e3, date), "",
           "| feed | cores | img/s | of compute-bound | GPU util (NVML) | "
           "GPU busy (events) | JPEG engines (NVML) | host wait ms/step |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append("| %s | %s | %.0f | %.2f | %s | %s | %s | %.1f |" % (
            r["name"], r["cores"], r["img_s"], r["img_s"] / ref,
            cell(r["util"]), cell(r["busy"]), cell(r.get("jpg")),
            r["wait_ms"]))
    for spec in core_sets:
        cpus = parse_cpus(spec)
        label = "%d (%s)" % (len(cpus), spec)
        here = [r for r in rows if r["cores"] == label]
        stock = [r for r in here if r["name"].startswith("stock")]
        for r in here:
            if stock and r["name"].startswith("nvjpeg"):
                out.append("")
                out.append("%s cores: %s / stock = %.2fx" % (
                    label, r["name"], r["img_s"] / stock[0]["img_s"]))
    for r in rows:
        if "stats" in r:
            out.append("")
            out.append("%s (%s cores): %s" % (r["name"], r["cores"],
                                              r["stats"]))
            out.append("")
            out.append("%s (%s cores), host ms per batch: %s" % (
                r["name"], r["cores"], r.get("time")))
    if dec_rows:
        out += ["", "## Decode only (%d files, batches of %d)" % (
            min(len(keys), 2048), min(args.batch, 2048)), "",
            "| path | img/s | vs torchvision decode | GPU kernel ms per "
            "batch (SM time) | JPEG engines (NVML) |",
            "|---|---:|---:|---:|---:|"]
        for name, v, tv, ms in dec_rows:
            out.append("| %s | %.0f | %.2fx | %s | %s |" % (
                name, v, v / tv, cell(ms), cell(JPG_UTIL.get(name))))
        out += ["", "SM time: the summed duration of the CUDA kernels "
                "(torch.profiler/CUPTI, every library) per batch; the "
                "hardware JPEG engines' work is not kernels."]
    text = "\n".join(out) + "\n"
    print(text)
    dest = args.out or (os.path.join(os.environ["OUT"], "jpeg_bench.md")
                        if os.environ.get("OUT") else None)
    if dest:
        with open(dest, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
