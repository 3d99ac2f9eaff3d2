"""dlcache.torch_data datasets in real torch DataLoaders against a real
dlcached process: fork, spawn and forkserver workers, persistent workers, a
parent that used a Client before forking, rank sharding, a worker killed
with SIGKILL (its leases go back), and a server restart mid-epoch.

Run by ctest (python_dataloader_test) with DLCACHED, DLCACHECTL and
DLCACHE_LIB set; or by hand:
  DLCACHED=build/server/dlcached DLCACHECTL=build/client/dlcachectl \\
  DLCACHE_LIB=build/client/libdlcache_c.so \\
  python3 tests/integration/python_dataloader_test.py [-k NAME]
Exits 77 (ctest: skipped) without torch or DLCACHED. Every test has a
deadline (TEST_DEADLINE_S) and every DataLoader a timeout, so a hung
worker fails the test instead of hanging the run.
"""

import gc
import os
import shutil
import signal
import sys
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

from python_server import (Server, die_with_test_process,  # noqa
                           private_dir, random_bytes, run_tests, wait_for,
                           watchdog)

try:
    import torch
    import torch.utils.data
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

if HAVE_TORCH:
    import dlcache
    from dlcache.torch_data import (CacheDataset, CacheIterableDataset,
                                    collate)
else:  # the module must still import (spawned workers import it too)
    CacheIterableDataset = object

TEST_DEADLINE_S = 120
LOADER_TIMEOUT_S = 60
RPC_TIMEOUT_S = 20.0

FIXED_SIZE = 3000
FIXED = ["fixed/%03d.bin" % i for i in range(120)]
VAR = ["var/%03d.bin" % i for i in range(119)] + ["big/multi.bin"]
FILES = {}
for i, k in enumerate(FIXED):
    FILES[k] = random_bytes(FIXED_SIZE, i)
for i, k in enumerate(VAR[:-1]):
    FILES[k] = random_bytes((i * 7919) % 30000 + 1, 1000 + i)
FILES["big/multi.bin"] = random_bytes((5 << 19) + 77, 7)  # 2.5 MiB, 3 chunks
ALL = FIXED + VAR

SERVER = None


def setUpModule():
    global SERVER
    SERVER = Server(FILES)


def tearDownModule():
    if SERVER is not None:
        SERVER.stop(cleanup=True)


def worker_init(worker_id):
    # Workers die with the test process, even one hung in a C call.
    die_with_test_process()


def as_bytes(x):
    if isinstance(x, torch.Tensor):
        return x.numpy().tobytes()
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    return x.tobytes()  # numpy


def loader(ds, method, workers, **kw):
    kw.setdefault("batch_size", None)
    if workers:
        kw.update(num_workers=workers, multiprocessing_context=method,
                  timeout=LOADER_TIMEOUT_S, worker_init_fn=worker_init)
    return torch.utils.data.DataLoader(ds, **kw)


def iterable(keys=ALL, **kw):
    kw.setdefault("rpc_timeout", RPC_TIMEOUT_S)
    kw.setdefault("connect_timeout", RPC_TIMEOUT_S)
    return CacheIterableDataset(keys, dataset="ds", socket=SERVER.socket,
                                **kw)


def interleave(shards):
    """The order an in-order DataLoader delivers per-worker sequences."""
    out, pos = [], [0] * len(shards)
    while any(p < len(s) for p, s in zip(pos, shards)):
        for w, s in enumerate(shards):
            if pos[w] < len(s):
                out.append(s[pos[w]])
                pos[w] += 1
    return out


class VictimDataset(CacheIterableDataset):
    """Worker 1 takes a batch (leases held), reports its pid in `marker`
    and blocks until it is killed; the others copy and go on."""

    def __init__(self, marker, **kw):
        super().__init__(ALL, dataset="ds", socket=SERVER.socket,
                         rpc_timeout=RPC_TIMEOUT_S, **kw)
        self.marker = marker

    def _read(self, keys, skip_errors):
        info = torch.utils.data.get_worker_info()
        if info is not None and info.id == 1:
            held = self._get_client().get_batch(self.dataset, keys)
            tmp = self.marker + ".tmp"
            with open(tmp, "w") as f:
                f.write("%d %d" % (os.getpid(), len(held)))
            os.rename(tmp, self.marker)
            while True:  # holds `held` until SIGKILL
                signal.pause()
        return super()._read(keys, skip_errors)


