"""The Python client (client/python/dlcache) against a real dlcached process.

Run by ctest (python_client_test) with DLCACHED (the server binary),
DLCACHECTL and DLCACHE_LIB (libdlcache_c.so) set; or by hand:
  DLCACHED=build/server/dlcached DLCACHE_LIB=build/client/libdlcache_c.so \
  python3 tests/integration/python_client_test.py
Exits 77 (ctest: skipped) when DLCACHED is not set. The torch/DataLoader
tests are in python_dataloader_test.py. Every test has a deadline
(TEST_DEADLINE_S): a hang dumps the tracebacks and fails the run.
"""

import ctypes
import gc
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import dlcache  # noqa: E402
from python_server import (Server, private_dir, random_bytes,  # noqa: E402
                           run_tests, wait_for, watchdog)

try:
    import numpy
except ImportError:
    numpy = None

CHUNK = 1 << 20
TEST_DEADLINE_S = 60

FILES = {}
for i in range(48):
    FILES["train/%02d.jpg" % i] = random_bytes(20000 + 3001 * i, i)
FILES["big/shard.bin"] = random_bytes(2 * CHUNK + 12345, 99)
FILES["empty.txt"] = b""
KEYS = sorted(k for k in FILES if k.startswith("train/"))
# Equal-size samples, for [B, size] copies.
FIXED_SIZE = 4096 + 17
FIXED = ["fixed/%02d.bin" % i for i in range(16)]
for i, k in enumerate(FIXED):
    FILES[k] = random_bytes(FIXED_SIZE, 500 + i)
# Read only by test_bytes_keys: a UTF-8 name beyond ASCII, and one whose
# bytes are not UTF-8 (b"caf\xe9.bin", Latin-1; surrogate-escaped in the
# str, os.fsencode gives the bytes back).
BYTES_KEYS = ["bytes/\u00fcn\u00efc\u00f6de.bin",
              os.fsdecode(b"bytes/caf\xe9.bin")]
for i, k in enumerate(BYTES_KEYS):
    FILES[k] = random_bytes(1000 + i, 800 + i)
# Read only by the prefetch test, so that what fills them is its prefetch.
PREFETCHED = ["prefetch/%02d.bin" % i for i in range(4)]
for i, k in enumerate(PREFETCHED):
    FILES[k] = random_bytes(3000 + i, 700 + i)
# One chunk each, 80 MiB in all: more than the 64 MiB arena.
BIG_SIZE = CHUNK - 4096
BIG = ["many/%02d.bin" % i for i in range(80)]
for i, k in enumerate(BIG):
    FILES[k] = random_bytes(BIG_SIZE, 1000 + i)


def setUpModule():
    global SERVER
    SERVER = Server(FILES)


def tearDownModule():
    SERVER.stop(cleanup=True)


class DeadlineTest(unittest.TestCase):
    """A test that fails (tracebacks dumped, process exits) instead of
    hanging past TEST_DEADLINE_S."""

    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))


def connect(**kw):
    # Connect waits (up to connect_timeout) for a server that is starting.
    return dlcache.Client(SERVER.socket, connect_timeout=20.0, **kw)


def address_of(view):
    return ctypes.addressof(view.obj)


