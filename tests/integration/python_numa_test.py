"""NUMA placement from Python (docs/numa.md): dlcache.numa against this
host's sysfs and fake trees, and Client(numa_node=...) against a real
dlcached that reads a fake two-node topology (--numa_sysfs_root).

This host has one NUMA node, so dlcached's mbind to the fake node 1 fails
(EINVAL) and those segments stay unbound: the arena is segments bound to
node 0 (even ids) and unbound ones (odd ids). A client that says node 0
must get its fills in even segments only; one without a node, in both.

Run by ctest (python_numa_test) with DLCACHED and DLCACHE_LIB set; exits
77 (skipped) without DLCACHED.
"""

import ctypes
import glob
import os
import shutil
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import dlcache  # noqa: E402
from dlcache import _lib, numa  # noqa: E402
from python_server import (Server, private_dir, random_bytes,  # noqa: E402
                           run_tests, watchdog)

CHUNK = 1 << 20
FILES = {"f%02d" % i: random_bytes(CHUNK - 4096, i) for i in range(24)}


def fake_two_node_sysfs(root):
    for n in (0, 1):
        d = os.path.join(root, "devices/system/node/node%d" % n)
        os.makedirs(d)
        with open(os.path.join(d, "cpulist"), "w") as f:
            f.write("%d-%d\n" % (4 * n, 4 * n + 3))
        with open(os.path.join(d, "meminfo"), "w") as f:
            f.write("Node %d MemTotal: 16000000 kB\n" % n)


def setUpModule():
    global SERVER, SYSFS
    SYSFS = private_dir()
    fake_two_node_sysfs(SYSFS)
    SERVER = Server(FILES, extra=("--numa=auto",
                                  "--numa_sysfs_root=" + SYSFS))


def tearDownModule():
    SERVER.stop(cleanup=True)
    shutil.rmtree(SYSFS, ignore_errors=True)


def segments_of(batch):
    """Segment id of every chunk of every item (through the C ABI)."""
    out = []
    c = _lib.Chunk()
    for item in batch:
        item.raise_for_status()
        h = item._live()
        for k in range(item.num_chunks):
            rc = h.lib.dlc_batch_chunk(h.ptr, item._index, k, ctypes.byref(c))
            assert rc == 0, rc
            out.append(c.segment)
    return out


class NumaClientTest(unittest.TestCase):
    def setUp(self):
        self.addCleanup(watchdog(60))

    def test_server_decided_on_both_nodes(self):
        log = SERVER.log_tail(20000)
        self.assertIn("NUMA placement on nodes 0,1", log)
        # Node 1 does not exist here: its segments are left unbound.
        self.assertIn("not NUMA-bound", log)

    def test_a_node_0_client_fills_node_0_segments(self):
        with dlcache.Client(SERVER.socket, connect_timeout=20,
                            numa_node=0) as c:
            batch = c.get_batch("ds", ["f%02d" % i for i in range(8)])
            segs = segments_of(batch)
            self.assertEqual(len(segs), 8)
            self.assertTrue(all(s % 2 == 0 for s in segs), segs)
            for i, item in enumerate(batch):
                self.assertEqual(item.tobytes(), FILES["f%02d" % i])

    def test_a_client_without_a_node_fills_both(self):
        with dlcache.Client(SERVER.socket, connect_timeout=20) as c:
            segs = segments_of(c.get_batch(
                "ds", ["f%02d" % i for i in range(8, 24)]))
            self.assertEqual(len(segs), 16)
            self.assertTrue(any(s % 2 == 0 for s in segs), segs)
            self.assertTrue(any(s % 2 == 1 for s in segs), segs)


class NumaLookupTest(unittest.TestCase):
    def test_pci_numa_node_matches_sysfs(self):
        devices = sorted(glob.glob("/sys/bus/pci/devices/*"))
        if not devices:
            self.skipTest("no PCI devices in /sys")
        for d in devices:
            with open(os.path.join(d, "numa_node")) as f:
                want = int(f.read())
            want = -1 if want < 0 else want
            addr = os.path.basename(d)
            self.assertEqual(numa.pci_numa_node(addr), want, addr)
            self.assertEqual(numa.pci_numa_node(addr.upper()), want, addr)

    def test_unknown_and_bad_addresses_are_no_preference(self):
        self.assertEqual(numa.pci_numa_node("ffff:ff:1f.7"), -1)
        self.assertEqual(numa.pci_numa_node("../../etc"), -1)
        self.assertEqual(numa.pci_numa_node(""), -1)
        self.assertEqual(numa.pci_numa_node(None), -1)

    def test_gpu_by_uuid_from_the_driver_listing(self):
        proc = private_dir()
        self.addCleanup(shutil.rmtree, proc, True)
        for addr, uuid in (("0000:18:00.0", "GPU-aaaa-1111"),
                           ("0000:9a:00.0", "GPU-bbbb-2222")):
            d = os.path.join(proc, "driver/nvidia/gpus", addr)
            os.makedirs(d)
            with open(os.path.join(d, "information"), "w") as f:
                f.write("Model: \t\t NVIDIA H200\nIRQ: 0\nGPU UUID: \t %s\n"
                        "Bus Location: \t %s\n" % (uuid, addr))
        self.assertEqual(numa._bus_id_by_uuid("GPU-bbbb-2222", proc),
                         "0000:9a:00.0")
        # torch's uuid has no "GPU-" prefix.
        self.assertEqual(numa._bus_id_by_uuid("aaaa-1111", proc),
                         "0000:18:00.0")
        self.assertIsNone(numa._bus_id_by_uuid("cccc", proc))

    def test_no_cuda_is_no_preference(self):
        try:
            import torch
            if torch.cuda.is_available():
                self.skipTest("a CUDA device is here: tests/gpu covers it")
        except ImportError:
            pass
        self.assertIsNone(numa.cuda_device_pci_bus_id(0))
        self.assertEqual(numa.cuda_device_numa_node(0), -1)


if __name__ == "__main__":
    run_tests(__name__)