def read_marker(path):
    try:
        with open(path) as f:
            return f.read().split()
    except FileNotFoundError:
        return None


class LoaderTest(unittest.TestCase):
    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))
        # 2-core CI machines: up to 4 workers on purpose. (Set here: the
        # unittest runner resets the filters before each run.)
        warnings.filterwarnings("ignore", message="This DataLoader will")
        # Python >= 3.12 warns on every fork of a process with threads (the
        # C++ client has some): forking such a process is what is tested.
        warnings.filterwarnings("ignore", category=DeprecationWarning,
                                message="This process .* is multi-threaded")

    def assert_exactly_once(self, pairs, keys):
        got = [k for k, _ in pairs]
        self.assertEqual(len(got), len(set(got)), "a key came twice")
        self.assertEqual(sorted(got), sorted(keys))
        bad = [k for k, v in pairs if as_bytes(v) != FILES[k]]
        self.assertEqual(bad, [], "bytes differ from the source files")

    # -- start methods --------------------------------------------------------

    def test_iterable_dataset_under_each_start_method(self):
        for method, workers in (("fork", 4), ("spawn", 2),
                                ("forkserver", 3)):
            with self.subTest(method=method, workers=workers):
                ds = iterable(fetch_size=16, return_keys=True, seed=3)
                pairs = list(loader(ds, method, workers))
                self.assert_exactly_once(pairs, ALL)

    def test_map_dataset_under_each_start_method(self):
        for method, workers, persistent in (("fork", 3, False),
                                            ("spawn", 2, True),
                                            ("forkserver", 2, False)):
            with self.subTest(method=method, workers=workers):
                ds = CacheDataset(FIXED, dataset="ds", socket=SERVER.socket,
                                  rpc_timeout=RPC_TIMEOUT_S)
                dl = loader(ds, method, workers, batch_size=8,
                            collate_fn=collate, persistent_workers=persistent)
                for _ in range(2 if persistent else 1):
                    rows = torch.cat(list(dl))
                    self.assertEqual(tuple(rows.shape),
                                     (len(FIXED), FIXED_SIZE))
                    self.assertEqual(rows.numpy().tobytes(),
                                     b"".join(FILES[k] for k in FIXED))

    def test_parent_used_a_client_before_the_dataloader(self):
        client = dlcache.Client(SERVER.socket, connect_timeout=20)
        held = client.get_batch("ds", FIXED[:4])  # leases held across fork
        ds = iterable(fetch_size=16, return_keys=True)
        first = next(iter(ds))  # the dataset's own Client, in the parent
        self.assertEqual(as_bytes(first[1]), FILES[first[0]])
        pairs = list(loader(ds, "fork", 2))
        self.assert_exactly_once(pairs, ALL)
        # Parent's Clients still work.
        self.assertEqual(bytes(held[0].view()), FILES[FIXED[0]])
        b = client.get_batch("ds", FIXED[4:6])
        self.assertEqual(bytes(b[1].view()), FILES[FIXED[5]])
        self.assertEqual(len(list(ds)), len(ALL))
        client.close()

    def test_inherited_client_raises_in_a_worker(self):
        # A dataset that (wrongly) shares the parent's Client with forked
        # workers gets FAILED_PRECONDITION at once, not a hang.
        client = dlcache.Client(SERVER.socket, connect_timeout=20)
        ds = SharedClientDataset(client)
        dl = loader(ds, "fork", 2)
        # The DataLoader re-raises the worker's error as a DlcacheError.
        with self.assertRaises(dlcache.DlcacheError) as cm:
            list(dl)
        self.assertEqual(cm.exception.code, dlcache.FAILED_PRECONDITION)
        self.assertIn("Client per process", cm.exception.message)
        client.close()

    # -- batching, outputs ------------------------------------------------

    def test_batched_reads_give_rows_or_lists(self):
        ds = iterable(FIXED, batch_size=10, return_keys=True)
        pairs = []
        for keys, rows in loader(ds, "fork", 2):
            self.assertIsInstance(rows, torch.Tensor)
            self.assertEqual(rows.shape[1], FIXED_SIZE)
            self.assertLessEqual(rows.shape[0], 10)
            pairs += zip(keys, rows)
        self.assert_exactly_once(pairs, FIXED)
        # Variable sizes: a list of tensors per step.
        ds = iterable(VAR, batch_size=8, return_keys=True, shuffle=False)
        pairs = []
        for keys, samples in ds:
            self.assertIsInstance(samples, list)
            pairs += zip(keys, samples)
        self.assert_exactly_once(pairs, VAR)
        # numpy rows, bytes lists, drop_last.
        ds = iterable(FIXED, batch_size=50, output="numpy", drop_last=True)
        shapes = [b.shape for b in ds]
        self.assertEqual(shapes, [(50, FIXED_SIZE)] * 2)
        ds = iterable(VAR[:5], batch_size=5, output="bytes", shuffle=False)
        self.assertEqual(list(ds), [[FILES[k] for k in VAR[:5]]])
        # A transform per sample, then collate.
        ds = iterable(FIXED[:6], batch_size=3, shuffle=False,
                      transform=first_byte)
        self.assertEqual([b.tolist() for b in ds],
                         [[FILES[k][0] for k in FIXED[:3]],
                          [FILES[k][0] for k in FIXED[3:6]]])

    def test_map_dataset_reads_lists_and_outputs(self):
        ds = CacheDataset(VAR, dataset="ds", socket=SERVER.socket,
                          return_keys=True)
        self.assertEqual(len(ds), len(VAR))
        key, t = ds[len(VAR) - 1]
        self.assertEqual(as_bytes(t), FILES[key])
        pairs = ds[list(range(len(VAR)))]
        self.assert_exactly_once(pairs, VAR)
        pairs = ds.__getitems__([3, 1])
        self.assertEqual([k for k, _ in pairs], [VAR[3], VAR[1]])
        for output in ("numpy", "bytes"):
            ds = CacheDataset(VAR[:4], dataset="ds", socket=SERVER.socket,
                              output=output)
            self.assertEqual([as_bytes(x) for x in ds[[0, 1, 2, 3]]],
                             [FILES[k] for k in VAR[:4]])
        # Zero-copy views.
        ds = CacheDataset(VAR[:4], dataset="ds", socket=SERVER.socket,
                          copy=False)
        self.assertEqual(as_bytes(ds[2]), FILES[VAR[2]])
        missing = CacheDataset(["var/none.bin"], dataset="ds",
                               socket=SERVER.socket)
        with self.assertRaises(dlcache.DlcacheError) as cm:
            missing[0]
        self.assertEqual(cm.exception.code, dlcache.NOT_FOUND)

    def test_collate(self):
        a, b = torch.arange(4, dtype=torch.uint8), torch.ones(4,
                                                             dtype=torch.uint8)
        self.assertEqual(collate([a, b]).shape, (2, 4))
        self.assertEqual(collate([b"ab", b"cd"]).tolist(),
                         [[97, 98], [99, 100]])
        keys, rows = collate([("k1", a), ("k2", b)])
        self.assertEqual((keys, rows.shape), (["k1", "k2"], (2, 4)))
        with self.assertRaises(ValueError) as cm:
            collate([a, torch.ones(3, dtype=torch.uint8)])
        self.assertIn("shape", str(cm.exception))

    def test_older_parameter_name_is_refused_with_the_new_one(self):
        # Pre-1.0: one name per parameter; socket_path= says socket=.
        with self.assertRaisesRegex(TypeError, "socket_path= .*socket="):
            CacheIterableDataset(FIXED[:3], "ds", socket_path=SERVER.socket)
        ds = CacheIterableDataset(FIXED[:3], "ds", socket=SERVER.socket,
                                  return_keys=True)
        self.assert_exactly_once(list(ds), FIXED[:3])

    def test_dataset_never_pickles_a_client(self):
        import pickle
        ds = iterable(FIXED[:3])
        next(iter(ds))
        self.assertIsNotNone(ds._client)
        copy = pickle.loads(pickle.dumps(ds))
        self.assertIsNone(copy._client)
        self.assertEqual(len(list(copy)), 3)
        with self.assertRaises(TypeError):
            pickle.dumps(ds._client)

    # -- epochs and shards --------------------------------------------------

    def test_persistent_workers_follow_the_epochs(self):
        ds = iterable(ALL, fetch_size=8, return_keys=True, seed=11)
        dl = loader(ds, "fork", 2, persistent_workers=True)
        orders = []
        for epoch in range(3):
            ds.set_epoch(epoch)
            pairs = list(dl)
            self.assert_exactly_once(pairs, ALL)
            order = [k for k, _ in pairs]
            # Blocks of fetch_size keys of the rank's order go to the
            # workers in turn; batch_size=None interleaves their samples.
            full = ds.epoch_order(epoch)
            blocks = [full[i:i + 8] for i in range(0, len(full), 8)]
            expected = interleave([sum(blocks[w::2], []) for w in range(2)])
            self.assertEqual(order, expected, "epoch %d" % epoch)
            orders.append(order)
        self.assertNotEqual(orders[0], orders[1])
        self.assertNotEqual(orders[1], orders[2])

    def test_spawned_workers_keep_the_parents_rank(self):
        # A spawned worker has no process group: the dataset carries the
        # rank the parent had when it was pickled.
        import pickle
        from unittest import mock
        ds = iterable(ALL, return_keys=True)
        dist = torch.distributed
        with mock.patch.object(dist, "is_available", return_value=True), \
                mock.patch.object(dist, "is_initialized", return_value=True), \
                mock.patch.object(dist, "get_rank", return_value=2), \
                mock.patch.object(dist, "get_world_size", return_value=3):
            blob = pickle.dumps(ds)
        copy = pickle.loads(blob)
        self.assertEqual(copy._rank(), (2, 3))
        self.assertEqual(sorted(k for k, _ in copy),
                         sorted(ds.epoch_order(0)[2::3]))

    def test_rank_sharding_covers_every_key_once(self):
        world = 3
        for epoch in (0, 1):
            seen = []
            for rank in range(world):
                ds = iterable(ALL, rank=rank, world_size=world,
                              return_keys=True, seed=5, fetch_size=32)
                ds.set_epoch(epoch)
                self.assertEqual(len(ds), len(ALL[rank::world]))
                workers = 2 if rank == 0 else 0
                pairs = list(loader(ds, "fork", workers))
                self.assert_exactly_once(
                    pairs, [k for k, _ in pairs])  # bytes
                seen += [k for k, _ in pairs]
            self.assertEqual(len(seen), len(ALL))
            self.assertEqual(sorted(seen), sorted(ALL))

    # -- failures -------------------------------------------------------------

    def test_killed_worker_releases_its_leases(self):
        gc.collect()
        baseline = SERVER.status()["leases"]
        d = private_dir()
        self.addCleanup(shutil.rmtree, d, True)
        marker = os.path.join(d, "victim")
        ds = VictimDataset(marker, fetch_size=16, return_keys=True)
        it = iter(loader(ds, "fork", 3))
        pid, held = map(int, wait_for(
            lambda: read_marker(marker),
            LOADER_TIMEOUT_S, "the victim worker to hold a batch"))
        wait_for(lambda: SERVER.status()["leases"] >= baseline + held, 20,
                 "the victim's leases on the server")
        os.kill(pid, signal.SIGKILL)
        received = []
        with self.assertRaises(RuntimeError) as cm:
            for pair in it:
                received.append(pair)
        self.assertIn(str(pid), str(cm.exception))
        del it
        gc.collect()
        wait_for(lambda: SERVER.status()["leases"] <= baseline, 30,
                 "the killed worker's leases to be released")
        # What the other workers delivered is intact, and a new epoch over
        # the same server reads everything.
        self.assertTrue(all(as_bytes(v) == FILES[k] for k, v in received))
        pairs = list(loader(iterable(ALL, return_keys=True), "fork", 2))
        self.assert_exactly_once(pairs, ALL)

    def test_server_restart_mid_epoch(self):
        ds = iterable(ALL, fetch_size=8, return_keys=True, seed=2)
        pairs = []
        restarted = False
        for pair in loader(ds, "fork", 2):
            pairs.append(pair)
            if not restarted and len(pairs) == len(ALL) // 3:
                SERVER.restart()
                restarted = True
        self.assertTrue(restarted)
        self.assert_exactly_once(pairs, ALL)


def first_byte(t):
    return t[0]


class SharedClientDataset(torch.utils.data.IterableDataset if HAVE_TORCH
                          else object):
    """Wrong on purpose: keeps the parent's Client (works only by fork)."""

    def __init__(self, client):
        self.client = client

    def __iter__(self):
        yield self.client.get_batch("ds", FIXED[:1])[0].tobytes()


if __name__ == "__main__":
    run_tests(__name__, require=[("torch is not installed for %s" %
                                  sys.executable, HAVE_TORCH)])
