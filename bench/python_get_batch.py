#!/usr/bin/env python3
"""Warm 256-key get_batch: Python client vs the C++ client, in one run.

Starts its own dlcached on a temporary socket over a generated dataset
(`--files` files of `--size` bytes), warms it, then measures in alternating
rounds on the same keys:

  native  a C timing loop (compiled here with cc when one is installed,
          loaded into this process) around dlc_get_batch + dlc_batch_free:
          the C++ client's time;
  cabi    the same two C calls driven from ctypes with the keys prepared
          once (C++ client + ~2 us of ctypes per call);
  python  dlcache.Client.get_batch(dataset, keys) with a fresh key list,
          reading batch.sizes/codes, then dropping the batch;
in rotating order, and prints per batch the wall time (p50/mean/min) and
the calling thread's CPU time (robust on a loaded machine), and the
ratios python / native (python / cabi when no compiler is found).
Target: <= 1.5.

  DLCACHED=build/server/dlcached DLCACHE_LIB=build/client/libdlcache_c.so \
    python3 bench/python_get_batch.py [--keys 256 --rounds 30 --iters 20]
"""

import argparse
import ctypes
import glob
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import dlcache  # noqa: E402
from dlcache import _lib  # noqa: E402

C_LOOP = r"""
#include <stddef.h>
#include <time.h>
#include "dlcache/dlcache_c.h"
/* Runs `iters` warm get_batch + free calls; returns ns per batch, or a
 * negative status. Called from Python through ctypes, which releases the
 * GIL: the loop itself is pure C over the C++ client. */
double dlcb_loop(dlc_client* c, const char* dataset, const char* const* keys,
                 size_t n, int iters) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < iters; ++i) {
    dlc_batch* b = NULL;
    int rc = dlc_get_batch(c, dataset, keys, n, &b);
    if (rc) return -rc;
    dlc_batch_free(b);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / iters;
}
"""


def find(path_env, pattern):
    p = os.environ.get(path_env)
    if p:
        return p
    hits = sorted(glob.glob(os.path.join(ROOT, pattern)),
                  key=os.path.getmtime, reverse=True)
    return hits[0] if hits else None


def build_native(tmp, lib_path):
    """The C timing loop as a shared library (same process, same kind of
    client as the Python side), or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        print("(no C compiler: comparing with the ctypes-driven C calls)")
        return None
    src = os.path.join(tmp, "loop.c")
    so = os.path.join(tmp, "libloop.so")
    with open(src, "w") as f:
        f.write(C_LOOP)
    real = os.path.realpath(lib_path)
    r = subprocess.run(
        [cc, "-O2", "-shared", "-fPIC", "-o", so, src,
         "-I", os.path.join(ROOT, "client", "include"), real,
         "-Wl,-rpath," + os.path.dirname(real)],
        capture_output=True, text=True)
    if r.returncode != 0:
        print("(no native loop: cc failed: %s)" % r.stderr.strip()[:300])
        return None
    loop = ctypes.CDLL(so).dlcb_loop
    loop.restype = ctypes.c_double
    loop.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                     ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                     ctypes.c_int]
    return loop


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=256)
    ap.add_argument("--size", type=int, default=110_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()

    dlcached = find("DLCACHED", "build*/server/dlcached")
    if not dlcached:
        sys.exit("set DLCACHED to the dlcached binary")
    lib = _lib.load()
    lib_path = lib._dlcache_path

    tmp = tempfile.mkdtemp(prefix="dlc_pybench_")
    shm = tempfile.mkdtemp(prefix="dlc_pybench_", dir="/dev/shm")
    proc = None
    try:
        src = os.path.join(tmp, "src")
        keys = ["d%02d/f%05d.bin" % (i % 16, i) for i in range(args.keys)]
        for i, k in enumerate(keys):
            os.makedirs(os.path.join(src, os.path.dirname(k)), exist_ok=True)
            with open(os.path.join(src, k), "wb") as f:
                f.write(os.urandom(args.size))
        sock = os.path.join(tmp, "d.sock")
        arena = max(256 << 20, 4 * args.keys * args.size)
        proc = subprocess.Popen(
            [dlcached, "--socket=" + sock, "--shm_dir=" + shm,
             "--arena_bytes=%d" % arena, "--segment_bytes=64MiB",
             "--dataset=ds=" + src, "--metrics_address=",
             "--keep_arena=false"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        # A client fails at once on a socket file that is not there yet
        # (issue 30): wait for dlcached to create it.
        deadline = time.monotonic() + 60
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit("dlcached did not create %s" % sock)
            time.sleep(0.02)
        client = dlcache.Client(sock, connect_timeout=30.0)
        warm = client.get_batch("ds", keys)
        warm.raise_for_status()
        del warm

        # C ABI from ctypes: keys prepared once.
        enc = [k.encode() for k in keys]
        arr = (ctypes.c_char_p * len(enc))(*enc)
        cptr = ctypes.c_void_p()
        if lib.dlc_connect(sock.encode(), b"bench-ctypes", ctypes.byref(cptr)):
            sys.exit(lib.dlc_last_error().decode())

        native = build_native(tmp, lib_path)

        def timed(body):
            """(wall ns, calling thread's CPU ns) per batch."""
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            body()
            return ((time.perf_counter_ns() - t0) / args.iters,
                    (time.thread_time_ns() - c0) / args.iters)

        def cabi_body():
            out = ctypes.c_void_p()
            for _ in range(args.iters):
                rc = lib.dlc_get_batch(cptr, b"ds", arr, len(enc),
                                       ctypes.byref(out))
                if rc:
                    raise RuntimeError(lib.dlc_last_error())
                lib.dlc_batch_free(out)

        def python_body():
            for _ in range(args.iters):
                b = client.get_batch("ds", list(keys))
                if b.num_failed or b.total_size != args.keys * args.size:
                    raise RuntimeError("bad batch %r" % b)
                del b

        def native_body():
            if native(cptr, b"ds", arr, len(enc), args.iters) < 0:
                raise RuntimeError(lib.dlc_last_error())

        bodies = {"python": python_body, "cabi": cabi_body}
        if native:
            bodies["native"] = native_body
        res = {name: [] for name in bodies}
        for _ in range(3):  # warm-up rounds, not counted
            for body in bodies.values():
                body()
        names = list(bodies)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                res[name].append(timed(bodies[name]))

        print("warm get_batch of %d keys x %d bytes, %d rounds x %d calls, "
              "alternating; per batch:" % (args.keys, args.size, args.rounds,
                                           args.iters))
        med = {}
        for name in ("native", "cabi", "python"):
            v = res.get(name)
            if v:
                wall = [x[0] for x in v]
                cpu = [x[1] for x in v]
                med[name] = (statistics.median(wall), statistics.median(cpu))
                print("  %-7s wall p50 %7.1f us  mean %7.1f  min %7.1f | "
                      "caller CPU p50 %6.1f us" % (
                          name, med[name][0] / 1e3,
                          statistics.mean(wall) / 1e3, min(wall) / 1e3,
                          med[name][1] / 1e3))
        base = "native" if "native" in med else "cabi"
        print("ratio python / %s (C++ client), wall p50: %.2fx (target "
              "<= 1.5x); caller CPU p50: %.2fx" % (
                  base, med["python"][0] / med[base][0],
                  med["python"][1] / med[base][1]))
        lib.dlc_close(cptr)
        client.close()
    finally:
        if proc and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main()
