"""DataLoader: torch's DataLoader that saves and restores the middle of an
epoch for dlcache's samplers and datasets."""

from typing import Any, Dict, Iterator, Optional

import torch
import torch.utils.data

from .._stall import StallMeter

__all__ = ["DataLoader"]


class DataLoader(torch.utils.data.DataLoader):
    """torch.utils.data.DataLoader (same arguments) with state_dict() and
    load_state_dict() for a pass over a dlcache sampler or dataset:
    PlannedSampler (as sampler), CacheIterableDataset or TarShardDataset.

    state_dict() is {"epoch", "batches"}: the epoch of the pass in
    progress (or last run) and the batches this loader yielded from it
    (those of a resumed start included). After load_state_dict(), the
    next pass of that epoch (set_epoch(epoch) may be called again, as a
    training loop's restart does) starts after those batches: the rest of
    the epoch, in order, whatever num_workers. It counts what it handed
    out, so the batches prefetched by workers but not yet taken are not
    lost. torchdata's StatefulDataLoader works with the same samplers and
    datasets through their own state_dict/load_state_dict.

    With CacheIterableDataset in per-sample mode, batch_size must be a
    multiple of the dataset's fetch_size (the blocks the workers read).

    The stall the training loop sees (docs/metrics.md): each pass measures
    the time the loop waits in next() and the time it spends between
    batches, and reports them to dlcached through this process's Client
    as the sampler's or the dataset's epoch plan (`stall`: the last pass's
    StallMeter, with total_wait / total_step seconds).
    """

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        self._dlc_epoch: Optional[int] = None
        self._dlc_batches = 0
        # The last pass's StallMeter (its totals: wait and step seconds).
        self.stall: Optional[StallMeter] = None
        from ..torch_data import CacheIterableDataset
        if (isinstance(dataset, CacheIterableDataset) and
                dataset.batch_size is None and self.batch_size is not None
                and self.batch_size % dataset.fetch_size):
            import warnings
            warnings.warn(
                "dlcache: batch_size %d is not a multiple of the dataset's "
                "fetch_size %d: the workers' batches straddle its blocks, "
                "so the order is not the epoch's and len() is not exact "
                "(give CacheIterableDataset fetch_size=%d)"
                % (self.batch_size, dataset.fetch_size, self.batch_size),
                stacklevel=2)

    def _dlc_target(self):
        from ..planned_sampler import PlannedSampler
        from ..torch_data import CacheIterableDataset
        from ._tar import TarShardDataset
        if isinstance(self.sampler, PlannedSampler):
            return "sampler", self.sampler
        if isinstance(self.dataset, CacheIterableDataset):
            return "iterable", self.dataset
        if isinstance(self.dataset, TarShardDataset):
            return "tar", self.dataset
        raise TypeError(
            "dlcache.torch.DataLoader saves the position of a PlannedSampler "
            "(sampler=), a CacheIterableDataset or a TarShardDataset; got "
            "sampler %s and dataset %s" % (type(self.sampler).__name__,
                                           type(self.dataset).__name__))

    def _dlc_samples_per_batch(self):
        return self.batch_size if self.batch_size is not None else 1

    def _dlc_start(self):
        """(epoch, batches already done) of the pass about to start."""
        kind, t = self._dlc_target()
        if kind == "sampler":
            epoch, first = t._next_pass()
            return epoch, first // self._dlc_samples_per_batch()
        if kind == "iterable":
            epoch, block = t._next_pass_start()
            if t.batch_size is not None:
                return epoch, block
            return epoch, block * t.fetch_size // \
                self._dlc_samples_per_batch()
        skip = t._skip
        return t._epoch, (skip[1] if skip is not None and
                          skip[0] == t._epoch else 0)

    def __iter__(self) -> Iterator[Any]:
        epoch, done = self._dlc_start()
        self._dlc_epoch, self._dlc_batches = epoch, done
        it = super().__iter__()
        # The resumed position is used by this pass (the workers got it):
        # a later pass of the same epoch starts from its beginning.
        kind, t = self._dlc_target()
        if kind == "iterable":
            t._pending = None
        elif kind == "tar":
            t._skip = None
        return self._dlc_count(it)

    def _dlc_count(self, it):
        # The loop's wait and step (issue 34), reported on this process's
        # Client as the pass's plan.
        meter = StallMeter(self._dlc_stall_reporter())
        self.stall = meter
        try:
            while True:
                meter.begin()
                try:
                    batch = next(it)
                except StopIteration:
                    return
                meter.handed()
                self._dlc_batches += 1
                yield batch
        finally:
            meter.end()

    def _dlc_stall_reporter(self):
        """Reports through the dataset's Client in this process (opened
        on the first report if the workers do the reading), as the plan
        the sampler or the dataset registers; None if the dataset has no
        Client."""
        kind, t = self._dlc_target()
        ds = self.dataset
        name = getattr(ds, "dataset", None)
        get_client = getattr(ds, "_get_client", None)
        if not isinstance(name, str) or get_client is None:
            return None

        def plan():
            if kind == "sampler":
                return ds.__dict__.get("_plan_name")
            if kind == "iterable" and getattr(t, "plan", False):
                return "%s/rank%d" % (t._plan_owner, t._rank()[0])
            return None

        def report(wait, step, batches, final):
            get_client().report_stall(name, plan() or "", wait, step,
                                      batches, final)

        return report

    def state_dict(self) -> Dict[str, Any]:
        if self._dlc_epoch is None:
            epoch, done = self._dlc_start()
            return {"epoch": epoch, "batches": done}
        return {"epoch": self._dlc_epoch, "batches": self._dlc_batches}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        epoch, batches = int(state["epoch"]), int(state["batches"])
        kind, t = self._dlc_target()
        per = self._dlc_samples_per_batch()
        if kind == "sampler":
            t.load_state_dict({"epoch": epoch, "yielded": batches * per})
        elif kind == "iterable":
            if t.batch_size is not None:
                block = batches
            else:
                if (batches * per) % t.fetch_size:
                    raise ValueError(
                        "resume: batch_size %d is not a multiple of the "
                        "dataset's fetch_size %d" % (per, t.fetch_size))
                block = batches * per // t.fetch_size
            t.load_state_dict({"epoch": epoch, "next_block": block})
        else:
            if self.batch_size is None and t.batch_size is None:
                raise ValueError("resume: give the DataLoader or the "
                                 "TarShardDataset a batch_size")
            size = per if self.batch_size is not None else t.batch_size
            t.load_state_dict({"epoch": epoch, "batches": batches,
                               "batch_size": size})
        self._dlc_epoch = None
