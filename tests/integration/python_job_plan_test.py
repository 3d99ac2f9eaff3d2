"""One epoch plan for the ranks of a job (issue 14), with real DDP
processes: N rank processes init torch.distributed (gloo, 127.0.0.1, the
store's port taken from the kernel) and each reads 2 epochs through a
DataLoader (2 workers) over PlannedSampler(job=...) from one real
dlcached. Every rank must get exactly the one epoch order's indices (dlcache._order,
DistributedSampler's padding and sharding)
and the files' bytes, the server must hold ONE plan for the job with the
ranks attached, the look-ahead must fill ahead of the ranks (hits in the
cold first epoch), every read must count as the plan's progress by
position (none misplaced, each rank's frontier where its reads end), and a
rank SIGKILLed mid-epoch must leave the others finishing, and nothing
(plans, leases, sessions) once all have exited.

Run by ctest (python_job_plan_test) with DLCACHED, DLCACHECTL and
DLCACHE_LIB set. Exits 77 (ctest: skipped) without torch, torch.distributed
or gloo, or DLCACHED. The rank processes die with the test (parent death
signal and a pidfd watcher on the test process), their workers with them.
"""

import datetime
import json
import os
import signal
import subprocess
import sys
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

from python_server import (Server, die_with_parent,  # noqa: E402
                           die_with_test_process, private_dir, random_bytes,
                           run_tests, wait_for, watchdog)

try:
    import torch
    import torch.distributed as dist
    import torch.utils.data
    import torch.utils.data.distributed
    HAVE_TORCH = True
    HAVE_GLOO = dist.is_available() and dist.is_gloo_available()
except ImportError:
    HAVE_TORCH = False
    HAVE_GLOO = False

TEST_DEADLINE_S = 300
WAIT_S = 120
SIZE = 64 << 10
N = 96             # a multiple of 2, 3 and 4: no padding, so every hit in
                   # the cold first epoch is the look-ahead's
SEED = 7
EPOCHS = 2
BATCH = 4
KEYS = ["j/%03d.bin" % i for i in range(N)]


def file_bytes(i):
    return random_bytes(SIZE, 500 + i)


def worker_init(worker_id):
    die_with_test_process()


def as_list(batch):
    return batch


# ---- a rank (this file run with --rank) ---------------------------------

def rank_main(args):
    """One DDP rank: 2 epochs through PlannedSampler(job=...); reports
    through the store (the test process holds its server side) and writes
    the keys it read, epoch by epoch, to `out`."""
    die_with_test_process()  # the rank process itself: pidfd + PDEATHSIG
    from dlcache.torch_data import CacheDataset, PlannedSampler

    rank, world = args["rank"], args["world"]
    store = dist.TCPStore("127.0.0.1", args["port"], None, False,
                          timeout=datetime.timedelta(seconds=WAIT_S))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=WAIT_S))
    ds = CacheDataset(KEYS, dataset="ds", socket=args["socket"],
                      output="bytes", return_keys=True, rpc_timeout=60.0)
    sampler = PlannedSampler(ds, shuffle=True, seed=SEED, job=args["job"])
    assert sampler.rank == rank and sampler.world_size == world
    loader = torch.utils.data.DataLoader(
        ds, batch_size=BATCH, sampler=sampler, num_workers=2,
        persistent_workers=True, collate_fn=as_list,
        multiprocessing_context="fork", timeout=WAIT_S,
        worker_init_fn=worker_init)
    dist.barrier()  # every rank set up: the epochs start together
    got = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        keys = []
        for n, batch in enumerate(loader):
            for key, data in batch:
                i = KEYS.index(key)
                if data != file_bytes(i):
                    raise AssertionError("rank %d: wrong bytes for %s" %
                                         (rank, key))
                keys.append(key)
            if n == 2:
                store.add("mid%d/%d" % (epoch, rank), 1)
                if epoch == 0 and args["pause_mid"]:
                    # Held here (a rank the test kills), its plan attached.
                    store.wait(["never"])
            # "Training": the look-ahead gets a little time to run ahead.
            time.sleep(0.02)
        got.append(keys)
        with open(args["out"], "w") as f:
            json.dump(got, f)
        store.add("epoch%d" % epoch, 1)
        if epoch == 0:
            store.wait(["go1"])  # the test reads the first epoch's stats
    store.add("finished", 1)
    store.wait(["exit"])
    del loader
    ds.close()


