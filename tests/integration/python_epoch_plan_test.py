"""Epoch plans (issue 14) from Python against a real dlcached: a
CacheIterableDataset in a DataLoader with two persistent workers registers
its epochs' order (worker 0 registers, worker 1 attaches to the same plan);
the arena holds half the dataset, and the plan keeps source reads near the
optimum. Client.register_plan's errors and limits.

Run by ctest (python_epoch_plan_test) with DLCACHED, DLCACHECTL and
DLCACHE_LIB set. Exits 77 (ctest: skipped) without torch or DLCACHED.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

from python_server import (Server, die_with_test_process, random_bytes,  # noqa
                           run_tests, watchdog)

try:
    import torch
    import torch.utils.data
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

if HAVE_TORCH:
    import dlcache
    from dlcache.torch_data import CacheIterableDataset

TEST_DEADLINE_S = 180
LOADER_TIMEOUT_S = 90
SIZE = 256 << 10  # one chunk each
N = 128           # twice the arena (16 MiB / 256 KiB = 64)
KEYS = ["p/%03d.bin" % i for i in range(N)]
FILES = {k: random_bytes(SIZE, 50 + i) for i, k in enumerate(KEYS)}
MAX_PLAN_KEYS = 1000

SERVER = None


def setUpModule():
    global SERVER
    SERVER = Server(FILES, arena="16MiB", chunk="256KiB",
                    extra=["--max_plan_keys=%d" % MAX_PLAN_KEYS])


def tearDownModule():
    if SERVER is not None:
        SERVER.stop(cleanup=True)


def worker_init(worker_id):
    die_with_test_process()


class EpochPlanTest(unittest.TestCase):

    def setUp(self):
        self.disarm = watchdog(TEST_DEADLINE_S)

    def tearDown(self):
        self.disarm()

    def test_dataloader_workers_share_a_plan(self):
        ds = CacheIterableDataset(KEYS, dataset="ds", socket=SERVER.socket,
                                  batch_size=8, seed=3, output="bytes",
                                  return_keys=True, plan=True,
                                  rpc_timeout=20.0, connect_timeout=20.0)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=None, num_workers=2, persistent_workers=True,
            multiprocessing_context="fork", timeout=LOADER_TIMEOUT_S,
            worker_init_fn=worker_init)
        reads = []
        counted = SERVER.status()["plans"]
        for epoch in range(3):
            ds.set_epoch(epoch)
            before = SERVER.dataset_stats()["source_reads"]
            seen = []
            for keys, samples in loader:
                for k, s in zip(keys, samples):
                    self.assertEqual(bytes(s), FILES[k], k)
                seen.extend(keys)
            self.assertEqual(sorted(seen), sorted(KEYS))
            # The DataLoader delivers what the plan said, in that order.
            self.assertEqual(seen, ds.plan_order(epoch, num_workers=2))
            reads.append(SERVER.dataset_stats()["source_reads"] - before)
        # The workers' batches said where they stand in the plan (a
        # position each, two workers out of order): every read counted
        # (but worker 1's first batches, when they come before worker 0 has
        # registered the epoch: by key it would not count either), none
        # taken for a mismatch.
        plans = SERVER.status()["plans"]
        self.assertGreaterEqual(plans["consumed"] - counted["consumed"],
                                3 * N - 16, plans)
        self.assertEqual(plans["progress_dropped"],
                         counted["progress_dropped"], plans)
        del loader
        # Epochs 2 and 3: the optimum reads N - 64 = 64 per epoch; CLOCK
        # reads about 0.85 N (docs/eviction_benchmark.md); the plan's
        # look-ahead costs a few slots.
        for r in reads[1:]:
            self.assertLessEqual(r, int(0.7 * N), reads)

    def test_restart_mid_epoch_registers_the_plan_again(self):
        # rpc_timeout: a restart on a loaded machine may take over 20 s.
        ds = CacheIterableDataset(KEYS, dataset="ds", socket=SERVER.socket,
                                  batch_size=8, seed=4, output="bytes",
                                  return_keys=True, rpc_timeout=60.0,
                                  connect_timeout=60.0)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=None, num_workers=2, persistent_workers=True,
            multiprocessing_context="fork", timeout=LOADER_TIMEOUT_S,
            worker_init_fn=worker_init)
        ds.set_epoch(0)
        seen = []
        restarted = False
        for keys, samples in loader:
            for k, s in zip(keys, samples):
                self.assertEqual(bytes(s), FILES[k], k)
            seen.extend(keys)
            if not restarted and len(seen) >= N // 4:
                SERVER.restart()
                restarted = True
        self.assertTrue(restarted)
        self.assertEqual(sorted(seen), sorted(KEYS))
        # On the new server: worker 0 registered the rest of the epoch (and
        # the next one), worker 1 attached again; their reads moved it.
        name = ds._plan_owner + "/rank0"
        plans = SERVER.status()["plans"]
        mine = [p for p in plans["plan_list"] if p["name"] == name]
        self.assertEqual(len(mine), 1, plans)
        p = mine[0]
        self.assertEqual(p["sessions"], 2, p)
        self.assertGreater(p["frontier"], 0, p)
        self.assertGreaterEqual(p["end"], N, p)
        self.assertLess(p["end"], 2 * N, p)
        self.assertGreater(plans["consumed"], 0, plans)
        del loader

    def test_register_plan_errors_and_limits(self):
        with dlcache.Client(SERVER.socket) as c:
            c.register_plan("ds", "mine", 0, KEYS)
            c.register_plan("ds", "mine", 0, [])  # attaching again is fine
            with self.assertRaises(dlcache.DlcacheError) as e:
                c.register_plan("ds", "big", 0,
                                ["k%d" % i for i in range(MAX_PLAN_KEYS + 1)])
            self.assertEqual(e.exception.name, "RESOURCE_EXHAUSTED")
            with self.assertRaises(dlcache.DlcacheError) as e:
                c.register_plan("ds", "", 0, KEYS)
            self.assertEqual(e.exception.name, "INVALID_ARGUMENT")
            with self.assertRaises(dlcache.DlcacheError) as e:
                c.register_plan("nope", "x", 0, KEYS)
            self.assertEqual(e.exception.name, "NOT_FOUND")
            # The session still serves.
            b = c.get_batch("ds", KEYS[:2])
            self.assertEqual(b[0].tobytes(), FILES[KEYS[0]])


if __name__ == "__main__":
    run_tests(__name__, require=[("torch is not installed for %s" %
                                  sys.executable, HAVE_TORCH)])
