#!/usr/bin/env python3
"""The stall dlcached exports vs the stall the training loop measures
(issue 34): do they agree within 2 points?

Starts its own dlcached (metrics on 127.0.0.1) over a generated dataset
(`--files` files of `--size` bytes) and runs, for each setting, a training
loop over dlcache.torch.DataLoader (CacheDataset + PlannedSampler, its own
plan per setting, `--workers` workers) whose step is a controllable compute
(`--compute sleep` or `busy`). The loader is starved by cold reads: before
each epoch of a starved setting the dataset is evicted, so every batch
waits for its fills from the source. A calibration pass measures the cold
wait per batch W; a setting aiming at stall s then computes W * (1 - s) / s
per step (the epoch plan's look-ahead overlaps part of the wait, so the
stall reached is lower than aimed at; it is the agreement that counts).
The setting "warm" keeps the dataset cached and computes `--warm-step-ms`.

The loop measures its own stall: time spent in next() over the loop's
wall time (from its first next() to the last StopIteration). dlcached's
is read from /metrics: dlcache_job_wait_seconds_total /
(dlcache_job_wait_seconds_total + dlcache_job_step_seconds_total) for the
setting's plan (and checked equal to `dlcachectl --json status`).
Prints a Markdown table and the largest difference in points; exits 1
past `--max-diff-points` (2).

  DLCACHED=build/server/dlcached DLCACHECTL=build/client/dlcachectl \\
  DLCACHE_LIB=build/client/libdlcache_c.so \\
    /usr/bin/python3 bench/stall_agreement.py [--epochs 3 --out FILE.md]
"""

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))


def die(msg):
    print("stall_agreement: " + msg, file=sys.stderr)
    sys.exit(2)


class Dlcached:
    def __init__(self, binary, ctl, src, tmp, arena):
        self.ctl = ctl
        self.socket = os.path.join(tmp, "d.sock")
        self.shm = tempfile.mkdtemp(prefix="dlc-stall-", dir="/dev/shm")
        self.log_path = os.path.join(tmp, "dlcached.log")
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(
            [binary, "--socket=" + self.socket, "--shm_dir=" + self.shm,
             "--arena_bytes=" + arena, "--segment_bytes=64MiB",
             "--dataset=ds=" + src, "--metrics_address=127.0.0.1:0",
             "--keep_arena=false"],
            stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 30
        self.metrics = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                die("dlcached exited:\n" + self.log.read())
            self.log.seek(0)
            m = re.search(r"metrics: (http://[0-9.]+:[0-9]+/metrics)",
                          self.log.read())
            if m and self.run("status").returncode == 0:
                self.metrics = m.group(1)
                return
            time.sleep(0.05)
        die("dlcached did not start")

    def run(self, *args):
        return subprocess.run([self.ctl, "--socket", self.socket] +
                              list(args), capture_output=True, text=True,
                              timeout=120)

    def evict(self):
        r = self.run("evict", "ds")
        if r.returncode != 0:
            die("evict: " + r.stderr)

    def warm(self):
        r = self.run("warmup", "ds")
        if r.returncode != 0:
            die("warmup: " + r.stderr)

    def scrape(self):
        return urllib.request.urlopen(self.metrics, timeout=10).read().decode()

    def status_job(self, plan):
        st = json.loads(self.run("--json", "status").stdout)
        for j in st.get("stalls", {}).get("jobs", []):
            if j.get("plan") == plan:
                return j
        return None

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.shm, ignore_errors=True)


def metric(text, name, plan):
    want = '%s{dataset="ds",plan="%s",' % (name, plan)
    for line in text.splitlines():
        if line.startswith(want):
            return float(line.rsplit(" ", 1)[1])
    return None


