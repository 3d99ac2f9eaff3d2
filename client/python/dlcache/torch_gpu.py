"""GpuLoader: batches of dataset files from dlcache straight into GPU memory.

    from dlcache.torch_gpu import GpuLoader
    with GpuLoader(keys, dataset="imagenet_raw", socket=SOCK, batch_size=256,
                   sample_shape=(3, 224, 224), targets=labels) as loader:
        for epoch in range(90):
            loader.set_epoch(epoch)
            for x, y in loader:       # uint8 CUDA [B, 3, 224, 224], [B]
                train_step(x, y)

With targets (a sequence aligned with the keys, a dict key -> target or a
callable key -> target) each batch is (x, y), y a tensor of the targets on
the loader's device; return_keys=True puts the batch's keys first. Without
targets, x alone.

The bytes are copied by the GPU's copy engines straight out of dlcache's
shared memory, which the uploader registered with CUDA once (C ABI
dlcache_cuda_c.h over client/cuda's CudaUploader): no worker processes, no
pinned staging copy, no per-sample Python. Raw batches go through the C++
feed (dlc_cuda_feed_*, producer="feed", the default): a C++ thread keeps
`prefetch` batches fetched and copying while Python only submits and takes
them, across epoch boundaries too. The consuming stream (the current
stream when a batch is handed out) waits for the batch's copies on the
device (no host sync), and the tensor is recorded on that stream, so
PyTorch's caching allocator (the buffer pool) reuses its memory only after
the consumer's work on it. The server's leases on the bytes are released
once the copy has completed. producer="thread" is the older Python
producer thread (kept for comparison; JPEG decode always uses it).

Modes:
  sample_shape=(...)   every file is exactly prod(shape) * dtype size bytes;
                       yields a tensor [B, *shape] of `dtype`.
  sample_shape=None    files of any size; yields VarBatch(data, offsets):
                       data a flat uint8 device tensor, offsets an int64 CPU
                       tensor of B + 1 entries (item i is
                       data[offsets[i]:offsets[i + 1]]; VarBatch.split()).
  decode="jpeg"        files are JPEGs, decoded on the GPU with nvjpeg
                       (torchvision.io.decode_jpeg(device="cuda"), which
                       reads the compressed bytes on the host: they are
                       handed to it in place from the shared memory); yields
                       a list of uint8 [3, H, W] device tensors. The decode
                       runs in the producer thread on a CUDA stream of its
                       own, `prefetch` batches ahead; transform=f (e.g. a
                       GPU crop/flip + stack) runs there too, on the decoded
                       list, so the consumer gets a ready batch and only
                       waits on its event.
  decode="nvjpeg"      files are JPEGs, decoded and augmented by dlcache's
                       GPU JPEG pipeline (docs/jpeg_pipeline.md): batched
                       nvJPEG decode (the GPU's hardware JPEG engines where
                       it has them) reading the bytes in place from the
                       shared memory, then one fused kernel for the crop
                       (jpeg=JpegTransform(...): RandomResizedCrop + flip
                       seeded per sample, or the eval resize + centre
                       crop), resize, normalisation, dtype and layout;
                       yields a ready [B, 3, H, W] tensor. Items nvJPEG
                       cannot decode (a PNG, a CMYK JPEG) are decoded on
                       the CPU with the same crop; without nvJPEG the
                       whole batch goes that way (torchvision or PIL
                       decode), with one warning saying why.

Without CUDA (torch.cuda.is_available() false, device="cpu", or the library
built without CUDA: DLC_UNAVAILABLE) the same loader yields CPU tensors and
warns once.

Order: the one epoch order of dlcache's loaders (dlcache._order of seed,
epoch, rank, world size, drop_last; the same as CacheIterableDataset,
PlannedSampler and the LibTorch CacheDataset), split between ranks
(rank/world_size, or torch.distributed's when initialised), every rank
getting the same number of samples and batches (as DistributedSampler):
the order is padded by repeating keys from its start, or, with
drop_last=True, cut to a multiple of the world size.

Epoch plans (plan=True): each pass registers this rank's order of the
epoch and of the next with dlcached (docs/epoch_plans.md), on the
loader's own session, which does the reads: dlcached evicts by Belady's
rule and fills ahead. Under torchrun (TORCHELASTIC_RUN_ID) or with job=,
the ranks of a node share one job plan.

Stall (docs/metrics.md): each pass measures how long the training loop
waits in next() and how long it spends between batches, and reports them
on the loader's session as its plan (dlcache_job_wait_seconds_total,
`dlcachectl status`); the pass iterator's `stall` has the totals.

Resume: state_dict() is {"epoch", "next_batch"}; load_state_dict() makes
the next pass start at that batch of that epoch.
"""

import collections
import ctypes
import hashlib
import math
import os
import queue
import threading
import time
import warnings
from typing import Any, Callable, Dict, Optional, Sequence

import torch

from . import _jpeg, _lib, _order
from ._jpeg import JpegTransform
from ._stall import StallMeter
from ._listing import (Lister, Targets, list_dataset, refuse_renamed,
                       target_getter)

__all__ = ["GpuLoader", "JpegTransform", "VarBatch",
           "cuda_upload_available"]

_OK = 0
_INVALID_ARGUMENT = 3
_DEADLINE_EXCEEDED = 4
_UNAVAILABLE = 14
_FAILED_PRECONDITION = 9
_OUT_OF_RANGE = 11

c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_size_t = ctypes.c_size_t
c_uint64 = ctypes.c_uint64
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p


class _CudaOptions(ctypes.Structure):
    # Filled by dlc_cuda_options_init; spare room for appended fields.
    _fields_ = [("device", c_int), ("stream", c_void_p), ("method", c_char_p),
                ("_spare", ctypes.c_char * 128)]


class _UploaderStats(ctypes.Structure):
    _fields_ = [("device", c_int), ("registered_segments", c_int),
                ("staged_segments", c_int), ("mapping_generation", c_uint64),
                ("uploads", c_uint64), ("bytes", c_uint64),
                ("staged_bytes", c_uint64)]


class _ItemInfo(ctypes.Structure):
    _fields_ = [("code", c_int), ("file_size", c_uint64), ("size", c_uint64),
                ("num_chunks", ctypes.c_uint32),
                ("chunk_count", ctypes.c_uint32), ("hit", c_int)]


class _Options(ctypes.Structure):
    # dlc_options (dlcache_c.h), filled by dlc_options_init; spare room for
    # fields appended later.
    _fields_ = [("socket_path", c_char_p), ("client_name", c_char_p),
                ("connect_timeout_s", ctypes.c_double),
                ("rpc_timeout_s", ctypes.c_double),
                ("release_delay_s", ctypes.c_double),
                ("verify_checksums", c_int), ("numa_node", c_int),
                ("_spare", ctypes.c_char * 256)]


class _Chunk(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("size", c_uint64),
                ("index", ctypes.c_uint32), ("segment", ctypes.c_uint32),
                ("offset", c_uint64), ("checksum", c_uint64)]


class _FeedOptions(ctypes.Structure):
    # dlc_cuda_feed_options, filled by dlc_cuda_feed_options_init.
    _fields_ = [("depth", c_int), ("item_size", c_uint64),
                ("alignment", c_uint64), ("stream", c_void_p),
                ("_spare", ctypes.c_char * 128)]


class _FeedBatchInfo(ctypes.Structure):
    _fields_ = [("tag", c_uint64), ("code", c_int), ("message", c_char_p),
                ("num_items", c_size_t), ("data", c_void_p),
                ("capacity", c_uint64), ("bytes", c_uint64),
                ("offsets", ctypes.POINTER(c_uint64)),
                ("staged_bytes", c_uint64)]


class _FeedStats(ctypes.Structure):
    _fields_ = [("submitted", c_uint64), ("started", c_uint64),
                ("returned", c_uint64), ("failed", c_uint64),
                ("cancelled", c_uint64), ("bytes", c_uint64),
                ("in_flight", c_int), ("max_in_flight", c_int),
                ("fetch_ns", c_uint64), ("copy_ns", c_uint64)]


_declared = {}
_declare_lock = threading.Lock()


