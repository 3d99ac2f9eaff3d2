"""Tar shards (WebDataset layout) read as samples in place from the cache.

A shard is a tar file (shard-000123.tar) whose members KEY.EXT are grouped
into samples by KEY (the member name up to the first '.' of its last path
component, as WebDataset groups them): KEY.jpg + KEY.cls is one sample.
Shards are fetched whole through dlcached (one get_batch each) and their
tar headers parsed over the zero-copy views of the cached bytes: nothing
is extracted or written anywhere; a member's bytes are a view of the cache
(copied only when the member straddles two of the server's chunks).

Tar: ustar, GNU (long names 'L', base-256 sizes) and pax ('x' headers'
path and size) members; regular files are samples, directories, links and
other types are skipped; every header's checksum is checked.
"""

from typing import (Any, Callable, Dict, Iterator, List, Optional, Sequence,
                    Tuple)

import torch
import torch.utils.data

from .. import _order
from .._listing import Lister, list_dataset, refuse_renamed
from ..torch_data import _ClientMixin
from ._folder import pil_loader

__all__ = ["TarShardDataset", "iter_tar_members", "group_samples"]

_BLOCK = 512


class _Chunks:
    """A file's bytes as a list of chunk views: read(offset, size) is a
    view of one chunk when the range lies in it, else a copy."""

    def __init__(self, views: Sequence[memoryview]) -> None:
        self.views = list(views)
        self.starts = []
        at = 0
        for v in self.views:
            self.starts.append(at)
            at += len(v)
        self.size = at
        self._last = 0

    def read(self, offset: int, size: int) -> memoryview:
        if size == 0:
            return memoryview(b"")
        if offset < 0 or offset + size > self.size:
            raise ValueError("tar: %d bytes at %d past the end (%d)" %
                             (size, offset, self.size))
        k = self._last
        if not self.starts[k] <= offset < self.starts[k] + len(self.views[k]):
            import bisect
            k = bisect.bisect_right(self.starts, offset) - 1
            self._last = k
        at = offset - self.starts[k]
        v = self.views[k]
        if at + size <= len(v):
            return v[at:at + size]
        parts = []
        while size > 0:
            v = self.views[k]
            take = min(size, len(v) - at)
            parts.append(v[at:at + take])
            size -= take
            k += 1
            at = 0
        return memoryview(b"".join(parts))


def _octal(field: bytes) -> int:
    if field and field[0] & 0x80:  # GNU base-256
        value = field[0] & 0x3F
        for b in field[1:]:
            value = (value << 8) | b
        if field[0] & 0x40:  # negative
            value -= 1 << (6 + 8 * (len(field) - 1))
        return value
    text = field.split(b"\0", 1)[0].strip(b" ")
    return int(text, 8) if text else 0


