"""The stall each job sees (issue 34): loaders' reports of their training
loop's wait and step, summed by dlcached per dataset, plan and uid, in
/metrics and `dlcachectl status`, against a real dlcached.

Run by ctest (python_stall_test, torch cases as python_stall_torch_test)
with DLCACHED, DLCACHECTL and DLCACHE_LIB set; exits 77 (skipped) without
DLCACHED. What it checks: a report shows up in /metrics and status under
its plan and the caller's uid, summed; bad arguments are refused by the
client; a report for a dataset the caller may not read is dropped, and the
same plan name from another uid is a series of that uid (root only: the
reports run as other uids, else skipped); dlcache.torch.DataLoader and
GpuLoader (on the CPU) report what the loop saw: the server's sums equal
the loader's own totals (torch only, else skipped).
"""

import os
import re
import subprocess
import sys
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import dlcache  # noqa: E402
from python_server import (Server, random_bytes, run_tests,  # noqa: E402
                           wait_for, watchdog)

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

TEST_DEADLINE_S = 90
N = 32
FILES = {"f%03d.bin" % i: random_bytes(3000 + i, i) for i in range(N)}
KEYS = sorted(FILES)
CLIENT_PATH = os.path.join(HERE, "..", "..", "client", "python")


def setUpModule():
    global SERVER
    SERVER = Server(FILES, extra=("--metrics_address=127.0.0.1:0",))


def tearDownModule():
    SERVER.stop(cleanup=True)


def jobs(server=None):
    st = (server or SERVER).status().get("stalls", {})
    return st.get("jobs", [])


def job(plan, owner="uid 0", server=None):
    for j in jobs(server):
        if j.get("plan", "") == plan and j.get("owner") == owner:
            return j
    return None


def batches_of(plan, owner="uid 0", server=None):
    j = job(plan, owner, server)
    return int(j.get("batches", 0)) if j else 0


def scrape(server=None):
    server = server or SERVER
    m = re.search(r"metrics: http://([0-9.]+:[0-9]+)/metrics",
                  server.log_tail(1 << 20))
    assert m, server.log_tail()
    return urllib.request.urlopen("http://%s/metrics" % m.group(1),
                                  timeout=10).read().decode()


def sample(text, name, plan, owner="uid 0"):
    want = '%s{dataset="ds",plan="%s",owner="%s"} ' % (name, plan, owner)
    for line in text.splitlines():
        if line.startswith(want):
            return float(line[len(want):])
    return None


def connect(server=None):
    return dlcache.Client((server or SERVER).socket, connect_timeout=20.0)