def _load():
    """The library with this module's functions declared; None for each
    missing CUDA entry point (an older libdlcache_c.so)."""
    lib = _lib.load()
    with _declare_lock:
        if id(lib) in _declared:
            return lib, _declared[id(lib)]
        P = ctypes.POINTER
        sig = {
            # Client-side calls used here (declared again, with this
            # module's own structs, so that _lib/_client may change).
            "dlc_last_error": (c_char_p, []),
            "dlc_status_name": (c_char_p, [c_int]),
            "dlc_connect": (c_int, [c_char_p, c_char_p, P(c_void_p)]),
            "dlc_options_init": (None, [P(_Options)]),
            "dlc_connect_with_options": (c_int, [P(_Options), P(c_void_p)]),
            "dlc_close": (None, [c_void_p]),
            "dlc_get_batch": (c_int, [c_void_p, c_char_p, P(c_char_p),
                                      c_size_t, P(c_void_p)]),
            "dlc_batch_size": (c_size_t, [c_void_p]),
            "dlc_batch_item": (c_int, [c_void_p, c_size_t, P(_ItemInfo)]),
            "dlc_batch_item_error": (c_char_p, [c_void_p, c_size_t]),
            "dlc_batch_chunk": (c_int, [c_void_p, c_size_t, ctypes.c_uint32,
                                        P(_Chunk)]),
            "dlc_batch_copy_item": (c_int, [c_void_p, c_size_t, c_void_p,
                                            c_uint64]),
            "dlc_batch_free": (None, [c_void_p]),
            "dlc_register_plan": (c_int, [c_void_p, c_char_p, c_char_p,
                                          c_uint64, c_uint64, P(c_char_p),
                                          c_size_t, c_int]),
            "dlc_sessions_opened": (c_int, [c_void_p, P(c_uint64)]),
            "dlc_report_stall": (c_int, [c_void_p, c_char_p, c_char_p,
                                         ctypes.c_double, ctypes.c_double,
                                         c_uint64, c_int]),
            "dlc_register_job_plan": (c_int, [
                c_void_p, c_char_p, c_char_p, ctypes.c_uint32,
                ctypes.c_uint32, c_uint64, c_uint64, P(c_char_p), c_size_t,
                P(c_int), P(c_uint64), P(c_uint64)]),
            # dlcache_cuda_c.h
            "dlc_cuda_last_error": (c_char_p, []),
            "dlc_cuda_options_init": (None, [P(_CudaOptions)]),
            "dlc_cuda_available": (c_int, [c_int]),
            "dlc_cuda_uploader_create": (c_int, [c_void_p, P(_CudaOptions),
                                                 P(c_void_p)]),
            "dlc_cuda_uploader_destroy": (None, [c_void_p]),
            "dlc_cuda_uploader_get_stats": (c_int, [c_void_p,
                                                    P(_UploaderStats)]),
            "dlc_cuda_uploader_release_finished": (c_int, [c_void_p]),
            "dlc_cuda_batch_layout": (c_int, [c_void_p, c_uint64, P(c_uint64),
                                              P(c_uint64)]),
            "dlc_cuda_upload_batch": (c_int, [c_void_p, c_void_p, c_void_p,
                                              c_uint64, P(c_uint64), c_void_p,
                                              c_uint, P(c_void_p)]),
            "dlc_cuda_upload_keys": (c_int, [c_void_p, c_char_p, P(c_char_p),
                                             c_size_t, c_void_p, c_uint64,
                                             c_uint64, P(c_uint64), c_void_p,
                                             c_uint, P(c_void_p)]),
            # The feed (dlcache_cuda_c.h); None in an older library.
            "dlc_cuda_feed_options_init": (None, [P(_FeedOptions)]),
            "dlc_cuda_feed_create": (c_int, [c_void_p, c_char_p,
                                             P(_FeedOptions), P(c_void_p)]),
            "dlc_cuda_feed_destroy": (None, [c_void_p]),
            "dlc_cuda_feed_submit": (c_int, [c_void_p, P(c_char_p), c_size_t,
                                             c_void_p, c_uint64, c_uint64]),
            "dlc_cuda_feed_next": (c_int, [c_void_p, ctypes.c_double,
                                           P(c_void_p)]),
            "dlc_cuda_feed_cancel": (c_int, [c_void_p, P(c_size_t)]),
            "dlc_cuda_feed_get_stats": (c_int, [c_void_p, P(_FeedStats)]),
            "dlc_cuda_feed_batch_get_info": (c_int, [c_void_p,
                                                     P(_FeedBatchInfo)]),
            "dlc_cuda_feed_batch_stream_wait": (c_int, [c_void_p, c_void_p]),
            "dlc_cuda_feed_batch_wait": (c_int, [c_void_p]),
            "dlc_cuda_feed_batch_free": (None, [c_void_p]),
        }
        # The JPEG pipeline (dlc_cuda_jpeg_*); None in an older library.
        sig.update(_jpeg.signatures())
        # A handle of our own to the same loaded library: its function
        # objects are declared here without touching _lib's.
        own = ctypes.CDLL(lib._name)
        fns = {}
        for name, (res, args) in sig.items():
            fn = getattr(own, name, None)
            if fn is not None:
                fn.restype = res
                fn.argtypes = args
            fns[name] = fn
        _declared[id(lib)] = fns
        return lib, fns


def _client_error(fns, code, what):
    from ._client import DlcacheError
    msg = (fns["dlc_last_error"]() or b"").decode(errors="replace")
    return DlcacheError(code, "%s: %s" % (what, msg))


def _cuda_error(fns, code, what):
    from ._client import DlcacheError
    fn = fns.get("dlc_cuda_last_error")
    msg = (fn() or b"").decode(errors="replace") if fn else ""
    return DlcacheError(code, "%s: %s" % (what, msg))


def cuda_upload_available(device=0):
    """(True, "") if libdlcache_c.so can upload to CUDA device `device`,
    else (False, reason)."""
    _, fns = _load()
    if fns.get("dlc_cuda_available") is None:
        return False, "libdlcache_c.so has no CUDA uploader (too old)"
    rc = fns["dlc_cuda_available"](int(device))
    if rc == _OK:
        return True, ""
    return False, (fns["dlc_cuda_last_error"]() or b"").decode(
        errors="replace")


_warned = False


# Seconds without a batch from the C++ feed before GpuLoader warns (and
# again every as many seconds): a batch of 256 JPEGs takes ~0.1 s.
FEED_SILENT_WARN_S = 60.0


def _warn_once(message):
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)


class VarBatch(collections.namedtuple("VarBatch", ["data", "offsets"])):
    """A batch of variable-size files: data is a flat uint8 tensor (on the
    loader's device), offsets an int64 CPU tensor of len(batch) + 1."""

    __slots__ = ()

    def __len__(self):
        return self.offsets.numel() - 1

    def split(self):
        """One uint8 tensor (a view of data) per item."""
        o = self.offsets.tolist()
        return [self.data[o[i]:o[i + 1]] for i in range(len(o) - 1)]


class _Conn:
    """A dlc_client of this loader's own (one per process: not after fork)."""

    def __init__(self, fns, socket, client_name, connect_timeout,
                 numa_node=-1):
        self.fns = fns
        self.ptr = c_void_p()
        self.pid = os.getpid()
        sock = socket.encode() if socket else None
        name = client_name.encode() if client_name else None
        if fns["dlc_options_init"] and fns["dlc_connect_with_options"]:
            opts = _Options()
            fns["dlc_options_init"](ctypes.byref(opts))
            opts.socket_path = sock
            opts.client_name = name
            opts.connect_timeout_s = float(connect_timeout)
            opts.numa_node = int(numa_node)
            rc = fns["dlc_connect_with_options"](ctypes.byref(opts),
                                                 ctypes.byref(self.ptr))
        else:
            rc = fns["dlc_connect"](sock, name, ctypes.byref(self.ptr))
        if rc != _OK:
            raise _client_error(fns, rc, "connect to %s" % socket)

    def close(self):
        if self.ptr and self.pid == os.getpid():
            self.fns["dlc_close"](self.ptr)
        self.ptr = c_void_p()


def _encode_keys(keys):
    enc = [k.encode() if isinstance(k, str) else bytes(k) for k in keys]
    return enc, (c_char_p * len(enc))(*enc)


class _Stop(Exception):
    pass