# ---- the test ------------------------------------------------------------

SERVER = None


def setUpModule():
    global SERVER
    files = {k: file_bytes(i) for i, k in enumerate(KEYS)}
    # The arena holds the dataset (4 MiB) 4 times: the look-ahead's fills
    # are not evicted before they are read.
    SERVER = Server(files, arena="16MiB", chunk="64KiB")


def tearDownModule():
    if SERVER is not None:
        SERVER.stop(cleanup=True)


def expected_keys(world, rank, epoch):
    from dlcache import _order
    return [KEYS[i] for i in _order.rank_order(N, SEED, epoch, rank, world)]


class Ranks:
    """The rank processes of one job and the store they meet at."""

    def __init__(self, world, pause_mid=None):
        self.world = world
        self.dir = private_dir()
        # The store's port comes from the kernel: this process listens on
        # it (port 0), the ranks connect.
        self.store = dist.TCPStore("127.0.0.1", 0, None, True,
                                   timeout=datetime.timedelta(seconds=WAIT_S),
                                   wait_for_workers=False)
        self.job = "test-%s" % uuid.uuid4().hex[:12]
        self.procs = []
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
        for rank in range(world):
            args = {"rank": rank, "world": world, "port": self.store.port,
                    "socket": SERVER.socket, "job": self.job,
                    "pause_mid": rank == pause_mid,
                    "out": os.path.join(self.dir, "rank%d.json" % rank)}
            log = open(os.path.join(self.dir, "rank%d.log" % rank), "wb")
            self.procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--rank",
                 json.dumps(args)],
                stdout=log, stderr=subprocess.STDOUT, env=env,
                preexec_fn=die_with_parent))
            log.close()

    def count(self, key):
        return self.store.add(key, 0)

    def await_count(self, key, n, ranks=None):
        def ready():
            for r, p in enumerate(self.procs):
                if (ranks is None or r in ranks) and p.poll() not in (None,
                                                                      0):
                    raise AssertionError("rank %d exited %s:\n%s" %
                                         (r, p.returncode, self.log(r)))
            return self.count(key) >= n
        wait_for(ready, WAIT_S, "%d ranks at %s" % (n, key), interval=0.05)

    def keys(self, rank):
        with open(os.path.join(self.dir, "rank%d.json" % rank)) as f:
            return json.load(f)

    def log(self, rank):
        try:
            with open(os.path.join(self.dir, "rank%d.log" % rank), "rb") as f:
                return f.read()[-4000:].decode(errors="replace")
        except OSError:
            return ""

    def finish(self, ranks):
        self.store.set("exit", "1")
        for r in ranks:
            try:
                rc = self.procs[r].wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                rc = "still running"
            self.assertions.append((r, rc))

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def job_plans(job):
    st = SERVER.status()["plans"]
    return st, [p for p in st.get("plan_list", [])
                if p["name"].startswith("job/%s/" % job)]


def nothing_left():
    st = SERVER.status()
    plans = st["plans"]
    return (plans.get("plans", 0) == 0 and
            plans.get("planned_positions", 0) == 0 and
            st.get("leases", 0) == 0 and st.get("sessions", 0) == 0)


@unittest.skipUnless(HAVE_TORCH and HAVE_GLOO,
                     "torch.distributed with gloo needed")