class ReportTest(unittest.TestCase):

    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))

    def test_reports_sum_in_metrics_and_status(self):
        with connect() as c:
            self.assertTrue(c.report_stall("ds", "job/sum", 1.5, 3.5, 10))
            self.assertTrue(c.report_stall("ds", "job/sum", 0.5, 0.5, 2))
            self.assertTrue(c.report_stall("ds", "", 0.25, 0.75, 4))
            # No answer comes: the sums show up when the server has them.
            wait_for(lambda: batches_of("job/sum") == 12, 20,
                     "the reports in status")
        j = job("job/sum")
        self.assertAlmostEqual(j["wait_s"], 2.0, places=6)
        self.assertAlmostEqual(j["step_s"], 4.0, places=6)
        self.assertEqual(int(j["reports"]), 2)
        self.assertEqual(j["dataset"], "ds")
        wait_for(lambda: batches_of("") == 4, 20, "the plan-less report")
        text = scrape()
        self.assertEqual(sample(text, "dlcache_job_wait_seconds_total",
                                "job/sum"), 2.0)
        self.assertEqual(sample(text, "dlcache_job_step_seconds_total",
                                "job/sum"), 4.0)
        self.assertEqual(sample(text, "dlcache_job_batches_total",
                                "job/sum"), 12)
        self.assertAlmostEqual(sample(text, "dlcache_job_stall_ratio",
                                      "job/sum"), 1 / 3, places=6)
        self.assertEqual(sample(text, "dlcache_job_stall_ratio", ""), 0.25)
        # The human view: the stall fraction per job.
        r = subprocess.run([SERVER.ctl, "--socket", SERVER.socket, "status"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        row = [l for l in r.stdout.splitlines() if "job/sum" in l]
        self.assertEqual(len(row), 1, r.stdout)
        self.assertIn("33.3%", row[0])

    def test_unknown_dataset_is_dropped_and_bad_arguments_refused(self):
        with connect() as c:
            before = SERVER.status()["stalls"]
            c.report_stall("nosuch", "job/x", 1, 1, 1)
            for bad in ((-1, 1), (1, float("nan")), (1e9, 1)):
                with self.assertRaises(dlcache.DlcacheError) as e:
                    c.report_stall("ds", "job/x", bad[0], bad[1], 1)
                self.assertEqual(e.exception.name, "INVALID_ARGUMENT")
            with self.assertRaises(dlcache.DlcacheError) as e:
                c.report_stall("ds", "p" * 129, 1, 1, 1)
            self.assertEqual(e.exception.name, "INVALID_ARGUMENT")
            # A report after them shows that the dropped one was read.
            c.report_stall("ds", "job/after", 1, 1, 1)
            wait_for(lambda: batches_of("job/after") == 1, 20, "job/after")
        self.assertIsNone(job("job/x"))
        self.assertEqual(int(SERVER.status()["stalls"].get("dropped", 0)),
                         int(before.get("dropped", 0)) + 1)


class OtherUidTest(unittest.TestCase):
    """A client adds only to its own uid's series, and only for a dataset
    it may read."""

    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))

    def report_as(self, uid, server, plan, wait):
        script = (
            "import sys\n"
            "sys.path.insert(0, %r)\n"
            "import dlcache\n"
            "c = dlcache.Client(%r, connect_timeout=20)\n"
            "c.report_stall('ds', %r, %r, 1.0, 1)\n"
            "c.close()\n"
            "print('SENT')\n" % (CLIENT_PATH, server.socket, plan, wait))
        r = subprocess.run([sys.executable, "-c", script], user=uid,
                           group=uid, extra_groups=[], capture_output=True,
                           text=True, timeout=60, cwd="/")
        if "Permission denied" in r.stderr and "libdlcache_c" in r.stderr:
            self.skipTest("uid %d cannot read the build tree: %s"
                          % (uid, r.stderr[-300:]))
        self.assertEqual(r.stdout.strip(), "SENT", r.stdout + r.stderr)

    def test_reports_are_confined_to_the_callers_uid(self):
        if os.getuid() != 0:
            self.skipTest("needs root to report as other uids")
        server = Server(FILES, extra=(
            "--dataset_readers=ds=uid:65534", "--default_readers=none"))
        self.addCleanup(server.stop, cleanup=True)
        os.chmod(server.root, 0o755)
        with connect(server) as c:
            c.report_stall("ds", "job/shared", 2.0, 1.0, 1)
            wait_for(lambda: batches_of("job/shared", server=server) == 1,
                     20, "root's report")
        # The same plan name from uid 65534 (a reader): its own series.
        self.report_as(65534, server, "job/shared", 7.0)
        wait_for(lambda: batches_of("job/shared", "uid 65534", server) == 1,
                 20, "uid 65534's report")
        mine = job("job/shared", server=server)
        self.assertEqual(int(mine["batches"]), 1)
        self.assertAlmostEqual(mine["wait_s"], 2.0, places=6)
        self.assertAlmostEqual(
            job("job/shared", "uid 65534", server)["wait_s"], 7.0, places=6)
        # uid 65533 may not read ds: its report is dropped.
        self.report_as(65533, server, "job/shared", 5.0)
        with connect(server) as c:
            c.report_stall("ds", "job/marker", 1.0, 1.0, 1)
            wait_for(lambda: batches_of("job/marker", server=server) == 1,
                     20, "the marker report")
        owners = sorted(j["owner"] for j in jobs(server)
                        if j.get("plan") == "job/shared")
        self.assertEqual(owners, ["uid 0", "uid 65534"])


@unittest.skipUnless(HAVE_TORCH, "needs torch (use /usr/bin/python3)")
class LoaderTest(unittest.TestCase):
    """The loaders measure the loop and report it: what the server sums
    is what the loader measured, batch for batch."""

    STEP_S = 0.01

    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))

    def check(self, plan, meter, batches):
        self.assertEqual(meter.total_batches, batches)
        self.assertGreaterEqual(meter.total_step,
                                (batches - 1) * self.STEP_S * 0.9)
        wait_for(lambda: batches_of(plan) == batches, 20,
                 "the loader's reports for " + plan)
        j = job(plan)
        self.assertAlmostEqual(j["step_s"], meter.total_step, delta=1e-6)
        self.assertAlmostEqual(j["wait_s"], meter.total_wait, delta=1e-6)

    def test_dataloader_reports_as_the_samplers_plan(self):
        from dlcache.torch import DataLoader
        from dlcache.torch_data import CacheDataset
        from dlcache.planned_sampler import PlannedSampler
        ds = CacheDataset(KEYS, dataset="ds", socket=SERVER.socket,
                          output="bytes", connect_timeout=20.0)
        self.addCleanup(ds.close)
        sampler = PlannedSampler(ds, seed=1)
        dl = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=0,
                        collate_fn=lambda b: b)
        n = 0
        for _ in dl:
            time.sleep(self.STEP_S)
            n += 1
        self.assertEqual(n, N // 8)
        self.check(sampler.plan_name, dl.stall, n)

    def test_gpu_loader_on_the_cpu_reports_as_its_plan(self):
        from dlcache.torch_gpu import GpuLoader
        ld = GpuLoader(KEYS, dataset="ds", socket=SERVER.socket,
                       device="cpu", batch_size=4)
        self.addCleanup(ld.close)
        it = iter(ld)
        n = 0
        for _ in it:
            time.sleep(self.STEP_S)
            n += 1
        self.assertEqual(n, N // 4)
        self.check(ld._plan_name, it.stall, n)


if __name__ == "__main__":
    run_tests(__name__)
