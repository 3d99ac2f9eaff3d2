"""DataLoader-ready datasets that read their samples from dlcache.

Map-style (random access; batched reads through __getitems__ on torch >= 2,
or by passing a list of indices, e.g. with a BatchSampler as sampler):

    ds = CacheDataset(keys, dataset="imagenet", socket=SOCK,
                      transform=decode)
    loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=8)

    # Or with epoch plans (docs/epoch_plans.md): PlannedSampler is torch's
    # DistributedSampler (same order) that tells dlcached each epoch's
    # order, so it evicts by Belady's rule and reads ahead of the workers.
    sampler = PlannedSampler(ds, shuffle=True, seed=0)
    loader = DataLoader(ds, batch_size=256, sampler=sampler, num_workers=8)
    for epoch in range(90):
        sampler.set_epoch(epoch)
        for x in loader: ...

Iterable (sharded by DataLoader worker and by torch.distributed rank,
reshuffled per epoch, one get_batch per step):

    ds = CacheIterableDataset(keys, dataset="imagenet", socket=SOCK,
                              batch_size=256, seed=0)
    loader = DataLoader(ds, batch_size=None, num_workers=8,
                        persistent_workers=True, pin_memory=True)
    for epoch in range(start, 90):
        ds.set_epoch(epoch)
        for x in loader: ...   # [256, size] uint8 when sizes are equal

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
import random
import warnings

import torch
import torch.utils.data

from ._client import OK, UNIMPLEMENTED, Client, DlcacheError
from .planned_sampler import PlannedSampler  # noqa: F401 (re-exported)

try:
    import numpy as _np
except ImportError:
    _np = None

_OUTPUTS = ("tensor", "numpy", "bytes")


def _shared_epoch():
    """[epoch, generation] in shared memory, or None where none can be
    made."""
    try:
        import multiprocessing
        return multiprocessing.RawArray("q", 2)
    except (ImportError, OSError):
        return None


def collate(samples):
    """Stacks equal-size samples into one batch.

    torch tensors -> torch.stack ([B, ...]); numpy arrays -> numpy.stack;
    bytes-like -> a [B, size] uint8 tensor; (key, sample) pairs -> (list of
    keys, stacked samples). Raises ValueError naming the sizes when they
    differ (keep variable-size samples as a list, or use
    Batch.to_tensor(), which gives flat + offsets). Usable as a
    DataLoader collate_fn.
    """
    samples = list(samples)
    if not samples:
        raise ValueError("collate: no samples")
    first = samples[0]
    if isinstance(first, tuple) and len(first) == 2 and isinstance(
            first[0], (str, bytes)):
        keys = [s[0] for s in samples]
        return keys, collate([s[1] for s in samples])
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
        """(kept keys, samples) for `keys` with one get_batch. Failed items
        raise DlcacheError, or are left out with skip_errors. The batch's
        place in the epoch plan, if known, was set by _read_at."""
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
        return self._convert(batch, keys, keep)

    def _read_at(self, keys, skip_errors, plan_position):
        """_read of keys that stand at plan_position ((epoch, offset) or
        None) in the plan: passed aside, so that subclasses overriding
        _read(keys, skip_errors) keep working."""
        self._plan_at = plan_position
        try:
            return self._read(keys, skip_errors)
        finally:
            self.__dict__.pop("_plan_at", None)

    def _convert(self, batch, keys, keep):
        n = len(batch)
        idx = range(n) if keep is None else keep
        kept = keys if keep is None else [keys[i] for i in keep]
        if not self.copy:
            if self.output == "bytes":
                return kept, [batch[i].tobytes() for i in idx]
            if self.output == "numpy":
                return kept, [batch[i].numpy() for i in idx]
            return kept, [batch[i].tensor() for i in idx]
        if self.output == "bytes":
            return kept, [batch[i].tobytes() for i in idx]
        total = batch.total_size
        if self.output == "numpy":
            flat = _np.empty(total, dtype=_np.uint8)
        else:
            flat = torch.empty(total, dtype=torch.uint8)
        offsets = batch.copy_into(flat)
        offsets = offsets.tolist() if hasattr(offsets, "tolist") else \
            list(offsets)
        del batch  # leases go now: the samples view `flat`
        return kept, [flat[offsets[i]:offsets[i + 1]] for i in idx]

    def _sample(self, key, data):
        if self.transform is not None:
            data = self.transform(data)
        return (key, data) if self.return_keys else data


class CacheDataset(_ClientMixin, torch.utils.data.Dataset):
    """Map-style dataset: ds[i] is the sample of keys[i].

    ds[[i, j, ...]] and __getitems__ (used by torch >= 2 DataLoaders with a
    batch_size) read all the indices with one get_batch and return a list
    of samples. A missing or failed file raises DlcacheError.

    Args:
      keys: dataset-relative paths.
      dataset: dlcached dataset name.
      socket: dlcached's socket (None = the default).
      transform: called on each sample (in the worker).
      output: "tensor" | "numpy" | "bytes".
      copy: copy into fresh memory (default) or zero-copy read-only views.
      return_keys: samples are (key, data).

    With a PlannedSampler, each process's Client attaches its session to
    the sampler's epoch plan before its first read (and again after a
    reconnect), so the reads count as the plan's progress.
    """

    def __init__(self, keys, dataset="default", socket=None, transform=None,
                 output="tensor", copy=True, return_keys=False,
                 client_name="torch", connect_timeout=10.0, rpc_timeout=60.0):
        super().__init__()
        self.keys = list(keys)
        self.dataset = dataset
        self.transform = transform
        self.return_keys = return_keys
        self._init_client(socket, client_name, connect_timeout, rpc_timeout,
                          output, copy)

    def __len__(self):
        return len(self.keys)

    def __getitems__(self, indices):
        keys = [self.keys[i] for i in indices]
        self._attach_plan()
        kept, samples = self._read_at(keys, False,
                                      self._plan_position(indices))
        return [self._sample(k, s) for k, s in zip(kept, samples)]

    def __getitem__(self, index):
        if isinstance(index, (list, tuple)):
            return self.__getitems__(index)
        key = self.keys[index]
        self._attach_plan()
        _, samples = self._read_at([key], False,
                                   self._plan_position([index]))
        return self._sample(key, samples[0])

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
    """Iterable dataset: each epoch, the keys reshuffled with
    Random(seed, epoch), split between ranks (torch.distributed, or the
    rank/world_size arguments, which take precedence) and then between
    DataLoader workers; every key is read once per epoch by exactly one
    worker of one rank. Reads go in get_batch calls of batch_size keys
    (batched mode) or fetch_size keys (per-sample mode).

    batch_size=None: yields samples (transform applied to each).
    batch_size=B: yields one batch per step (use DataLoader(batch_size=None)):
      without transform/collate_fn, a [B, size] tensor / ndarray when all
      sizes are equal (copied straight from the cache in C++), else a list
      of samples (bytes output: always a list); with a transform, the
      transformed samples passed to collate_fn (default: stack when the
      shapes agree, else the list). The last batch of each worker may be
      smaller (drop_last=True drops it).

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

    Failed items raise DlcacheError, or are skipped with skip_errors.

    Epoch plans (plan=True, the default; docs/epoch_plans.md): the order is
    known from the seed, so at the start of each pass the rank's read order
    for this epoch and the next is registered with the server, as the
    DataLoader's workers will ask for it (their batches in turn). Every
    worker of the rank shares one plan (the first registers, the others
    attach); the server evicts by Belady's rule and fills the next planned
    keys ahead of the workers. The plan ends with the workers' sessions.
    Without server support it is silently off.
    """

    def __init__(self, keys, dataset="default", socket=None, transform=None,
                 output="tensor", copy=True, batch_size=None, fetch_size=64,
                 shuffle=True, seed=0, drop_last=False, return_keys=False,
                 skip_errors=False, rank=None, world_size=None,
                 collate_fn=None, client_name="torch", connect_timeout=10.0,
                 rpc_timeout=60.0, socket_path=None, plan=True):
        super().__init__()
        if isinstance(keys, str) and not isinstance(dataset, str):
            # Older form: CacheIterableDataset(dataset, keys, socket_path=).
            keys, dataset = dataset, keys
        if socket is None:
            socket = socket_path
        if batch_size is not None and batch_size < 1:
            raise ValueError("batch_size must be >= 1 or None")
        if fetch_size < 1:
            raise ValueError("fetch_size must be >= 1")
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if world_size is not None and not 0 <= rank < world_size:
            raise ValueError("rank %r not in [0, %r)" % (rank, world_size))
        self.keys = list(keys)
        self.dataset = dataset
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
        # [epoch, generation] shared with the DataLoader's workers.
        self._shared = _shared_epoch()
        self._seen_gen = 0
        self._init_client(socket, client_name, connect_timeout, rpc_timeout,
                          output, copy)

    def set_epoch(self, epoch):
        """Sets the epoch whose order the next pass uses, here and in the
        DataLoader's workers (persistent ones included)."""
        self._epoch = int(epoch)
        self._passes = 0
        if self._shared is not None:
            self._shared[0] = self._epoch
            self._shared[1] += 1
            self._seen_gen = self._shared[1]

    def _next_epoch(self):
        """The epoch of the pass starting now (this process's copy)."""
        sh = self.__dict__.get("_shared")
        if sh is not None and sh[1] != self._seen_gen:
            # set_epoch was called (in the main process) since this copy
            # last looked.
            self._seen_gen = sh[1]
            self._epoch = sh[0]
            self._passes = 0
        epoch = self._epoch + self._passes
        self._passes += 1
        return epoch

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

    def epoch_order(self, epoch):
        """All keys in the order of `epoch` (before sharding)."""
        order = list(self.keys)
        if self.shuffle:
            random.Random("dlcache:%d:%d" % (self.seed, epoch)).shuffle(order)
        return order

    def shard(self, order, worker_id=None, num_workers=None):
        """This rank's (and worker's) part of `order`. worker_id and
        num_workers default to the DataLoader worker running this."""
        rank, world = self._rank()
        if world > 1 and order:
            # The same count on every rank (DistributedSampler's rule).
            n = len(order)
            total = (n // world if self.drop_last else -(-n // world)) * world
            if total > n:
                order = (list(order) * -(-total // n))[:total]
            else:
                order = order[:total]
        mine = order[rank::world]
        if worker_id is None:
            info = torch.utils.data.get_worker_info()
            if info is not None:
                worker_id, num_workers = info.id, info.num_workers
        if worker_id is not None and num_workers and num_workers > 1:
            mine = mine[worker_id::num_workers]
        return mine

    def __len__(self):
        # Samples (or batches) of this rank; batches are exact for
        # num_workers <= 1 (each worker's last batch may be partial).
        world = self._rank()[1]
        n = len(self.keys)
        if world > 1:
            n = n // world if self.drop_last else -(-n // world)
        if self.batch_size is None:
            return n
        if self.drop_last:
            return n // self.batch_size
        return (n + self.batch_size - 1) // self.batch_size

    def plan_order(self, epoch, num_workers=None):
        """The order in which this rank's DataLoader reads `epoch`: each
        worker's batches (fetches) in turn, as the DataLoader yields them."""
        if num_workers is None:
            info = torch.utils.data.get_worker_info()
            num_workers = info.num_workers if info is not None else 1
        rank_order = self.shard(self.epoch_order(epoch), 0, 1)
        parts = [rank_order[w::num_workers] for w in range(num_workers)]
        step = self.batch_size or self.fetch_size
        out = []
        longest = max((len(p) for p in parts), default=0)
        for start in range(0, longest, step):
            for p in parts:
                out.extend(p[start:start + step])
        return out

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

    def _replan_on_new_session(self, epoch, done):
        """After a reconnect (dlcached restarted: the plan went with the
        old session) registers the rest of the epoch again, from where
        this worker is (`done` of its keys read), or attaches again."""
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
        info = torch.utils.data.get_worker_info()
        workers = info.num_workers if info is not None else 1
        # Workers take turns by batches: worker 0's next key sits about
        # `done * workers` into the rank's plan order.
        self._register_plan(epoch, offset=done * workers)

    def __iter__(self):
        epoch = self._next_epoch()
        self._register_plan(epoch)
        mine = self.shard(self.epoch_order(epoch))
        if self.batch_size is None:
            return self._iter_samples(mine, epoch)
        return self._iter_batches(mine, epoch)

    def _iter_samples(self, mine, epoch):
        step = self.fetch_size
        offsets = self._plan_offsets(step)
        for start in range(0, len(mine), step):
            self._replan_on_new_session(epoch, start)
            at = (epoch, offsets(start)) if offsets is not None else None
            kept, samples = self._read_at(mine[start:start + step],
                                          self.skip_errors, at)
            for key, data in zip(kept, samples):
                yield self._sample(key, data)
            del kept, samples

    def _plan_offsets(self, step):
        """A function start -> where this worker's keys mine[start:start +
        step] stand in the rank's plan order (plan_order), or None when
        no plan was registered or attached: batches then say where they
        stand, and dlcached counts their progress by position."""
        if not self.plan or self.__dict__.get("_plan_session") is None:
            return None
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        rank, world = self._rank()
        n = len(self.keys)
        if world > 1 and n:
            n = (n // world if self.drop_last else -(-n // world)) * world
        rank_len = len(range(rank, n, world))
        parts = [len(range(w, rank_len, workers)) for w in range(workers)]

        def offset(start):
            # plan_order: every worker's first `start` keys (whole rounds
            # of `step`), then the earlier workers' keys of this round.
            return (sum(min(p, start) for p in parts)
                    + sum(max(0, min(step, p - start))
                          for p in parts[:worker]))
        return offset

    def _iter_batches(self, mine, epoch):
        step = self.batch_size
        fast = self.transform is None and self.collate_fn is None
        offsets = self._plan_offsets(step)
        for start in range(0, len(mine), step):
            self._replan_on_new_session(epoch, start)
            keys = mine[start:start + step]
            if self.drop_last and len(keys) < step:
                break
            at = (epoch, offsets(start)) if offsets is not None else None
            if fast and self.copy and self.output != "bytes":
                batch = self._get_client().get_batch(self.dataset, keys,
                                                     plan_position=at)
                if batch.num_failed == 0 and batch.uniform_size is not None:
                    data = (batch.to_numpy() if self.output == "numpy"
                            else batch.to_tensor())
                    del batch
                    yield (keys, data) if self.return_keys else data
                    continue
                if batch.num_failed and not self.skip_errors:
                    batch.raise_for_status()
                codes = batch.codes
                keep = None if batch.num_failed == 0 else [
                    i for i in range(len(batch)) if codes[i] == OK]
                kept, samples = self._convert(batch, keys, keep)
                del batch
            else:
                kept, samples = self._read_at(keys, self.skip_errors, at)
            if not fast:
                if self.transform is not None:
                    samples = [self.transform(s) for s in samples]
                samples = (self.collate_fn or _stack_or_list)(samples)
            yield (kept, samples) if self.return_keys else samples
