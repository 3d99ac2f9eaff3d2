#!/usr/bin/env python3
"""Several trainer ranks on one node fed from one dlcached (issue 19).

One process per rank (torch.multiprocessing, torch.distributed: NCCL when
every rank has its own GPU, gloo when ranks share one), each consuming its
DDP shard of raw 3x224x224 uint8 samples through dlcache.torch_gpu.GpuLoader
straight into its GPU's memory. Measured in the same run:

  * each GPU's pinned host -> device peak, one GPU at a time (the target's
    denominator: the sum of the per-GPU peaks), and all used GPUs copying
    from pinned memory at once (what the host's memory system allows);
  * dlcache with NUMA placement on (dlcached --numa=auto, each rank sends
    its GPU's NUMA node) and off (--numa=off, no node sent);
  * the stock DataLoader per rank over the same files (DistributedSampler,
    pin_memory, workers = cores / ranks - 1), for comparison.

Prints a markdown table per rank count: per-rank and aggregate GB/s into GPU
memory, and the aggregate against the sum of per-GPU pinned peaks.

  python3 bench/multi_rank_feed.py --ranks 1,2,4,8      # an 8-GPU node
  python3 bench/multi_rank_feed.py --ranks 1,2          # one GPU: 2 ranks
                                                        # share it (gloo)
  DLCACHED=... DLCACHE_LIB=... select the binaries (else build*/ is searched)
"""

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import trainer_feed as tf  # noqa: E402  (data, server, measuring helpers)


def log(*a):
    print("[multi_rank_feed %s]" % time.strftime("%H:%M:%S"), *a, flush=True)


def gpu_of(rank, gpus):
    return rank % gpus


def pinned_peak(device, batch, steps, seconds):
    return tf.ceiling(device, batch * tf.RAW_SIZE, steps, seconds)["gbs"]


