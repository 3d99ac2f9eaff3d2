"""DataLoader-ready datasets that read their samples from dlcache (also
importable as dlcache.torch; see docs/python.md).

Map-style (random access; batched reads through __getitems__ on torch >= 2,
or by passing a list of indices, e.g. with a BatchSampler as sampler):

    ds = CacheDataset(keys, dataset="imagenet", socket=SOCK,
                      targets=labels, transform=decode)
    sampler = PlannedSampler(ds, seed=0)  # the one epoch order + a plan
    loader = DataLoader(ds, batch_size=256, sampler=sampler, num_workers=8)
    for epoch in range(90):
        sampler.set_epoch(epoch)
        for x, y in loader: ...

Iterable (sharded by torch.distributed rank, then by DataLoader worker in
whole batches, reshuffled per epoch, one get_batch per step):

    ds = CacheIterableDataset(keys, dataset="imagenet", socket=SOCK,
                              targets=labels, batch_size=256, seed=0)
    loader = DataLoader(ds, batch_size=None, num_workers=8,
                        persistent_workers=True, pin_memory=True)
    for epoch in range(start, 90):
        ds.set_epoch(epoch)
        for x, y in loader: ...   # [256, size] uint8, [256] targets

Epoch order: every loader reads epoch e in dlcache._order's order (seed,
epoch, rank, world size, drop_last), the LibTorch CacheDataset too. The
iterable dataset hands whole batches to the workers in turn (batch b to
worker b % num_workers), so the DataLoader yields the rank's order exactly,
for any num_workers, and len() is exact.

Targets: `targets` is a sequence aligned with the keys, a dict key ->
target or a callable key -> target; samples are then (sample, target)
(target_transform applied to the target). Without targets, samples alone.

Resume: state_dict()/load_state_dict() on the datasets and samplers
(torchdata StatefulDataLoader's convention), and dlcache.torch.DataLoader,
a DataLoader that counts the batches it yielded and restores a pass from
the middle: the rest of the epoch comes out in order.

Processes: a dlcache.Client cannot cross fork(). These datasets therefore
never pickle their Client (__getstate__ drops it) and open one lazily in
each process that reads (per pid), so they work with num_workers=0..N under
the fork, spawn and forkserver start methods, with persistent workers, and
when the main process used a Client of its own before the DataLoader forked.

Samples are uint8 data: output="tensor" (torch.uint8, 1-D), "numpy" (uint8
ndarray) or "bytes". With copy=True (the default) a step's items are copied
in C++ into one fresh buffer that the samples view, and the leases are
released at once; copy=False gives zero-copy read-only views of the cache
(tensor/numpy) that hold their leases while they live: useful with
num_workers=0 and a transform that decodes them (never write to them).
"""

import os
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch
import torch.utils.data

from . import _order
from ._client import OK, UNIMPLEMENTED, Client, DlcacheError
from ._listing import (Lister, Targets, list_dataset, refuse_renamed,
                       target_getter)
from .planned_sampler import PlannedSampler  # noqa: F401 (re-exported)

try:
    import numpy as _np
except ImportError:
    _np = None

_OUTPUTS = ("tensor", "numpy", "bytes")


def _shared_state():
    """[epoch, generation, resume block] in shared memory, or None where
    none can be made."""
    try:
        import multiprocessing
        return multiprocessing.RawArray("q", 3)
    except (ImportError, OSError):
        return None


