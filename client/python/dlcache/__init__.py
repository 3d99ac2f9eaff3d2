"""Python client of dlcache, the node-local shared cache for training data.

    import dlcache
    # The socket: the argument, else $DLCACHE_SOCKET, else
    # /run/dlcache/dlcached.sock.
    with dlcache.Client() as client:
        files = client.list("imagenet", "train")  # [FileEntry(name, size,
                                                  #   mtime_ns)], sorted
        batch = client.get_batch("imagenet", [f.name for f in files[:256]])
        batch.sizes, batch.codes    # per-item arrays (numpy if installed)
        view = batch[0].view()      # read-only memoryview, zero-copy
        t = batch[0].tensor()       # uint8 torch tensor over the same bytes
        x = batch.to_tensor()       # [B, size] copy (flat + offsets if ragged)

For PyTorch: dlcache.torch (ImageFolder, CacheDataset,
CacheIterableDataset, TarShardDataset, PlannedSampler, DataLoader,
GpuLoader; docs/python.md). A Client does not cross fork(): make one per
process (the datasets do).

Uses libdlcache_c.so through ctypes (no compile step); set DLCACHE_LIB to
its path if it is not found (see dlcache._lib).
"""

from ._client import (ABORTED, ALREADY_EXISTS, CANCELLED, DATA_LOSS,
                      DEADLINE_EXCEEDED, FAILED_PRECONDITION, INTERNAL,
                      INVALID_ARGUMENT, NOT_FOUND, OK, OUT_OF_RANGE,
                      PERMISSION_DENIED, RESOURCE_EXHAUSTED, UNAUTHENTICATED,
                      UNAVAILABLE, UNIMPLEMENTED, UNKNOWN, Batch, Client,
                      DlcacheError, FileEntry, Item, Segment, list_keys,
                      status_name)

__all__ = [
    "Batch", "Client", "DlcacheError", "FileEntry", "Item", "Segment",
    "list_keys", "status_name",
    "CacheDataset", "CacheIterableDataset", "PlannedSampler", "collate",
]

__version__ = "0.1.0"

# Kept at the top level for older code; dlcache.torch has them all.
_TORCH_NAMES = ("CacheDataset", "CacheIterableDataset", "PlannedSampler",
                "collate", "GpuLoader", "ImageFolder", "TarShardDataset",
                "DataLoader")


def __getattr__(name):
    # torch is imported only when a dataset is asked for.
    if name in _TORCH_NAMES:
        from . import torch as _torch
        return getattr(_torch, name)
    raise AttributeError("module 'dlcache' has no attribute %r" % name)