class ClientTest(DeadlineTest):
    def setUp(self):
        super().setUp()
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

    def test_read_range_within_and_across_chunks(self):
        data = FILES["big/shard.bin"]
        for offset, length in ((0, 10), (CHUNK - 5, 10), (CHUNK, CHUNK),
                               (2 * CHUNK + 12000, 345), (7, None)):
            want = data[offset:] if length is None else \
                data[offset:offset + length]
            got = self.client.read_range("ds", "big/shard.bin", offset,
                                         length)
            self.assertEqual(got, want, (offset, length))
        self.assertEqual(self.client.read_range("ds", "big/shard.bin",
                                                len(data)), b"")
        with self.assertRaises(dlcache.DlcacheError) as cm:
            self.client.read_range("ds", "big/shard.bin", len(data) + 1, 1)
        self.assertEqual(cm.exception.name, "OUT_OF_RANGE")
        with self.assertRaises(dlcache.DlcacheError) as cm:
            self.client.read_range("ds", "train/none.jpg", 0, 1)
        self.assertEqual(cm.exception.code, dlcache.NOT_FOUND)

    def test_read_range_past_4_gib(self):
        # A sparse file of 4 GiB + 5 MiB + 77 (more than the 64 MiB arena
        # holds: only ranges can be read), data around 4 GiB and at its
        # end; issue 33's >4 GiB check for the Python path.
        size = (1 << 32) + 5 * CHUNK + 77
        windows = {(1 << 32) - 3 * CHUNK: random_bytes(6 * CHUNK, 4242),
                   size - 1000: random_bytes(1000, 4243)}
        path = os.path.join(SERVER.src, "huge", "sparse.bin")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)
            for at, b in windows.items():
                f.seek(at)
                f.write(b)
        self.addCleanup(os.unlink, path)

        def expect(offset, length):
            out = bytearray(length)
            for at, b in windows.items():
                lo, hi = max(at, offset), min(at + len(b), offset + length)
                if lo < hi:
                    out[lo - offset:hi - offset] = b[lo - at:hi - at]
            return bytes(out)

        for offset, length in (((1 << 32) - 100, 200), ((1 << 32), 1),
                               ((1 << 32) - CHUNK - 3, 2 * CHUNK + 6),
                               (size - 1500, 1500)):
            self.assertEqual(
                self.client.read_range("ds", "huge/sparse.bin", offset,
                                       length), expect(offset, length),
                (offset, length))
        self.assertEqual(self.client.read_range("ds", "huge/sparse.bin",
                                                size - 10), expect(size - 10,
                                                                   10))

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

    def test_prefetch_fills_and_takes_no_lease(self):
        before = SERVER.status()

        def landed():
            # Chunks put in the cache so far: a fill that evicts to make
            # room leaves cached_chunks as it was and counts an eviction,
            # so the sum moves only when a fill has landed (after its
            # read, unlike source_reads, which counts at the read's start).
            d = SERVER.dataset_stats()
            return d.get("cached_chunks", 0) + d.get("evictions", 0)

        filled = landed()
        self.client.prefetch("ds", PREFETCHED)
        # The fills run in the background: wait until the 4 chunks are in
        # the cache (nothing else fills now).
        wait_for(lambda: landed() >= filled + len(PREFETCHED),
                 20, "the prefetched chunks to land in the cache")
        # Filled, and not one lease taken for them.
        self.assertEqual(SERVER.status().get("leases", 0),
                         before.get("leases", 0))
        batch = self.client.get_batch("ds", PREFETCHED)
        for i, key in enumerate(PREFETCHED):
            self.assertTrue(batch[i].hit, key)  # filled by the prefetch
            self.assertEqual(bytes(batch[i].view()), FILES[key])
        # The batch, not the prefetch, holds leases now.
        self.assertEqual(SERVER.status().get("leases", 0),
                         before.get("leases", 0) + len(PREFETCHED))
        del batch

    def test_closed_client(self):
        client = connect()
        client.close()
        with self.assertRaises(dlcache.DlcacheError) as cm:
            client.get_batch("ds", KEYS[:1])
        self.assertEqual(cm.exception.code, dlcache.FAILED_PRECONDITION)