def collate(samples):
    """Stacks equal-size samples into one batch.

    torch tensors -> torch.stack ([B, ...]); numpy arrays -> numpy.stack;
    bytes-like -> a [B, size] uint8 tensor; (key, sample) pairs -> (list of
    keys, stacked samples); (sample, target) pairs -> (stacked samples,
    targets as a tensor when they are numbers, else a list). Raises
    ValueError naming the sizes when they differ (keep variable-size
    samples as a list, or use Batch.to_tensor(), which gives flat +
    offsets). Usable as a DataLoader collate_fn.
    """
    samples = list(samples)
    if not samples:
        raise ValueError("collate: no samples")
    first = samples[0]
    if isinstance(first, tuple) and len(first) >= 2:
        if isinstance(first[0], (str, bytes)):
            keys = [s[0] for s in samples]
            rest = [s[1] if len(s) == 2 else s[1:] for s in samples]
            return keys, collate(rest)
        if len(first) == 2:
            return (collate([s[0] for s in samples]),
                    _collate_targets([s[1] for s in samples]))
    if isinstance(first, (bytes, bytearray, memoryview)):
        sizes = {len(memoryview(s).cast("B")) for s in samples}
        if len(sizes) != 1:
            raise ValueError("collate: samples differ in size (%s); "
                             "equal sizes are needed to stack" %
                             sorted(sizes)[:8])
        out = torch.empty((len(samples), sizes.pop()), dtype=torch.uint8)
        view = out.numpy() if _np is not None else None
        for i, s in enumerate(samples):
            if view is not None:
                view[i] = _np.frombuffer(s, dtype=_np.uint8)
            else:
                out[i] = torch.tensor(list(bytes(s)), dtype=torch.uint8)
        return out
    shapes = {tuple(s.shape) for s in samples}
    if len(shapes) != 1:
        raise ValueError("collate: samples differ in shape (%s); equal "
                         "shapes are needed to stack" % sorted(shapes)[:8])
    if isinstance(first, torch.Tensor):
        return torch.stack(samples)
    if _np is not None and isinstance(first, _np.ndarray):
        return _np.stack(samples)
    raise TypeError("collate: cannot stack %s" % type(first).__name__)


def _collate_targets(targets):
    """A tensor of number (or tensor) targets, else the list."""
    first = targets[0]
    try:
        if isinstance(first, torch.Tensor):
            return torch.stack(targets)
        if isinstance(first, (bool, int, float)) or (
                _np is not None and isinstance(first, _np.number)):
            return torch.tensor(targets)
    except (TypeError, ValueError, RuntimeError):
        pass
    return targets


def _stack_or_list(samples):
    try:
        return collate(samples)
    except (ValueError, TypeError):
        return samples


