"""PlannedSampler: the one epoch order as a sampler, told to dlcache as a plan.

    ds = CacheDataset(keys, dataset="imagenet", socket=SOCK)
    sampler = PlannedSampler(ds, shuffle=True, seed=0)  # rank from dist
    loader = DataLoader(ds, batch_size=256, sampler=sampler, num_workers=8)
    for epoch in range(start, 90):
        sampler.set_epoch(epoch)
        for x in loader: ...

The order is dlcache's one epoch order (dlcache._order: the permutation
of (seed, epoch), padded or cut to a multiple of the world size as torch's
DistributedSampler does, rank r taking every W-th index from r), the order
every dlcache loader and the LibTorch dataset read. It replaces a
DistributedSampler (the same padding, the same number of samples per
rank; another permutation). With no process group and no rank/world_size
it is a plain (shuffling) sampler of one rank.

Resume: state_dict() is {"epoch", "yielded"} (indices handed out in the
current pass); load_state_dict() makes the next pass start at epoch's
index `yielded` (torchdata's StatefulDataLoader convention;
dlcache.torch.DataLoader sets it from the batches it counted).

Epoch plans (docs/epoch_plans.md): when a pass starts, the main process
registers this rank's keys in the sampler's order with dlcached, for this
epoch and, once set_epoch is in use, the next one; the DataLoader's workers
attach their sessions to the same plan on their first read (the dataset
learns the plan's name from the sampler), so their reads are the plan's
progress. dlcached then evicts by Belady's rule and fills the next planned
keys ahead of the workers. The plan lives as long as a session attached to
it (the main process's Client: until dataset.close() or exit). After a
dlcached restart the Client reconnects by itself with a new session, which
has no plan: the sampler registers the rest of the epoch again, the workers
attach again. A server with plans off (UNIMPLEMENTED) is read without them;
other registration errors are a warning, never a failed epoch.

Job plans: when the ranks of a job can name it (job=, or torchrun's
TORCHELASTIC_RUN_ID), the ranks on a node share ONE plan instead of one
each: the first local rank to start a pass registers the epoch's whole
padded permutation with the world size, the others attach with their rank
(only what the plan lacks is sent). dlcached then follows each local rank's
progress in it, looks ahead in the node's read order and keeps the plan
while any rank's session lives. Under either kind of plan the sampler
yields PlanIndex: where each index stands in the rank's reads, which
CacheDataset sends with the batch (progress by position).

Fork safety: registration uses the dataset's per-process Client in the
main process (where DataLoaders iterate samplers); workers never touch it
(see CacheDataset).
"""

import hashlib
import math
import os
import warnings
from typing import Any, Dict, Iterator, Optional

import torch
import torch.utils.data

from . import _order
from ._client import UNIMPLEMENTED, DlcacheError

# How many indices the sampler hands out between looks at the Client's
# session count (a reconnect means: register again).
_SESSION_CHECK_EVERY = 8


class PlanIndex(int):
    """A dataset index that knows where it stands in the rank's epoch
    plan: `plan_at` = (plan epoch, offset). An int everywhere else;
    CacheDataset sends it with the read, so that dlcached counts the
    progress by position rather than looking up each key."""

    def __new__(cls, index, plan_at):
        self = super().__new__(cls, index)
        self.plan_at = plan_at
        return self

    def __reduce__(self):
        return (PlanIndex, (int(self), self.plan_at))


def _job_id(job):
    """The job id the ranks agree on: `job` (a string), else torchrun's
    TORCHELASTIC_RUN_ID (unless unset or torchrun's default "none"); None:
    no job plan (job=False always)."""
    if job is False:
        return None
    if job is not None and job is not True:
        return str(job)
    env = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return env if env and env != "none" else None