class JobPlanTest(unittest.TestCase):

    def setUp(self):
        self.disarm = watchdog(TEST_DEADLINE_S)
        self.ranks = None

    def tearDown(self):
        if self.ranks is not None:
            self.ranks.kill_all()
        self.disarm()

    def check_epoch_keys(self, ranks, world, rank):
        got = ranks.keys(rank)
        self.assertEqual(len(got), EPOCHS)
        for epoch in range(EPOCHS):
            self.assertEqual(got[epoch], expected_keys(world, rank, epoch),
                             "rank %d epoch %d" % (rank, epoch))

    def run_job(self, world):
        before_plans = SERVER.status()["plans"]
        r = self.ranks = Ranks(world)
        r.assertions = []
        before = SERVER.dataset_stats()
        r.await_count("epoch0", world)
        # The first epoch was cold: what was found in memory, the
        # look-ahead put there (no key is read twice in an epoch).
        first = SERVER.dataset_stats()
        st, mine = job_plans(r.job)
        hits = int(first.get("hits", 0)) - int(before.get("hits", 0))
        self.assertGreater(hits, 0, (first, st))
        self.assertGreater(int(st.get("lookahead_issued", 0)), 0, st)
        r.store.set("go1", "1")
        r.await_count("finished", world)
        st, mine = job_plans(r.job)
        # ONE plan for the job, every rank attached (main + 2 workers).
        self.assertEqual(len(mine), 1, st)
        self.assertEqual(int(st["plans"]), 1, st)
        p = mine[0]
        self.assertEqual(int(p["world_size"]), world, p)
        self.assertEqual(sorted(int(x.get("rank", 0)) for x in p["ranks"]),
                         list(range(world)), p)
        self.assertEqual(int(p["sessions"]), 3 * world, p)
        # Every read counted, by position (PlannedSampler yields each
        # index's place in the rank's reads, CacheDataset sends it): none
        # misplaced (a wrong offset is counted in progress_dropped and
        # moves nothing), each rank's frontier one past its last read of
        # epoch 1 (the job's index N - world + rank of that epoch).
        def delta(field):
            return int(st.get(field, 0)) - int(before_plans.get(field, 0))
        self.assertEqual(delta("consumed"), EPOCHS * N, st)
        self.assertEqual(delta("progress_dropped"), 0, st)
        for x in p["ranks"]:
            self.assertEqual(int(x.get("frontier", 0)),
                             EPOCHS * N - world + int(x.get("rank", 0)) + 1, p)
        r.finish(range(world))
        self.assertEqual(r.assertions, [(i, 0) for i in range(world)],
                         [r.log(i) for i in range(world)])
        for rank in range(world):
            self.check_epoch_keys(r, world, rank)
        wait_for(nothing_left, WAIT_S, "no plan, lease or session left")

    def test_two_ranks_share_one_plan(self):
        self.run_job(2)

    def test_four_ranks_share_one_plan(self):
        self.run_job(4)

    def test_a_killed_rank_leaves_the_others_finishing(self):
        world, victim = 3, 1
        r = self.ranks = Ranks(world, pause_mid=victim)
        r.assertions = []
        # The victim has read 3 batches of epoch 0 and holds there.
        r.await_count("mid0/%d" % victim, 1)
        r.procs[victim].send_signal(signal.SIGKILL)
        r.procs[victim].wait(timeout=WAIT_S)
        others = [x for x in range(world) if x != victim]
        r.await_count("epoch0", len(others), ranks=others)
        r.store.set("go1", "1")
        r.await_count("finished", len(others), ranks=others)
        st, mine = job_plans(r.job)
        self.assertEqual(len(mine), 1, st)
        p = mine[0]
        self.assertEqual(sorted(int(x.get("rank", 0)) for x in p["ranks"]),
                         others, p)
        r.finish(others)
        self.assertEqual(r.assertions, [(i, 0) for i in others],
                         [r.log(i) for i in others])
        for rank in others:
            self.check_epoch_keys(r, world, rank)
        wait_for(nothing_left, WAIT_S, "no plan, lease or session left")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rank":
        rank_main(json.loads(sys.argv[2]))
        sys.exit(0)
    run_tests(__name__, require=[
        ("torch is not installed for %s" % sys.executable, HAVE_TORCH),
        ("torch.distributed with gloo is not available", HAVE_GLOO)])
