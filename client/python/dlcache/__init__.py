"""Python client of dlcache, the node-local shared cache for training data.

    import dlcache
    with dlcache.Client("/run/dlcache/dlcached.sock") as client:
        batch = client.get_batch("imagenet", ["train/n01/a.jpg"])
        view = batch[0].view()      # read-only memoryview, zero-copy
        t = batch[0].tensor()       # uint8 torch tensor over the same bytes

For a stock PyTorch loop: dlcache.torch_data.CacheIterableDataset.

Uses libdlcache_c.so through ctypes (no compile step); set DLCACHE_LIB to
its path if it is not found (see dlcache._lib).
"""

from ._client import (ABORTED, ALREADY_EXISTS, CANCELLED, DATA_LOSS,
                      DEADLINE_EXCEEDED, FAILED_PRECONDITION, INTERNAL,
                      INVALID_ARGUMENT, NOT_FOUND, OK, OUT_OF_RANGE,
                      PERMISSION_DENIED, RESOURCE_EXHAUSTED, UNAUTHENTICATED,
                      UNAVAILABLE, UNIMPLEMENTED, UNKNOWN, Batch, Client,
                      DlcacheError, Item, Segment, status_name)

__all__ = [
    "Batch", "Client", "DlcacheError", "Item", "Segment", "status_name",
    "CacheIterableDataset",
]

__version__ = "0.1.0"


def __getattr__(name):
    # torch is imported only when the dataset is asked for.
    if name == "CacheIterableDataset":
        from .torch_data import CacheIterableDataset
        return CacheIterableDataset
    raise AttributeError(name)
