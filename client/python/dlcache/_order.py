"""The one epoch order of dlcache's loaders (no torch needed).

Every loader (CacheDataset with PlannedSampler or EpochSampler,
CacheIterableDataset, GpuLoader, the tar shard reader's shard order) and
the LibTorch CacheDataset (common/epoch_order.h, the same specification)
read an epoch in this order:

    mix64(x)        = SplitMix64's output of state x (all mod 2**64):
                        z = x + 0x9E3779B97F4A7C15
                        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
                        z = (z ^ (z >> 27)) * 0x94D049BB133111EB
                        return z ^ (z >> 31)
    base(seed, e)   = mix64(mix64(seed) ^ e)        (seed, e mod 2**64)
    permutation     = range(n) sorted by mix64(base ^ i), ascending
                      (mix64 is a bijection: keys never tie);
                      range(n) itself when not shuffling
    job order       = the permutation repeated from its start up to
                      ceil(n / W) * W indices, or cut to floor(n / W) * W
                      with drop_last (DistributedSampler's rule); W = 1 is
                      neither padded nor cut
    rank order      = job order[rank::W]

numpy computes it in a few vectorised passes (1.3M indices in ~0.2 s);
without numpy a pure Python version gives the same order, slower.
"""

from typing import List, Optional, Sequence

try:
    import numpy as _np
except ImportError:  # pragma: no cover - numpy comes with torch
    _np = None

__all__ = ["mix64", "epoch_permutation", "job_order", "rank_order",
           "samples_per_rank"]

_M = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB


def mix64(x: int) -> int:
    """SplitMix64's output function of state x (mod 2**64)."""
    z = (x + _GAMMA) & _M
    z = ((z ^ (z >> 30)) * _C1) & _M
    z = ((z ^ (z >> 27)) * _C2) & _M
    return z ^ (z >> 31)


def _base(seed: int, epoch: int) -> int:
    return mix64(mix64(seed & _M) ^ (epoch & _M))


def _keys_numpy(n: int, base: int):
    with _np.errstate(over="ignore"):
        z = _np.arange(n, dtype=_np.uint64) ^ _np.uint64(base)
        z = z + _np.uint64(_GAMMA)
        z = (z ^ (z >> _np.uint64(30))) * _np.uint64(_C1)
        z = (z ^ (z >> _np.uint64(27))) * _np.uint64(_C2)
        return z ^ (z >> _np.uint64(31))


def epoch_permutation(n: int, seed: int = 0, epoch: int = 0,
                      shuffle: bool = True, use_numpy: Optional[bool] = None
                      ) -> List[int]:
    """The epoch's permutation of range(n) (before padding, sharding)."""
    n = int(n)
    if not shuffle or n < 2:
        return list(range(max(n, 0)))
    base = _base(int(seed), int(epoch))
    if use_numpy is None:
        use_numpy = _np is not None
    if use_numpy:
        return _np.argsort(_keys_numpy(n, base), kind="stable").tolist()
    return sorted(range(n), key=lambda i: mix64(base ^ i))


def samples_per_rank(n: int, world_size: int = 1,
                     drop_last: bool = False) -> int:
    """How many indices every rank reads per epoch."""
    if world_size <= 1:
        return n
    return n // world_size if drop_last else -(-n // world_size)


def job_order(n: int, seed: int = 0, epoch: int = 0, world_size: int = 1,
              drop_last: bool = False, shuffle: bool = True) -> List[int]:
    """Every rank's indices of the epoch: the permutation padded (or cut)
    to a multiple of world_size; rank r reads positions r, r + W, ..."""
    order = epoch_permutation(n, seed, epoch, shuffle)
    if world_size <= 1 or not order:
        return order
    total = samples_per_rank(n, world_size, drop_last) * world_size
    if total <= n:
        return order[:total]
    return (order * -(-total // n))[:total]


def rank_order(n: int, seed: int = 0, epoch: int = 0, rank: int = 0,
               world_size: int = 1, drop_last: bool = False,
               shuffle: bool = True) -> List[int]:
    """What `rank` reads in `epoch`, in order: job_order(...)[rank::W]."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError("rank %r not in [0, %r)" % (rank, world_size))
    return job_order(n, seed, epoch, world_size, drop_last,
                     shuffle)[rank::world_size]


def take(keys: Sequence, indices: Sequence[int]) -> list:
    """[keys[i] for i in indices]."""
    return [keys[i] for i in indices]