def _cstr(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax(data: bytes) -> Dict[str, str]:
    out = {}
    at = 0
    while at < len(data):
        sp = data.index(b" ", at)
        length = int(data[at:sp])
        record = data[sp + 1:at + length - 1]  # without the newline
        key, _, value = record.partition(b"=")
        out[key.decode()] = value.decode("utf-8", "surrogateescape")
        at += length
    return out


def iter_tar_members(data: Any) -> Iterator[Tuple[str, memoryview]]:
    """(name, bytes) of every regular file of the tar archive `data` (a
    bytes-like, or a list of chunk views), in archive order. Raises
    ValueError for a corrupt archive (bad checksum, truncated)."""
    chunks = data if isinstance(data, _Chunks) else _Chunks(
        data if isinstance(data, list) else [memoryview(data).cast("B")])
    at = 0
    long_name = None
    pax: Dict[str, str] = {}
    while at + _BLOCK <= chunks.size:
        header = bytes(chunks.read(at, _BLOCK))
        if header.count(0) == _BLOCK:
            return  # end of archive (two zero blocks; one is enough)
        stored = _octal(header[148:156])
        computed = sum(header[:148]) + 8 * 32 + sum(header[156:])
        if stored != computed:
            raise ValueError("tar: bad header checksum at offset %d" % at)
        kind = header[156:157]
        size = _octal(header[124:136])
        name = _cstr(header[0:100])
        if header[257:263] == b"ustar\0":  # POSIX: name = prefix/name
            prefix = _cstr(header[345:500])
            if prefix:
                name = prefix + "/" + name
        data_at = at + _BLOCK
        if "size" in pax:
            size = int(pax["size"])
        at = data_at + -(-size // _BLOCK) * _BLOCK
        if at > chunks.size:
            raise ValueError("tar: member %r truncated" % name)
        if kind == b"L":  # GNU long name of the next member
            long_name = _cstr(bytes(chunks.read(data_at, size)))
            continue
        if kind == b"x":  # pax header of the next member
            pax = _pax(bytes(chunks.read(data_at, size)))
            continue
        if kind in (b"g", b"K"):  # pax global header, GNU long link name
            continue
        if long_name is not None:
            name, long_name = long_name, None
        if "path" in pax:
            name = pax["path"]
        pax = {}
        if kind in (b"0", b"\0", b"7"):
            yield name, chunks.read(data_at, size)


def _split_key(name: str) -> Tuple[str, str]:
    """"dir/KEY.a.b" -> ("dir/KEY", "a.b") (WebDataset's grouping)."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (folder + "/" + stem if folder else stem), ext


def group_samples(members: Iterator[Tuple[str, memoryview]]
                  ) -> Iterator[Tuple[str, Dict[str, memoryview]]]:
    """(key, {ext: bytes}) for runs of consecutive members sharing a key."""
    key, sample = None, {}
    for name, data in members:
        k, ext = _split_key(name)
        if k != key and sample:
            yield key, sample
            sample = {}
        key = k
        sample[ext.lower()] = data
    if sample:
        yield key, sample


def _parse_target(data: memoryview) -> Any:
    text = bytes(data).decode("utf-8").strip()
    try:
        return int(text)
    except ValueError:
        return text


class TarShardDataset(_ClientMixin, torch.utils.data.IterableDataset):
    """Samples of WebDataset-style tar shards served by dlcached, yielded
    as (sample, target): sample = transform(loader(the member with one of
    sample_ext)), target = target_transform(the target_ext member: an int
    when it parses as one, else its text).

    Order: each epoch the shards are permuted by dlcache's one epoch order
    (dlcache._order.epoch_permutation(seed, epoch)), split between ranks
    (shard i of the permutation to rank i % W) and then between DataLoader
    workers (every num_workers-th of the rank's shards), as WebDataset's
    split_by_node / split_by_worker; each worker's samples go through a
    shuffle buffer of shuffle_buffer samples (WebDataset's shuffle: a
    random buffered sample out for each one in, the random choices from
    SplitMix64 of (seed, epoch, rank, worker)), so an epoch's order is
    fixed by (seed, epoch, rank, world size, num_workers). Ranks get the
    samples of their shards: counts differ unless the shards hold equal
    numbers and divide evenly.

    Args:
      shards: shard keys; None: the dataset's files under `prefix` whose
        names end with ".tar" (listing through dlcached, or `lister`).
      loader: bytes -> sample (default: an RGB PIL image); None: the
        member's bytes (a read-only view of the cache, valid while the
        sample lives; copy it to keep it).
      sample_ext, target_ext: which members make the sample and target.
      batch_size: None (samples) or B (lists collated with collate_fn,
        default dlcache's collate: stacked samples, target tensor).

    Resume: state_dict() in a worker is {"epoch", "yielded", "worker",
    "num_workers"} (StatefulDataLoader's convention, restored per worker);
    load_state_dict({"epoch": e, "batches": k, "batch_size": B}) in the
    main process resumes after k DataLoader batches of B samples (exact
    while every worker still had samples, which equal-sized shards keep).
    """

    def __init__(self, shards: Optional[Sequence[str]] = None,
                 dataset: str = "default", socket: Optional[str] = None,
                 transform: Optional[Callable] = None,
                 target_transform: Optional[Callable] = None,
                 loader: Optional[Callable[[Any], Any]] = pil_loader,
                 sample_ext: Sequence[str] = ("jpg", "jpeg", "png", "webp",
                                              "ppm", "bmp"),
                 target_ext: str = "cls", shuffle: bool = True,
                 shuffle_buffer: int = 1000, seed: int = 0,
                 rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 batch_size: Optional[int] = None,
                 collate_fn: Optional[Callable] = None,
                 prefix: str = "", lister: Optional[Lister] = None,
                 return_keys: bool = False, client_name: str = "torch",
                 connect_timeout: float = 10.0, rpc_timeout: float = 60.0,
                 **renamed: Any) -> None:
        refuse_renamed(renamed, "TarShardDataset")
        super().__init__()
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        self._init_client(socket, client_name, connect_timeout, rpc_timeout,
                          "bytes", True)
        self.dataset = dataset
        if shards is None:
            entries = list_dataset(
                dataset, prefix, socket=socket, lister=lister,
                client=None if lister is not None else self._get_client())
            shards = [e.name for e in entries if e.name.endswith(".tar")]
        self.shards = list(shards)
        self.transform = transform
        self.target_transform = target_transform
        self.loader = loader
        self.sample_ext = tuple(e.lower().lstrip(".") for e in sample_ext)
        self.target_ext = target_ext.lower().lstrip(".")
        self.shuffle = shuffle
        self.shuffle_buffer = max(1, int(shuffle_buffer))
        self.seed = int(seed)
        self.rank = rank
        self.world_size = world_size
        self.batch_size = batch_size
        self.collate_fn = collate_fn
        self.return_keys = return_keys
        self._epoch = 0
        self._skip = None     # main-process resume: (epoch, batches, B)
        self._worker_resume = None
        self._yielded = 0
        self._pass_epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self._epoch = int(epoch)
        if self._skip is not None and self._skip[0] != self._epoch:
            self._skip = None

    def _rank(self) -> Tuple[int, int]:
        if self.world_size is not None:
            return self.rank, self.world_size
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return self.__dict__.get("_parent_rank") or (0, 1)

    def __getstate__(self):
        state = super().__getstate__()
        state["_parent_rank"] = self._rank()
        return state

    def worker_shards(self, epoch: int, worker: int = 0,
                      num_workers: int = 1) -> List[str]:
        """The shards a worker of this rank reads in `epoch`, in order."""
        rank, world = self._rank()
        perm = _order.epoch_permutation(len(self.shards), self.seed, epoch,
                                        self.shuffle)
        return [self.shards[i] for i in perm[rank::world]][
            worker::num_workers]

    def state_dict(self) -> Dict[str, Any]:
        info = torch.utils.data.get_worker_info()
        return {"epoch": self._pass_epoch, "yielded": self._yielded,
                "worker": info.id if info is not None else None,
                "num_workers": info.num_workers if info is not None else 0}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if "batches" in state:
            self._epoch = int(state["epoch"])
            self._skip = (self._epoch, int(state["batches"]),
                          int(state["batch_size"]))
            return
        if torch.utils.data.get_worker_info() is not None:
            self._worker_resume = (int(state["epoch"]),
                                   int(state["yielded"]))
        else:
            self._epoch = int(state["epoch"])
            self._skip = (self._epoch, int(state["yielded"]), 1)

    def _samples(self, shards: Sequence[str]):
        """(key, sample bytes, target) of the shards, in archive order."""
        for shard in shards:
            batch = self._get_client().get_batch(self.dataset, [shard])
            batch.raise_for_status()
            item = batch[0]
            views = (item.chunks() if item.num_chunks > 1 else
                     [item.view()])
            del batch, item
            for key, members in group_samples(iter_tar_members(views)):
                data = next((members[e] for e in self.sample_ext
                             if e in members), None)
                if data is None or self.target_ext not in members:
                    raise ValueError(
                        "tar shard %s: sample %r lacks a %s or a .%s member "
                        "(has %s)" % (shard, key, "/".join(self.sample_ext),
                                      self.target_ext,
                                      ", ".join(sorted(members))))
                yield key, data, _parse_target(members[self.target_ext])

    def _shuffled(self, samples, epoch, rank, worker):
        """WebDataset's buffer shuffle with SplitMix64 choices."""
        if not self.shuffle or self.shuffle_buffer <= 1:
            yield from samples
            return
        state = _order.mix64(_order.mix64(_order.mix64(
            self.seed & ((1 << 64) - 1)) ^ epoch) ^ (rank << 32 | worker))
        buf: List[Any] = []
        n = 0
        for s in samples:
            buf.append(s)
            if len(buf) < self.shuffle_buffer:
                continue
            n += 1
            k = _order.mix64(state + n) % len(buf)
            buf[k], buf[-1] = buf[-1], buf[k]
            yield buf.pop()
        while buf:
            n += 1
            k = _order.mix64(state + n) % len(buf)
            buf[k], buf[-1] = buf[-1], buf[k]
            yield buf.pop()

    def _make(self, key, data, target):
        sample = self.loader(data) if self.loader is not None else data
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return (key, sample, target) if self.return_keys else (sample, target)

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        epoch = self._epoch
        skip = 0
        if self._worker_resume is not None:
            epoch, skip = self._worker_resume
            self._worker_resume = None
        elif self._skip is not None and self._skip[0] == epoch:
            _, batches, size = self._skip
            # DataLoader batch j came from worker j % workers; the resumed
            # DataLoader asks its worker 0 first, for batch `batches`:
            # that worker takes the stream of worker batches % workers.
            worker = (worker + batches) % workers
            skip = len(range(worker, batches, workers)) * size
        self._skip = None
        if info is None:
            self._epoch = epoch + 1  # without set_epoch: one per pass
        self._pass_epoch = epoch
        self._yielded = skip
        rank = self._rank()[0]
        stream = self._shuffled(
            self._samples(self.worker_shards(epoch, worker, workers)),
            epoch, rank, worker)
        for _ in range(skip):
            if next(stream, None) is None:
                return iter(())
        out = self._counted(stream)
        if self.batch_size is None:
            return out
        return self._batched(out)

    def _counted(self, stream):
        for key, data, target in stream:
            self._yielded += 1
            yield self._make(key, data, target)
            del data

    def _batched(self, samples):
        from ..torch_data import collate
        fn = self.collate_fn or collate
        buf = []
        for s in samples:
            buf.append(s)
            if len(buf) == self.batch_size:
                yield fn(buf)
                buf = []
        if buf:
            yield fn(buf)
