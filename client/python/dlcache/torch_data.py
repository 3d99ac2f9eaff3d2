"""A torch.utils.data.IterableDataset that reads samples from dlcache.

    ds = CacheIterableDataset("imagenet", keys, socket_path=SOCK,
                              transform=decode_jpeg)
    loader = torch.utils.data.DataLoader(ds, batch_size=256, num_workers=8,
                                         pin_memory=True)
    for epoch in range(90):
        ds.set_epoch(epoch)
        for images in loader: ...

Each worker process opens its own Client and reads its share of the
epoch's (shuffled) keys in requests of `fetch_size` keys. Samples are
uint8 tensors viewing the cache's shared memory (read-only, zero-copy); the
transform should decode or copy them. With num_workers > 0 DataLoader moves
samples between processes through its own shared memory (one copy).
"""

import random

import torch
import torch.utils.data

from ._client import Client, DlcacheError


class CacheIterableDataset(torch.utils.data.IterableDataset):
    """Yields transform(tensor) (or (key, tensor) with return_keys) for each
    key, in an order reshuffled every epoch (seed + epoch).

    Sharding: keys are split between DataLoader workers and, when
    torch.distributed is initialised (or rank/world_size are given), between
    ranks. Missing or failed files raise DlcacheError unless skip_errors.
    The epoch is set by set_epoch(); without it, each iteration of this
    object advances it (which only works with num_workers=0 or
    persistent_workers).
    """

    def __init__(self, dataset, keys, socket_path=None, shuffle=True, seed=0,
                 fetch_size=64, transform=None, return_keys=False,
                 skip_errors=False, rank=None, world_size=None,
                 client_name="torch"):
        super().__init__()
        if fetch_size < 1:
            raise ValueError("fetch_size must be >= 1")
        self.dataset = dataset
        self.keys = list(keys)
        self.socket_path = socket_path
        self.shuffle = shuffle
        self.seed = seed
        self.fetch_size = fetch_size
        self.transform = transform
        self.return_keys = return_keys
        self.skip_errors = skip_errors
        self.rank = rank
        self.world_size = world_size
        self.client_name = client_name
        self._epoch = None
        self._auto_epoch = 0
        self._client = None
        self._client_pid = None

    def set_epoch(self, epoch):
        self._epoch = int(epoch)

    def __len__(self):
        return len(self._shard(self.keys))

    def _rank(self):
        if self.rank is not None:
            return self.rank, self.world_size or 1
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def _shard(self, keys):
        rank, world = self._rank()
        keys = keys[rank::world]
        info = torch.utils.data.get_worker_info()
        if info is not None:
            keys = keys[info.id::info.num_workers]
        return keys

    def _get_client(self):
        import os
        # A client does not survive fork: each worker opens its own.
        if self._client is None or self._client_pid != os.getpid():
            self._client = Client(self.socket_path,
                                  client_name=self.client_name)
            self._client_pid = os.getpid()
        return self._client

    def __iter__(self):
        if self._epoch is None:
            epoch = self._auto_epoch
            self._auto_epoch += 1
        else:
            epoch = self._epoch
        order = list(self.keys)
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        mine = self._shard(order)
        client = self._get_client()
        for start in range(0, len(mine), self.fetch_size):
            keys = mine[start:start + self.fetch_size]
            batch = client.get_batch(self.dataset, keys)
            for key, item in zip(keys, batch):
                if not item.ok:
                    if self.skip_errors:
                        continue
                    raise DlcacheError(item.code, "%s: %s" % (key, item.error))
                t = item.tensor()
                if self.transform is not None:
                    t = self.transform(t)
                yield (key, t) if self.return_keys else t
            batch.release()

    def __getstate__(self):
        # Clients are per process; workers open their own.
        state = dict(self.__dict__)
        state["_client"] = None
        state["_client_pid"] = None
        return state