def _dist_rank():
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class PlannedSampler(torch.utils.data.Sampler):
    """Sampler of a CacheDataset (or any dataset with .keys, .dataset and
    the CacheDataset Client settings) that registers each epoch's order as
    an epoch plan.

    Args:
      dataset: the CacheDataset the DataLoader reads.
      shuffle, seed, drop_last: as torch's DistributedSampler (the
        permutation of epoch e is dlcache._order's of (seed, e)).
      rank, world_size: default: torch.distributed's, else 0 and 1.
      plan: register epoch plans (False: a plain sampler of the order).
      plan_name: the plan's name on the node (default: the client name,
        the process id and the rank); ranks need distinct names. Not used
        for a job plan.
      job: the job's id, the same in every rank (default: torchrun's
        TORCHELASTIC_RUN_ID; False: a plan per rank). With one, the local
        ranks share one job plan, named after the job id, the dataset's
        length, seed, world size, padding and shuffling (what every rank
        agrees on).

    Thread-compatible; iterate it in one process (the DataLoader's main
    process) at a time.
    """

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0,
                 rank: Optional[int] = None,
                 world_size: Optional[int] = None, drop_last: bool = False,
                 plan: bool = True, plan_name: Optional[str] = None,
                 job: Any = None) -> None:
        if rank is None or world_size is None:
            dist_rank, dist_world = _dist_rank()
            rank = dist_rank if rank is None else rank
            world_size = dist_world if world_size is None else world_size
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError("rank %r not in [0, %r)" % (rank, world_size))
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = int(seed)
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % world_size:
            # Cut to a multiple of world_size rather than padded up.
            self.num_samples = n // world_size
        else:
            self.num_samples = math.ceil(n / world_size)
        self.total_size = self.num_samples * world_size
        self.plan = plan
        if plan_name is None:
            plan_name = "%s-%d/sampler/rank%d" % (
                getattr(dataset, "client_name", "torch"), os.getpid(), rank)
        self.job = _job_id(job)
        if self.job is not None:
            plan_name = "job/%s/n%d/s%d/w%d/%s%s" % (
                self.job, n, self.seed, world_size,
                "cut" if drop_last else "pad", "" if shuffle else "/ordered")
            if len(plan_name.encode()) > 128:
                digest = hashlib.sha256(plan_name.encode()).hexdigest()[:32]
                plan_name = "job/%s" % digest
        self.plan_name = plan_name
        if plan:
            # The workers attach to it on their first read (to a job plan
            # as this rank).
            dataset._plan_name = plan_name
            dataset._plan_job = (None if self.job is None else
                                 (world_size, rank))
        self._epoch_set = False
        # After a completed pass: (pid, epoch of the next pass as guessed
        # then, the plan epoch it was registered as, the Client's session
        # count then).
        self._next = None
        self._plan_epoch = 0
        self._passes = 0  # job plans without set_epoch: passes so far
        self._warned = False
        self._resume_at = None  # (epoch, first index) of a resumed pass
        self._yielded = 0    # indices handed out in the current pass
        self._pass_epoch = 0

    def state_dict(self) -> Dict[str, Any]:
        """{"epoch", "yielded"}: the current pass's epoch and how many of
        its indices were handed out (counting from the pass's start, a
        resumed pass's skipped ones included)."""
        return {"epoch": self._pass_epoch, "yielded": self._yielded}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """The next pass gives epoch state["epoch"] from index
        state["yielded"] on (then passes start from 0 again)."""
        self.set_epoch(int(state["epoch"]))
        self._resume_at = (self.epoch, max(0, int(state.get("yielded", 0))))
        self._yielded = self._resume_at[1]
        self._pass_epoch = self.epoch

    def _next_pass(self):
        """(epoch, first index) of the next pass (dlcache.torch.DataLoader
        asks)."""
        r = self._resume_at
        return (self.epoch, r[1] if r is not None and r[0] == self.epoch
                else 0)

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next pass gives (as
        DistributedSampler.set_epoch: call it before each epoch)."""
        self.epoch = int(epoch)
        self._epoch_set = True

    def __len__(self) -> int:
        return self.num_samples

    def indices(self, epoch):
        """This rank's dataset indices of `epoch`, in order."""
        return self.job_indices(epoch)[self.rank:self.total_size:
                                       self.world_size]

    def job_indices(self, epoch):
        """The whole job's dataset indices of `epoch` (every rank's): the
        padded (or cut) permutation; rank r reads positions r, r + W, ..."""
        return _order.job_order(len(self.dataset), self.seed, epoch,
                                self.world_size, self.drop_last,
                                self.shuffle)

    def plan_order(self, epoch):
        """This rank's keys of `epoch` in the order they will be read."""
        keys = self.dataset.keys
        return [keys[i] for i in self.indices(epoch)]

    def __iter__(self) -> Iterator[int]:
        epoch = self.epoch
        indices = self.indices(epoch)
        _, start = self._next_pass()
        self._resume_at = None
        self._pass_epoch = epoch
        self._yielded = start
        return self._iter(epoch, indices, start)

    def _iter(self, epoch, indices, start=0):
        client = self._register_pass(epoch, indices, start)
        seen = self._sessions(client)
        # Each index says where it stands: a reader's plan holds this
        # rank's indices in this order; in a job plan `pos` counts this
        # rank's reads (dlcached maps read pos to the job's index rank +
        # pos * world_size).
        positioned = client is not None
        for pos in range(start, len(indices)):
            i = indices[pos]
            if (client is not None and self.plan and pos > start
                    and pos % _SESSION_CHECK_EVERY == 0):
                now = self._sessions(client)
                if now != seen and self._register_rest(epoch, indices, pos,
                                                       client):
                    seen = now
            self._yielded = pos + 1
            yield PlanIndex(i, (self._plan_epoch, pos)) if positioned else i
        if client is not None:
            self._next = (os.getpid(), self._guess_next(epoch),
                          self._plan_epoch + 1, seen)

    # -- registration ------------------------------------------------------

    def _guess_next(self, epoch):
        return epoch + 1 if self._epoch_set else epoch

    def _sessions(self, client):
        if client is None:
            return None
        try:
            return client.sessions_opened
        except DlcacheError:
            return None

    def _register_pass(self, epoch, indices=None, start=0):
        """Registers this pass (unless the last pass registered it as its
        successor) and the next one; a resumed pass (start > 0) registers
        the rest of its epoch. Returns the Client, or None when plans are
        off."""
        if not self.plan:
            return None
        if self.job is not None:
            return self._register_job_pass(epoch)
        if start > 0:
            self._next = None
            self._plan_epoch += 1
            try:
                client = self.dataset._get_client()
            except DlcacheError as e:
                return self._failed(e)
            return client if self._register_rest(
                epoch, indices, start, client) else None
        nxt = self._next
        self._next = None
        try:
            client = self.dataset._get_client()
            # The plan has this pass already if the last pass ran to its
            # end, guessed this epoch and no reconnect lost the plan since.
            continued = (nxt is not None and nxt[0] == os.getpid() and
                         nxt[1] == epoch and
                         nxt[3] == self._sessions(client))
            if continued:
                self._plan_epoch = nxt[2]
            else:
                # First pass, a pass left unfinished, or an epoch other
                # than the one planned next: start the plan afresh.
                self._plan_epoch += 1
                client.register_plan(self.dataset.dataset, self.plan_name,
                                     self._plan_epoch, self.plan_order(epoch),
                                     reset=True)
            client.register_plan(self.dataset.dataset, self.plan_name,
                                 self._plan_epoch + 1,
                                 self.plan_order(self._guess_next(epoch)))
            return client
        except DlcacheError as e:
            return self._failed(e)

    def _job_keys(self, epoch, start=0):
        keys = self.dataset.keys
        return [keys[i] for i in self.job_indices(epoch)[start:]]

    def _register_job_pass(self, epoch):
        """A job plan: attaches this rank to the job's plan and adds this
        pass's epoch and the next (only what no other local rank added:
        the plan's epochs are the sampler's, the same in every rank)."""
        self._plan_epoch = epoch if self._epoch_set else self._passes
        self._passes += 1
        try:
            client = self.dataset._get_client()
            for e, plan_epoch in ((epoch, self._plan_epoch),
                                  (self._guess_next(epoch),
                                   self._plan_epoch + 1)):
                client.register_job_plan(self.dataset.dataset, self.plan_name,
                                         self.world_size, self.rank,
                                         plan_epoch, self._job_keys(e))
            return client
        except DlcacheError as e:
            return self._failed(e)

    def _register_rest(self, epoch, indices, pos, client):
        """A new session (dlcached restarted): the plan is gone; registers
        the epoch from `pos` on and the next one. True when done."""
        keys = self.dataset.keys
        if self.job is not None:
            # The job's order from this rank's row on (the other local
            # ranks add what they lack when they notice).
            start = pos * self.world_size
            try:
                client.register_job_plan(self.dataset.dataset, self.plan_name,
                                         self.world_size, self.rank,
                                         self._plan_epoch,
                                         self._job_keys(epoch, start),
                                         offset=start)
                client.register_job_plan(self.dataset.dataset, self.plan_name,
                                         self.world_size, self.rank,
                                         self._plan_epoch + 1,
                                         self._job_keys(
                                             self._guess_next(epoch)))
                return True
            except DlcacheError as e:
                self._failed(e)
                return False
        try:
            client.register_plan(self.dataset.dataset, self.plan_name,
                                 self._plan_epoch,
                                 [keys[i] for i in indices[pos:]],
                                 offset=pos, reset=True)
            client.register_plan(self.dataset.dataset, self.plan_name,
                                 self._plan_epoch + 1,
                                 self.plan_order(self._guess_next(epoch)))
            return True
        except DlcacheError as e:
            self._failed(e)
            return False

    def _failed(self, e):
        if e.code == UNIMPLEMENTED:
            self.plan = False
            self.dataset._plan_name = None
            self.dataset._plan_job = None
        elif not self._warned:
            self._warned = True
            warnings.warn("dlcache: epoch plan not registered: %s" % e)
        return None
