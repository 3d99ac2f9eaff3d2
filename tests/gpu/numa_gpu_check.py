#!/usr/bin/env python3
"""NUMA check on a GPU machine (issue 19; docs/numa.md).

For every CUDA device torch sees: its PCI bus id (dlcache.numa, from torch's
device properties or the NVIDIA driver's /proc entry), the numa_node the
kernel reports for it (read here straight from sysfs, independently of
dlcache), and what dlcache's own code says (dlc_pci_numa_node in
libdlcache_c.so, the C++ topology code). They must agree. Also prints the
host's NUMA nodes and, with nvidia-smi present, its bus ids as a cross-check.

Then, with DLCACHED set (run_on_device.sh sets it), two "ranks" on the same
GPU (two processes, each with a Client that sends the GPU's node at session
open) read the same files through one dlcached started with --numa=auto:
the bytes must match the source and the server must have logged its NUMA
decision. On a one-node machine (the usual single-GPU host) placement is
off and that is what the log says; the session path is exercised anyway.

Exit 0 when everything agrees, 1 otherwise, 77 without a CUDA device.
"""

import glob
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time


def sysfs_numa_node(bus_id):
    """The kernel's answer, read without dlcache: int or None."""
    addr = bus_id.lower()
    dom, rest = addr.split(":", 1)
    addr = "%04x:%s" % (int(dom, 16), rest)
    try:
        with open("/sys/bus/pci/devices/%s/numa_node" % addr) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def host_nodes():
    out = []
    for d in sorted(glob.glob("/sys/devices/system/node/node[0-9]*")):
        try:
            cpus = open(d + "/cpulist").read().strip()
        except OSError:
            cpus = "?"
        out.append("%s cpus %s" % (os.path.basename(d), cpus))
    return out


def rank(args):
    socket, node, keys, src = args
    import dlcache
    with dlcache.Client(socket, client_name="numa-rank-node%d" % node,
                        numa_node=node, connect_timeout=20) as c:
        batch = c.get_batch("default", keys)
        batch.raise_for_status()
        for i, k in enumerate(keys):
            want = open(os.path.join(src, k), "rb").read()
            if bytes(batch[i].view()) != want:
                return "rank node %d: bytes of %s differ" % (node, k)
    return None


def main():
    try:
        import torch
    except ImportError:
        print("SKIP: no torch")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    import dlcache
    from dlcache import numa
    rc = 0
    print("host NUMA nodes:", "; ".join(host_nodes()) or "none in sysfs")
    print("NVIDIA driver GPUs:", " ".join(
        sorted(os.path.basename(p) for p in
               glob.glob("/proc/driver/nvidia/gpus/*"))) or "none listed")
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run([smi, "--query-gpu=index,pci.bus_id",
                            "--format=csv,noheader"], capture_output=True,
                           text=True)
        print("nvidia-smi:", r.stdout.strip().replace("\n", "; "))
    first_node = -1
    for i in range(torch.cuda.device_count()):
        bus = numa.cuda_device_pci_bus_id(i)
        if bus is None:
            print("FAIL cuda:%d: no PCI bus id (torch props lack pci_* and "
                  "uuid, or /proc/driver/nvidia is not visible)" % i)
            rc = 1
            continue
        kernel = sysfs_numa_node(bus)
        ours = numa.cuda_device_numa_node(i)
        want = -1 if kernel is None or kernel < 0 else kernel
        ok = ours == want
        print("%s cuda:%d %s kernel numa_node=%s dlcache=%d" % (
            "ok  " if ok else "FAIL", i, bus, kernel, ours))
        if not ok:
            rc = 1
        if i == 0:
            first_node = ours

    dlcached = os.environ.get("DLCACHED")
    if not dlcached:
        print("DLCACHED not set: skipping the two-rank session check")
        return rc
    work = tempfile.mkdtemp(prefix="dlc_numa_", dir="/dev/shm")
    src = os.path.join(work, "src")
    os.makedirs(src)
    keys = []
    for k in range(16):
        name = "f%02d" % k
        with open(os.path.join(src, name), "wb") as f:
            f.write(os.urandom(300000 + 7 * k))
        keys.append(name)
    sock = os.path.join(work, "d.sock")
    log = open(os.path.join(work, "dlcached.log"), "w+")
    srv = subprocess.Popen(
        [dlcached, "--source=" + src, "--socket=" + sock,
         "--shm_dir=" + os.path.join(work, "arena"), "--arena_bytes=256MiB",
         "--metrics_address=", "--keep_arena=false", "--numa=auto"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        # A client fails at once on a socket file that is not there yet
        # (issue 30): wait for dlcached to create it.
        deadline = time.monotonic() + 60
        while not os.path.exists(sock):
            if srv.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dlcached did not create %s" % sock)
            time.sleep(0.02)
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(2) as pool:
            errors = pool.map(rank, [(sock, first_node, keys, src),
                                     (sock, first_node, keys[::-1], src)])
        for e in errors:
            if e:
                print("FAIL", e)
                rc = 1
        if not any(errors):
            print("ok   two ranks on cuda:0 (numa_node %d) read %d files "
                  "through dlcached" % (first_node, len(keys)))
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        log.seek(0)
        lines = [l.strip() for l in log if "NUMA" in l]
        print("dlcached:", " | ".join(lines) or "no NUMA line logged")
        if not lines:
            rc = 1
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
