"""Training semantics of dlcache.torch against a real dlcached (issue 31):
ImageFolder with torchvision's rules, (sample, target) from every loader,
tar shards read in place, one epoch order across the loaders (and the C++
common/epoch_order that the LibTorch dataset compiles), resume in the
middle of an epoch with 0, 1, 2 and 4 workers, exact len() and OneCycleLR.

torchvision is not installed here: the reference ImageFolder is built in
this file from the same files with PIL and torchvision's documented rules
(class folders sorted, files of the allowed extensions, lower-cased, in
sorted(os.walk) order). The tar reference is Python's tarfile.

Run by ctest (python_train_test) with DLCACHED, DLCACHECTL, DLCACHE_LIB
and EPOCH_ORDER_TOOL set. Exits 77 (skipped) without torch, numpy or PIL.
"""

import io
import os
import random
import subprocess
import sys
import tarfile
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

from python_server import (Server, die_with_test_process,  # noqa: E402
                           run_tests, watchdog)

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.utils.data
    from PIL import Image
    HAVE_DEPS = True
except ImportError:
    HAVE_DEPS = False

if HAVE_DEPS:
    import dlcache
    import dlcache.torch as dt
    from dlcache import _order

TEST_DEADLINE_S = 240
LOADER_TIMEOUT_S = 60
CLASSES = ["b_green", "a_red", "C_blue", "d_white"]  # sorted: C, a, b, d
COLOURS = {"a_red": (220, 30, 30), "b_green": (30, 200, 40),
           "C_blue": (30, 40, 220), "d_white": (235, 235, 235)}
PER_CLASS = 24
SHARDS = 4
SERVER = None
FILES = {}


def image_bytes(colour, seed, fmt):
    rng = np.random.default_rng(seed)
    px = np.clip(np.array(colour, dtype=np.int16) +
                 rng.integers(-25, 26, size=(16, 16, 3)), 0, 255)
    buf = io.BytesIO()
    Image.fromarray(px.astype(np.uint8)).save(buf, format=fmt)
    return buf.getvalue()


def make_files():
    files = {}
    n = 0
    for cls in CLASSES:
        for i in range(PER_CLASS):
            # PNG and JPEG, upper-case extensions, a nested folder.
            fmt, ext = (("PNG", ".png") if i % 3 == 0 else
                        ("JPEG", ".JPG" if i % 5 == 0 else ".jpg"))
            sub = "deep/" if i % 4 == 1 else ""
            files["train/%s/%simg_%03d%s" % (cls, sub, i, ext)] = \
                image_bytes(COLOURS[cls], n, fmt)
            n += 1
        files["train/%s/notes.txt" % cls] = b"not an image"
    files["train/README"] = b"a file beside the class folders"
    # Tar shards (WebDataset layout) of the same images, with a GNU long
    # name and a pax member among them.
    items = []
    for key in sorted(k for k in files if k.startswith("train/") and
                      "." in k.rsplit("/", 1)[1] and
                      not k.endswith(".txt")):
        cls = key.split("/")[1]
        items.append((key, files[key], sorted(CLASSES).index(cls)))
    random.Random(0).shuffle(items)  # classes mixed within each shard
    for s in range(SHARDS):
        buf = io.BytesIO()
        fmt = tarfile.GNU_FORMAT if s % 2 == 0 else tarfile.PAX_FORMAT
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
            for j, (key, data, cls) in enumerate(items[s::SHARDS]):
                stem = "s%d/%s_%04d" % (s, "x" * (120 if j == 0 else 4), j)
                for name, payload in ((stem + ".jpg", data),
                                      (stem + ".cls", b"%d" % cls)):
                    info = tarfile.TarInfo(name)
                    info.size = len(payload)
                    info.mtime = 1700000000
                    tar.addfile(info, io.BytesIO(payload))
        files["shards/shard-%06d.tar" % s] = buf.getvalue()
    return files


