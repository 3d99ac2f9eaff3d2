"""dlcache.torch_gpu.GpuLoader against a real dlcached process.

On a machine with a CUDA device (and torch built with CUDA) the device
tests check that GPU tensors equal the source bytes for many sizes, that
epochs reshuffle, that leases are released after the copies, and the GPU
JPEG decode; everywhere the CPU fallback path runs the same checks on CPU
tensors. Run by ctest (python_gpu_loader_test) with DLCACHED and
DLCACHE_LIB set, or on the GPU machine by tests/gpu/run_on_device.sh:
  DLCACHED=build/server/dlcached DLCACHE_LIB=build/client/libdlcache_c.so \\
  PYTHONPATH=client/python python3 tests/integration/python_gpu_loader_test.py
Exit code 77 (ctest: skipped) when torch or the server binary is missing.
"""

import os
import subprocess
import sys

SKIP = 77


def _reexec_with_torch():
    """The interpreter ctest found may lack torch while the system's has it
    (Debian's python3-torch): run this file with that one instead."""
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.realpath(cand) == os.path.realpath(sys.executable):
            continue
        if os.access(cand, os.X_OK) and subprocess.call(
                [cand, "-c", "import torch"], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL) == 0:
            os.execv(cand, [cand] + sys.argv)
    print("SKIPPED: torch is not installed (python_gpu_loader_test)")
    sys.exit(SKIP)


if __name__ == "__main__":
    _reexec_with_torch()

import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402
import urllib.request  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
sys.path.insert(0, HERE)

from dlcache import torch_gpu  # noqa: E402
from dlcache.torch_gpu import GpuLoader, VarBatch  # noqa: E402
from python_server import (die_with_parent, private_dir,  # noqa: E402
                           run_tests, wait_for)

CHUNK = 1 << 20
HAVE_CUDA = torch.cuda.is_available() and torch_gpu.cuda_upload_available()[0]
try:
    import torchvision.io  # noqa: F401
    HAVE_TV = True
except ImportError:
    HAVE_TV = False


