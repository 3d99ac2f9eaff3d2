#!/usr/bin/env python3
"""A training loop that reads its dataset only through dlcache.

    python3 train.py --data=dlcache://imagenet/train [--epochs=1]

The pod (trainer-pod.yaml) mounts dlcached's socket directory and nothing
of the source: the files are listed through the cache (Client.list) and
read through it (Client.get_batch). The socket comes from DLCACHE_SOCKET
(the pod sets it), else /run/dlcache/dlcached.sock.

--data is dlcache://DATASET[/PREFIX]: DATASET as configured in dlcached
(--dataset=NAME=ROOT), PREFIX a directory inside it ("" = all). Each epoch
shuffles the files (seeded by --seed and the epoch), reads them in batches
of --batch-size and hands each batch to step(); the step here only sums
the bytes (on the GPU when torch sees one), standing in for decoding and a
model. Prints files/s and MB/s per epoch; --verify checks every file's
size against the listing. Needs the dlcache wheel (docs/install.md);
torch is optional.
"""

import argparse
import os
import random
import sys
import time
import urllib.parse

import dlcache


def parse_data_url(url):
    """(dataset, prefix) of dlcache://DATASET[/PREFIX]; ValueError else."""
    u = urllib.parse.urlparse(url)
    if u.scheme != "dlcache" or not u.netloc:
        raise ValueError("--data must be dlcache://DATASET[/PREFIX], got %r"
                         % url)
    if u.query or u.fragment or u.params:
        raise ValueError("--data takes no query or fragment: %r" % url)
    return u.netloc, urllib.parse.unquote(u.path).strip("/")


def make_step():
    """A stand-in for decode + forward + backward: sums the batch's bytes,
    on the GPU when there is one."""
    try:
        import torch
    except ImportError:
        return lambda views: sum(sum(v) for v in views)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def step(views):
        total = torch.zeros((), dtype=torch.int64, device=device)
        for v in views:
            if len(v) == 0:
                continue
            t = torch.frombuffer(v, dtype=torch.uint8)
            total += t.to(device, non_blocking=True).sum()
        return int(total)

    return step


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True,
                    help="dlcache://DATASET[/PREFIX]")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-files", type=int, default=0,
                    help="read only the first N files of each epoch (0 = "
                         "all)")
    ap.add_argument("--verify", action="store_true",
                    help="check each file's size against the listing")
    args = ap.parse_args(argv)
    try:
        dataset, prefix = parse_data_url(args.data)
    except ValueError as e:
        ap.error(str(e))

    socket = os.environ.get("DLCACHE_SOCKET", "/run/dlcache/dlcached.sock")
    with dlcache.Client(client_name="train.py") as client:
        t0 = time.monotonic()
        files = client.list(dataset, prefix)
        print("listed %d files of %s under %r through %s in %.2f s"
              % (len(files), dataset, prefix or "/", socket,
                 time.monotonic() - t0), flush=True)
        if not files:
            print("nothing to train on", file=sys.stderr)
            return 1
        size_of = {f.name: f.size for f in files}
        step = make_step()
        for epoch in range(args.epochs):
            order = [f.name for f in files]
            random.Random(args.seed * 1000003 + epoch).shuffle(order)
            if args.max_files:
                order = order[:args.max_files]
            t0 = time.monotonic()
            nbytes = 0
            checksum = 0
            for i in range(0, len(order), args.batch_size):
                keys = order[i:i + args.batch_size]
                batch = client.get_batch(dataset, keys)
                batch.raise_for_status()
                views = [item.view() for item in batch]
                if args.verify:
                    for key, v in zip(keys, views):
                        if len(v) != size_of[key]:
                            raise SystemExit(
                                "%s: read %d bytes, listed %d"
                                % (key, len(v), size_of[key]))
                nbytes += sum(len(v) for v in views)
                checksum += step(views)
                del views, batch  # the leases go back to dlcached
            dt = max(time.monotonic() - t0, 1e-9)
            print("epoch %d: %d files, %.1f MB in %.2f s: %.0f files/s, "
                  "%.1f MB/s (byte sum %d)"
                  % (epoch, len(order), nbytes / 1e6, dt, len(order) / dt,
                     nbytes / 1e6 / dt, checksum), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