def setUpModule():
    global SERVER, FILES
    if not HAVE_DEPS:
        raise unittest.SkipTest("needs torch, numpy and PIL")
    FILES = make_files()
    # 64 KiB chunks: a shard spans several, members straddle them.
    SERVER = Server(FILES, chunk="64KiB")


def tearDownModule():
    if SERVER is not None:
        SERVER.stop(cleanup=True)


def worker_init(worker_id):
    die_with_test_process()


def lister():
    """The dataset's listing: through dlcached where the Client lists
    datasets (issue 30), else the same names from the source folder."""
    if hasattr(dlcache.Client, "list"):
        return None
    return dt.local_lister(SERVER.src)


def to_tensor(img):
    """PIL RGB -> float [3, 16, 16] in [0, 1] (torchvision's ToTensor)."""
    a = np.asarray(img, dtype=np.float32) / 255.0
    return torch.from_numpy(a.transpose(2, 0, 1).copy())


# -- the reference ImageFolder: torchvision's rules over the source files --

IMG_EXT = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif",
           ".tiff", ".webp")


class ReferenceImageFolder(torch.utils.data.Dataset if HAVE_DEPS else
                           object):
    def __init__(self, root, transform):
        self.classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = []
        for cls in sorted(self.class_to_idx):
            for dirpath, _, names in sorted(os.walk(os.path.join(root, cls),
                                                    followlinks=True)):
                for name in sorted(names):
                    if name.lower().endswith(IMG_EXT):
                        self.samples.append((os.path.join(dirpath, name),
                                             self.class_to_idx[cls]))
        self.targets = [t for _, t in self.samples]
        self.transform = transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, target = self.samples[i]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        return self.transform(img), target


class TarfileSamples(torch.utils.data.IterableDataset if HAVE_DEPS else
                     object):
    """The reference tar reader: Python's tarfile over the shard files, in
    the given shard order, samples grouped by key."""

    def __init__(self, shard_paths, transform):
        self.paths = shard_paths
        self.transform = transform

    def samples(self):
        for path in self.paths:
            with tarfile.open(path) as tar:
                group, key = {}, None
                for m in tar.getmembers():
                    if not m.isfile():
                        continue
                    folder, _, base = m.name.rpartition("/")
                    stem, _, ext = base.partition(".")
                    k = folder + "/" + stem if folder else stem
                    if k != key and group:
                        yield key, group
                        group = {}
                    key = k
                    group[ext] = tar.extractfile(m).read()
                if group:
                    yield key, group

    def __iter__(self):
        for key, g in self.samples():
            img = Image.open(io.BytesIO(g["jpg"])).convert("RGB")
            yield self.transform(img), int(g["cls"])


class ListSampler(torch.utils.data.Sampler if HAVE_DEPS else object):
    def __init__(self, indices):
        self.indices = list(indices)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))


def train(batches_per_epoch, epochs=4, steps_per_epoch=None):
    """Trains small_cnn on batches_per_epoch(epoch) (iterables of (x, y));
    returns (accuracy over the last epoch's batches, batches seen)."""
    torch.set_num_threads(1)
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = None
    if steps_per_epoch is not None:
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=0.2, epochs=epochs, steps_per_epoch=steps_per_epoch)
    correct = total = 0
    for epoch in range(epochs):
        correct = total = 0
        for x, y in batches_per_epoch(epoch):
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            correct += int((out.argmax(1) == y).sum())
            total += len(y)
    return correct / max(total, 1), total


def keys_of(batch):
    return list(batch[0])