class ConnectTest(DeadlineTest):
    def test_no_server_is_unavailable(self):
        d = private_dir()
        try:
            with self.assertRaises(dlcache.DlcacheError) as cm:
                dlcache.Client(os.path.join(d, "none.sock"),
                               connect_timeout=0.5)
            self.assertEqual(cm.exception.code, dlcache.UNAVAILABLE)
        finally:
            shutil.rmtree(d)

    def test_missing_socket_fails_at_once(self):
        # Issue 30: no socket file is no server; the default
        # connect_timeout (10 s) is not waited out, and the message says so.
        d = private_dir()
        try:
            start = time.monotonic()
            with self.assertRaises(dlcache.DlcacheError) as cm:
                dlcache.Client(os.path.join(d, "none.sock"))
            self.assertLess(time.monotonic() - start, 2.0)
            self.assertEqual(cm.exception.code, dlcache.UNAVAILABLE)
            self.assertIn("socket file does not exist", cm.exception.message)
        finally:
            shutil.rmtree(d)

    def test_dlcache_socket_is_the_default(self):
        old = os.environ.get("DLCACHE_SOCKET")
        os.environ["DLCACHE_SOCKET"] = SERVER.socket
        try:
            with dlcache.Client(connect_timeout=20.0) as c:
                self.assertEqual(c.get_batch("ds", KEYS[:1]).codes[0],
                                 dlcache.OK)
        finally:
            if old is None:
                del os.environ["DLCACHE_SOCKET"]
            else:
                os.environ["DLCACHE_SOCKET"] = old

    def test_library_path_is_reported(self):
        from dlcache import _lib
        self.assertTrue(os.path.exists(_lib.load()._dlcache_path))


    def test_missing_library_names_places_and_fixes(self):
        # DLCACHE_LIB pointing nowhere: the message names it and both fixes.
        code = ("import dlcache\n"
                "try:\n"
                "    dlcache.Client('/nonexistent.sock')\n"
                "except OSError as e:\n"
                "    print(e)\n")
        env = dict(os.environ, DLCACHE_LIB="/nonexistent/libdlcache_c.so",
                   PYTHONPATH=PROJECT_DIR)
        r = subprocess.run([sys.executable, "-c", code], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertIn("/nonexistent/libdlcache_c.so", r.stdout)
        self.assertIn("DLCACHE_LIB", r.stdout)
        self.assertIn("inside the package", r.stdout)
        # A copy of the package outside the tree, no DLCACHE_LIB: every
        # place tried is listed.
        d = private_dir()
        try:
            shutil.copytree(PACKAGE_DIR, os.path.join(d, "dlcache"),
                            ignore=shutil.ignore_patterns("*.so*",
                                                          "__pycache__"))
            env = {k: v for k, v in os.environ.items()
                   if k not in ("DLCACHE_LIB", "PYTHONPATH",
                                "LD_LIBRARY_PATH")}
            env["PYTHONPATH"] = d
            r = subprocess.run([sys.executable, "-c", code], env=env,
                               capture_output=True, text=True, timeout=60,
                               cwd=d)
            out = r.stdout
            self.assertIn(os.path.join(d, "dlcache", "libdlcache_c.so"), out)
            self.assertIn("/usr/local/lib/libdlcache_c.so", out)
            self.assertIn("DLCACHE_LIB", out)
            self.assertIn("inside the package", out)
            # The fix named is the wheel, not a copy into the source tree.
            self.assertIn("build_wheel.sh", out)
            self.assertIn("pip install", out)
            self.assertNotIn("python_package_lib", out)
        finally:
            shutil.rmtree(d)


PACKAGE_DIR = os.path.join(HERE, "..", "..", "client", "python", "dlcache")
PROJECT_DIR = os.path.join(HERE, "..", "..", "client", "python")


def lib_path():
    from dlcache import _lib
    return os.path.realpath(_lib.load()._dlcache_path)


class BatchArraysTest(DeadlineTest):
    """get_batch is one C call returning per-item arrays."""

    def setUp(self):
        super().setUp()
        self.client = connect()

    def tearDown(self):
        self.client.close()

    def test_arrays_describe_every_item(self):
        keys = KEYS[:3] + ["big/shard.bin", "train/none.jpg", "empty.txt"]
        b = self.client.get_batch("ds", keys)
        self.assertEqual(len(b), 6)
        self.assertEqual(list(b.codes), [0, 0, 0, 0, dlcache.NOT_FOUND, 0])
        self.assertEqual([int(x) for x in b.sizes],
                         [len(FILES[k]) for k in KEYS[:3]] +
                         [len(FILES["big/shard.bin"]), 0, 0])
        self.assertEqual(int(b.file_sizes[3]), len(FILES["big/shard.bin"]))
        self.assertEqual([int(x) for x in b.num_chunks], [1, 1, 1, 3, 0, 0])
        ptrs = [int(x) for x in b.data_ptrs]
        self.assertTrue(all(ptrs[:3]))
        self.assertEqual(ptrs[3:], [0, 0, 0])  # multi-chunk, failed, empty
        self.assertEqual(len(b.hits), 6)
        self.assertFalse(b.ok)
        self.assertEqual(b.num_failed, 1)
        self.assertTrue(b.has_multi_chunk)
        self.assertIsNone(b.uniform_size)
        self.assertEqual(b.total_size, sum(int(x) for x in b.sizes))
        for i in range(3):
            self.assertEqual(ctypes.string_at(ptrs[i], int(b.sizes[i])),
                             FILES[keys[i]])
        with self.assertRaises(dlcache.DlcacheError) as cm:
            b.raise_for_status()
        self.assertEqual(cm.exception.code, dlcache.NOT_FOUND)
        self.assertIn("train/none.jpg", str(cm.exception))
        if numpy is not None:
            self.assertIsInstance(b.sizes, numpy.ndarray)
            self.assertFalse(b.sizes.flags.writeable)

    def test_items_on_demand(self):
        keys = KEYS[:4] + ["big/shard.bin"]
        b = self.client.get_batch("ds", keys)
        self.assertEqual(b[-1].key, "big/shard.bin")
        self.assertEqual(b[-1].chunk_count, 3)
        self.assertEqual(b[-1].tobytes(), FILES["big/shard.bin"])
        self.assertEqual([it.key for it in b[1:3]], keys[1:3])
        self.assertEqual([bytes(it.view()) for it in b],
                         [FILES[k] for k in keys])
        self.assertEqual(b[0].tobytes(), FILES[keys[0]])
        with self.assertRaises(IndexError):
            b[5]

    def test_uniform_batch_copies_to_rows(self):
        b = self.client.get_batch("ds", FIXED)
        self.assertTrue(b.ok)
        self.assertEqual(b.uniform_size, FIXED_SIZE)
        buf = bytearray(len(FIXED) * FIXED_SIZE)
        offsets = b.copy_into(buf, stride=FIXED_SIZE)
        self.assertEqual([int(o) for o in offsets],
                         [i * FIXED_SIZE for i in range(len(FIXED) + 1)])
        self.assertEqual(bytes(buf), b"".join(FILES[k] for k in FIXED))
        if numpy is not None:
            rows = b.to_numpy()
            self.assertEqual(rows.shape, (len(FIXED), FIXED_SIZE))
            for k, row in zip(FIXED, rows):
                self.assertEqual(row.tobytes(), FILES[k])

    def test_variable_sizes_copy_flat_with_offsets(self):
        keys = ["big/shard.bin"] + KEYS[:5] + ["empty.txt"]
        b = self.client.get_batch("ds", keys)
        buf = bytearray(b.total_size)
        offsets = [int(o) for o in b.copy_into(buf)]
        self.assertEqual(offsets[-1], b.total_size)
        for i, k in enumerate(keys):
            self.assertEqual(bytes(buf[offsets[i]:offsets[i + 1]]), FILES[k])
        # Fixed slots with zero padding.
        stride = len(FILES["big/shard.bin"]) + 5
        slots = bytearray(b"\xff" * (stride * len(keys)))
        b.copy_into(slots, stride=stride)
        for i, k in enumerate(keys):
            slot = bytes(slots[i * stride:(i + 1) * stride])
            self.assertEqual(slot, FILES[k] + bytes(stride - len(FILES[k])))
        if numpy is not None:
            flat, offs = b.to_numpy()
            self.assertEqual(flat.tobytes(), b"".join(FILES[k] for k in keys))
            self.assertEqual(list(offs), offsets)

    def test_copy_errors_are_clear(self):
        b = self.client.get_batch("ds", KEYS[:3])
        with self.assertRaises(dlcache.DlcacheError) as cm:
            b.copy_into(bytearray(b.total_size - 1))
        self.assertEqual(cm.exception.code, dlcache.INVALID_ARGUMENT)
        with self.assertRaises(dlcache.DlcacheError) as cm:
            b.copy_into(bytearray(10 ** 6), stride=100)
        self.assertEqual(cm.exception.code, dlcache.INVALID_ARGUMENT)
        self.assertIn("stride", cm.exception.message)
        with self.assertRaises(TypeError):
            b.copy_into(bytes(b.total_size))  # read-only

    def test_failed_item_fails_to_numpy(self):
        if numpy is None:
            self.skipTest("numpy is not installed")
        b = self.client.get_batch("ds", FIXED[:2] + ["fixed/none.bin"])
        with self.assertRaises(dlcache.DlcacheError) as cm:
            b.to_numpy()
        self.assertEqual(cm.exception.code, dlcache.NOT_FOUND)

    def test_key_with_nul_is_invalid_argument(self):
        with self.assertRaises(dlcache.DlcacheError) as cm:
            self.client.get_batch("ds", ["train/00.jpg", "a\0b"])
        self.assertEqual(cm.exception.code, dlcache.INVALID_ARGUMENT)

    def test_bytes_keys(self):
        # Keys as bytes: ASCII, UTF-8 beyond ASCII, and bytes that are not
        # UTF-8 at all (file names are bytes; the key must reach the file
        # unchanged, not decoded and re-encoded).
        keys = [KEYS[0].encode(), BYTES_KEYS[0].encode(),
                os.fsencode(BYTES_KEYS[1])]
        self.assertRaises(UnicodeDecodeError, keys[2].decode)
        b = self.client.get_batch("ds", keys)
        self.assertTrue(b.ok, b)
        self.assertEqual([bytes(m) for m in b.memoryviews()],
                         [FILES[KEYS[0]], FILES[BYTES_KEYS[0]],
                          FILES[BYTES_KEYS[1]]])
        # One byte off is another file (none here): NOT_FOUND, not a match.
        b = self.client.get_batch("ds", [keys[2][:-5] + b"\xe8.bin"])
        self.assertEqual(int(b.codes[0]), dlcache.NOT_FOUND)

    def test_empty_key_list(self):
        b = self.client.get_batch("ds", [])
        self.assertEqual(len(b), 0)
        self.assertEqual(b.total_size, 0)
        self.assertEqual(len(b.sizes), 0)

    def test_caller_arrays_from_the_c_abi(self):
        from dlcache import _lib
        lib = _lib.load()
        b = self.client.get_batch("ds", KEYS[:4] + ["train/none.jpg"])
        n = len(b)
        code = (ctypes.c_int32 * n)()
        size = (ctypes.c_uint64 * n)()
        data = (ctypes.c_void_p * n)()
        rc = lib.dlc_batch_fill_arrays(b._handle.ptr, 0, n, code, size, data,
                                       None, None, None)
        self.assertEqual(rc, 0)
        self.assertEqual(list(code), [int(x) for x in b.codes])
        self.assertEqual(list(size), [int(x) for x in b.sizes])
        self.assertEqual([d or 0 for d in data], [int(x) for x in b.data_ptrs])
        rc = lib.dlc_batch_fill_arrays(b._handle.ptr, 2, n, code, None, None,
                                       None, None, None)
        self.assertEqual(rc, dlcache.OUT_OF_RANGE)

    def test_leases_go_with_the_batch(self):
        # 80 MiB through a 64 MiB arena with to_numpy/copy_into: only
        # possible when dropped batches release their leases.
        for start in range(0, len(BIG), 8):
            keys = BIG[start:start + 8]
            b = self.client.get_batch("ds", keys)
            self.assertTrue(b.ok, b)
            buf = bytearray(b.total_size)
            offsets = b.copy_into(buf)
            self.assertEqual(bytes(buf[:64]), FILES[keys[0]][:64])
            self.assertEqual(int(offsets[-1]), 8 * BIG_SIZE)
            del b

    def test_without_numpy_arrays_are_ctypes(self):
        code = (
            "import sys, ctypes\n"
            "sys.modules['numpy'] = None\n"
            "import dlcache\n"
            "c = dlcache.Client(%r, connect_timeout=20)\n"
            "b = c.get_batch('ds', %r)\n"
            "assert isinstance(b.sizes, ctypes.Array), type(b.sizes)\n"
            "buf = bytearray(b.total_size)\n"
            "off = b.copy_into(buf)\n"
            "sys.stdout.write(repr((list(b.sizes), list(off))))\n"
            "sys.stdout.flush()\n"
            "open(%r, 'wb').write(bytes(buf))\n")
        d = private_dir()
        try:
            out = os.path.join(d, "out.bin")
            r = subprocess.run(
                [sys.executable, "-c", code % (SERVER.socket, KEYS[:3], out)],
                env=dict(os.environ, PYTHONPATH=PROJECT_DIR),
                capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            sizes, offsets = eval(r.stdout)
            self.assertEqual(sizes, [len(FILES[k]) for k in KEYS[:3]])
            self.assertEqual(offsets[-1], sum(sizes))
            with open(out, "rb") as f:
                self.assertEqual(f.read(), b"".join(FILES[k]
                                                    for k in KEYS[:3]))
        finally:
            shutil.rmtree(d)


def run_in_fork(fn, timeout=30):
    """Runs fn() in a forked child; returns (exit status, what fn returned
    or the exception, as text). Kills the child and fails past `timeout`."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into unittest
        code = 0
        try:
            os.close(r)
            msg = str(fn())
        except BaseException as e:  # reported to the parent
            msg, code = "EXCEPTION %r" % (e,), 1
        try:
            os.write(w, msg.encode()[:60000])
        finally:
            os._exit(code)
    os.close(w)
    try:
        done = wait_for(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid or None,
                        timeout, "the forked child", interval=0.01)
        del done
    except AssertionError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        raise AssertionError("the forked child did not finish in %d s "
                             "(hung in the client?)" % timeout)
    chunks = []
    while True:
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    return b"".join(chunks).decode(errors="replace")


class ForkTest(DeadlineTest):
    """A Client inherited through fork() fails fast; a new one works."""

    def test_inherited_client_raises_failed_precondition(self):
        client = connect()
        batch = client.get_batch("ds", KEYS[:2])
        view = batch[0].view()

        def child():
            out = []
            for call in (lambda: client.get_batch("ds", KEYS[:1]),
                         lambda: client.prefetch("ds", KEYS[:1]),
                         lambda: client.segments()):
                try:
                    call()
                    out.append("no error")
                except dlcache.DlcacheError as e:
                    out.append("%s|%s" % (e.name, e.message))
            assert client.inherited
            # Inherited views stay readable; dropping the inherited Client
            # and Batch must not call into the parent's C++ state.
            assert bytes(view) == FILES[KEYS[0]]
            assert bytes(batch[1].view()) == FILES[KEYS[1]]
            client.close()
            return "\n".join(out)

        try:
            out = run_in_fork(child)
            lines = out.splitlines()
            self.assertEqual(len(lines), 3, out)
            for line in lines:
                self.assertTrue(line.startswith("FAILED_PRECONDITION|"), out)
                self.assertIn("Client per process", line)
                self.assertIn("fork", line)
            # The parent's Client is unaffected.
            self.assertEqual(bytes(client.get_batch("ds", KEYS[2:3])[0].view()),
                             FILES[KEYS[2]])
        finally:
            client.close()

    def test_inherited_client_is_dropped_by_gc_in_the_child(self):
        client = connect()
        holder = {"c": client}

        def child():
            # The last reference goes: __del__ must only forget the handle.
            holder.clear()
            gc.collect()
            return "ok"

        try:
            del client
            self.assertEqual(run_in_fork(child), "ok")
        finally:
            holder.clear()
            gc.collect()

    def test_new_client_in_the_child_works(self):
        client = connect()
        client.get_batch("ds", KEYS[:1])

        def child():
            with dlcache.Client(SERVER.socket, connect_timeout=10,
                                rpc_timeout=10) as c:
                b = c.get_batch("ds", KEYS[:8])
                ok = [bytes(it.view()) == FILES[k]
                      for k, it in zip(KEYS[:8], b)]
                return "ok" if all(ok) else "mismatch %r" % ok

        try:
            self.assertEqual(run_in_fork(child, timeout=30), "ok")
            self.assertEqual(bytes(client.get_batch("ds", KEYS[1:2])[0].view()),
                             FILES[KEYS[1]])
        finally:
            client.close()


class PackagingTest(DeadlineTest):
    def test_pip_install_finds_the_library_next_to_the_package(self):
        try:
            import setuptools  # noqa: F401
            import wheel  # noqa: F401
        except ImportError:
            self.skipTest("setuptools/wheel not installed for %s" %
                          sys.executable)
        d = private_dir()
        try:
            # Build from a copy: pip leaves build/ and *.egg-info behind.
            src = os.path.join(d, "src")
            shutil.copytree(PROJECT_DIR, src, ignore=shutil.ignore_patterns(
                "build", "*.egg-info", "__pycache__", "*.so*"))
            target = os.path.join(d, "site")
            r = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--no-deps",
                 "--no-build-isolation", "--no-index", "--quiet",
                 "--target", target, src],
                capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            shutil.copy(lib_path(), os.path.join(target, "dlcache",
                                                 "libdlcache_c.so"))
            code = ("import dlcache, dlcache._lib as l\n"
                    "c = dlcache.Client(%r, connect_timeout=20)\n"
                    "b = c.get_batch('ds', [%r])\n"
                    "print(l.load()._dlcache_path)\n"
                    "print(int(b.sizes[0]))\n" % (SERVER.socket, KEYS[0]))
            env = {k: v for k, v in os.environ.items()
                   if k not in ("DLCACHE_LIB", "PYTHONPATH")}
            env["PYTHONPATH"] = target
            r = subprocess.run([sys.executable, "-c", code], env=env, cwd=d,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            path, size = r.stdout.split()
            self.assertEqual(path, os.path.join(target, "dlcache",
                                                "libdlcache_c.so"))
            self.assertEqual(int(size), len(FILES[KEYS[0]]))
        finally:
            shutil.rmtree(d)


if __name__ == "__main__":
    run_tests(__name__)
