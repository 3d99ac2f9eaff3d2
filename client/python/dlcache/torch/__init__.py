"""dlcache for PyTorch training loops (see docs/python.md).

    import dlcache.torch as dt
    ds = dt.ImageFolder("imagenet", prefix="train", transform=tf)
    sampler = dt.PlannedSampler(ds, seed=0)      # one order, a plan, resume
    loader = dt.DataLoader(ds, batch_size=256, sampler=sampler,
                           num_workers=8)
    for epoch in range(start, 90):
        sampler.set_epoch(epoch)
        for x, y in loader: ...

Names: ImageFolder (torchvision's semantics, from the dataset's listing),
CacheDataset (map-style over keys, with targets), CacheIterableDataset
(batched reads, sharded by rank and worker), TarShardDataset
(WebDataset-style tar shards read in place), PlannedSampler (the one epoch
order as a sampler, registered as an epoch plan), DataLoader (torch's,
with state_dict/load_state_dict for mid-epoch resume), GpuLoader (batches
straight into GPU memory, yielding (x, y)), VarBatch, collate, epoch_order
(the one order of every loader), FileEntry, list_dataset.
"""

from .. import _order
from .._listing import FileEntry, list_dataset, local_lister
from ..planned_sampler import PlanIndex, PlannedSampler
from ..torch_data import CacheDataset, CacheIterableDataset, collate
from ..torch_gpu import (GpuLoader, JpegTransform, VarBatch,
                         cuda_upload_available)
from ._folder import IMG_EXTENSIONS, ImageFolder, pil_loader
from ._loader import DataLoader
from ._tar import TarShardDataset, iter_tar_members

epoch_order = _order.rank_order

__all__ = [
    "CacheDataset", "CacheIterableDataset", "DataLoader", "FileEntry",
    "GpuLoader", "IMG_EXTENSIONS", "ImageFolder", "JpegTransform",
    "PlanIndex",
    "PlannedSampler", "TarShardDataset", "VarBatch", "collate",
    "cuda_upload_available", "epoch_order", "iter_tar_members",
    "list_dataset", "local_lister", "pil_loader",
]