def rank_main(rank, world, cfg, keys, results):
    """One rank: its GPU, its shard, one case (cfg["case"])."""
    gpus = cfg["gpus"]
    gpu = gpu_of(rank, gpus)
    torch.cuda.set_device(gpu)
    device = torch.device("cuda", gpu)
    backend = "nccl" if world <= gpus else "gloo"
    dist.init_process_group(backend, init_method=cfg["init"], rank=rank,
                            world_size=world)
    try:
        case = cfg["case"]
        B = cfg["batch"]
        if case == "pinned":
            batches = None
            dist.barrier()
            r = tf.ceiling(device, B * tf.RAW_SIZE, cfg["steps"] * 4,
                           cfg["seconds"])
        elif case == "dataloader":
            ds = tf.FileDataset(cfg["src"], keys, tf.raw_from_bytes)
            sampler = torch.utils.data.distributed.DistributedSampler(
                ds, num_replicas=world, rank=rank, shuffle=True, seed=0)
            workers = max(1, (os.cpu_count() or 2) // world - 1)
            ld = torch.utils.data.DataLoader(
                ds, batch_size=B, sampler=sampler, drop_last=True,
                num_workers=workers, pin_memory=True, prefetch_factor=4,
                persistent_workers=True)
            batches = tf.forever(ld)
            tf.to_device(next(batches), device)
            dist.barrier()
            r = tf.measure(batches, device, 2, cfg["steps"], cfg["seconds"])
            r["workers"] = workers
        else:
            from dlcache import torch_gpu
            numa_node = None if case == "dlcache_numa" else -1
            ld = torch_gpu.GpuLoader(
                keys, dataset="raw", socket=cfg["socket"], batch_size=B,
                device=device, sample_shape=tf.RAW_SHAPE, shuffle=True,
                seed=0, drop_last=True, prefetch=cfg["prefetch"], rank=rank,
                world_size=world, numa_node=numa_node,
                client_name="rank%d" % rank)
            with ld:
                def epochs():
                    while True:
                        for x in ld:
                            yield x
                batches = epochs()
                tf.to_device(next(batches), device)
                dist.barrier()
                r = tf.measure(batches, device, 2, cfg["steps"],
                               cfg["seconds"])
                r["numa_node"] = ld.numa_node
        r["gpu"] = gpu
        results[rank] = r
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_case(case, world, cfg, keys):
    mgr = mp.Manager()
    results = mgr.dict()
    fd, init = tempfile.mkstemp(prefix="mrf_init_")
    os.close(fd)
    os.unlink(init)  # the file store creates it
    c = dict(cfg, case=case, init="file://" + init)
    try:
        mp.spawn(rank_main, args=(world, c, keys, results), nprocs=world,
                 join=True)
    finally:
        if os.path.exists(init):
            os.unlink(init)
    out = [results[r] for r in range(world)]
    mgr.shutdown()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default=None,
                    help="comma list of rank counts (default 1,2,..,GPUs)")
    ap.add_argument("--samples", type=int, default=16384)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--prefetch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=60,
                    help="batches measured per rank and case (at most)")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--cases", default="pinned,dlcache_numa,dlcache_off,"
                    "dataloader")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=None, help="also write the tables here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("multi_rank_feed needs CUDA GPUs")
    gpus = torch.cuda.device_count()
    ranks = ([int(r) for r in args.ranks.split(",")] if args.ranks else
             [n for n in (1, 2, 4, 8) if n <= gpus] or [1])
    cases = [c for c in args.cases.split(",") if c]
    dlcached = tf.find_binary("DLCACHED", "build*/server/dlcached")
    if not os.environ.get("DLCACHE_LIB"):
        lib = tf.find_binary("DLCACHE_LIB", "build*/client/libdlcache_c.so")
        if lib:
            os.environ["DLCACHE_LIB"] = lib
    if not dlcached:
        sys.exit("dlcached not found: set DLCACHED")
    from dlcache import numa as dnuma
    date = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    nodes = sorted(set(dnuma.cuda_device_numa_node(torch.device("cuda", g))
                       for g in range(gpus)))
    log("%d x %s, GPU NUMA nodes %s, %d cores, torch %s" % (
        gpus, torch.cuda.get_device_name(0), nodes, os.cpu_count(),
        torch.__version__))

    work = tempfile.mkdtemp(prefix="multi_rank_feed_", dir=args.workdir)
    src = os.path.join(work, "src")
    keys = tf.write_raw(src, args.samples)
    data_bytes = args.samples * tf.RAW_SIZE
    arena = (int(data_bytes * 1.25) + (1 << 29)) // (1 << 28) * (1 << 28)
    cfg = dict(gpus=gpus, batch=args.batch, steps=args.steps,
               seconds=args.seconds, prefetch=args.prefetch, src=src)

    # Each GPU alone, pinned host -> device: the target's denominator.
    solo = {}
    for g in range(min(gpus, max(ranks))):
        solo[g] = pinned_peak(torch.device("cuda", g), args.batch,
                              args.steps * 4, args.seconds)
        log("GPU %d pinned peak alone: %.2f GB/s" % (g, solo[g]))

    lines = ["# Multi-rank feed (issue 19), %s" % date, "",
             "%d x %s, GPU NUMA nodes %s, %d cores, torch %s, %s. %d raw "
             "samples of %d B, batch %d." % (
                 gpus, torch.cuda.get_device_name(0), nodes, os.cpu_count(),
                 torch.__version__, platform.node(), args.samples,
                 tf.RAW_SIZE, args.batch), "",
             "Per-GPU pinned peak alone: " + ", ".join(
                 "GPU %d %.2f GB/s" % kv for kv in sorted(solo.items())), ""]
    try:
        for world in ranks:
            used = sorted(set(gpu_of(r, gpus) for r in range(world)))
            peak_sum = sum(solo[g] for g in used)
            lines += ["## %d rank%s on %d GPU%s (%s)" % (
                world, "s" if world > 1 else "", len(used),
                "s" if len(used) > 1 else "",
                "nccl" if world <= gpus else "gloo: ranks share a GPU"), "",
                "| case | per-rank GB/s | aggregate GB/s | of sum of "
                "per-GPU pinned peaks (%.2f GB/s) |" % peak_sum,
                "|---|---|---:|---:|"]
            for case in cases:
                server = None
                if case.startswith("dlcache"):
                    numa_flag = "auto" if case == "dlcache_numa" else "off"
                    server = tf.Dlcached(dlcached, {"raw": src}, arena, work,
                                         extra=["--numa=" + numa_flag])
                    tf.warm(server.socket, "raw", keys)
                    cfg["socket"] = server.socket
                try:
                    rs = run_case(case, world, cfg, keys)
                finally:
                    if server:
                        server.stop()
                agg = sum(r["gbs"] for r in rs)
                label = {"pinned": "pinned host -> GPU, all ranks at once",
                         "dlcache_numa": "dlcache GpuLoader, NUMA placement "
                                         "on",
                         "dlcache_off": "dlcache GpuLoader, NUMA placement "
                                        "off",
                         "dataloader": "stock DataLoader + DistributedSampler"
                                       ", %s workers/rank" % (
                                           rs[0].get("workers", "?"))}[case]
                lines.append("| %s | %s | %.2f | %.2fx |" % (
                    label, " ".join("%.2f" % r["gbs"] for r in rs), agg,
                    agg / peak_sum))
                log(world, case, ["%.2f" % r["gbs"] for r in rs],
                    "aggregate %.2f GB/s = %.2fx" % (agg, agg / peak_sum))
            lines.append("")
    finally:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