class _ClientMixin:
    """A Client per process, opened on first use; never pickled."""

    def _init_client(self, socket, client_name, connect_timeout,
                     rpc_timeout, output, copy):
        if output not in _OUTPUTS:
            raise ValueError("output must be one of %s, not %r" %
                             (", ".join(_OUTPUTS), output))
        if output == "numpy" and _np is None:
            raise ImportError('output="numpy" needs numpy')
        self.socket = socket
        self.client_name = client_name
        self.connect_timeout = connect_timeout
        self.rpc_timeout = rpc_timeout
        self.output = output
        self.copy = copy
        self._client = None
        self._client_pid = None

    def _init_keys(self, keys, dataset, prefix, lister, targets,
                   target_transform):
        """keys (or the dataset's listing under prefix) and the targets."""
        self.dataset = dataset
        self.prefix = prefix
        if keys is None:
            keys = [e.name for e in list_dataset(
                dataset, prefix, socket=self.socket, lister=lister,
                client=None if lister is not None else self._get_client())]
        self.keys = list(keys)
        self.targets = targets
        self.target_transform = target_transform
        self._target_of = target_getter(targets, self.keys)

    def _get_client(self):
        pid = os.getpid()
        c = self._client
        if c is None or self._client_pid != pid or c.inherited:
            # Never touch a Client inherited through fork: open our own.
            self._client = None
            c = Client(self.socket, client_name="%s-%d" % (
                self.client_name, pid), connect_timeout=self.connect_timeout,
                rpc_timeout=self.rpc_timeout)
            self._client = c
            self._client_pid = pid
        return c

    def close(self):
        """Closes this process's Client (a new one opens on next use)."""
        c, self._client = self._client, None
        if c is not None and self._client_pid == os.getpid():
            c.close()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_client"] = None
        state["_client_pid"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    # -- reading ----------------------------------------------------------

    def _read(self, keys, skip_errors):
        """(kept positions, samples) for `keys` with one get_batch. Failed
        items raise DlcacheError, or are left out with skip_errors. The
        batch's place in the epoch plan, if known, was set by _read_at."""
        at = self.__dict__.pop("_plan_at", None)
        batch = self._get_client().get_batch(self.dataset, keys,
                                             plan_position=at)
        if batch.num_failed:
            if not skip_errors:
                batch.raise_for_status()
            codes = batch.codes
            keep = [i for i in range(len(batch)) if codes[i] == OK]
        else:
            keep = None
        return self._convert(batch, keep)

    def _read_at(self, keys, skip_errors, plan_position):
        """_read of keys that stand at plan_position ((epoch, offset) or
        None) in the plan: passed aside, so that subclasses overriding
        _read(keys, skip_errors) keep working."""
        self._plan_at = plan_position
        try:
            return self._read(keys, skip_errors)
        finally:
            self.__dict__.pop("_plan_at", None)

    def _convert(self, batch, keep):
        n = len(batch)
        idx = list(range(n)) if keep is None else keep
        if not self.copy:
            if self.output == "bytes":
                return idx, [batch[i].tobytes() for i in idx]
            if self.output == "numpy":
                return idx, [batch[i].numpy() for i in idx]
            return idx, [batch[i].tensor() for i in idx]
        if self.output == "bytes":
            return idx, [batch[i].tobytes() for i in idx]
        total = batch.total_size
        if self.output == "numpy":
            flat = _np.empty(total, dtype=_np.uint8)
        else:
            flat = torch.empty(total, dtype=torch.uint8)
        offsets = batch.copy_into(flat)
        offsets = offsets.tolist() if hasattr(offsets, "tolist") else \
            list(offsets)
        del batch  # leases go now: the samples view `flat`
        return idx, [flat[offsets[i]:offsets[i + 1]] for i in idx]

    def _target(self, index):
        t = self._target_of(index)
        if self.target_transform is not None:
            t = self.target_transform(t)
        return t

    def _sample(self, index, data):
        """What one sample yields: data transformed, with its target when
        the dataset has targets, with its key first under return_keys."""
        if self.transform is not None:
            data = self.transform(data)
        if self._target_of is not None:
            out = (data, self._target(index))
            return (self.keys[index],) + out if self.return_keys else out
        return (self.keys[index], data) if self.return_keys else data


class CacheDataset(_ClientMixin, torch.utils.data.Dataset):
    """Map-style dataset: ds[i] is the sample of keys[i], or (sample,
    target) with targets.

    ds[[i, j, ...]] and __getitems__ (used by torch >= 2 DataLoaders with a
    batch_size) read all the indices with one get_batch and return a list
    of samples. A missing or failed file raises DlcacheError.

    Args:
      keys: dataset-relative paths; None: the dataset's listing under
        `prefix` (through dlcached, or `lister`).
      dataset: dlcached dataset name.
      socket: dlcached's socket (None: $DLCACHE_SOCKET, else
        /run/dlcache/dlcached.sock).
      targets: a sequence aligned with keys, a dict key -> target or a
        callable key -> target; samples are then (sample, target).
      transform, target_transform: called on each sample / target (in the
        worker).
      output: "tensor" | "numpy" | "bytes".
      copy: copy into fresh memory (default) or zero-copy read-only views.
      return_keys: samples are (key, sample[, target]).
      prefix, lister: see keys.

    Use it with PlannedSampler (the one epoch order, registered as an
    epoch plan, resumable): each process's Client attaches its session to
    the sampler's epoch plan before its first read (and again after a
    reconnect), so the reads count as the plan's progress.
    """

    def __init__(self, keys: Optional[Sequence[str]] = None,
                 dataset: str = "default", socket: Optional[str] = None,
                 transform: Optional[Callable] = None,
                 output: str = "tensor", copy: bool = True,
                 return_keys: bool = False, client_name: str = "torch",
                 connect_timeout: float = 10.0, rpc_timeout: float = 60.0,
                 targets: Targets = None,
                 target_transform: Optional[Callable] = None,
                 prefix: str = "", lister: Optional[Lister] = None,
                 **renamed: Any) -> None:
        refuse_renamed(renamed, "CacheDataset")
        super().__init__()
        self.transform = transform
        self.return_keys = return_keys
        self._init_client(socket, client_name, connect_timeout, rpc_timeout,
                          output, copy)
        self._init_keys(keys, dataset, prefix, lister, targets,
                        target_transform)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitems__(self, indices: Sequence[int]) -> List[Any]:
        keys = [self.keys[i] for i in indices]
        self._attach_plan()
        kept, samples = self._read_at(keys, False,
                                      self._plan_position(indices))
        return [self._sample(int(indices[j]), s)
                for j, s in zip(kept, samples)]

    def __getitem__(self, index):
        if isinstance(index, (list, tuple)):
            return self.__getitems__(index)
        key = self.keys[index]
        self._attach_plan()
        _, samples = self._read_at([key], False,
                                   self._plan_position([index]))
        return self._sample(int(index), samples[0])

    def _plan_position(self, indices):
        """(epoch, offset) when `indices` are consecutive reads of the
        sampler's plan (PlannedSampler yields PlanIndex), else None."""
        if not indices or self.__dict__.get("_plan_attached") is None:
            return None
        first = getattr(indices[0], "plan_at", None)
        if first is None:
            return None
        epoch, offset = first
        for n, i in enumerate(indices):
            if getattr(i, "plan_at", None) != (epoch, offset + n):
                return None
        return first

    def _attach_plan(self):
        """Attaches this process's session (once per session: again after
        a reconnect) to the epoch plan a PlannedSampler registers for this
        dataset, so that its reads count as the plan's progress."""
        name = self.__dict__.get("_plan_name")
        if name is None:
            return
        client = self._get_client()
        try:
            session = (os.getpid(), id(client), client.sessions_opened)
            if self.__dict__.get("_plan_attached") == session:
                return
            job = self.__dict__.get("_plan_job")
            if job is None:
                client.register_plan(self.dataset, name, 0, [])
            else:
                # The job's plan: this worker reads as the sampler's rank.
                client.register_job_plan(self.dataset, name, job[0], job[1],
                                         0, [])
            self._plan_attached = session
        except DlcacheError as e:
            if e.code == UNIMPLEMENTED:
                self._plan_name = None
            # Else (dlcached restarting, say): again on the next read.


class CacheIterableDataset(_ClientMixin, torch.utils.data.IterableDataset):
    """Iterable dataset: each epoch, this rank's part of the one epoch
    order (dlcache._order.rank_order of seed, epoch, rank, world size,
    drop_last), cut into blocks of batch_size keys (batched mode) or
    fetch_size keys (per-sample mode), block b read by DataLoader worker
    b % num_workers with one get_batch. The DataLoader hands the workers'
    output out in turn, so it yields the rank's order exactly; every key is
    read once per epoch by exactly one worker of one rank.

    batch_size=None: yields samples (transform applied to each), or
      (sample, target) with targets. With DataLoader(batch_size=B), give
      fetch_size=B so that the DataLoader's batches are the blocks (the
      order and len(loader) are then exact).
    batch_size=B: yields one batch per step (use DataLoader(batch_size=None)):
      without transform/collate_fn, a [B, size] tensor / ndarray when all
      sizes are equal (copied straight from the cache in C++), else a list
      of samples (bytes output: always a list); with a transform, the
      transformed samples passed to collate_fn (default: stack when the
      shapes agree, else the list). With targets: (batch, targets), the
      targets a tensor when they are numbers. Only the epoch's last batch
      may be smaller (drop_last=True drops it); len() is exact for any
      num_workers.

    Epochs: set_epoch(e) before each epoch (before iter(loader)). The
    epoch lives in shared memory (a multiprocessing RawArray made here)
    that DataLoader workers share with the main process, whether forked or
    spawned, so workers that persist across epochs (persistent_workers=True)
    see every set_epoch call, in any order (e.g. resuming at epoch 7).
    Without set_epoch, each pass advances the epoch by one. (Where no
    shared memory can be made, persistent workers advance by one per pass.)

    Ranks: every rank gets the same number of samples (as torch's
    DistributedSampler): the epoch's order is padded by repeating keys from
    its start to a multiple of the world size, or, with drop_last=True, cut
    down to one; so every rank runs the same number of steps.

    Resume: load_state_dict({"epoch": e, "next_block": k}) (or the state
    a worker's state_dict() gave, as torchdata's StatefulDataLoader passes
    it back) makes the next pass start at block k of epoch e's order;
    dlcache.torch.DataLoader does it from the batches it counted.

    Failed items raise DlcacheError, or are skipped with skip_errors.

    Epoch plans (plan=True, the default; docs/epoch_plans.md): at the
    start of each pass the rank's read order for this epoch and the next is
    registered with the server (the first worker registers, the others
    attach); the server evicts by Belady's rule and fills the next planned
    keys ahead of the workers. The plan ends with the workers' sessions.
    Without server support it is silently off.
    """

    def __init__(self, keys: Optional[Sequence[str]] = None,
                 dataset: str = "default", socket: Optional[str] = None,
                 transform: Optional[Callable] = None,
                 output: str = "tensor", copy: bool = True,
                 batch_size: Optional[int] = None, fetch_size: int = 64,
                 shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, return_keys: bool = False,
                 skip_errors: bool = False, rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 collate_fn: Optional[Callable] = None,
                 client_name: str = "torch", connect_timeout: float = 10.0,
                 rpc_timeout: float = 60.0, plan: bool = True,
                 targets: Targets = None,
                 target_transform: Optional[Callable] = None,
                 prefix: str = "", lister: Optional[Lister] = None,
                 **renamed: Any) -> None:
        refuse_renamed(renamed, "CacheIterableDataset")
        super().__init__()
        if batch_size is not None and batch_size < 1:
            raise ValueError("batch_size must be >= 1 or None")
        if fetch_size < 1:
            raise ValueError("fetch_size must be >= 1")
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if world_size is not None and not 0 <= rank < world_size:
            raise ValueError("rank %r not in [0, %r)" % (rank, world_size))
        self.transform = transform
        self.batch_size = batch_size
        self.fetch_size = fetch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.return_keys = return_keys
        self.skip_errors = skip_errors
        self.rank = rank
        self.world_size = world_size
        self.collate_fn = collate_fn
        self.plan = plan
        # Names the job's plans: the process that made the dataset.
        self._plan_owner = "%s-%d" % (client_name, os.getpid())
        self._plan_state = None  # (pid, last epoch registered from there)
        self._epoch = 0
        self._passes = 0
        self._resume = 0          # block the next pass starts at
        self._worker_resume = None  # (epoch, next block): a worker's state
        self._position = None     # (epoch, next block of this process)
        # [epoch, generation, resume block] shared with the workers.
        self._shared = _shared_state()
        self._seen_gen = 0
        self._init_client(socket, client_name, connect_timeout, rpc_timeout,
                          output, copy)
        self._init_keys(keys, dataset, prefix, lister, targets,
                        target_transform)

    # -- epochs and state -------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose order the next pass uses, here and in the
        DataLoader's workers (persistent ones included), from its start
        (or from where load_state_dict put that epoch)."""
        epoch = int(epoch)
        pending = self.__dict__.get("_pending")
        if pending is not None and pending[0] != epoch:
            pending = self._pending = None
        self._set(epoch, pending[1] if pending is not None else 0)

    def _set(self, epoch, resume):
        self._epoch = epoch
        self._passes = 0
        self._resume = resume
        if self._shared is not None:
            self._shared[0] = epoch
            self._shared[2] = resume
            self._shared[1] += 1
            self._seen_gen = self._shared[1]

    def _next_pass(self):
        """(epoch, first block) of the pass starting now (this process's
        copy)."""
        sh = self.__dict__.get("_shared")
        if sh is not None and sh[1] != self._seen_gen:
            # set_epoch / load_state_dict was called (in the main process)
            # since this copy last looked.
            self._seen_gen = sh[1]
            self._epoch = sh[0]
            self._resume = sh[2]
            self._passes = 0
        epoch = self._epoch + self._passes
        resume = self._resume if self._passes == 0 else 0
        self._passes += 1
        return epoch, resume

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def block_size(self) -> int:
        """Keys per block: batch_size, or fetch_size in per-sample mode."""
        return self.batch_size or self.fetch_size

    def state_dict(self) -> Dict[str, Any]:
        """{"epoch", "next_block", "worker", "num_workers"}: in a
        DataLoader worker (where StatefulDataLoader asks) this worker's next
        block; in the process that iterates without workers, the next
        block of the pass; else what load_state_dict set."""
        info = torch.utils.data.get_worker_info()
        pos = self.__dict__.get("_position")
        if pos is not None and pos[2] == os.getpid():
            epoch, nxt = pos[0], pos[1]
        else:
            epoch, nxt = self._epoch, self._resume
        return {"epoch": epoch, "next_block": nxt,
                "worker": info.id if info is not None else None,
                "num_workers": info.num_workers if info is not None else 0}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """The next pass starts where `state` says: a main-process state
        (every block before next_block done), or one worker's state (in
        that worker, as StatefulDataLoader restores it)."""
        epoch, nxt = int(state["epoch"]), int(state.get("next_block", 0))
        if state.get("worker") is not None and \
                torch.utils.data.get_worker_info() is not None:
            self._worker_resume = (epoch, nxt)
            return
        self._pending = (epoch, nxt)
        self._set(epoch, nxt)

    def _next_pass_start(self):
        """(epoch, first block) of the next pass in this process."""
        if self._passes == 0:
            return self._epoch, self._resume
        return self._epoch + self._passes, 0

    # -- order ------------------------------------------------------------

    def _rank(self):
        if self.world_size is not None:
            return self.rank, self.world_size
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        # A spawned worker has no process group: use the rank the parent
        # had when it pickled this dataset.
        return self.__dict__.get("_parent_rank") or (0, 1)

    def __getstate__(self):
        state = super().__getstate__()
        state["_parent_rank"] = self._rank()
        if state.get("_shared") is not None:
            from multiprocessing import context
            if context.get_spawning_popen() is None:
                # Pickled other than to a starting worker (where shared
                # memory cannot go): a copy with its own epoch.
                state["_shared"] = None
        return state

    def rank_indices(self, epoch: int) -> List[int]:
        """This rank's key indices of `epoch`, in the order the DataLoader
        yields them."""
        rank, world = self._rank()
        return _order.rank_order(len(self.keys), self.seed, epoch, rank,
                                 world, self.drop_last, self.shuffle)

    def epoch_order(self, epoch: int) -> List[str]:
        """This rank's keys of `epoch`, in the order the DataLoader yields
        them."""
        return [self.keys[i] for i in self.rank_indices(epoch)]

    def plan_order(self, epoch: int, num_workers: Optional[int] = None
                   ) -> List[str]:
        """The order in which this rank's DataLoader reads `epoch` (the
        rank's order, whatever num_workers)."""
        return self.epoch_order(epoch)

    def _num_blocks(self, rank_len):
        b = self.block_size
        if self.batch_size is not None and self.drop_last:
            return rank_len // b
        return -(-rank_len // b)

    def __len__(self) -> int:
        # Samples (per-sample mode) or batches of this rank: exact for any
        # num_workers (only the epoch's last block may be short).
        rank, world = self._rank()
        n = _order.samples_per_rank(len(self.keys), world, self.drop_last)
        if self.batch_size is None:
            return n
        return self._num_blocks(n)

    def _register_plan(self, epoch, offset=0):
        """Registers this epoch's order from `offset` on and the next
        epoch's (worker 0) or attaches to the rank's plan (other workers).
        Never fails the loader: a refused plan is a warning, none on the
        server is silent."""
        if not self.plan:
            return
        pid = os.getpid()
        state = self.__dict__.get("_plan_state")
        last = state[1] if state is not None and state[0] == pid else None
        info = torch.utils.data.get_worker_info()
        worker = info.id if info is not None else 0
        rank = self._rank()[0]
        name = "%s/rank%d" % (self._plan_owner, rank)
        # The same or an earlier epoch again: a restart, start afresh; so
        # does a new session registering the rest of the epoch.
        reset = offset > 0 or (last is not None and epoch <= last)
        client = self._get_client()
        try:
            session = (pid, id(client), client.sessions_opened)
            if worker == 0:
                client.register_plan(self.dataset, name, epoch,
                                     self.plan_order(epoch)[offset:],
                                     offset=offset, reset=reset)
                client.register_plan(self.dataset, name, epoch + 1,
                                     self.plan_order(epoch + 1))
            else:
                client.register_plan(self.dataset, name, epoch, [])
            self._plan_session = session
        except DlcacheError as e:
            if e.code == UNIMPLEMENTED:
                self.plan = False
            else:
                warnings.warn("dlcache: epoch plan not registered: %s" % e)
        self._plan_state = (pid, epoch)

    def _replan_on_new_session(self, epoch, offset):
        """After a reconnect (dlcached restarted: the plan went with the
        old session) registers the rest of the epoch again from `offset`
        (this worker's next key in the rank's order), or attaches again."""
        if not self.plan:
            return
        seen = self.__dict__.get("_plan_session")
        client = self._get_client()
        try:
            now = (os.getpid(), id(client), client.sessions_opened)
        except DlcacheError:
            return
        if seen is None or seen == now:
            return
        self._register_plan(epoch, offset=offset)

    def __iter__(self) -> Iterator[Any]:
        epoch, first = self._next_pass()
        self._pending = None
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        start = first + worker
        wr = self.__dict__.get("_worker_resume")
        if wr is not None:
            # StatefulDataLoader gave this worker its own saved state.
            self._worker_resume = None
            epoch, start = wr
        order = self.rank_indices(epoch)
        self._register_plan(epoch, offset=min(first, start) *
                            self.block_size)
        blocks = range(start, self._num_blocks(len(order)), workers)
        self._position = (epoch, start, os.getpid())
        if self.batch_size is None:
            return self._iter_samples(order, blocks, epoch, workers)
        return self._iter_batches(order, blocks, epoch, workers)

    def _plan_at(self, epoch, offset):
        if not self.plan or self.__dict__.get("_plan_session") is None:
            return None
        return (epoch, offset)

    def _iter_samples(self, order, blocks, epoch, workers):
        step = self.fetch_size
        for b in blocks:
            start = b * step
            self._replan_on_new_session(epoch, start)
            idx = order[start:start + step]
            kept, samples = self._read_at([self.keys[i] for i in idx],
                                          self.skip_errors,
                                          self._plan_at(epoch, start))
            self._position = (epoch, b + workers, os.getpid())
            for j, data in zip(kept, samples):
                yield self._sample(idx[j], data)
            del kept, samples

    def _batch_targets(self, idx):
        return _collate_targets([self._target(i) for i in idx])

    def _iter_batches(self, order, blocks, epoch, workers):
        step = self.batch_size
        fast = self.transform is None and self.collate_fn is None
        for b in blocks:
            start = b * step
            self._replan_on_new_session(epoch, start)
            idx = order[start:start + step]
            keys = [self.keys[i] for i in idx]
            at = self._plan_at(epoch, start)
            self._position = (epoch, b + workers, os.getpid())
            data = None
            if fast and self.copy and self.output != "bytes":
                batch = self._get_client().get_batch(self.dataset, keys,
                                                     plan_position=at)
                if batch.num_failed == 0 and batch.uniform_size is not None:
                    data = (batch.to_numpy() if self.output == "numpy"
                            else batch.to_tensor())
                    kept = None
                else:
                    if batch.num_failed and not self.skip_errors:
                        batch.raise_for_status()
                    codes = batch.codes
                    keep = None if batch.num_failed == 0 else [
                        i for i in range(len(batch)) if codes[i] == OK]
                    kept, samples = self._convert(batch, keep)
                del batch
            else:
                kept, samples = self._read_at(keys, self.skip_errors, at)
            if data is None:
                if not fast:
                    if self.transform is not None:
                        samples = [self.transform(s) for s in samples]
                    samples = (self.collate_fn or _stack_or_list)(samples)
                data = samples
            if kept is not None and len(kept) != len(idx):
                idx = [idx[j] for j in kept]
                keys = [self.keys[i] for i in idx]
            out = (data,)
            if self._target_of is not None:
                out = (data, self._batch_targets(idx))
            if self.return_keys:
                out = (keys,) + out
            yield out[0] if len(out) == 1 else out