class GpuLoader:
    """Yields batches of `keys` (dataset-relative paths) on `device`.

    Args:
      keys: the dataset's file keys (the whole dataset; sharded per rank).
      dataset, socket: dlcached's dataset name and Unix socket (None = the
        default /run/dlcache/dlcached.sock).
      batch_size, shuffle, seed, drop_last: as for a DataLoader; the order
        of epoch e is random.Random(seed + e). drop_last also cuts the
        order to a multiple of world_size instead of padding it.
      device: "cuda", "cuda:N" or "cpu".
      sample_shape, dtype: fixed-size mode (see the module doc); None =
        variable-size mode (VarBatch).
      prefetch: batches uploaded ahead of the consumer (>= 1).
      decode: None, "jpeg" (GPU decode with torchvision where it exists)
        or "nvjpeg" (dlcache's GPU JPEG pipeline; see jpeg).
      jpeg: decode="nvjpeg" only: the JpegTransform (default
        JpegTransform(): 224x224 RandomResizedCrop + flip, uint8, NCHW).
      nvjpeg_backend: decode="nvjpeg" only: "auto" (hardware JPEG engines,
        else nvJPEG's GPU backend), "hardware" or "gpu".
      rank, world_size: shard; default torch.distributed's, else 0, 1.
      method: the uploader's copy method ("auto", "memcpy", "memcpy_batch",
        "kernel").
      producer: "auto"/"feed" (raw bytes, and decode="nvjpeg", through
        the C++ feed, whose thread fetches, decodes and augments with no
        Python code per batch; "feed" fails if the library has none) or
        "thread" (Python producer threads).
      transform: decode="jpeg"/"nvjpeg" only: applied to each decoded
        batch; in the producer thread, on its stream, or with the C++ feed
        (decode="nvjpeg") in the iterating thread, on its current stream.
      decode_workers: decode="jpeg"/"nvjpeg" only: threads (>= 1), each
        fetching and decoding every decode_workers-th batch on a CUDA
        stream of its own, so that one batch's fetch and decode call (which
        blocks its thread) overlap another's; batches still come out in
        order. With decode="nvjpeg" and the C++ feed they are the feed's
        threads, else Python producer threads. None (default): 2 for
        decode="nvjpeg", 1 for decode="jpeg".
      numa_node: the NUMA node sent to dlcached when the session opens, so
        that the chunks this loader's misses fill land on that node's
        memory (docs/numa.md). None (default) = the CUDA device's own node
        (dlcache.numa.cuda_device_numa_node; -1 when unknown or on the
        CPU); -1 = no preference.

      targets, target_transform: the batch's targets as a device tensor y
        (see the module doc); return_keys: the batch's keys first.
      plan, job: epoch plans (see the module doc); job: the job id shared
        by the ranks (default torchrun's TORCHELASTIC_RUN_ID; False: a plan
        per rank).
      keys=None: the dataset's listing under `prefix` (or `lister`).

    Thread safety: iterate from one thread. Close with close() or `with`.
    """

    def __init__(self, keys: Optional[Sequence[str]] = None,
                 dataset: str = "default", socket: Optional[str] = None,
                 batch_size: int = 256, device: Any = "cuda",
                 sample_shape: Optional[Sequence[int]] = None,
                 dtype: torch.dtype = torch.uint8, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False, prefetch: int = 2,
                 rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 decode: Optional[str] = None, method: Optional[str] = None,
                 client_name: str = "gpu_loader",
                 connect_timeout: float = 20.0, producer: str = "auto",
                 transform: Optional[Callable] = None,
                 decode_workers: Optional[int] = None,
                 numa_node: Optional[int] = None,
                 targets: Targets = None,
                 target_transform: Optional[Callable] = None,
                 return_keys: bool = False, plan: bool = True,
                 job: Any = None, prefix: str = "",
                 lister: Optional[Lister] = None,
                 jpeg: Optional[JpegTransform] = None,
                 nvjpeg_backend: str = "auto", **renamed: Any) -> None:
        refuse_renamed(renamed, "GpuLoader")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if prefetch < 1:
            raise ValueError("prefetch must be >= 1")
        if decode not in (None, "jpeg", "nvjpeg"):
            raise ValueError("decode must be None, 'jpeg' or 'nvjpeg'")
        if decode_workers is None:
            decode_workers = 2 if decode == "nvjpeg" else 1
        if int(decode_workers) < 1:
            raise ValueError("decode_workers must be >= 1")
        if jpeg is not None and decode != "nvjpeg":
            raise ValueError("jpeg= goes with decode='nvjpeg'")
        if nvjpeg_backend not in ("auto", "hardware", "gpu"):
            raise ValueError("nvjpeg_backend must be auto, hardware or gpu")
        self.jpeg = (jpeg or JpegTransform()) if decode == "nvjpeg" else None
        self.nvjpeg_backend = nvjpeg_backend
        self._jpeg_handles = []
        self.jpeg_fallback_reason = None
        self.cpu_decoded = 0  # items decoded on the CPU (nvjpeg mode)
        self.decode_workers = (int(decode_workers)
                               if decode in ("jpeg", "nvjpeg") else 1)
        if producer not in ("auto", "feed", "thread"):
            raise ValueError("producer must be 'auto', 'feed' or 'thread'")
        if keys is None:
            keys = [e.name for e in list_dataset(dataset, prefix, socket,
                                                 lister)]
        self.keys = list(keys)
        self.targets = targets
        self.target_transform = target_transform
        self._target_of = target_getter(targets, self.keys)
        self.return_keys = return_keys
        self.plan = plan
        self.job = None
        self._plan_name = None
        self._planned = None  # (pid, epoch registered as the next)
        self._resume = 0      # batch the next pass starts at
        self._resume_epoch = None
        self._plan_sessions = None  # the session count when registered
        self._pass = None     # (epoch, first batch, iterator) of this pass
        self.transform = transform
        self._keys_b = None  # encoded once, for the feed
        self.dataset = dataset
        self.socket = socket
        self.batch_size = int(batch_size)
        self.sample_shape = tuple(sample_shape) if sample_shape else None
        self.dtype = dtype
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.prefetch = int(prefetch)
        self.decode = decode
        self.method = method
        self._epoch = None
        self._auto_epoch = 0
        self._plan_epoch = None
        self._iter = None
        self._closed = False
        if rank is None or world_size is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank, world_size = dist.get_rank(), dist.get_world_size()
            else:
                rank, world_size = 0, 1
        self.rank, self.world_size = int(rank), int(world_size)
        if plan:
            from .planned_sampler import _job_id
            self.job = _job_id(job)
            if self.job is not None:
                name = "job/%s/n%d/s%d/w%d/%s%s" % (
                    self.job, len(self.keys), int(seed), self.world_size,
                    "cut" if drop_last else "pad",
                    "" if shuffle else "/ordered")
                if len(name.encode()) > 128:
                    name = "job/" + hashlib.sha256(
                        name.encode()).hexdigest()[:32]
            else:
                name = "%s-%d/gpu/rank%d" % (client_name, os.getpid(),
                                            self.rank)
            self._plan_name = name
        if self.sample_shape is not None:
            elem = torch.empty((), dtype=dtype).element_size()
            self.item_size = int(math.prod(self.sample_shape)) * elem
        else:
            self.item_size = 0

        self._lib, self._fns = _load()
        if numa_node is None:
            numa_node = -1
            if device != "cpu" and torch.cuda.is_available():
                from .numa import cuda_device_numa_node
                numa_node = cuda_device_numa_node(device)
        self.numa_node = int(numa_node)
        if not socket:
            from ._client import DEFAULT_SOCKET
            socket = os.environ.get("DLCACHE_SOCKET") or DEFAULT_SOCKET
            self.socket = socket
        self._conn = _Conn(self._fns, socket, client_name, connect_timeout,
                           self.numa_node)
        self._dataset_b = dataset.encode()
        self._uploader = c_void_p()
        self._feed = c_void_p()
        self._stream = None
        self._decode_streams = []
        self._jpeg_stream = None  # the JPEG feed's (outputs made on it)
        self._jpeg_streams = []   # one per feed thread
        self.producer = "thread"
        self.fallback_reason = None
        dev = torch.device(device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            self.fallback_reason = "torch.cuda.is_available() is False"
        elif dev.type == "cuda" and self._fns.get(
                "dlc_cuda_uploader_create") is None:
            self.fallback_reason = "libdlcache_c.so has no CUDA uploader"
        elif dev.type not in ("cuda", "cpu"):
            raise ValueError("device must be cuda or cpu, not %s" % device)
        if dev.type == "cuda" and self.fallback_reason is None:
            if dev.index is None:
                dev = torch.device("cuda", torch.cuda.current_device())
            self._stream = torch.cuda.Stream(device=dev)
            opts = _CudaOptions()
            self._fns["dlc_cuda_options_init"](ctypes.byref(opts))
            opts.device = dev.index
            opts.stream = self._stream.cuda_stream
            opts.method = method.encode() if method else None
            rc = self._fns["dlc_cuda_uploader_create"](
                self._conn.ptr, ctypes.byref(opts),
                ctypes.byref(self._uploader))
            if rc == _UNAVAILABLE:
                self.fallback_reason = (self._fns["dlc_cuda_last_error"]()
                                        or b"").decode(errors="replace")
                self._stream = None
            elif rc != _OK:
                self._conn.close()
                raise _cuda_error(self._fns, rc, "CUDA uploader")
        if self.fallback_reason is not None:
            _warn_once("dlcache GpuLoader: no CUDA upload (%s); yielding CPU "
                       "tensors" % self.fallback_reason)
            dev = torch.device("cpu")
        self.device = dev
        if decode == "jpeg" and dev.type == "cuda":
            try:
                import torchvision.io  # noqa: F401
            except ImportError:
                self.close()
                raise RuntimeError(
                    "decode='jpeg' on the GPU needs torchvision")
            # The decode (and `transform`) run in the producer threads, each
            # on a stream of its own, `prefetch` batches ahead.
            self._decode_streams = [torch.cuda.Stream(device=dev)
                                    for _ in range(self.decode_workers)]
        jpeg_feed = (decode == "nvjpeg" and producer != "thread" and
                     self._fns.get("dlc_cuda_jpeg_feed_create") is not None)
        if jpeg_feed and self._fns.get(
                "dlc_cuda_jpeg_feed_create_workers") is None:
            self.decode_workers = 1  # a library of one feed thread
        if decode == "nvjpeg" and dev.type == "cuda":
            self._open_nvjpeg(dev, self.decode_workers)
            if jpeg_feed and self._jpeg_handles:
                self._open_jpeg_feed(dev)
            elif producer == "feed":
                self.close()
                raise RuntimeError(
                    "producer='feed' with decode='nvjpeg' needs nvJPEG and "
                    "a library with dlc_cuda_jpeg_feed_create (%s)" % (
                        self.jpeg_fallback_reason or "too old"))
            else:
                # Producer threads, each on a stream of its own.
                self._decode_streams = [torch.cuda.Stream(device=dev)
                                        for _ in range(self.decode_workers)]
        elif decode == "nvjpeg":
            self.jpeg_fallback_reason = "no CUDA (%s)" % (
                self.fallback_reason or "device is cpu")
        # Raw bytes on the GPU: the C++ feed (dlc_cuda_feed_*) keeps
        # `prefetch` batches fetched and copying on a thread of its own.
        has_feed = self._fns.get("dlc_cuda_feed_create") is not None
        if self._uploader and decode is None and producer != "thread":
            if not has_feed:
                if producer == "feed":
                    self.close()
                    raise RuntimeError("libdlcache_c.so has no feed "
                                       "(dlc_cuda_feed_create)")
            else:
                fo = _FeedOptions()
                self._fns["dlc_cuda_feed_options_init"](ctypes.byref(fo))
                fo.depth = self.prefetch
                fo.item_size = self.item_size
                fo.stream = None  # the uploader's: self._stream
                rc = self._fns["dlc_cuda_feed_create"](
                    self._uploader, self._dataset_b, ctypes.byref(fo),
                    ctypes.byref(self._feed))
                if rc != _OK:
                    self.close()
                    raise _cuda_error(self._fns, rc, "CUDA feed")
                self.producer = "feed"
        if self.producer == "feed":
            self._keys_b = [k.encode() if isinstance(k, str) else bytes(k)
                            for k in self.keys]
        # Feed state (consumer thread): batches submitted and not yet
        # taken, in order, and a guess of the next epoch's first batches.
        self._outstanding = collections.deque()
        self._tag = 0
        self._spec = None
        self._var_per_item = 0  # bytes per item to reserve (variable mode)

    def _open_jpeg_feed(self, dev):
        """decode="nvjpeg" through the C++ feed: its threads (one per
        decode worker) fetch, decode and augment `prefetch` batches ahead,
        each on a stream of its own, at high priority so that the decode's
        kernels go ahead of the training step's."""
        k = len(self._jpeg_handles)
        self._jpeg_streams = [torch.cuda.Stream(device=dev, priority=-1)
                              for _ in range(k)]
        self._jpeg_stream = self._jpeg_streams[0]  # outputs are made on it
        fo = _FeedOptions()
        self._fns["dlc_cuda_feed_options_init"](ctypes.byref(fo))
        fo.depth = max(self.prefetch, k)
        fo.stream = self._jpeg_stream.cuda_stream
        ct = self.jpeg.to_c(self.seed, 0)
        if k > 1:
            rc = self._fns["dlc_cuda_jpeg_feed_create_workers"](
                self._uploader, self._dataset_b,
                (c_void_p * k)(*self._jpeg_handles),
                (c_void_p * k)(*[s.cuda_stream for s in self._jpeg_streams]),
                k, ctypes.byref(ct), ctypes.byref(fo),
                ctypes.byref(self._feed))
        else:
            rc = self._fns["dlc_cuda_jpeg_feed_create"](
                self._uploader, self._dataset_b, self._jpeg_handles[0],
                ctypes.byref(ct), ctypes.byref(fo), ctypes.byref(self._feed))
        if rc != _OK:
            self.close()
            raise _cuda_error(self._fns, rc, "JPEG feed")
        self.producer = "feed"

    def _open_nvjpeg(self, dev, count):
        """`count` pipeline handles (one per producer); on UNAVAILABLE the
        loader decodes with torchvision/PIL instead (same crops)."""
        fns = self._fns
        if fns.get("dlc_cuda_jpeg_create") is None:
            self.jpeg_fallback_reason = ("libdlcache_c.so has no JPEG "
                                         "pipeline (too old)")
        else:
            for _ in range(count):
                h, rc, msg = _jpeg.open_handle(fns, dev.index,
                                               self.nvjpeg_backend)
                if rc == _UNAVAILABLE:
                    self.jpeg_fallback_reason = msg
                    break
                if rc != _OK:
                    self.close()
                    from ._client import DlcacheError
                    raise DlcacheError(rc, "JPEG pipeline: %s" % msg)
                self._jpeg_handles.append(h)
        if self.jpeg_fallback_reason is not None:
            for h in self._jpeg_handles:
                fns["dlc_cuda_jpeg_destroy"](h)
            self._jpeg_handles = []
            _warn_once("dlcache GpuLoader: decode='nvjpeg' without nvJPEG "
                       "(%s); decoding with torchvision/PIL and the same "
                       "crops (slower)" % self.jpeg_fallback_reason)

    def jpeg_stats(self):
        """decode="nvjpeg": the pipeline's counters summed over the decode
        workers, its backend, and the CPU-decoded items."""
        out = {"backend": None, "fallback_reason": self.jpeg_fallback_reason,
               "cpu_decoded": self.cpu_decoded}
        for h in self._jpeg_handles:
            s = _jpeg._JpegStats()
            rc = self._fns["dlc_cuda_jpeg_get_stats"](h, ctypes.byref(s))
            if rc != _OK:
                raise _cuda_error(self._fns, rc, "JPEG stats")
            out["backend"] = (s.backend or b"").decode(errors="replace")
            for k, _ in _jpeg._JpegStats._fields_[1:]:
                out[k] = out.get(k, 0) + getattr(s, k)
        return out

    # ---- the epoch ----

    @property
    def on_gpu(self):
        return self.device.type == "cuda"

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass reads (from its first batch)."""
        self._epoch = int(epoch)
        if self._resume_epoch != self._epoch:
            self._resume = 0

    def state_dict(self) -> Dict[str, Any]:
        """{"epoch", "next_batch"}: the pass in progress and the batches
        taken from it (or what load_state_dict set, before the pass)."""
        p = self._pass
        if p is not None:
            return {"epoch": p[0], "next_batch": p[1] + p[2].taken}
        epoch = self._epoch if self._epoch is not None else self._auto_epoch
        return {"epoch": epoch, "next_batch": self._resume}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """The next pass reads epoch state["epoch"] from batch
        state["next_batch"] on: the rest of that epoch, in order."""
        self._epoch = int(state["epoch"])
        self._resume_epoch = self._epoch
        self._resume = max(0, int(state.get("next_batch", 0)))
        self._pass = None

    def _per_rank(self):
        """Samples per rank: equal on every rank (DistributedSampler's
        rule): padded up by repeating keys, or cut down with drop_last."""
        return _order.samples_per_rank(len(self.keys), self.world_size,
                                       self.drop_last)

    def _order_idx(self, epoch):
        """This rank's indices into keys for `epoch` (the one order)."""
        return _order.rank_order(len(self.keys), self.seed, epoch, self.rank,
                                 self.world_size, self.drop_last,
                                 self.shuffle)

    def _job_keys(self, epoch):
        return [self.keys[i] for i in _order.job_order(
            len(self.keys), self.seed, epoch, self.world_size,
            self.drop_last, self.shuffle)]

    def _sessions(self):
        """Sessions the loader's connection opened (a reconnect adds one);
        None where the library cannot tell."""
        fn = self._fns.get("dlc_sessions_opened")
        if fn is None or not self._conn.ptr:
            return None
        n = c_uint64()
        return n.value if fn(self._conn.ptr, ctypes.byref(n)) == _OK else None

    def _register(self, epoch, start_key):
        """Registers this pass's epoch (from its start_key-th key of the
        rank) and the next epoch as the plan of the loader's session.
        Never fails the loader: a refused plan is a warning, a server or
        library without plans is silent."""
        if not self.plan or self._plan_name is None:
            return
        self._plan_sessions = self._sessions()
        fns = self._fns
        name = self._plan_name.encode()
        nxt = epoch + 1
        try:
            if self.job is not None:
                fn = fns.get("dlc_register_job_plan")
                if fn is None:
                    self.plan = False
                    return
                for e in (epoch, nxt):
                    enc, arr = _encode_keys(self._job_keys(e))
                    rc = fn(self._conn.ptr, self._dataset_b, name,
                            self.world_size, self.rank, e, 0, arr, len(enc),
                            None, None, None)
                    if rc != _OK:
                        raise _client_error(fns, rc, "register job plan")
                return
            fn = fns.get("dlc_register_plan")
            if fn is None:
                self.plan = False
                return
            continued = (self._planned == (os.getpid(), epoch)
                         and start_key == 0)
            if not continued:
                keys = self._order(epoch)[start_key:]
                enc, arr = _encode_keys(keys)
                rc = fn(self._conn.ptr, self._dataset_b, name, epoch,
                        start_key, arr, len(enc), 1)
                if rc != _OK:
                    raise _client_error(fns, rc, "register plan")
            enc, arr = _encode_keys(self._order(nxt))
            rc = fn(self._conn.ptr, self._dataset_b, name, nxt, 0, arr,
                    len(enc), 0)
            if rc != _OK:
                raise _client_error(fns, rc, "register plan")
            self._planned = (os.getpid(), nxt)
        except Exception as e:  # never fail the loader for its plan
            from ._client import DlcacheError
            if isinstance(e, DlcacheError) and e.code == 12:
                self.plan = False  # UNIMPLEMENTED: plans are off
            else:
                warnings.warn("dlcache GpuLoader: epoch plan not "
                              "registered: %s" % e)

    def _order(self, epoch):
        return [self.keys[i] for i in self._order_idx(epoch)]

    def __len__(self) -> int:
        n = self._per_rank()
        if self.drop_last:
            return n // self.batch_size
        return (n + self.batch_size - 1) // self.batch_size

    def _batch_indices(self, epoch, first=0):
        """The epoch's batches from batch `first` on: lists of indices."""
        mine = self._order_idx(epoch)
        out = []
        for start in range(first * self.batch_size, len(mine),
                           self.batch_size):
            idx = mine[start:start + self.batch_size]
            if self.drop_last and len(idx) < self.batch_size:
                break
            out.append(idx)
        return out

    def _batches(self, epoch, encoded=False, first=0):
        """The epoch's batches: lists of keys (or of encoded keys)."""
        src = self._keys_b if encoded else self.keys
        return [[src[i] for i in idx]
                for idx in self._batch_indices(epoch, first)]

    def __iter__(self):
        if self._closed:
            raise RuntimeError("GpuLoader is closed")
        if self._conn.pid != os.getpid():
            raise RuntimeError("GpuLoader cannot be used after fork(); "
                               "create one per process")
        if self._iter is not None:
            self._iter.close()
        if self._epoch is None:
            epoch = self._auto_epoch
            self._auto_epoch += 1
        else:
            epoch = self._epoch
        first, self._resume = self._resume, 0
        self._resume_epoch = None
        self._register(epoch, first * self.batch_size)
        if self.producer == "feed":
            inner = _FeedIter(self, epoch, first)
        else:
            inner = _EpochIter(self, self._batches(epoch, first=first),
                               self._batch_indices(epoch, first), epoch)
        it = _Labeled(self, inner, self._batch_indices(epoch, first), epoch,
                      first)
        it.stall = StallMeter(self._stall_reporter())
        self._iter = it
        self._pass = (epoch, first, it)
        return it

    def _stall_reporter(self):
        """The pass's stall reports (issue 34) on this loader's session,
        as its plan, if it has one; None from a library without them."""
        fn = self._fns.get("dlc_report_stall")
        if fn is None:
            return None
        dataset = self._dataset_b

        def report(wait, step, batches, final):
            if not self._conn.ptr or self._conn.pid != os.getpid():
                return
            plan = self._plan_name if self.plan else None
            rc = fn(self._conn.ptr, dataset, (plan or "").encode(),
                    float(wait), float(step), int(batches),
                    1 if final else 0)
            if rc != _OK:
                raise _client_error(self._fns, rc, "report stall")

        return report

    def _labels(self, idx):
        ys = []
        for i in idx:
            t = self._target_of(i)
            if self.target_transform is not None:
                t = self.target_transform(t)
            ys.append(t)
        if ys and isinstance(ys[0], torch.Tensor):
            y = torch.stack(ys)
        else:
            y = torch.as_tensor(ys)
        if self.device.type == "cuda":
            y = y.pin_memory().to(self.device, non_blocking=True)
        return y

    # ---- the feed (consumer thread) ----

    def _feed_submit(self, keys_b, epoch, idx=None):
        if self.decode == "nvjpeg":
            return self._jpeg_feed_submit(keys_b, epoch, idx)
        n = len(keys_b)
        if self.item_size:
            nbytes = n * self.item_size
        else:
            nbytes = n * self._var_per_item
        # Allocated on the upload stream, whose order the copies follow:
        # the caching allocator hands the block out again only after the
        # work recorded on it (the consumer's, see __next__).
        with torch.cuda.stream(self._stream):
            buf = torch.empty(max(nbytes, 1), dtype=torch.uint8,
                              device=self.device)
        tag = self._tag
        self._tag += 1
        rc = self._fns["dlc_cuda_feed_submit"](
            self._feed, (c_char_p * n)(*keys_b), n, c_void_p(buf.data_ptr()),
            nbytes, tag)
        if rc != _OK:
            raise _cuda_error(self._fns, rc, "feed submit")
        self._outstanding.append((tag, epoch, buf, keys_b, None))

    def _jpeg_feed_submit(self, keys_b, epoch, idx):
        n = len(keys_b)
        ct = self.jpeg.to_c(self.seed, epoch)
        # On the feed's stream, as for the raw feed (see above).
        with torch.cuda.stream(self._jpeg_stream):
            x = self.jpeg.empty(n, self.device)
        tag = self._tag
        self._tag += 1
        rc = self._fns["dlc_cuda_jpeg_feed_submit"](
            self._feed, (c_char_p * n)(*keys_b), (c_uint64 * n)(*idx), n,
            ctypes.byref(ct), c_void_p(x.data_ptr()),
            x.numel() * x.element_size(), tag)
        if rc != _OK:
            raise _cuda_error(self._fns, rc, "JPEG feed submit")
        self._outstanding.append((tag, epoch, x, keys_b, idx))

    def _jpeg_feed_batch(self, fb, x, keys_b, idx, epoch):
        """A JPEG feed batch taken: the items nvJPEG could not decode (a
        PNG, ...) decoded on the CPU with their crops, then `transform`;
        on the current stream, which already waits for the decode."""
        n = len(keys_b)
        fns = self._fns
        items = (_jpeg._JpegItem * n)()
        failed = c_size_t()
        rc = fns["dlc_cuda_jpeg_feed_batch_items"](fb, items, n,
                                                   ctypes.byref(failed))
        if rc != _OK:
            raise _cuda_error(fns, rc, "JPEG feed items")
        if failed.value:
            bad = [i for i in range(n) if items[i].code != _OK]
            keys = [keys_b[i].decode() for i in bad]
            ct = self.jpeg.to_c(self.seed, epoch)
            b = self._get_batch(keys)
            try:
                for j, i in enumerate(bad):
                    msg = (fns["dlc_cuda_jpeg_feed_batch_item_error"](fb, i)
                           or b"").decode(errors="replace")
                    self._cpu_item(b, j, keys[j], idx[i], ct, x[i], msg)
            finally:
                self._fns["dlc_batch_free"](b)
        if self.transform is not None:
            x = self.transform(x)
        return x

    def _feed_take(self):
        """The next batch handle of the feed (blocks; the GIL is free).
        Says so, every FEED_SILENT_WARN_S seconds, while none comes."""
        fb = c_void_p()
        t0 = time.monotonic()
        warned = 0
        while True:
            rc = self._fns["dlc_cuda_feed_next"](self._feed, 0.5,
                                                 ctypes.byref(fb))
            if rc == _OK:
                return fb
            if rc != _DEADLINE_EXCEEDED:
                raise _cuda_error(self._fns, rc, "feed next")
            waited = time.monotonic() - t0
            if waited >= FEED_SILENT_WARN_S * (warned + 1):
                warned += 1
                warnings.warn(
                    "dlcache GpuLoader: no batch from the feed for %.0f s "
                    "(feed %s)%s" % (
                        waited, self.feed_stats(),
                        "; a decode thread may be stuck inside nvJPEG "
                        "(docs/jpeg_pipeline.md, Limits)"
                        if self.decode == "nvjpeg" else ""),
                    RuntimeWarning, stacklevel=2)

    def _feed_discard(self):
        """Drops every outstanding batch: those not started are cancelled,
        the others taken and their memory kept until their copies are
        done (the upload stream waits for them)."""
        if not self._feed or not self._outstanding:
            self._outstanding.clear()
            self._spec = None
            return
        n = c_size_t()
        self._fns["dlc_cuda_feed_cancel"](self._feed, ctypes.byref(n))
        for _ in range(min(n.value, len(self._outstanding))):
            self._outstanding.pop()
        stream = (self._jpeg_stream if self.decode == "nvjpeg"
                  else self._stream)
        while self._outstanding:
            buf = self._outstanding.popleft()[2]
            fb = self._feed_take()
            self._fns["dlc_cuda_feed_batch_stream_wait"](
                fb, c_void_p(stream.cuda_stream))
            self._fns["dlc_cuda_feed_batch_free"](fb)
            buf.record_stream(stream)
            del buf
        self._spec = None

    def feed_stats(self):
        """The feed's counters (empty dict without the feed)."""
        if not self._feed:
            return {}
        s = _FeedStats()
        rc = self._fns["dlc_cuda_feed_get_stats"](self._feed, ctypes.byref(s))
        if rc != _OK:
            raise _cuda_error(self._fns, rc, "feed stats")
        return {k: getattr(s, k) for k, _ in _FeedStats._fields_}

    # ---- producing one batch (producer thread) ----

    def _get_batch(self, keys):
        enc, arr = _encode_keys(keys)
        b = c_void_p()
        rc = self._fns["dlc_get_batch"](self._conn.ptr, self._dataset_b, arr,
                                        len(keys), ctypes.byref(b))
        if rc != _OK:
            raise _client_error(self._fns, rc, "get_batch")
        return b

    def _item_info(self, b, i, key):
        """Item i of batch b's dlc_item_info; raises for an item the cache
        could not serve (the message names the key)."""
        from ._client import DlcacheError
        info = _ItemInfo()
        rc = self._fns["dlc_batch_item"](b, i, ctypes.byref(info))
        if rc != _OK:
            raise _client_error(self._fns, rc, "batch item")
        if info.code != _OK:
            err = (self._fns["dlc_batch_item_error"](b, i) or b"").decode(
                errors="replace")
            raise DlcacheError(info.code, "%s: %s" % (key, err))
        return info

    def _check_items(self, b, keys):
        """Per-item sizes and chunk counts; raises for a failed item."""
        sizes, nchunks = [], []
        for i, key in enumerate(keys):
            info = self._item_info(b, i, key)
            sizes.append(info.size)
            nchunks.append(info.num_chunks)
        return sizes, nchunks

    def _produce_gpu_fixed(self, keys):
        n = len(keys)
        nbytes = n * self.item_size
        buf = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        enc, arr = _encode_keys(keys)
        rc = self._fns["dlc_cuda_upload_keys"](
            self._uploader, self._dataset_b, arr, n, c_void_p(buf.data_ptr()),
            nbytes, self.item_size, None, None, 0, None)
        if rc != _OK:
            raise _cuda_error(self._fns, rc, "upload")
        return buf.view(self.dtype).view((n,) + self.sample_shape)

    def _produce_gpu_var(self, keys):
        n = len(keys)
        b = self._get_batch(keys)
        try:
            offsets = (c_uint64 * (n + 1))()
            total = c_uint64()
            rc = self._fns["dlc_cuda_batch_layout"](b, 1, offsets,
                                                    ctypes.byref(total))
            if rc != _OK:
                raise _cuda_error(self._fns, rc, "batch layout")
            buf = torch.empty(max(total.value, 1), dtype=torch.uint8,
                              device=self.device)
            rc = self._fns["dlc_cuda_upload_batch"](
                self._uploader, b, c_void_p(buf.data_ptr()), buf.numel(),
                offsets, None, 0, None)
            if rc != _OK:
                raise _cuda_error(self._fns, rc, "upload")
            b = None  # the upload owns it now
        finally:
            if b is not None:
                self._fns["dlc_batch_free"](b)
        off = torch.tensor(list(offsets), dtype=torch.int64)
        return VarBatch(buf[:total.value], off)

    def _host_tensors(self, b, keys):
        """CPU uint8 tensors of the items: zero-copy views of the shared
        memory for one-chunk items (read-only: never write them), copies
        for multi-chunk ones. Valid while the batch `b` is alive."""
        sizes, nchunks = self._check_items(b, keys)
        chunk = _Chunk()
        out = []
        with warnings.catch_warnings():
            # frombuffer warns about read-only memory: these views are
            # never written.
            warnings.simplefilter("ignore", UserWarning)
            self._host_views(b, sizes, nchunks, chunk, out)
        return out

    def _host_views(self, b, sizes, nchunks, chunk, out):
        for i, (size, nc) in enumerate(zip(sizes, nchunks)):
            if size == 0:
                out.append(torch.empty(0, dtype=torch.uint8))
            elif nc == 1:
                rc = self._fns["dlc_batch_chunk"](b, i, 0, ctypes.byref(chunk))
                if rc != _OK:
                    raise _client_error(self._fns, rc, "batch chunk")
                arr = (ctypes.c_char * size).from_address(chunk.data)
                out.append(torch.frombuffer(arr, dtype=torch.uint8))
            else:
                t = torch.empty(size, dtype=torch.uint8)
                rc = self._fns["dlc_batch_copy_item"](
                    b, i, c_void_p(t.data_ptr()), size)
                if rc != _OK:
                    raise _client_error(self._fns, rc, "copy item")
                out.append(t)

    def _decode(self, tensors):
        try:
            import torchvision.io as tio
        except ImportError:
            tio = None
        if tio is not None:
            if self.on_gpu:
                return tio.decode_jpeg(tensors, mode=tio.ImageReadMode.RGB,
                                       device=self.device)
            return [tio.decode_jpeg(t, mode=tio.ImageReadMode.RGB)
                    for t in tensors]
        import io
        import numpy as np
        from PIL import Image
        out = []
        for t in tensors:
            img = Image.open(io.BytesIO(t.numpy().tobytes())).convert("RGB")
            out.append(torch.from_numpy(np.asarray(img).copy()).permute(
                2, 0, 1))
        return out

    def _produce_nvjpeg(self, j, b, keys, idx, epoch, stream):
        """decode="nvjpeg": the batch `b` of `keys` (dataset indices `idx`)
        decoded and augmented into a new tensor, queued on `stream` (None
        on the CPU). b must stay alive until that work is done."""
        t = self.jpeg
        fns = self._fns
        n = len(keys)
        ct = t.to_c(self.seed, epoch)
        x = t.empty(n, self.device)
        if not self._jpeg_handles:
            self._fallback_decode(b, keys, idx, ct, x)
            return x
        h = self._jpeg_handles[j]
        items = (_jpeg._JpegItem * n)()
        failed = c_size_t()
        enc, karr = _encode_keys(keys)
        iarr = (c_uint64 * n)(*idx)
        rc = fns["dlc_cuda_jpeg_decode_batch"](
            h, b, karr, iarr, ctypes.byref(ct), c_void_p(x.data_ptr()),
            x.numel() * x.element_size(), c_void_p(stream.cuda_stream),
            items, ctypes.byref(failed))
        if rc != _OK:
            raise _cuda_error(fns, rc, "JPEG decode")
        if failed.value:
            for i in range(n):
                if items[i].code != _OK:
                    msg = (fns["dlc_cuda_jpeg_item_error"](h, i) or
                           b"").decode(errors="replace")
                    self._cpu_item(b, i, keys[i], idx[i], ct, x[i], msg)
        return x

    def _item_bytes(self, b, i, key):
        """Item i of batch b as bytes; raises for an item the cache could
        not serve."""
        info = self._item_info(b, i, key)
        buf = ctypes.create_string_buffer(max(int(info.size), 1))
        if info.size:
            rc = self._fns["dlc_batch_copy_item"](
                b, i, ctypes.cast(buf, c_void_p), info.size)
            if rc != _OK:
                raise _client_error(self._fns, rc, "copy item")
        return buf.raw[:info.size]

    def _cpu_item(self, b, i, key, index, ct, out, gpu_error=""):
        """Item i decoded on the CPU (PIL), then the pipeline's crop for it
        applied in torch ops into `out`; raises, naming the key, when the
        CPU cannot decode it either."""
        from ._client import DlcacheError
        data = self._item_bytes(b, i, key)
        try:
            img = _jpeg.cpu_decode(data)
        except Exception as e:  # PIL's many error types
            raise DlcacheError(3, "%s: cannot decode (%s%s)" % (
                key, ("GPU: %s; CPU: " % gpu_error) if gpu_error else "",
                e)) from None
        box = _jpeg.crop_box(self._fns, ct, img.shape[2], img.shape[1],
                             index)
        _jpeg.apply_crop(img, box, self.jpeg, out)
        self.cpu_decoded += 1

    def _fallback_decode(self, b, keys, idx, ct, x):
        """No nvJPEG: the batch decoded by torchvision (on the GPU where it
        can) or PIL, then the pipeline's crops in torch ops."""
        tensors = self._host_tensors(b, keys)
        imgs = None
        try:
            imgs = self._decode(tensors)
        except Exception:  # a PNG or a corrupt file: one by one below
            imgs = None
        for i in range(len(keys)):
            img = imgs[i] if imgs is not None else None
            if img is None or img.shape[0] != 3:
                self._cpu_item(b, i, keys[i], idx[i], ct, x[i])
                continue
            box = _jpeg.crop_box(self._fns, ct, img.shape[2], img.shape[1],
                                 idx[i])
            _jpeg.apply_crop(img, box, self.jpeg, x[i])

    def _produce_cpu(self, keys, idx=None, epoch=0):
        n = len(keys)
        b = self._get_batch(keys)
        try:
            if self.decode == "nvjpeg":
                return self._produce_nvjpeg(0, b, keys, idx, epoch, None)
            if self.decode == "jpeg":
                return self._decode(self._host_tensors(b, keys))
            sizes, _ = self._check_items(b, keys)
            if self.item_size:
                from ._client import DlcacheError
                for key, s in zip(keys, sizes):
                    if s != self.item_size:
                        raise DlcacheError(3, "%s: %d bytes, expected %d" % (
                            key, s, self.item_size))
                offs = [i * self.item_size for i in range(n + 1)]
            else:
                offs = [0]
                for s in sizes:
                    offs.append(offs[-1] + s)
            buf = torch.empty(max(offs[-1], 1), dtype=torch.uint8)
            base = buf.data_ptr()
            for i in range(n):
                rc = self._fns["dlc_batch_copy_item"](
                    b, i, c_void_p(base + offs[i]), offs[i + 1] - offs[i])
                if rc != _OK:
                    raise _client_error(self._fns, rc, "copy item")
            if self.item_size:
                return buf.view(self.dtype).view((n,) + self.sample_shape)
            return VarBatch(buf[:offs[-1]], torch.tensor(offs,
                                                         dtype=torch.int64))
        finally:
            self._fns["dlc_batch_free"](b)

    # ---- teardown ----

    def stats(self):
        """The uploader's counters (empty dict on the CPU path)."""
        if not self._uploader:
            return {}
        s = _UploaderStats()
        rc = self._fns["dlc_cuda_uploader_get_stats"](self._uploader,
                                                      ctypes.byref(s))
        if rc != _OK:
            raise _cuda_error(self._fns, rc, "stats")
        return {k: getattr(s, k) for k, _ in _UploaderStats._fields_}

    def release_finished(self):
        """Releases the leases of uploads whose copies have completed."""
        if self._uploader:
            self._fns["dlc_cuda_uploader_release_finished"](self._uploader)

    def close(self):
        """Stops the producer, waits for the copies in flight, releases
        every lease and closes the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._iter is not None:
            self._iter.close()
            self._iter = None
        if self._feed:
            # Waits for the copies of the batches not taken, releases
            # their leases.
            self._fns["dlc_cuda_feed_destroy"](self._feed)
            self._feed = c_void_p()
            self._outstanding.clear()
        if self._stream is not None:
            self._stream.synchronize()
        for stream in self._decode_streams:
            stream.synchronize()
        for stream in self._jpeg_streams:
            stream.synchronize()
        for h in self._jpeg_handles:
            self._fns["dlc_cuda_jpeg_destroy"](h)
        self._jpeg_handles = []
        if self._uploader:
            self._fns["dlc_cuda_uploader_destroy"](self._uploader)
            self._uploader = c_void_p()
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


class _EpochIter:
    """One epoch: producer threads upload (or fetch and decode) up to
    `prefetch` batches ahead. With k producers (decode_workers), producer j
    makes batches j, j + k, ... into a queue of its own, and the consumer
    takes batch i from queue i % k, so the order stays the epoch's."""

    def __init__(self, loader, batches, batch_idx=None, epoch=0):
        self._loader = loader
        self._n = len(batches)
        self._epoch = epoch
        if batch_idx is None:
            batch_idx = [None] * len(batches)
        work = list(zip(batches, batch_idx))
        k = max(1, min(loader.decode_workers, max(1, self._n)))
        depth = max(1, -(-loader.prefetch // k))  # ceil(prefetch / k)
        self._qs = [queue.Queue(maxsize=depth) for _ in range(k)]
        self._stop = threading.Event()
        self._done = False
        self._taken = 0
        self.taken = 0
        self._threads = [
            threading.Thread(target=self._run, args=(j, work[j::k]),
                             name="dlcache-gpu-loader-%d" % j, daemon=True)
            for j in range(k)]
        for t in self._threads:
            t.start()

    def __len__(self):
        return self._n

    def __iter__(self):
        return self

    def _put(self, q, item):
        while not self._stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stop()

    def _run(self, j, work):
        ld = self._loader
        q = self._qs[j]
        pending = []  # (batch handle, event): host bytes a decode may read
        try:
            if ld.on_gpu:
                # JPEGs: decoded (and transformed) here, on a stream of
                # this producer's own, `prefetch` batches ahead.
                stream = (ld._decode_streams[j] if ld.decode in (
                    "jpeg", "nvjpeg") else ld._stream)
                with torch.cuda.device(ld.device), torch.cuda.stream(stream):
                    for keys, idx in work:
                        if self._stop.is_set():
                            raise _Stop()
                        if ld.decode == "nvjpeg":
                            b = ld._get_batch(keys)
                            try:
                                out = ld._produce_nvjpeg(j, b, keys, idx,
                                                         self._epoch, stream)
                                if ld.transform is not None:
                                    out = ld.transform(out)
                            except BaseException:
                                # The device work may still read b.
                                stream.synchronize()
                                ld._fns["dlc_batch_free"](b)
                                raise
                        elif ld.decode == "jpeg":
                            b = ld._get_batch(keys)
                            try:
                                out = ld._decode(ld._host_tensors(b, keys))
                                if ld.transform is not None:
                                    out = ld.transform(out)
                            except BaseException:
                                ld._fns["dlc_batch_free"](b)
                                raise
                        elif ld.item_size:
                            out, b = ld._produce_gpu_fixed(keys), None
                        else:
                            out, b = ld._produce_gpu_var(keys), None
                        ev = torch.cuda.Event()
                        ev.record(stream)
                        if b is not None:
                            pending.append((b, ev))
                        pending = self._free_done(pending)
                        self._put(q, (out, ev))
                    stream.synchronize()
                    pending = self._free_done(pending, wait=True)
                    ld.release_finished()
            else:
                for keys, idx in work:
                    if self._stop.is_set():
                        raise _Stop()
                    out = ld._produce_cpu(keys, idx, self._epoch)
                    if (ld.decode in ("jpeg", "nvjpeg")
                            and ld.transform is not None):
                        out = ld.transform(out)
                    self._put(q, (out, None))
            self._put(q, None)
        except _Stop:
            pass
        except BaseException as e:  # handed to the consumer
            try:
                self._put(q, e)
            except _Stop:
                pass
        finally:
            self._free_done(pending, wait=True)

    def _free_done(self, pending, wait=False):
        keep = []
        for b, ev in pending:
            if wait:
                ev.synchronize()
            if wait or ev.query():
                self._loader._fns["dlc_batch_free"](b)
            else:
                keep.append((b, ev))
        return keep

    def __next__(self):
        if self._done:
            raise StopIteration
        j = self._taken % len(self._qs)
        q, thread = self._qs[j], self._threads[j]
        while True:
            try:
                item = q.get(timeout=1.0)
                break
            except queue.Empty:
                if not thread.is_alive() and q.empty():
                    self._finish()
                    raise RuntimeError("GpuLoader producer thread died")
        if item is None:
            # Producer j ran out first: every batch has been taken.
            self._finish()
            raise StopIteration
        if isinstance(item, BaseException):
            self._finish()
            raise item
        self._taken += 1
        self.taken = self._taken
        out, ev = item
        if ev is not None:
            stream = torch.cuda.current_stream(self._loader.device)
            stream.wait_event(ev)
            for t in (out if isinstance(out, list) else
                      [out.data] if isinstance(out, VarBatch) else [out]):
                t.record_stream(stream)
        return out

    def _finish(self):
        """Stops the producers and drops what they prefetched."""
        self._done = True
        self._stop.set()
        for q in self._qs:
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        for t in self._threads:
            t.join()

    def close(self):
        """Stops the producers and drops the batches they prefetched."""
        self._finish()


class _FeedIter:
    """One epoch through the C++ feed: the consumer thread submits batches
    (device memory from the caching allocator) `prefetch` + 2 ahead; the
    feed's thread fetches and copies them; __next__ makes the current
    stream wait for the batch's copies (no host sync).

    Near the end of the epoch the first batches of the next one (epoch + 1,
    the usual next set_epoch) are submitted too, so that the copy engines
    do not drain between epochs; if the next epoch turns out different,
    they are dropped."""

    def __init__(self, loader, epoch, first=0):
        ld = self._loader = loader
        self._epoch = epoch
        spec = ld._spec
        if (spec is not None and spec[0] == epoch and first == 0 and all(
                o[1] == epoch for o in ld._outstanding)):
            # The batches submitted ahead are this epoch's first ones.
            self._batches, self._next, self._idx = spec[1], spec[2], spec[3]
        else:
            ld._feed_discard()
            self._batches = ld._batches(epoch, encoded=True, first=first)
            self._idx = ld._batch_indices(epoch, first)
            self._next = 0
        ld._spec = None
        self._n = len(self._batches)
        self._i = 0
        self.taken = 0
        self._done = False
        self._ahead = ld.prefetch + 2

    def __len__(self):
        return self._n

    def __iter__(self):
        return self

    def _top_up(self):
        ld = self._loader
        # Variable sizes: one batch at a time until a batch has shown how
        # much to reserve per item.
        ahead = (1 if not ld.item_size and not ld._var_per_item and
                 ld.decode != "nvjpeg" else self._ahead)
        while len(ld._outstanding) < ahead:
            if self._next < self._n:
                ld._feed_submit(self._batches[self._next], self._epoch,
                                self._idx[self._next])
                self._next += 1
                continue
            # This epoch is all submitted: start on the next one.
            if ld._spec is None:
                nxt = self._epoch + 1
                ld._spec = [nxt, ld._batches(nxt, encoded=True), 0,
                            ld._batch_indices(nxt)]
            spec = ld._spec
            if spec[2] >= len(spec[1]):
                return
            ld._feed_submit(spec[1][spec[2]], spec[0], spec[3][spec[2]])
            spec[2] += 1

    def __next__(self):
        if self._done or self._i >= self._n:
            self._done = True
            raise StopIteration
        ld = self._loader
        if ld._closed or not ld._feed:
            raise RuntimeError("GpuLoader is closed")
        self._top_up()
        tag, epoch, buf, keys_b, idx = ld._outstanding.popleft()
        self._i += 1
        self.taken = self._i
        fb = ld._feed_take()
        try:
            info = _FeedBatchInfo()
            rc = ld._fns["dlc_cuda_feed_batch_get_info"](fb,
                                                         ctypes.byref(info))
            if rc != _OK:
                raise _cuda_error(ld._fns, rc, "feed batch")
            if info.tag != tag:
                raise RuntimeError("GpuLoader: feed out of order (%d, %d)" %
                                   (info.tag, tag))
            n = len(keys_b)
            stream = torch.cuda.current_stream(ld.device)
            if info.code == _OK:
                rc = ld._fns["dlc_cuda_feed_batch_stream_wait"](
                    fb, c_void_p(stream.cuda_stream))
                if rc != _OK:
                    raise _cuda_error(ld._fns, rc, "feed stream wait")
                buf.record_stream(stream)
                if ld.decode == "nvjpeg":
                    return ld._jpeg_feed_batch(fb, buf, keys_b, idx, epoch)
                if ld.item_size:
                    return buf.view(ld.dtype).view((n,) + ld.sample_shape)
                offs = torch.tensor(info.offsets[:n + 1], dtype=torch.int64)
                ld._var_per_item = max(ld._var_per_item,
                                       -(-info.bytes // max(n, 1)))
                return VarBatch(buf[:info.bytes], offs)
            if (info.code == _OUT_OF_RANGE and not ld.item_size and
                    ld.decode != "nvjpeg"):
                # Bigger than reserved: reserve more from now on, and get
                # this one the direct way (one batch, in order).
                ld._var_per_item = max(
                    ld._var_per_item,
                    int(-(-info.bytes // max(n, 1)) * 1.25) + 1)
                del buf
                keys = [k.decode() for k in keys_b]
                with torch.cuda.stream(ld._stream):
                    out = ld._produce_gpu_var(keys)
                stream.wait_stream(ld._stream)
                out.data.record_stream(stream)
                return out
            from ._client import DlcacheError
            raise DlcacheError(info.code, (info.message or b"").decode(
                errors="replace"))
        finally:
            ld._fns["dlc_cuda_feed_batch_free"](fb)

    def close(self):
        """Ends this epoch for the consumer; what it submitted ahead stays
        with the loader (taken by the next epoch or dropped)."""
        self._done = True


# Batches between looks at the connection's session count.
_SESSION_CHECK_EVERY = 8


class _Labeled:
    """One pass: the inner pass's batches, with their targets (a device
    tensor) and/or keys where asked for; counts them (state_dict) and
    registers the rest of the epoch as the plan again after a reconnect
    (a dlcached restart ends the old session's plan)."""

    def __init__(self, loader, inner, batch_indices, epoch=0, first=0):
        self._loader = loader
        self._inner = inner
        self._idx = batch_indices
        self._epoch = epoch
        self._first = first
        self.taken = 0
        # The loop's wait and step (issue 34), set by GpuLoader.__iter__.
        self.stall = None

    def __len__(self):
        return len(self._inner)

    def __iter__(self):
        return self

    def __next__(self):
        stall = self.stall
        if stall is not None:
            stall.begin()
        try:
            x = next(self._inner)
        except StopIteration:
            if stall is not None:
                stall.end()
            raise
        ld = self._loader
        idx = self._idx[self.taken]
        self.taken += 1
        if (ld.plan and self.taken % _SESSION_CHECK_EVERY == 0 and
                ld.__dict__.get("_plan_sessions") is not None and
                ld._sessions() not in (None, ld._plan_sessions)):
            ld._planned = None
            ld._register(self._epoch,
                         (self._first + self.taken) * ld.batch_size)
        out = (x,)
        if ld._target_of is not None:
            out = (x, ld._labels(idx))
        if ld.return_keys:
            out = ([ld.keys[i] for i in idx],) + out
        if stall is not None:
            stall.handed()
        return out[0] if len(out) == 1 else out

    def close(self):
        if self.stall is not None:
            self.stall.end()
        self._inner.close()
