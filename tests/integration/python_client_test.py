"""The Python client (client/python/dlcache) against a real dlcached process.

Run by ctest (python_client_test) with DLCACHED (the server binary) and
DLCACHE_LIB (libdlcache_c.so) set; or by hand:
  DLCACHED=build/server/dlcached DLCACHE_LIB=build/client/libdlcache_c.so \
  PYTHONPATH=client/python python3 tests/integration/python_client_test.py
The torch tests run where torch is installed and skip elsewhere.
"""

import ctypes
import gc
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import dlcache  # noqa: E402

try:
    import torch  # noqa: F401
    import torch.utils.data
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

CHUNK = 1 << 20


def random_bytes(n, seed):
    return random.Random(seed).randbytes(n)


class Server:
    """dlcached on a temporary socket, arena and source directory."""

    def __init__(self, files):
        binary = os.environ.get("DLCACHED")
        if not binary or not os.access(binary, os.X_OK):
            raise unittest.SkipTest("DLCACHED (the dlcached binary) not set")
        self.root = tempfile.mkdtemp(prefix="dlc_py_")
        self.shm = tempfile.mkdtemp(prefix="dlc_py_", dir="/dev/shm")
        self.src = os.path.join(self.root, "src")
        for path, data in files.items():
            full = os.path.join(self.src, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
        self.socket = os.path.join(self.root, "d.sock")
        self.log = open(os.path.join(self.root, "dlcached.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "--socket=" + self.socket, "--shm_dir=" + self.shm,
             "--arena_bytes=64MiB", "--segment_bytes=16MiB",
             "--chunk_size=1MiB", "--dataset=ds=" + self.src,
             "--metrics_address=", "--keep_arena=false"],
            stdout=self.log, stderr=subprocess.STDOUT)

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


FILES = {}
for i in range(48):
    FILES["train/%02d.jpg" % i] = random_bytes(20000 + 3001 * i, i)
FILES["big/shard.bin"] = random_bytes(2 * CHUNK + 12345, 99)
FILES["empty.txt"] = b""
KEYS = sorted(k for k in FILES if k.startswith("train/"))
# One chunk each, 80 MiB in all: more than the 64 MiB arena.
BIG_SIZE = CHUNK - 4096
BIG = ["many/%02d.bin" % i for i in range(80)]
for i, k in enumerate(BIG):
    FILES[k] = random_bytes(BIG_SIZE, 1000 + i)


def setUpModule():
    global SERVER
    SERVER = Server(FILES)


def tearDownModule():
    SERVER.stop()


def connect(**kw):
    # Connect waits (up to connect_timeout) for a server that is starting.
    return dlcache.Client(SERVER.socket, connect_timeout=20.0, **kw)


def address_of(view):
    return ctypes.addressof(view.obj)


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.client = connect()

    def tearDown(self):
        self.client.close()

    def test_views_are_zero_copy_and_hold_the_bytes(self):
        batch = self.client.get_batch("ds", KEYS)
        self.assertEqual(len(batch), len(KEYS))
        segments = self.client.segments()
        self.assertTrue(segments)
        for key, item in zip(KEYS, batch):
            self.assertTrue(item.ok, item)
            self.assertEqual(item.key, key)
            self.assertEqual(item.size, len(FILES[key]))
            self.assertEqual(item.num_chunks, 1)
            v = item.view()
            self.assertTrue(v.readonly)
            self.assertEqual(bytes(v), FILES[key])
            # The view points into a mapped segment: nothing was copied.
            a = address_of(v)
            self.assertTrue(any(s.address <= a < s.address + s.size
                                for s in segments), hex(a))
        self.assertEqual([bytes(m) for m in batch.memoryviews()],
                         [FILES[k] for k in KEYS])

    def test_views_are_read_only(self):
        v = self.client.get_batch("ds", KEYS[:1])[0].view()
        with self.assertRaises(TypeError):
            v[0] = 1

    def test_missing_file_is_a_per_item_error(self):
        batch = self.client.get_batch("ds", [KEYS[0], "train/none.jpg"])
        self.assertTrue(batch[0].ok)
        self.assertFalse(batch[1].ok)
        self.assertEqual(batch[1].code, dlcache.NOT_FOUND)
        with self.assertRaises(dlcache.DlcacheError) as cm:
            batch[1].view()
        self.assertEqual(cm.exception.code, dlcache.NOT_FOUND)
        self.assertEqual(cm.exception.name, "NOT_FOUND")
        self.assertIsNone(batch.memoryviews()[1])

    def test_bad_key_is_invalid_argument(self):
        batch = self.client.get_batch("ds", ["../etc/passwd"])
        self.assertEqual(batch[0].code, dlcache.INVALID_ARGUMENT)

    def test_multi_chunk_file(self):
        item = self.client.get_batch("ds", ["big/shard.bin"])[0]
        self.assertTrue(item.ok, item)
        self.assertEqual(item.num_chunks, 3)
        chunks = item.chunks()
        self.assertEqual([len(c) for c in chunks], [CHUNK, CHUNK, 12345])
        self.assertEqual(b"".join(bytes(c) for c in chunks),
                         FILES["big/shard.bin"])
        self.assertEqual(bytes(item.view()), FILES["big/shard.bin"])
        self.assertEqual(item.tobytes(), FILES["big/shard.bin"])
        with self.assertRaises(dlcache.DlcacheError) as cm:
            item.view(copy_if_needed=False)
        self.assertEqual(cm.exception.code, dlcache.FAILED_PRECONDITION)

    def test_empty_file(self):
        item = self.client.get_batch("ds", ["empty.txt"])[0]
        self.assertTrue(item.ok, item)
        self.assertEqual(bytes(item.view()), b"")

    def test_views_outlive_batch_and_client(self):
        client = connect()
        batch = client.get_batch("ds", KEYS[:4])
        views = batch.memoryviews()
        batch.release()
        client.close()
        del batch
        gc.collect()
        for k, v in zip(KEYS[:4], views):
            self.assertEqual(bytes(v), FILES[k])

    def test_leases_go_when_the_views_go(self):
        # 80 MiB of files through a 64 MiB arena: only possible if the
        # leases of dropped batches and views are released.
        for _ in range(2):
            for start in range(0, len(BIG), 8):
                keys = BIG[start:start + 8]
                batch = self.client.get_batch("ds", keys)
                views = batch.memoryviews()
                for k, it, v in zip(keys, batch, views):
                    self.assertTrue(it.ok, it)
                    self.assertEqual(bytes(v[:64]), FILES[k][:64])
                del batch, views

    def test_held_views_keep_their_leases(self):
        # The converse: holding every view pins the arena full, and the
        # server reports RESOURCE_EXHAUSTED instead of reusing pinned bytes.
        held, codes = [], []
        for start in range(0, len(BIG), 8):
            batch = self.client.get_batch("ds", BIG[start:start + 8])
            codes += [it.code for it in batch]
            held += [it.view() for it in batch if it.ok]
        self.assertIn(dlcache.RESOURCE_EXHAUSTED, codes)
        for v in held:  # still intact
            self.assertEqual(len(v), BIG_SIZE)
        del held

    def test_threads_share_a_client(self):
        errors = []

        def work(seed):
            rng = random.Random(seed)
            try:
                for _ in range(20):
                    keys = rng.sample(KEYS, 8)
                    batch = self.client.get_batch("ds", keys)
                    for k, it in zip(keys, batch):
                        if bytes(it.view()) != FILES[k]:
                            errors.append(k)
            except Exception as e:  # reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_keys_must_be_a_sequence(self):
        with self.assertRaises(TypeError):
            self.client.get_batch("ds", "train/00.jpg")

    def test_prefetch_takes_no_lease(self):
        self.client.prefetch("ds", KEYS[:4])
        self.assertEqual(bytes(self.client.get_batch("ds", KEYS[:1])[0].view()),
                         FILES[KEYS[0]])

    def test_closed_client(self):
        client = connect()
        client.close()
        with self.assertRaises(dlcache.DlcacheError) as cm:
            client.get_batch("ds", KEYS[:1])
        self.assertEqual(cm.exception.code, dlcache.FAILED_PRECONDITION)


class ConnectTest(unittest.TestCase):
    def test_no_server_is_unavailable(self):
        d = tempfile.mkdtemp()
        try:
            with self.assertRaises(dlcache.DlcacheError) as cm:
                dlcache.Client(os.path.join(d, "none.sock"),
                               connect_timeout=0.5)
            self.assertEqual(cm.exception.code, dlcache.UNAVAILABLE)
        finally:
            shutil.rmtree(d)

    def test_library_path_is_reported(self):
        from dlcache import _lib
        self.assertTrue(os.path.exists(_lib.load()._dlcache_path))


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class TorchTest(unittest.TestCase):
    def test_tensor_views_the_bytes(self):
        with connect() as client:
            item = client.get_batch("ds", KEYS[:1])[0]
            t = item.tensor()
            self.assertEqual(t.dtype, torch.uint8)
            self.assertEqual(bytes(t.numpy().tobytes()), FILES[KEYS[0]])

    def test_iterable_dataset_epochs(self):
        ds = dlcache.CacheIterableDataset("ds", KEYS, socket_path=SERVER.socket,
                                          fetch_size=7, return_keys=True,
                                          seed=5)
        seen = []
        for epoch in range(2):
            ds.set_epoch(epoch)
            order = []
            loader = torch.utils.data.DataLoader(ds, batch_size=None)
            for key, t in loader:
                self.assertEqual(bytes(t.numpy().tobytes()), FILES[key])
                order.append(key)
            self.assertEqual(sorted(order), KEYS)
            seen.append(order)
        self.assertNotEqual(seen[0], seen[1])
        ds.set_epoch(0)
        self.assertEqual([k for k, _ in ds], seen[0])

    def test_workers_split_the_keys(self):
        ds = dlcache.CacheIterableDataset("ds", KEYS, socket_path=SERVER.socket,
                                          return_keys=True,
                                          transform=lambda t: t.clone())
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        keys = [k for k, _ in loader]
        self.assertEqual(sorted(keys), KEYS)

    def test_missing_key_raises_or_is_skipped(self):
        keys = KEYS[:3] + ["train/none.jpg"]
        ds = dlcache.CacheIterableDataset("ds", keys, socket_path=SERVER.socket,
                                          shuffle=False)
        with self.assertRaises(dlcache.DlcacheError):
            list(ds)
        ds.skip_errors = True
        self.assertEqual(len(list(ds)), 3)


if __name__ == "__main__":
    unittest.main(verbosity=2)
