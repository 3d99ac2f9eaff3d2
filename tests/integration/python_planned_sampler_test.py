"""Epoch plans for map-style datasets (issue 14) against a real dlcached:
dlcache.torch_data.PlannedSampler gives torch's DistributedSampler order
and registers each epoch's shard order from the main process; DataLoader
workers attach to the plan; the plan's stats (dlcachectl status) move; a
dlcached restart mid-epoch gets the plan registered again; a server with
plans off is read without them.

Run by ctest (python_planned_sampler_test) with DLCACHED, DLCACHECTL and
DLCACHE_LIB set. Exits 77 (ctest: skipped) without torch or DLCACHED.
"""

import gc
import os
import subprocess
import sys
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

from python_server import (Server, die_with_test_process, random_bytes,  # noqa
                           run_tests, wait_for, watchdog)

try:
    import torch
    import torch.utils.data
    import torch.utils.data.distributed
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

if HAVE_TORCH:
    import dlcache
    from dlcache.torch_data import CacheDataset, PlannedSampler

TEST_DEADLINE_S = 240
LOADER_TIMEOUT_S = 90
# A restart of dlcached on a loaded machine can take longer than 20 s:
# the Clients wait that long for their reconnect.
RPC_TIMEOUT_S = 60.0
SIZE = 256 << 10  # one chunk each
N = 128           # twice the arena (16 MiB / 256 KiB = 64 slots)
LOOKAHEAD = 16    # a quarter of the arena's slots
KEYS = ["p/%03d.bin" % i for i in range(N)]
FILES = {k: random_bytes(SIZE, 70 + i) for i, k in enumerate(KEYS)}

SERVER = None


def setUpModule():
    global SERVER
    SERVER = Server(FILES, arena="16MiB", chunk="256KiB")


def tearDownModule():
    if SERVER is not None:
        SERVER.stop(cleanup=True)


def worker_init(worker_id):
    die_with_test_process()


def as_list(batch):
    return batch


def dataset(**kw):
    return CacheDataset(KEYS, dataset="ds", socket=SERVER.socket,
                        output="bytes", return_keys=True,
                        rpc_timeout=RPC_TIMEOUT_S,
                        connect_timeout=RPC_TIMEOUT_S, **kw)


def loader(ds, sampler, workers=2):
    return torch.utils.data.DataLoader(
        ds, batch_size=8, sampler=sampler, num_workers=workers,
        persistent_workers=workers > 0, collate_fn=as_list,
        multiprocessing_context="fork" if workers else None,
        timeout=LOADER_TIMEOUT_S if workers else 0,
        worker_init_fn=worker_init if workers else None)