def compute(seconds, how):
    if seconds <= 0:
        return
    if how == "sleep":
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def run_setting(server, keys, name, step_s, epochs, cold, args):
    """One setting: `epochs` passes of the loop. Returns (loop's own wait,
    loop's wall time, batches, the loader's meter)."""
    from dlcache.planned_sampler import PlannedSampler
    from dlcache.torch import DataLoader
    from dlcache.torch_data import CacheDataset
    ds = CacheDataset(keys, dataset="ds", socket=server.socket,
                      output="bytes", client_name="bench-" + name,
                      connect_timeout=30.0)
    sampler = PlannedSampler(ds, seed=7, plan_name="bench/" + name)
    dl = DataLoader(ds, batch_size=args.batch, sampler=sampler,
                    num_workers=args.workers,
                    persistent_workers=args.workers > 0,
                    collate_fn=lambda b: b)
    wait = wall = 0.0
    batches = 0
    meters = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        if cold:
            server.evict()
        it = iter(dl)
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            try:
                next(it)
            except StopIteration:
                t1 = time.perf_counter()
                wait += t1 - t0
                break
            t1 = time.perf_counter()
            wait += t1 - t0
            batches += 1
            compute(step_s, args.compute)
        wall += time.perf_counter() - start
        meters.append(dl.stall)
    ds.close()
    return wait, wall, batches, sampler.plan_name, meters


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dlcached", default=os.environ.get(
        "DLCACHED", os.path.join(ROOT, "build/server/dlcached")))
    ap.add_argument("--dlcachectl", default=os.environ.get(
        "DLCACHECTL", os.path.join(ROOT, "build/client/dlcachectl")))
    ap.add_argument("--files", type=int, default=192)
    ap.add_argument("--size", type=int, default=512 << 10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--compute", choices=("sleep", "busy"), default="sleep")
    ap.add_argument("--warm-step-ms", type=float, default=200.0)
    ap.add_argument("--targets", default="0.3,0.5,0.7,0.9",
                    help="stall fractions the cold settings aim at")
    ap.add_argument("--max-diff-points", type=float, default=2.0)
    ap.add_argument("--out", help="also write the table here (Markdown)")
    args = ap.parse_args()
    os.environ.setdefault("DLCACHE_LIB",
                          os.path.join(ROOT, "build/client/libdlcache_c.so"))
    try:
        import torch  # noqa: F401
    except ImportError:
        die("needs torch (Debian: /usr/bin/python3)")

    tmp = tempfile.mkdtemp(prefix="dlc-stall-bench-")
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    keys = []
    for i in range(args.files):
        k = "s%04d.bin" % i
        with open(os.path.join(src, k), "wb") as f:
            f.write(os.urandom(args.size))
        keys.append(k)
    arena = "%dMiB" % max(64, 2 * args.files * args.size // (1 << 20))
    server = Dlcached(args.dlcached, args.dlcachectl, src, tmp, arena)
    rows = []
    try:
        # Calibration: the cold wait per batch with no compute.
        w, wall, n, _, _ = run_setting(server, keys, "calibrate", 0.0, 1,
                                       True, args)
        per_batch = w / max(n, 1)
        settings = [("warm", args.warm_step_ms / 1000.0, False)]
        for t in args.targets.split(","):
            s = float(t)
            settings.append(("cold-aim%02d" % round(100 * s),
                             per_batch * (1 - s) / s, True))
        for name, step_s, cold in settings:
            if not cold:
                server.warm()
            wait, wall, n, plan, meters = run_setting(
                server, keys, name, step_s, args.epochs, cold, args)
            loop = wait / wall
            # The reports are notifications: wait until the server has
            # every batch.
            deadline = time.monotonic() + 20
            text = server.scrape()
            while (metric(text, "dlcache_job_batches_total", plan) or 0) < n:
                if time.monotonic() > deadline:
                    die("the server has %r of %d batches for %s" % (
                        metric(text, "dlcache_job_batches_total", plan), n,
                        plan))
                time.sleep(0.05)
                text = server.scrape()
            sw = metric(text, "dlcache_job_wait_seconds_total", plan)
            ss = metric(text, "dlcache_job_step_seconds_total", plan)
            exported = sw / (sw + ss)
            j = server.status_job(plan)
            status = j["wait_s"] / (j["wait_s"] + j["step_s"])
            rows.append((name, step_s * 1000, n, loop, exported, status,
                         100 * abs(exported - loop)))
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    machine = "%s, %d cores (%s), Python %s" % (
        platform.node(), os.cpu_count(), _cpu_model(),
        platform.python_version())
    lines = [
        "Machine: " + machine,
        "Date: " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "Dataset: %d files of %d KiB, batch %d, %d workers, %d epochs per "
        "setting, compute=%s; cold settings evict the dataset before each "
        "epoch (cold wait per batch, calibrated: %.1f ms)" % (
            args.files, args.size >> 10, args.batch, args.workers,
            args.epochs, args.compute, per_batch * 1000),
        "",
        "| setting | step (ms) | batches | stall, loop's own | stall, "
        "/metrics | stall, dlcachectl status | difference (points) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, step_ms, n, loop, exported, status, diff in rows:
        lines.append("| %s | %.1f | %d | %.2f%% | %.2f%% | %.2f%% | %.2f |" % (
            name, step_ms, n, 100 * loop, 100 * exported, 100 * status, diff))
    worst = max(r[-1] for r in rows)
    lines += ["", "Largest difference: %.2f points (limit %.1f)." % (
        worst, args.max_diff_points)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    return 0 if worst <= args.max_diff_points else 1


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


if __name__ == "__main__":
    sys.exit(main())