class TrainTest(unittest.TestCase):
    def setUp(self):
        self.disarm = watchdog(TEST_DEADLINE_S)
        warnings.simplefilter("ignore", RuntimeWarning)  # GpuLoader on CPU
        # "more workers than suggested" on this 2-core machine.
        warnings.filterwarnings("ignore", "This DataLoader will create")

    def tearDown(self):
        self.disarm()

    def folder(self, **kw):
        return dt.ImageFolder("ds", prefix="train", socket=SERVER.socket,
                              transform=to_tensor, lister=lister(), **kw)

    def loader(self, ds, workers, cls=None, **kw):
        if workers:
            kw.update(num_workers=workers, timeout=LOADER_TIMEOUT_S,
                      worker_init_fn=worker_init,
                      multiprocessing_context="fork")
        return (cls or dt.DataLoader)(ds, **kw)

    # -- one epoch order ---------------------------------------------------

    def test_python_order_equals_cpp_order(self):
        tool = os.environ.get("EPOCH_ORDER_TOOL")
        if not tool or not os.access(tool, os.X_OK):
            self.skipTest("EPOCH_ORDER_TOOL (tests/unit/epoch_order_tool) "
                          "not set")
        # The golden values common/epoch_order's unit test asserts too.
        self.assertEqual(_order.epoch_permutation(10),
                         [0, 9, 1, 6, 3, 5, 4, 2, 8, 7])
        self.assertEqual(_order.rank_order(10, 3, 1, 1, 3), [1, 0, 2, 5])
        for n, seed, epoch, rank, world, drop, shuf in [
                (1000, 0, 0, 0, 1, 0, 1), (1001, 7, 3, 2, 4, 0, 1),
                (1001, 7, 3, 3, 4, 1, 1), (5, 2**63 + 5, 9, 1, 8, 0, 1),
                (300, 1, 2, 1, 3, 0, 0), (0, 1, 1, 0, 2, 0, 1)]:
            out = subprocess.run(
                [tool] + [str(v) for v in (n, seed, epoch, rank, world, drop,
                                           shuf)],
                capture_output=True, text=True, check=True).stdout.split()
            cpp = [int(v) for v in out]
            py = _order.rank_order(n, seed, epoch, rank, world, bool(drop),
                                   bool(shuf))
            self.assertEqual(py, cpp, (n, seed, epoch, rank, world))
            if shuf and n:
                self.assertEqual(
                    _order.epoch_permutation(n, seed, epoch,
                                             use_numpy=False),
                    _order.epoch_permutation(n, seed, epoch,
                                             use_numpy=True))

    def test_every_loader_reads_the_one_order(self):
        ds = self.folder(return_keys=True)
        keys = ds.keys
        n = len(keys)
        seed, epoch, rank, world = 5, 3, 1, 3
        want = [keys[i] for i in _order.rank_order(n, seed, epoch, rank,
                                                   world)]
        # PlannedSampler through a DataLoader with 2 workers.
        sampler = dt.PlannedSampler(ds, seed=seed, rank=rank,
                                    world_size=world, plan=False)
        sampler.set_epoch(epoch)
        got = []
        for batch in self.loader(ds, 2, batch_size=5, sampler=sampler):
            got += keys_of(batch)
        self.assertEqual(got, want)
        # CacheIterableDataset, batched, 2 and 3 workers.
        for workers in (2, 3):
            it = dlcache.torch.CacheIterableDataset(
                keys, dataset="ds", socket=SERVER.socket, batch_size=4,
                seed=seed, rank=rank, world_size=world, return_keys=True)
            it.set_epoch(epoch)
            got = []
            for batch in self.loader(it, workers, batch_size=None):
                got += keys_of(batch)
            self.assertEqual(got, want, workers)
        # GpuLoader (CPU here) hands its batches' keys.
        with dt.GpuLoader(keys, dataset="ds", socket=SERVER.socket,
                          batch_size=6, device="cpu", seed=seed, rank=rank,
                          world_size=world, return_keys=True,
                          targets=ds.targets) as gl:
            gl.set_epoch(epoch)
            got = []
            for bkeys, x, y in gl:
                got += bkeys
                self.assertEqual(y.tolist(),
                                 [ds.targets[keys.index(k)] for k in bkeys])
            self.assertEqual(got, want)
        # The tar reader's shard order is the same function's.
        tar = dt.TarShardDataset(dataset="ds", prefix="shards",
                                 socket=SERVER.socket, lister=lister(),
                                 seed=seed, rank=0, world_size=1)
        self.assertEqual(tar.worker_shards(epoch),
                         [tar.shards[i] for i in
                          _order.epoch_permutation(SHARDS, seed, epoch)])

    # -- ImageFolder ---------------------------------------------------------

    def test_image_folder_has_torchvisions_semantics(self):
        ref = ReferenceImageFolder(os.path.join(SERVER.src, "train"),
                                   to_tensor)
        ds = self.folder()
        self.assertEqual(ds.classes, ref.classes)
        self.assertEqual(ds.classes, sorted(CLASSES))
        self.assertEqual(ds.class_to_idx, ref.class_to_idx)
        self.assertEqual(ds.targets, ref.targets)
        self.assertEqual(
            ds.samples, [(os.path.relpath(p, SERVER.src), t)
                         for p, t in ref.samples])
        self.assertEqual(len(ds), len(CLASSES) * PER_CLASS)
        for i in (0, 7, len(ds) - 1):
            x, y = ds[i]
            rx, ry = ref[i]
            self.assertEqual(y, ry)
            self.assertTrue(torch.equal(x, rx))
        # target_transform, and the batched read.
        ds2 = self.folder(target_transform=lambda t: t + 100)
        out = ds2.__getitems__([0, 30, 60])
        self.assertEqual([t for _, t in out],
                         [ref.targets[i] + 100 for i in (0, 30, 60)])
        with self.assertRaises(FileNotFoundError):
            dt.ImageFolder("ds", prefix="shards", socket=SERVER.socket,
                           lister=lister())

    def test_spawned_workers_read_the_same_epoch(self):
        ds = self.folder(return_keys=True)
        sampler = dt.PlannedSampler(ds, seed=3, plan=False)
        sampler.set_epoch(1)
        orders = []
        for method in ("fork", "spawn"):
            loader = torch.utils.data.DataLoader(
                ds, batch_size=8, sampler=sampler, num_workers=2,
                multiprocessing_context=method, timeout=LOADER_TIMEOUT_S)
            batches = list(loader)
            orders.append([k for b in batches for k in b[0]])
            self.assertEqual(batches[0][2].tolist(),
                             [ds.targets[ds.keys.index(k)]
                              for k in batches[0][0]])
        self.assertEqual(orders[0], orders[1])
        self.assertEqual(orders[0], [ds.keys[i] for i in
                                     _order.rank_order(len(ds), 3, 1)])

    def test_cnn_on_image_folder_matches_the_reference(self):
        ds = self.folder()
        ref = ReferenceImageFolder(os.path.join(SERVER.src, "train"),
                                   to_tensor)
        sampler = dt.PlannedSampler(ds, seed=1)
        loader = self.loader(ds, 2, batch_size=8, sampler=sampler)

        def ours(epoch):
            sampler.set_epoch(epoch)
            return loader

        def theirs(epoch):
            order = _order.rank_order(len(ref), 1, epoch)
            return torch.utils.data.DataLoader(
                ref, batch_size=8, sampler=ListSampler(order), num_workers=0)

        acc, seen = train(ours)
        ref_acc, ref_seen = train(theirs)
        self.assertEqual(seen, ref_seen)
        self.assertAlmostEqual(acc, ref_acc, places=6)
        self.assertGreaterEqual(acc, 0.9)

    # -- tar shards ------------------------------------------------------------

    def shard_paths(self, names):
        return [os.path.join(SERVER.src, n) for n in names]

    def tar(self, **kw):
        kw.setdefault("lister", lister())
        return dt.TarShardDataset(dataset="ds", prefix="shards",
                                  socket=SERVER.socket, **kw)

    def test_tar_shards_read_as_tarfile_reads_them(self):
        ds = self.tar(shuffle=False, loader=None, return_keys=True)
        self.assertEqual(len(ds.shards), SHARDS)
        ref = TarfileSamples(self.shard_paths(ds.shards), None)
        want = [(k, g["jpg"], int(g["cls"])) for k, g in ref.samples()]
        got = [(k, bytes(v), t) for k, v, t in ds]
        self.assertEqual(got, want)
        self.assertTrue(any(len(k) > 100 for k, _, _ in got))  # long names
        # Shuffled, 2 workers: every sample once, the same order each run.
        ds = self.tar(shuffle=True, shuffle_buffer=10, loader=None,
                      return_keys=True, seed=4)
        ds.set_epoch(2)

        def run():
            out = []
            for k, v, t in self.loader(ds, 2, cls=torch.utils.data.DataLoader,
                                       batch_size=None):
                out.append((k, bytes(v), int(t)))
            return out
        first = run()
        self.assertEqual(sorted(first), sorted(want))
        self.assertNotEqual(first, want)
        self.assertEqual(run(), first)

    def test_tar_parser_over_chunks_and_bad_headers(self):
        data = FILES["shards/shard-000000.tar"]
        with dlcache.Client(SERVER.socket) as c:
            # The cached shard spans chunks: members straddle them.
            self.assertGreater(c.get_batch("ds", [
                "shards/shard-000000.tar"])[0].num_chunks, 1)
        whole = [(n, bytes(v)) for n, v in dt.iter_tar_members(data)]
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            want = [(m.name, tar.extractfile(m).read())
                    for m in tar.getmembers() if m.isfile()]
        self.assertEqual(whole, want)
        mv = memoryview(data)
        for cuts in ([512 * 7, 512 * 40], [1000, 1001, 30000], [65536]):
            views = [mv[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
            self.assertEqual(
                [(n, bytes(v)) for n, v in dt.iter_tar_members(views)], want)
        bad = bytearray(data)
        bad[1] ^= 0x20  # the first member's name: its checksum no longer fits
        with self.assertRaisesRegex(ValueError, "checksum"):
            list(dt.iter_tar_members(bytes(bad)))
        with self.assertRaisesRegex(ValueError, "truncated"):
            list(dt.iter_tar_members(data[:2048]))

    def test_cnn_on_tar_shards_matches_tarfile(self):
        ds = self.tar(shuffle=False, transform=to_tensor)
        ref = TarfileSamples(self.shard_paths(ds.shards), to_tensor)

        def ours(epoch):
            return torch.utils.data.DataLoader(ds, batch_size=8)

        def theirs(epoch):
            return torch.utils.data.DataLoader(ref, batch_size=8)

        acc, seen = train(ours)
        ref_acc, ref_seen = train(theirs)
        self.assertEqual(seen, ref_seen)
        self.assertAlmostEqual(acc, ref_acc, places=6)
        self.assertGreaterEqual(acc, 0.9)
        # Shuffled, with workers: learns as well.
        ds = self.tar(shuffle=True, shuffle_buffer=16, transform=to_tensor)
        loader = self.loader(ds, 2, batch_size=8)

        def shuffled(epoch):
            ds.set_epoch(epoch)
            return loader
        acc, _ = train(shuffled)
        self.assertGreaterEqual(acc, 0.9)

    # -- resume --------------------------------------------------------------

    def test_resume_after_k_batches_yields_the_rest(self):
        for workers in (0, 1, 2, 4):
            for kind in ("sampler", "iterable", "tar"):
                with self.subTest(workers=workers, kind=kind):
                    self.check_resume(kind, workers, k=3, epoch=2)

    def make(self, kind, workers):
        if kind == "sampler":
            ds = self.folder(return_keys=True)
            s = dt.PlannedSampler(ds, seed=9)
            return s, self.loader(ds, workers, batch_size=7, sampler=s)
        if kind == "iterable":
            keys = self.folder().keys
            ds = dt.CacheIterableDataset(keys, dataset="ds",
                                         socket=SERVER.socket, batch_size=7,
                                         seed=9, return_keys=True)
            return ds, self.loader(ds, workers, batch_size=None)
        ds = self.tar(loader=None, return_keys=True, seed=9,
                      shuffle_buffer=8)
        return ds, self.loader(ds, workers, batch_size=6,
                               collate_fn=lambda b: ([s[0] for s in b],))

    def check_resume(self, kind, workers, k, epoch):
        owner, loader = self.make(kind, workers)
        owner.set_epoch(epoch)
        full = [keys_of(b) for b in loader]
        self.assertGreater(len(full), k + 1)
        # Stopped after k batches...
        owner.set_epoch(epoch)
        it = iter(loader)
        head = [keys_of(next(it)) for _ in range(k)]
        state = loader.state_dict()
        del it
        self.assertEqual(head, full[:k])
        self.assertEqual(state, {"epoch": epoch, "batches": k})
        # ... and resumed by a new process's objects: the rest, in order.
        owner2, loader2 = self.make(kind, workers)
        loader2.load_state_dict(state)
        owner2.set_epoch(epoch)  # a restarted loop sets the epoch again
        rest = [keys_of(b) for b in loader2]
        self.assertEqual(rest, full[k:])
        self.assertEqual(loader2.state_dict(),
                         {"epoch": epoch, "batches": len(full)})
        # The next epoch starts from its beginning.
        owner2.set_epoch(epoch + 1)
        self.assertEqual(len([b for b in loader2]), len(full))

    def test_gpu_loader_resumes(self):
        keys = self.folder().keys
        kw = dict(dataset="ds", socket=SERVER.socket, batch_size=10,
                  device="cpu", seed=2, return_keys=True)
        with dt.GpuLoader(keys, **kw) as gl:
            gl.set_epoch(4)
            full = [b[0] for b in gl]
            gl.set_epoch(4)
            it = iter(gl)
            head = [next(it)[0] for _ in range(3)]
            state = gl.state_dict()
        self.assertEqual(head, full[:3])
        self.assertEqual(state, {"epoch": 4, "next_batch": 3})
        with dt.GpuLoader(keys, **kw) as gl:
            gl.load_state_dict(state)
            gl.set_epoch(4)
            self.assertEqual([b[0] for b in gl], full[3:])

    def test_gpu_loader_registers_its_epochs_as_plans(self):
        keys = self.folder().keys
        before = SERVER.status()["plans"]
        with dt.GpuLoader(keys, dataset="ds", socket=SERVER.socket,
                          batch_size=16, device="cpu", seed=1) as gl:
            gl.set_epoch(0)
            n = sum(len(b) for b in gl)
            self.assertEqual(n, len(keys))
            plans = SERVER.status()["plans"]
            names = [p.get("name") for p in plans["plan_list"]]
            self.assertIn(gl._plan_name, names, plans)
            # Its reads were the plan's progress.
            self.assertGreaterEqual(plans["consumed"] - before["consumed"],
                                    n, plans)
        # A job's ranks share one job plan, named after the job.
        with dt.GpuLoader(keys, dataset="ds", socket=SERVER.socket,
                          batch_size=16, device="cpu", seed=1, job="j31",
                          rank=0, world_size=2) as gl:
            self.assertTrue(gl._plan_name.startswith("job/j31/"))
            self.assertEqual(sum(len(b) for b in gl), len(keys) // 2)
            names = [p.get("name") for p in
                     SERVER.status()["plans"]["plan_list"]]
            self.assertIn(gl._plan_name, names)

    def test_gpu_loader_plans_again_after_a_restart(self):
        keys = self.folder().keys
        with dt.GpuLoader(keys, dataset="ds", socket=SERVER.socket,
                          batch_size=4, device="cpu", seed=1, prefetch=1,
                          connect_timeout=30) as gl:
            gl.set_epoch(0)
            it = iter(gl)
            for _ in range(2):
                next(it)
            SERVER.restart()  # the plan goes with the old session
            n = 2 + sum(1 for _ in it)
            self.assertEqual(n, len(gl))
            names = [p.get("name") for p in
                     SERVER.status()["plans"]["plan_list"]]
            self.assertIn(gl._plan_name, names)

    # -- len and the scheduler --------------------------------------------

    def test_len_is_exact_and_one_cycle_runs(self):
        keys = ["k/%03d" % i for i in range(400)]
        ds = dt.CacheIterableDataset(keys, dataset="ds", socket=SERVER.socket,
                                     batch_size=32)
        for workers in (0, 2, 3):
            loader = self.loader(ds, workers, batch_size=None)
            self.assertEqual(len(loader), 13)
        # Per-sample mode with fetch_size = the loader's batch size.
        ds = dt.CacheIterableDataset(keys, dataset="ds", socket=SERVER.socket,
                                     fetch_size=32)
        self.assertEqual(len(self.loader(ds, 2, batch_size=32)), 13)
        # OneCycleLR(steps_per_epoch=len(loader)) over real batches.
        folder = self.folder()
        it = dt.CacheIterableDataset(folder.keys, dataset="ds",
                                     socket=SERVER.socket, batch_size=10,
                                     targets=folder.targets,
                                     transform=lambda b: to_tensor(
                                         Image.open(io.BytesIO(
                                             b.numpy().tobytes())).convert(
                                                 "RGB")))
        loader = self.loader(it, 2, batch_size=None)
        self.assertEqual(len(loader), 10)  # 96 samples

        def epochs(epoch):
            it.set_epoch(epoch)
            return loader
        acc, seen = train(epochs, epochs=3, steps_per_epoch=len(loader))
        self.assertEqual(seen, 96)

    # -- the package -------------------------------------------------------

    def test_targets_in_every_form(self):
        folder = self.folder()
        keys, targets = folder.keys, folder.targets
        as_dict = dict(zip(keys, targets))
        for t in (targets, as_dict, as_dict.__getitem__,
                  torch.tensor(targets)):
            ds = dt.CacheDataset(keys, dataset="ds", socket=SERVER.socket,
                                 targets=t)
            _, y = ds[5]
            self.assertEqual(int(y), targets[5])
        with self.assertRaises(ValueError):
            dt.CacheDataset(keys, dataset="ds", targets=targets[:3])
        # Batched iterable reads: (batch, targets tensor), with keys.
        it = dt.CacheIterableDataset(keys, dataset="ds", socket=SERVER.socket,
                                     batch_size=8, targets=as_dict,
                                     return_keys=True, seed=2)
        for bkeys, data, y in it:
            self.assertEqual(len(data), len(bkeys))
            self.assertEqual(y.tolist(), [as_dict[k] for k in bkeys])
            self.assertEqual(bytes(data[0].numpy()),
                             FILES[bkeys[0]])
        # keys=None: the dataset's listing under prefix.
        ds = dt.CacheDataset(dataset="ds", prefix="shards",
                             socket=SERVER.socket, lister=lister())
        self.assertEqual(ds.keys, ["shards/shard-%06d.tar" % i
                                   for i in range(SHARDS)])

    def test_old_parameter_names_are_refused(self):
        for cls in (dt.CacheDataset, dt.CacheIterableDataset):
            with self.assertRaisesRegex(TypeError, "socket_path=.*socket="):
                cls(["a"], dataset="ds", socket_path=SERVER.socket)
        with self.assertRaisesRegex(TypeError, "socket="):
            dlcache.Client(socket_path=SERVER.socket)
        with dlcache.Client(socket=SERVER.socket) as c:
            self.assertEqual(c.socket, SERVER.socket)
        old = os.environ.get("DLCACHE_SOCKET")
        os.environ["DLCACHE_SOCKET"] = SERVER.socket
        try:
            with dlcache.Client() as c:
                self.assertEqual(c.socket, SERVER.socket)
        finally:
            if old is None:
                del os.environ["DLCACHE_SOCKET"]
            else:
                os.environ["DLCACHE_SOCKET"] = old
        # The older import paths still work.
        from dlcache.torch_data import CacheDataset
        self.assertIs(CacheDataset, dt.CacheDataset)
        self.assertIs(dlcache.CacheDataset, dt.CacheDataset)
        self.assertTrue(os.path.exists(os.path.join(
            os.path.dirname(dlcache.__file__), "py.typed")))


if __name__ == "__main__":
    run_tests(__name__, require=[("torch, numpy and PIL", HAVE_DEPS)])