def evict_all():
    r = subprocess.run([SERVER.ctl, "--socket", SERVER.socket, "evict", "ds"],
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r
    assert SERVER.dataset_stats()["cached_chunks"] == 0


def plans(server=None):
    return (server or SERVER).status()["plans"]


def plan(name, server=None):
    for p in plans(server)["plan_list"]:
        if p["name"] == name:
            return p
    return None


class Keys:
    """Stands in for a CacheDataset where no server is needed."""

    def __init__(self, n):
        self.keys = ["k%d" % i for i in range(n)]

    def __len__(self):
        return len(self.keys)


class PlannedSamplerOrderTest(unittest.TestCase):

    def test_order_is_the_one_order_with_distributed_samplers_counts(self):
        from dlcache import _order
        for n in (128, 127, 5):
            for world in (1, 2, 3):
                for drop_last in (False, True):
                    for shuffle in (True, False):
                        for rank in range(world):
                            ref = torch.utils.data.distributed.\
                                DistributedSampler(
                                    Keys(n), num_replicas=world, rank=rank,
                                    shuffle=shuffle, seed=7,
                                    drop_last=drop_last)
                            mine = PlannedSampler(
                                Keys(n), shuffle=shuffle, seed=7, rank=rank,
                                world_size=world, drop_last=drop_last,
                                plan=False)
                            for epoch in (0, 3):
                                ref.set_epoch(epoch)
                                mine.set_epoch(epoch)
                                what = (n, world, drop_last, shuffle, rank,
                                        epoch)
                                self.assertEqual(
                                    list(mine), _order.rank_order(
                                        n, 7, epoch, rank, world, drop_last,
                                        shuffle), what)
                                # DistributedSampler's padding, counts and
                                # (unshuffled) order.
                                self.assertEqual(len(mine), len(ref), what)
                                self.assertEqual(len(list(mine)),
                                                 len(list(ref)), what)
                                if not shuffle:
                                    self.assertEqual(list(mine), list(ref),
                                                     what)

    def test_job_id_names_one_plan_for_the_ranks(self):
        env = os.environ.pop("TORCHELASTIC_RUN_ID", None)
        try:
            # No job id: a plan per rank (today's, distinct names).
            a = PlannedSampler(Keys(N), rank=0, world_size=2)
            b = PlannedSampler(Keys(N), rank=1, world_size=2)
            self.assertIsNone(a.job)
            self.assertNotEqual(a.plan_name, b.plan_name)
            self.assertIsNone(a.dataset._plan_job)
            # torchrun's run id, or job=: one name for every rank.
            os.environ["TORCHELASTIC_RUN_ID"] = "run-42"
            a = PlannedSampler(Keys(N), rank=0, world_size=2, seed=3)
            b = PlannedSampler(Keys(N), rank=1, world_size=2, seed=3)
            self.assertEqual(a.job, "run-42")
            self.assertEqual(a.plan_name, b.plan_name)
            self.assertEqual(b.dataset._plan_job, (2, 1))
            c = PlannedSampler(Keys(N), rank=0, world_size=2, seed=3,
                               job="other")
            self.assertNotEqual(c.plan_name, a.plan_name)
            self.assertIsNone(PlannedSampler(Keys(N), job=False).job)
            os.environ["TORCHELASTIC_RUN_ID"] = "none"  # torchrun's default
            self.assertIsNone(PlannedSampler(Keys(N)).job)
            long = PlannedSampler(Keys(N), job="x" * 200)
            self.assertLessEqual(len(long.plan_name), 128)
            # The job's order: every rank's indices, interleaved.
            whole = a.job_indices(2)
            self.assertEqual(whole[0::2], a.indices(2))
            self.assertEqual(whole[1::2], b.indices(2))
            self.assertEqual(sorted(whole), list(range(N)))
        finally:
            os.environ.pop("TORCHELASTIC_RUN_ID", None)
            if env is not None:
                os.environ["TORCHELASTIC_RUN_ID"] = env

    def test_set_epoch_changes_the_order_deterministically(self):
        a = PlannedSampler(Keys(N), seed=1, plan=False)
        b = PlannedSampler(Keys(N), seed=1, plan=False)
        self.assertEqual(list(a), list(b))
        self.assertEqual(list(a), list(a))  # no set_epoch: the same again
        first = list(a)
        a.set_epoch(1)
        b.set_epoch(1)
        self.assertNotEqual(list(a), first)
        self.assertEqual(list(a), list(b))
        self.assertEqual(sorted(a), list(range(N)))
        a.set_epoch(0)
        self.assertEqual(list(a), first)


class PlannedSamplerServerTest(unittest.TestCase):

    def setUp(self):
        self.disarm = watchdog(TEST_DEADLINE_S)
        self.leases = SERVER.status()["leases"]

    def tearDown(self):
        gc.collect()
        wait_for(lambda: plans()["plans"] == 0, 30, "no plan left")
        wait_for(lambda: SERVER.status()["leases"] <= self.leases, 30,
                 "no lease left")
        self.disarm()

    def test_two_ranks_register_their_shards(self):
        # Two ranks of one job on the node (one process here: each its own
        # dataset, Client and session).
        evict_all()  # what other tests left in the arena
        ranks = [dataset() for _ in range(2)]
        samplers = [PlannedSampler(ds, seed=5, rank=r, world_size=2)
                    for r, ds in enumerate(ranks)]
        before = plans()
        its = []
        for s in samplers:
            s.set_epoch(4)
            it = iter(s)
            next(it)  # the pass starts: registered
            its.append(it)
        for s in samplers:
            p = plan(s.plan_name)
            self.assertIsNotNone(p, plans())
            # This epoch's shard and the next one's.
            self.assertEqual(p["end"], 2 * (N // 2), p)
            self.assertEqual(p["sessions"], 1, p)
            self.assertEqual(p["frontier"], 0, p)
        self.assertEqual(plans()["plans"], before["plans"] + 2)
        # The look-ahead fills the first LOOKAHEAD keys of each shard's
        # order, and nothing else.
        wait_for(lambda: (plans()["lookahead_issued"] >=
                          before["lookahead_issued"] + 2 * LOOKAHEAD and
                          plans()["lookahead_in_flight"] == 0), 30,
                 "the look-ahead of both plans")
        self.assertEqual(plans()["lookahead_issued"],
                         before["lookahead_issued"] + 2 * LOOKAHEAD)
        with dlcache.Client(SERVER.socket) as c:
            for s in samplers:
                order = s.plan_order(4)
                self.assertEqual(order[:1], [KEYS[s.indices(4)[0]]])
                head = c.get_batch("ds", order[:LOOKAHEAD])
                self.assertTrue(all(head[i].hit for i in range(LOOKAHEAD)),
                                [head[i].hit for i in range(LOOKAHEAD)])
                del head
            for s in samplers:
                rest = c.get_batch("ds", s.plan_order(4)[LOOKAHEAD:])
                self.assertFalse(any(rest[i].hit for i in range(len(rest))))
                del rest
        del its
        for ds in ranks:
            ds.close()

    def test_job_plan_indices_say_where_they_stand_in_the_ranks_reads(self):
        # A job plan: each index carries (plan epoch, its place in the
        # rank's reads); dlcached maps read j to the job's index rank + j *
        # world. Rank 1 of 2 reads its first 8 by position (one batch).
        ranks = [dataset() for _ in range(2)]
        samplers = [PlannedSampler(ds, seed=5, rank=r, world_size=2,
                                   job="pos-test")
                    for r, ds in enumerate(ranks)]
        before = plans()
        got = []
        for s in samplers:
            s.set_epoch(2)
            got.append(list(s))
        for s, idx in zip(samplers, got):
            self.assertEqual([int(i) for i in idx], s.indices(2))
            self.assertEqual([i.plan_at for i in idx],
                             [(2, j) for j in range(len(idx))])
        ds = ranks[1]
        first = got[1][:8]
        batch = ds.__getitems__(first)
        self.assertEqual([bytes(d) for _, d in batch],
                         [FILES[KEYS[i]] for i in first])
        # (Attached now: positions go with consecutive reads only.)
        self.assertEqual(ds._plan_position(first), (2, 0))
        self.assertIsNone(ds._plan_position(first[1:] + first[:1]))
        after = plans()
        self.assertEqual(after["consumed"] - before["consumed"], 8, after)
        self.assertEqual(after["progress_dropped"],
                         before["progress_dropped"], after)
        p = plan(samplers[1].plan_name)
        self.assertEqual(p["world_size"], 2, p)
        r1 = [r for r in p["ranks"] if r.get("rank", 0) == 1]
        # One past rank 1's read 7 (the job's index 15 of epoch 2).
        self.assertEqual(r1[0]["frontier"], 16, p)
        del batch
        for d in ranks:
            d.close()

    def test_dataloader_workers_read_every_item_once_per_epoch(self):
        ds = dataset()
        sampler = PlannedSampler(ds, seed=3, rank=0, world_size=1)
        dl = loader(ds, sampler, workers=2)
        before = plans()
        reads = []
        for epoch in range(3):
            sampler.set_epoch(epoch)
            src = SERVER.dataset_stats()["source_reads"]
            seen = []
            for batch in dl:
                for k, data in batch:
                    self.assertEqual(bytes(data), FILES[k], k)
                    seen.append(k)
            # Each item once, in the sampler's (= the plan's) order.
            self.assertEqual(seen, sampler.plan_order(epoch))
            self.assertEqual(sorted(seen), sorted(KEYS))
            reads.append(SERVER.dataset_stats()["source_reads"] - src)
            p = plan(sampler.plan_name)
            # The main process and both (persistent) workers.
            self.assertEqual(p["sessions"], 3, p)
            # The workers' reads moved the plan to the end of the epoch.
            self.assertGreaterEqual(p["frontier"], (epoch + 1) * N - 8, p)
        after = plans()
        self.assertGreaterEqual(after["consumed"] - before["consumed"],
                                3 * N - 24)
        # The indices said where they stand in the plan (PlanIndex): the
        # batches went by position, and none was taken for a mismatch.
        self.assertEqual(after["progress_dropped"], before["progress_dropped"])
        self.assertGreater(after["lookahead_issued"],
                           before["lookahead_issued"] + 2 * LOOKAHEAD)
        # Epochs 2 and 3: the optimum reads N - 64 per epoch, CLOCK about
        # 0.85 N (docs/eviction_benchmark.md).
        for r in reads[1:]:
            self.assertLessEqual(r, int(0.7 * N), reads)
        del dl
        ds.close()

    def test_restarting_an_epoch_starts_the_plan_afresh(self):
        ds = dataset()
        sampler = PlannedSampler(ds, seed=2, rank=0, world_size=1)
        sampler.set_epoch(0)
        self.assertEqual(len(list(loader(ds, sampler, workers=0))), N // 8)
        self.assertEqual(plan(sampler.plan_name)["end"], 2 * N)
        sampler.set_epoch(1)  # planned already: only epoch 2 is added
        it = iter(loader(ds, sampler, workers=0))
        next(it)
        self.assertEqual(plan(sampler.plan_name)["end"], 3 * N)
        del it
        sampler.set_epoch(1)  # the same epoch again: afresh
        it = iter(loader(ds, sampler, workers=0))
        next(it)
        p = plan(sampler.plan_name)
        self.assertEqual((p["end"], p["frontier"]), (2 * N, 8), p)
        del it
        ds.close()

    def test_restart_mid_epoch_registers_the_plan_again(self):
        ds = dataset()
        sampler = PlannedSampler(ds, seed=9, rank=0, world_size=1)
        sampler.set_epoch(0)
        dl = loader(ds, sampler, workers=2)
        seen = []
        restarted = False
        for batch in dl:
            seen.extend(k for k, _ in batch)
            if not restarted and len(seen) >= N // 4:
                SERVER.restart()
                restarted = True
                # The sampler looks for a new session every few indices
                # while it hands them out; a reconnect after its last one
                # is seen at the next pass.
                wait_for(lambda: ds._get_client().sessions_opened >= 2, 30,
                         "the main process's Client to reconnect")
        self.assertTrue(restarted)
        self.assertEqual(seen, sampler.plan_order(0))
        # The new server has the rest of the epoch (and the next) planned,
        # with the main process and both workers attached, and saw reads.
        p = wait_for(lambda: plan(sampler.plan_name), 10, "the plan")
        self.assertEqual(p["sessions"], 3, p)
        self.assertGreater(plans()["consumed"], 0)
        self.assertGreater(p["frontier"], 0, p)
        self.assertLess(p["end"], 2 * N, p)
        self.assertGreaterEqual(p["end"], N, p)
        del dl
        ds.close()


class NoPlansServerTest(unittest.TestCase):

    def test_sampler_works_without_plans(self):
        server = Server(FILES, arena="16MiB", chunk="256KiB",
                        extra=["--epoch_plans=false"])
        disarm = watchdog(TEST_DEADLINE_S)
        try:
            # No plans: the field is absent (null in JSON).
            self.assertFalse((server.status().get("plans") or {})
                             .get("enabled"))
            ds = CacheDataset(KEYS, dataset="ds", socket=server.socket,
                              output="bytes", return_keys=True)
            sampler = PlannedSampler(ds, seed=1, rank=0, world_size=1)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for epoch in range(2):
                    sampler.set_epoch(epoch)
                    seen = [k for b in loader(ds, sampler, workers=2)
                            for k, _ in b]
                    self.assertEqual(seen, sampler.plan_order(epoch))
            self.assertEqual([str(w.message) for w in caught
                              if "dlcache" in str(w.message)], [])
            self.assertFalse(sampler.plan)
            ds.close()
        finally:
            disarm()
            server.stop(cleanup=True)


if __name__ == "__main__":
    run_tests(__name__, require=[("torch is not installed for %s" %
                                  sys.executable, HAVE_TORCH)])