class Server:
    """dlcached on a temporary socket, arena and source directory."""

    def __init__(self, datasets):
        binary = os.environ.get("DLCACHED")
        if not binary or not os.access(binary, os.X_OK):
            raise unittest.SkipTest("DLCACHED (the dlcached binary) not set")
        # dlc-PID-* dirs: swept by the next run if this process is killed.
        self.root = private_dir()
        self.shm = private_dir("/dev/shm")
        specs = []
        for name, files in datasets.items():
            src = os.path.join(self.root, name)
            for path, data in files.items():
                full = os.path.join(src, path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as f:
                    f.write(data)
            specs.append("%s=%s" % (name, src))
        self.socket = os.path.join(self.root, "d.sock")
        self.log_path = os.path.join(self.root, "dlcached.log")
        self.log = open(self.log_path, "wb")
        # Port 0: the kernel picks a free port (no bind-close-reuse race
        # under ctest -j); the server logs the one it got. Own session and
        # PDEATHSIG: dlcached dies with this process even when it is killed.
        self.proc = subprocess.Popen(
            [binary, "--socket=" + self.socket, "--shm_dir=" + self.shm,
             "--arena_bytes=256MiB", "--segment_bytes=32MiB",
             "--chunk_size=1MiB", "--dataset=" + ",".join(specs),
             "--metrics_address=127.0.0.1:0", "--keep_arena=false"],
            stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent)
        self.metrics = wait_for(self._metrics_address, 30,
                                "dlcached's metrics address in its log")
        # The metrics line comes before the data socket is bound: under
        # load (a whole-suite run beside two CPU hogs, 2026-12-06) the
        # first tests found no socket. The line after it is bound:
        wait_for(self._serving, 30, "dlcached serving on " + self.socket)

    def _serving(self):
        with open(self.log_path, "rb") as f:
            ok = (b" serving on unix:" + self.socket.encode()) in f.read()
        if not ok and self.proc.poll() is not None:
            raise AssertionError("dlcached exited (%s)" % self.proc.returncode)
        return ok

    def _metrics_address(self):
        with open(self.log_path, "rb") as f:
            m = re.search(rb"metrics: http://(127\.0\.0\.1:[0-9]+)", f.read())
        if m is None and self.proc.poll() is not None:
            raise AssertionError("dlcached exited (%s)" % self.proc.returncode)
        return m.group(1).decode() if m else None

    def leases(self):
        with urllib.request.urlopen("http://%s/metrics" % self.metrics,
                                    timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("dlcache_leases "):
                    return int(float(line.split()[1]))
        raise AssertionError("no dlcache_leases metric")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.shm, ignore_errors=True)


def rand(n, seed):
    return random.Random(seed).randbytes(n)


# Fixed-size datasets: name -> (item size, count). Each file starts with its
# index (8 bytes, little endian) where it is large enough.
FIXED = {"f1": (1, 5), "f4095": (4095, 7), "f4096": (4096, 9),
         "f150528": (150528, 40), "f3m": (3 * CHUNK + 17, 4)}
DATASETS = {}
for name, (size, count) in FIXED.items():
    files = {}
    for i in range(count):
        body = rand(size, sum(map(ord, name)) * 1000 + i)
        if size >= 8:
            body = i.to_bytes(8, "little") + body[8:]
        files["s/%04d.bin" % i] = body
    DATASETS[name] = files
# Variable sizes, including empty and multi-chunk files.
VAR_SIZES = [0, 1, 2, 255, 4096, 4097, 65536, 110000, CHUNK - 1, CHUNK,
             CHUNK + 1, 2 * CHUNK + 4321] + [random.Random(7).randrange(
                 1, 300000) for _ in range(40)]
DATASETS["var"] = {"v/%03d.bin" % i: rand(s, 500 + i)
                   for i, s in enumerate(VAR_SIZES)}
if HAVE_TV:
    import torchvision.io as tio
    jpegs = {}
    g = torch.Generator().manual_seed(3)
    for i in range(12):
        h, w = 64 + 8 * i, 96 + 4 * i
        img = (torch.rand(3, h, w, generator=g) * 40).to(torch.uint8)
        img += torch.linspace(0, 200, w).to(torch.uint8).view(1, 1, w)
        jpegs["j/%02d.jpg" % i] = bytes(tio.encode_jpeg(img, quality=90)
                                        .numpy().tobytes())
    DATASETS["jpg"] = jpegs

try:  # JPEGs made by PIL: the decode_workers tests need no torchvision
    import io as _io
    from PIL import Image as _Image
    _pj = {}
    _rng = random.Random(11)
    for i in range(14):
        w, h = 40 + 6 * i, 30 + 4 * i
        px = bytes(_rng.randrange(256) for _ in range(w * h * 3))
        buf = _io.BytesIO()
        _Image.frombytes("RGB", (w, h), px).save(buf, format="JPEG",
                                                 quality=85)
        _pj["p/%02d.jpg" % i] = buf.getvalue()
    DATASETS["pjpg"] = _pj
    HAVE_PIL = True
except ImportError:
    HAVE_PIL = False


def setUpModule():
    global SERVER
    SERVER = Server(DATASETS)


def tearDownModule():
    SERVER.stop()


def keys_of(name):
    return sorted(DATASETS[name])


def loader(name, device, **kw):
    kw.setdefault("batch_size", 4)
    return GpuLoader(keys_of(name), dataset=name, socket=SERVER.socket,
                     device=device, **kw)


def wait_no_leases(test, timeout=10.0):
    deadline = time.time() + timeout
    n = SERVER.leases()
    while n != 0 and time.time() < deadline:
        time.sleep(0.05)
        n = SERVER.leases()
    test.assertEqual(n, 0, "leases still held")


class _Checks:
    """The same checks on either device (DEVICE set by the subclass)."""

    DEVICE = None

    def expect_device(self, t):
        want = "cuda" if self.DEVICE == "cuda" else "cpu"
        self.assertEqual(t.device.type, want)

    def test_fixed_size_bytes_equal_source_for_many_sizes(self):
        for name, (size, count) in FIXED.items():
            with self.subTest(name=name), loader(
                    name, self.DEVICE, sample_shape=(size,), shuffle=False,
                    batch_size=3) as ld:
                seen = []
                for x in ld:
                    self.expect_device(x)
                    self.assertEqual(x.dtype, torch.uint8)
                    self.assertEqual(tuple(x.shape[1:]), (size,))
                    seen.extend(bytes(r.cpu().numpy().tobytes()) for r in x)
                want = [DATASETS[name][k] for k in keys_of(name)]
                self.assertEqual(len(seen), count)
                self.assertTrue(seen == want, "bytes differ for %s" % name)
        wait_no_leases(self)

    def test_shape_and_dtype_view(self):
        with loader("f150528", self.DEVICE, sample_shape=(3, 224, 224),
                    shuffle=False, batch_size=16) as ld:
            x = next(iter(ld))
            self.assertEqual(tuple(x.shape), (16, 3, 224, 224))
            k = keys_of("f150528")[5]
            self.assertEqual(bytes(x[5].cpu().numpy().tobytes()),
                             DATASETS["f150528"][k])
        with loader("f4096", self.DEVICE, sample_shape=(1024,),
                    dtype=torch.float32, shuffle=False) as ld:
            x = next(iter(ld))
            self.assertEqual(x.dtype, torch.float32)
            self.assertEqual(bytes(x[0].cpu().numpy().tobytes()),
                             DATASETS["f4096"][keys_of("f4096")[0]])

    def test_variable_size_flat_tensor_and_offsets(self):
        with loader("var", self.DEVICE, shuffle=False, batch_size=7) as ld:
            got = []
            for vb in ld:
                self.assertIsInstance(vb, VarBatch)
                self.expect_device(vb.data)
                self.assertEqual(vb.offsets.dtype, torch.int64)
                self.assertEqual(len(vb.split()), len(vb))
                got.extend(bytes(t.cpu().numpy().tobytes())
                           for t in vb.split())
        want = [DATASETS["var"][k] for k in keys_of("var")]
        self.assertEqual([len(g) for g in got], [len(w) for w in want])
        self.assertTrue(got == want)
        wait_no_leases(self)

    def test_epochs_reshuffle_and_cover_every_key(self):
        n = FIXED["f150528"][1]
        with loader("f150528", self.DEVICE, sample_shape=(150528,),
                    batch_size=8, seed=5) as ld:
            orders = []
            for epoch in (0, 1, 0):
                ld.set_epoch(epoch)
                ids = []
                for x in ld:
                    ids.extend(int.from_bytes(bytes(r[:8].cpu().numpy()
                                                    .tobytes()), "little")
                               for r in x)
                self.assertEqual(sorted(ids), list(range(n)))
                orders.append(ids)
            self.assertNotEqual(orders[0], orders[1])
            self.assertEqual(orders[0], orders[2])

    def test_len_drop_last_and_shards(self):
        n = FIXED["f150528"][1]  # 40
        with loader("f150528", self.DEVICE, sample_shape=(150528,),
                    batch_size=16) as ld:
            self.assertEqual(len(ld), 3)
            self.assertEqual([x.shape[0] for x in ld], [16, 16, 8])
        with loader("f150528", self.DEVICE, sample_shape=(150528,),
                    batch_size=16, drop_last=True) as ld:
            self.assertEqual(len(ld), 2)
            self.assertEqual(sum(1 for _ in ld), 2)
        ids = []
        for rank in range(3):
            with loader("f150528", self.DEVICE, sample_shape=(150528,),
                        batch_size=5, rank=rank, world_size=3) as ld:
                ld.set_epoch(2)
                for x in ld:
                    ids.extend(int.from_bytes(bytes(r[:8].cpu().numpy()
                                                    .tobytes()), "little")
                               for r in x)
        # 40 keys on 3 ranks: 14 each, two keys repeated (padding).
        self.assertEqual(len(ids), 42)
        self.assertEqual(sorted(set(ids)), list(range(n)))

    def test_ddp_ranks_get_the_same_number_of_batches(self):
        # DistributedSampler's rule: pad by repeating keys, or cut with
        # drop_last; every rank runs the same number of steps.
        n = FIXED["f150528"][1]  # 40
        for drop_last, per_rank, batches in ((False, 14, [5, 5, 4]),
                                             (True, 13, [5, 5])):
            seen = []
            for rank in range(3):
                with loader("f150528", self.DEVICE, sample_shape=(150528,),
                            batch_size=5, rank=rank, world_size=3,
                            drop_last=drop_last, seed=4) as ld:
                    self.assertEqual(len(ld), len(batches))
                    sizes = []
                    for x in ld:
                        sizes.append(x.shape[0])
                        seen.extend(int.from_bytes(bytes(
                            r[:8].cpu().numpy().tobytes()), "little")
                            for r in x)
                    self.assertEqual(sizes, batches, (drop_last, rank))
            if drop_last:
                self.assertEqual(len(set(seen)), len(seen))  # no repeats
                self.assertEqual(len(seen), 30)
            else:
                self.assertEqual(len(seen), 3 * per_rank)
                self.assertEqual(sorted(set(seen)), list(range(n)))

    def test_iterable_dataset_epochs_reach_persistent_workers(self):
        # set_epoch in the main process, in any order, is what persistent
        # DataLoader workers use (the epoch is in shared memory).
        from dlcache.torch_data import CacheIterableDataset
        keys = keys_of("f4096")
        ds = CacheIterableDataset(keys, dataset="f4096",
                                  socket=SERVER.socket, return_keys=True,
                                  seed=3, fetch_size=2)
        dl = torch.utils.data.DataLoader(
            ds, batch_size=None, num_workers=2, persistent_workers=True,
            multiprocessing_context="fork")
        for epoch in (5, 2, 2, 9):
            ds.set_epoch(epoch)
            got = [k for k, _ in dl]
            # Blocks of fetch_size keys of the rank's order go to the
            # workers in turn; batch_size=None interleaves their samples.
            order = ds.epoch_order(epoch)
            blocks = [order[i:i + 2] for i in range(0, len(order), 2)]
            shards = [sum(blocks[w::2], []) for w in (0, 1)]
            want = []
            for i in range(max(map(len, shards))):
                want.extend(sh[i] for sh in shards if i < len(sh))
            self.assertEqual(got, want, "epoch %d" % epoch)
        # Ranks: equal counts, padded.
        counts = []
        for rank in range(2):
            d = CacheIterableDataset(keys, dataset="f4096",
                                     socket=SERVER.socket, rank=rank,
                                     world_size=2, batch_size=2)
            counts.append((len(d), sum(1 for _ in d)))
        self.assertEqual(counts, [(3, 3), (3, 3)])  # 9 keys: 5 + 5

    @unittest.skipUnless(HAVE_TV, "torchvision not installed")
    def test_decode_jpeg_with_transform_in_the_producer(self):
        crop = lambda imgs: torch.stack([im[:, :16, :16] for im in imgs])  # noqa: E731
        with loader("jpg", self.DEVICE, decode="jpeg", shuffle=False,
                    batch_size=5, transform=crop, prefetch=2) as ld:
            shapes = [tuple(x.shape) for x in ld]
            for x in ld:
                self.expect_device(x)
        self.assertEqual(shapes, [(5, 3, 16, 16), (5, 3, 16, 16),
                                  (2, 3, 16, 16)])
        wait_no_leases(self)

    def test_leases_released_after_the_copies(self):
        with loader("f150528", self.DEVICE, sample_shape=(150528,),
                    batch_size=8, prefetch=3) as ld:
            it = iter(ld)
            next(it)
            # Batches are in flight: the server holds leases for them...
            for x in it:
                pass
            if self.DEVICE == "cuda":
                torch.cuda.synchronize()
            # ... and none once the epoch's copies are done, while the
            # loader (and its connection) is still open.
            wait_no_leases(self)

    def test_failed_item_raises_and_close_mid_epoch(self):
        from dlcache import DlcacheError
        ld = GpuLoader(keys_of("f4096") + ["s/missing.bin"], dataset="f4096",
                       socket=SERVER.socket, device=self.DEVICE,
                       sample_shape=(4096,), batch_size=4, shuffle=False)
        with self.assertRaises(DlcacheError) as cm:
            for _ in ld:
                pass
        self.assertIn("missing", str(cm.exception))
        ld.close()
        with loader("f150528", self.DEVICE, sample_shape=(150528,),
                    batch_size=2, prefetch=4) as ld:
            it = iter(ld)
            next(it)
        # Closed with batches in flight: no hang, leases go back.
        wait_no_leases(self)
        with loader("f4096", self.DEVICE, sample_shape=(4095,)) as ld:
            with self.assertRaises(DlcacheError):  # wrong size
                next(iter(ld))

    def test_decode_workers_keep_the_epoch_order(self):
        if not HAVE_PIL or (self.DEVICE == "cuda" and not HAVE_TV):
            self.skipTest("needs PIL (and torchvision on the GPU)")
        from dlcache import DlcacheError
        outs = {}
        for workers in (1, 3):
            with loader("pjpg", self.DEVICE, decode="jpeg", seed=5,
                        batch_size=3, prefetch=2,
                        decode_workers=workers) as ld:
                outs[workers] = [[im.cpu() for im in imgs] for imgs in ld]
        self.assertEqual(len(outs[1]), 5)  # 14 images: 3 + 3 + 3 + 3 + 2
        self.assertEqual([len(b) for b in outs[1]],
                         [len(b) for b in outs[3]])
        for a, b in zip(outs[1], outs[3]):
            for x, y in zip(a, b):
                self.assertTrue(torch.equal(x, y))
        # A failed batch in one producer reaches the consumer in its turn.
        ld = GpuLoader(keys_of("pjpg")[:7] + ["p/missing.jpg"],
                       dataset="pjpg", socket=SERVER.socket,
                       device=self.DEVICE, decode="jpeg", batch_size=2,
                       shuffle=False, decode_workers=3)
        got = 0
        with self.assertRaises(DlcacheError):
            for imgs in ld:
                got += len(imgs)
        self.assertEqual(got, 6)  # batches 0..2; batch 3 holds the missing
        ld.close()
        with self.assertRaises(ValueError):
            GpuLoader(["x"], device=self.DEVICE, decode="jpeg",
                      socket=SERVER.socket, decode_workers=0)
        wait_no_leases(self)

    @unittest.skipUnless(HAVE_TV, "torchvision not installed")
    def test_decode_jpeg(self):
        import torchvision.io as tio
        with loader("jpg", self.DEVICE, decode="jpeg", shuffle=False,
                    batch_size=5) as ld:
            got = []
            for imgs in ld:
                self.assertIsInstance(imgs, list)
                for im in imgs:
                    self.expect_device(im)
                got.extend(imgs)
        self.assertEqual(len(got), len(DATASETS["jpg"]))
        for k, im in zip(keys_of("jpg"), got):
            ref = tio.decode_jpeg(torch.frombuffer(bytearray(
                DATASETS["jpg"][k]), dtype=torch.uint8),
                mode=tio.ImageReadMode.RGB)
            self.assertEqual(tuple(im.shape), tuple(ref.shape))
            diff = (im.cpu().int() - ref.int()).abs().float().mean().item()
            self.assertLess(diff, 3.0, k)
        wait_no_leases(self)


class CpuFallbackTest(_Checks, unittest.TestCase):
    DEVICE = "cpu"

    def test_cuda_request_without_cuda_falls_back_and_warns_once(self):
        if HAVE_CUDA:
            self.skipTest("a CUDA device is present")
        torch_gpu._warned = False
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with loader("f4096", "cuda", sample_shape=(4096,)) as ld:
                x = next(iter(ld))
                self.assertEqual(x.device.type, "cpu")
                self.assertFalse(ld.on_gpu)
                self.assertTrue(ld.fallback_reason)
            with loader("f4096", "cuda", sample_shape=(4096,)) as ld:
                next(iter(ld))
        msgs = [str(x.message) for x in w if "GpuLoader" in str(x.message)]
        self.assertEqual(len(msgs), 1, msgs)

    def test_c_abi_reports_unavailable_without_a_device(self):
        if HAVE_CUDA:
            self.skipTest("a CUDA device is present")
        ok, reason = torch_gpu.cuda_upload_available(0)
        self.assertFalse(ok)
        self.assertTrue(reason)


@unittest.skipUnless(HAVE_CUDA, "no CUDA device (or torch without CUDA, or "
                     "libdlcache_c.so without CUDA)")
class CudaTest(_Checks, unittest.TestCase):
    DEVICE = "cuda"

    def test_uploads_use_registered_segments(self):
        with loader("f150528", "cuda", sample_shape=(150528,),
                    batch_size=8) as ld:
            for _ in ld:
                pass
            st = ld.stats()
        self.assertGreater(st["registered_segments"], 0)
        self.assertEqual(st["staged_segments"], 0)
        self.assertEqual(st["staged_bytes"], 0)
        # The epoch, and with the feed the next epoch's first batches.
        self.assertEqual(st["bytes"] % 150528, 0)
        self.assertGreaterEqual(st["bytes"], 40 * 150528)

    def test_feed_producer_depth_and_epochs(self):
        n = FIXED["f150528"][1]
        with loader("f150528", "cuda", sample_shape=(150528,),
                    batch_size=4, prefetch=3) as ld:
            self.assertEqual(ld.producer, "feed")
            for epoch in range(3):  # auto epochs: the next one prefetched
                ids = []
                for x in ld:
                    ids.extend(int.from_bytes(bytes(r[:8].cpu().numpy()
                                                    .tobytes()), "little")
                               for r in x)
                self.assertEqual(sorted(ids), list(range(n)), epoch)
            st = ld.feed_stats()
            self.assertLessEqual(st["max_in_flight"], 3)
            self.assertGreaterEqual(st["returned"], 30)
            self.assertEqual(st["failed"], 0)
            # Leave mid-epoch, then another epoch: no mixing of batches.
            it = iter(ld)
            next(it)
            ld.set_epoch(7)
            ids = []
            for x in ld:
                ids.extend(int.from_bytes(bytes(r[:8].cpu().numpy()
                                                .tobytes()), "little")
                           for r in x)
            self.assertEqual(sorted(ids), list(range(n)))
            torch.cuda.synchronize()
            ld.release_finished()
        wait_no_leases(self)

    def test_feed_and_thread_producers_deliver_the_same_batches(self):
        out = {}
        for prod in ("feed", "thread"):
            for name, bs in (("f150528", 6), ("var", 5)):
                shape = (150528,) if name == "f150528" else None
                with loader(name, "cuda", sample_shape=shape, batch_size=bs,
                            seed=9, producer=prod) as ld:
                    self.assertEqual(ld.producer, prod)
                    got = []
                    for _ in range(2):
                        for x in ld:
                            if isinstance(x, VarBatch):
                                got.append([bytes(t.cpu().numpy().tobytes())
                                            for t in x.split()])
                            else:
                                got.append(bytes(x.cpu().numpy().tobytes()))
                    out[(prod, name)] = got
        for name in ("f150528", "var"):
            self.assertTrue(out[("feed", name)] == out[("thread", name)],
                            name)

    def test_consumer_stream_ordering(self):
        # Consume on a non-default stream with work queued before the
        # batch arrives: the values must still be the uploaded bytes.
        s = torch.cuda.Stream()
        with torch.cuda.stream(s), loader("f150528", "cuda",
                                          sample_shape=(150528,),
                                          shuffle=False, batch_size=8) as ld:
            sums = []
            for x in ld:
                torch.cuda._sleep(1000000)  # keep the stream busy
                sums.append(x.to(torch.int64).sum(dim=1))
            got = torch.cat(sums).cpu().tolist()
        want = [sum(DATASETS["f150528"][k]) for k in keys_of("f150528")]
        self.assertEqual(got, want)


if __name__ == "__main__":
    run_tests(__name__)
