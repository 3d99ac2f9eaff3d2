"""dlcache.Client over the C ABI (ctypes; no compile step).

A get_batch is one C call: the keys go packed in one buffer, and the
per-item results come back as arrays owned by the batch (codes, sizes,
data pointers, ...), exposed as numpy arrays when numpy is installed (else
ctypes arrays). Item objects are made only when asked for (batch[i]).

Processes: a Client does not survive fork(). In a forked child every call
on an inherited Client raises DlcacheError(FAILED_PRECONDITION); create one
Client per process (e.g. lazily in a DataLoader worker). Views and batches
inherited by a child stay readable there.
"""

import ctypes
import os
import warnings
import weakref
from typing import Iterator, List, NamedTuple, Optional

from . import _lib

try:
    import numpy as _np
except ImportError:  # numpy is optional
    _np = None

# absl::StatusCode numbers, as in dlcache_c.h.
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16

_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND", 6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
    10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL",
    14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}


def status_name(code):
    """"NOT_FOUND", ... for an absl status code number."""
    return _NAMES.get(code, "UNKNOWN")


class DlcacheError(Exception):
    """A failed call or item. `code` is the absl status code number,
    `name` its name ("NOT_FOUND", ...), `message` the reason."""

    def __init__(self, code, message=None):
        if message is None and isinstance(code, str):
            # One text argument, e.g. a DataLoader re-raising a worker's
            # error as type(exc)(text): recover the code from the
            # "DlcacheError: NAME: ..." line if there is one.
            message = code
            code = UNKNOWN
            for line in reversed(message.splitlines()):
                _, sep, rest = line.partition("DlcacheError: ")
                if sep:
                    name = rest.split(":", 1)[0]
                    code = next((c for c, n in _NAMES.items() if n == name),
                                UNKNOWN)
                    break
        self.code = code
        self.name = status_name(code)
        self.message = message
        super().__init__("%s: %s" % (self.name, message))

    def __reduce__(self):  # picklable (DataLoader re-raises worker errors)
        return (DlcacheError, (self.code, self.message))


def _check(code):
    if code != OK:
        msg = _lib.load().dlc_last_error() or b""
        raise DlcacheError(code, msg.decode(errors="replace"))


# Where dlcached listens unless told otherwise (DLCACHE_SOCKET overrides).
DEFAULT_SOCKET = "/run/dlcache/dlcached.sock"


# ---- fork safety ---------------------------------------------------------
#
# _fork_generation counts the forks this process descends from. Clients and
# batch handles remember the generation they were made in; a different one
# means "inherited through fork()": the C++ state behind them belongs to the
# parent (its threads did not survive), so they are never called into again
# (not even to free them).

_fork_generation = 0
_live_clients = weakref.WeakSet()


def _after_fork_in_child():
    global _fork_generation
    _fork_generation += 1
    for client in list(_live_clients):
        client._mark_inherited()
    _live_clients.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _inherited_error(client):
    return DlcacheError(
        FAILED_PRECONDITION,
        "this dlcache.Client was created in process %d and inherited by "
        "fork() into process %d; a Client cannot be used across fork(). "
        "Create a Client per process (per DataLoader worker), e.g. lazily on "
        "first use in the worker, as dlcache.torch_data's datasets do"
        % (client._pid, os.getpid()))


# ---- keys ------------------------------------------------------------------

def _key_list(keys):
    if isinstance(keys, (str, bytes)):
        raise TypeError("keys must be a sequence of paths, not one string")
    return keys if isinstance(keys, list) else list(keys)


def _pack_keys(keys):
    """NUL-terminated keys back to back (dlc_get_batch_packed)."""
    if not keys:
        return b""
    try:
        return ("\0".join(keys) + "\0").encode("utf-8", "surrogateescape")
    except TypeError:  # bytes (or mixed) keys
        return b"".join(_fs_encode(k) + b"\0" for k in keys)


def _encode_keys(keys):
    enc = [_fs_encode(k) for k in keys]
    arr = (ctypes.c_char_p * len(enc))(*enc)
    return enc, arr


# ---- listing ---------------------------------------------------------------

class FileEntry(NamedTuple):
    """One file of a dataset's listing (Client.list): `name` is the path
    relative to the dataset's root, '/'-separated (the key get_batch
    takes; bytes that are not UTF-8 are decoded with surrogateescape, as
    os.fsdecode does, and get_batch encodes them back); `size` in bytes;
    `mtime_ns` the source's modification time (ns since the epoch)."""
    name: str
    size: int
    mtime_ns: int


def _fs_encode(s):
    return s.encode("utf-8", "surrogateescape") if isinstance(s, str) \
        else bytes(s)


def _list_page_entries(lib, handle):
    """([FileEntry], next_page_token bytes) of a dlc_list."""
    names = ctypes.c_void_p()
    nbytes = ctypes.c_size_t()
    sizes = ctypes.c_void_p()
    mtimes = ctypes.c_void_p()
    count = ctypes.c_size_t()
    _check(lib.dlc_list_arrays(handle, ctypes.byref(names),
                               ctypes.byref(nbytes), ctypes.byref(sizes),
                               ctypes.byref(mtimes), ctypes.byref(count)))
    n = count.value
    token = lib.dlc_list_next_page_token(handle) or b""
    if n == 0:
        return [], token
    blob = ctypes.string_at(names.value, nbytes.value)
    # One decode and one split for the page, not a call per name.
    name_list = blob[:-1].decode("utf-8", "surrogateescape").split("\0")
    size_list = (ctypes.c_uint64 * n).from_address(sizes.value)[:]
    mtime_list = (ctypes.c_int64 * n).from_address(mtimes.value)[:]
    return list(map(FileEntry, name_list, size_list, mtime_list)), token


def list_keys(client: "Client", dataset: str, prefix: str = "") -> List[str]:
    """The names (get_batch keys) of the dataset's files under `prefix`,
    sorted: what a loader given keys=None reads (Client.list)."""
    return [e.name for e in client.list(dataset, prefix)]


# ---- batches ---------------------------------------------------------------

class _BatchHandle:
    """Owns one dlc_batch. Every view, array or Item handed out references
    it, so the leases are released only when the Batch and all of those
    are gone."""

    __slots__ = ("ptr", "lib", "gen", "__weakref__")

    def __init__(self, lib, ptr):
        self.lib = lib
        self.ptr = ptr
        self.gen = _fork_generation

    def __del__(self):
        if self.ptr:
            # In a forked child the batch belongs to the parent's client
            # state: leave it alone (its bytes stay mapped and readable).
            if self.gen == _fork_generation:
                self.lib.dlc_batch_free(self.ptr)
            self.ptr = None


def _view(handle, address, size):
    """A read-only memoryview of `size` bytes at `address` that keeps
    `handle` alive."""
    if size == 0:
        return memoryview(b"")
    arr = (ctypes.c_char * size).from_address(address)
    arr._dlcache_owner = handle  # the view keeps arr, arr keeps the batch
    return memoryview(arr).cast("B").toreadonly()


def _writable_buffer(buffer):
    """(address, nbytes, keepalive) of a writable C-contiguous buffer: a
    bytearray, numpy array, writable memoryview, or CPU torch tensor."""
    if hasattr(buffer, "data_ptr") and hasattr(buffer, "element_size"):
        if buffer.device.type != "cpu":
            raise ValueError("copy_into needs a CPU tensor (got %s); copy "
                             "to a pinned CPU tensor, then to the GPU"
                             % buffer.device)
        if not buffer.is_contiguous():
            raise ValueError("copy_into needs a contiguous tensor")
        return (buffer.data_ptr(), buffer.numel() * buffer.element_size(),
                buffer)
    mv = memoryview(buffer)
    if mv.readonly:
        raise TypeError("copy_into needs a writable buffer")
    if not mv.c_contiguous:
        raise ValueError("copy_into needs a C-contiguous buffer")
    if mv.nbytes == 0:
        return None, 0, mv
    c = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(c), mv.nbytes, c


class Item:
    """One requested file of a Batch (made on demand by batch[i]).

    Attributes: key, code (0 = OK), ok, error (message, "" if OK), file_size,
    size (bytes returned), num_chunks, chunk_count (of the whole file), hit.
    """

    __slots__ = ("_handle", "_index", "_data", "key", "code", "file_size",
                 "size", "num_chunks", "hit", "_error", "_chunk_count")

    def __init__(self, handle, index, key, code, size, file_size,
                 num_chunks, hit, data):
        self._handle = handle
        self._index = index
        self._data = data
        self.key = key
        self.code = code
        self.size = size
        self.file_size = file_size
        self.num_chunks = num_chunks
        self.hit = bool(hit)
        self._error = None
        self._chunk_count = None

    @property
    def ok(self):
        return self.code == OK

    @property
    def error(self):
        """The item's error message ("" for OK items)."""
        if self.code == OK:
            return ""
        if self._error is None:
            h = self._handle
            self._error = (h.lib.dlc_batch_item_error(h.ptr, self._index)
                           or b"").decode(errors="replace") if h.ptr else ""
        return self._error

    @property
    def chunk_count(self):
        """Chunks in the whole file (a range request may return fewer)."""
        if self._chunk_count is None:
            h = self._live()
            info = _lib.ItemInfo()
            _check(h.lib.dlc_batch_item(h.ptr, self._index,
                                        ctypes.byref(info)))
            self._chunk_count = info.chunk_count
        return self._chunk_count

    def raise_for_status(self):
        if self.code != OK:
            raise DlcacheError(self.code, "%s: %s" % (self.key, self.error))

    def _live(self):
        if not self._handle.ptr:
            raise DlcacheError(FAILED_PRECONDITION, "batch was released")
        return self._handle

    def chunks(self):
        """Zero-copy read-only memoryviews, one per returned chunk."""
        self.raise_for_status()
        h = self._live()
        if self.num_chunks == 1 and self._data:
            return [_view(h, self._data, self.size)]
        out = []
        c = _lib.Chunk()
        for k in range(self.num_chunks):
            _check(h.lib.dlc_batch_chunk(h.ptr, self._index, k,
                                         ctypes.byref(c)))
            out.append(_view(h, c.data, c.size))
        return out

    def view(self, copy_if_needed=True):
        """The item's bytes as one read-only memoryview: zero-copy when the
        item is one chunk (files below the server's chunk size); otherwise a
        copy, or FAILED_PRECONDITION if copy_if_needed is False."""
        self.raise_for_status()
        if self.num_chunks == 1 and self._data:
            return _view(self._live(), self._data, self.size)
        if self.num_chunks == 0:
            return memoryview(b"")
        if not copy_if_needed:
            raise DlcacheError(FAILED_PRECONDITION,
                               "%s has %d chunks" % (self.key, self.num_chunks))
        return memoryview(self.tobytes())

    def tobytes(self):
        """A copy of the item's bytes."""
        self.raise_for_status()
        h = self._live()
        if self.num_chunks == 1 and self._data:
            return ctypes.string_at(self._data, self.size)
        buf = ctypes.create_string_buffer(max(self.size, 1))
        _check(h.lib.dlc_batch_copy_item(h.ptr, self._index, buf, self.size))
        return buf.raw[:self.size]

    def numpy(self, copy=False):
        """A 1-D uint8 numpy array of the bytes: a read-only zero-copy view
        for one-chunk items (copy=False), else a writable copy."""
        if _np is None:
            raise ImportError("numpy is not installed")
        if copy:
            return _np.frombuffer(bytearray(self.tobytes()), dtype=_np.uint8)
        return _np.frombuffer(self.view(), dtype=_np.uint8)

    def tensor(self):
        """A uint8 CPU tensor of the bytes (torch.frombuffer: zero-copy for
        one-chunk items). The memory is mapped read-only: in-place writes
        crash the process; clone() first to modify."""
        import torch
        v = self.view()
        if len(v) == 0:
            return torch.empty(0, dtype=torch.uint8)
        with warnings.catch_warnings():
            # frombuffer warns that the buffer is not writable: intended.
            warnings.simplefilter("ignore", UserWarning)
            return torch.frombuffer(v, dtype=torch.uint8)

    def __repr__(self):
        state = "OK" if self.ok else "%s: %s" % (status_name(self.code),
                                                 self.error)
        return "Item(%r, size=%d, %s)" % (self.key, self.size, state)


_ARRAY_FIELDS = {
    # name: (struct field, ctypes type, numpy dtype name)
    "codes": ("code", ctypes.c_int32, "int32"),
    "sizes": ("size", ctypes.c_uint64, "uint64"),
    "file_sizes": ("file_size", ctypes.c_uint64, "uint64"),
    "data_ptrs": ("data", ctypes.c_uint64, "uint64"),
    "num_chunks": ("num_chunks", ctypes.c_uint32, "uint32"),
    "hits": ("hit", ctypes.c_uint8, "bool"),
}


class Batch:
    """The items of one get_batch, in request order.

    Per-item results are arrays (numpy when installed, else ctypes) over
    memory the batch owns: codes, sizes, file_sizes, hits, num_chunks,
    data_ptrs (address of each one-chunk item's bytes, 0 for failed and
    multi-chunk items). batch[i] makes an Item; len(), iteration and
    memoryviews()/tensors() work as on a list of Items. Whole-batch copies
    run in C++: copy_into(buffer), to_numpy(), to_tensor().

    The leases are released when the Batch and every Item, view, array or
    tensor taken from it (zero-copy ones) are gone, or at release() once
    those are gone.
    """

    __slots__ = ("_handle", "keys", "_a", "_n", "_cache")

    def __init__(self, handle, keys, arrays):
        self._handle = handle
        self.keys = keys
        self._a = arrays  # _lib.BatchArrays in memory the dlc_batch owns
        self._n = arrays.num_items
        self._cache = None

    # -- summary ------------------------------------------------------------

    def __len__(self):
        return self._n

    def _arrays(self):
        if self._a is None:
            raise DlcacheError(FAILED_PRECONDITION, "batch was released")
        return self._a

    @property
    def ok(self):
        """True when every item is OK."""
        return self._arrays().num_failed == 0

    @property
    def num_failed(self):
        return self._arrays().num_failed

    @property
    def total_size(self):
        """Bytes of all items (failed items count 0)."""
        return self._arrays().total_size

    @property
    def uniform_size(self):
        """The size every item has when all are OK and equal, else None."""
        u = self._arrays().uniform_size
        return None if u == _lib.NO_UNIFORM_SIZE else u

    @property
    def has_multi_chunk(self):
        """True if an item spans several chunks (no single data pointer)."""
        return self._arrays().num_multi_chunk > 0

    def _array(self, name):
        cache = self._cache
        if cache is None:
            cache = self._cache = {}
        a = cache.get(name)
        if a is not None:
            return a
        field, ctype, dtype = _ARRAY_FIELDS[name]
        arrays = self._arrays()
        n = self._n
        address = ctypes.cast(getattr(arrays, field), ctypes.c_void_p).value
        carr = (ctype * n).from_address(address)
        carr._dlcache_owner = self._handle
        if _np is not None:
            a = _np.frombuffer(carr, dtype=_np.dtype(dtype)) if n else \
                _np.empty(0, dtype=_np.dtype(dtype))
            a.flags.writeable = False
        else:
            a = carr
        cache[name] = a
        return a

    codes = property(lambda self: self._array("codes"),
                     doc="Per-item status codes (0 = OK).")
    sizes = property(lambda self: self._array("sizes"),
                     doc="Per-item bytes returned (0 for failed items).")
    file_sizes = property(lambda self: self._array("file_sizes"),
                          doc="Per-item size of the whole file.")
    hits = property(lambda self: self._array("hits"),
                    doc="Per-item: served from memory without a fill.")
    num_chunks = property(lambda self: self._array("num_chunks"),
                          doc="Per-item chunks returned.")
    data_ptrs = property(lambda self: self._array("data_ptrs"),
                         doc="Per-item address of the bytes (one-chunk OK "
                             "items; 0 otherwise). Valid while the batch "
                             "lives.")

    def raise_for_status(self):
        """Raises DlcacheError for the first failed item (naming how many
        failed)."""
        a = self._arrays()
        if a.num_failed == 0:
            return
        for i in range(self._n):
            if a.code[i] != OK:
                item = self[i]
                more = a.num_failed - 1
                raise DlcacheError(item.code, "%s: %s%s" % (
                    item.key, item.error,
                    " (and %d more failed items)" % more if more else ""))

    # -- items ----------------------------------------------------------------

    def _item(self, i):
        a = self._arrays()
        key = self.keys[i] if i < len(self.keys) else None
        return Item(self._handle, i, key, a.code[i], a.size[i],
                    a.file_size[i], a.num_chunks[i], a.hit[i], a.data[i])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._item(k) for k in range(*i.indices(self._n))]
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("item %d of a batch of %d" % (i, self._n))
        return self._item(i)

    def __iter__(self):
        for i in range(self._n):
            yield self._item(i)

    def memoryviews(self):
        """One read-only memoryview per item (None for failed items);
        zero-copy for one-chunk items."""
        a = self._arrays()
        h = self._handle
        out = []
        for i in range(self._n):
            if a.code[i] != OK:
                out.append(None)
            elif a.num_chunks[i] == 1:
                out.append(_view(h, a.data[i], a.size[i]))
            else:
                out.append(self._item(i).view())
        return out

    def tensors(self):
        """One uint8 tensor per item (None for failed items), zero-copy for
        one-chunk items (read-only memory: clone() before writing)."""
        return [it.tensor() if it.ok else None for it in self]

    # -- whole-batch copies (in C++, GIL released) -------------------------

    def copy_into(self, buffer, stride=0, offsets=None):
        """Copies every item's bytes into `buffer` (bytearray, numpy array,
        writable memoryview, or contiguous CPU torch tensor, pinned ones
        included) in one C call, and returns the offsets: num_items + 1
        entries, item i in [offsets[i], offsets[i+1]) (minus the zero
        padding with a stride).

        stride=0: back to back (variable-size samples); needs total_size
        bytes. stride=S: item i at i*S, the rest of each slot zeroed; needs
        len(batch)*S bytes; an item larger than S is INVALID_ARGUMENT.
        Failed items take no bytes: call raise_for_status() first if they
        matter. `offsets` may be a preallocated int64/uint64 array (numpy or
        torch) of num_items + 1 entries.
        """
        self._arrays()
        n = self._n
        address, nbytes, keep = _writable_buffer(buffer)
        if offsets is None:
            if _np is not None:
                offsets = _np.empty(n + 1, dtype=_np.int64)
            else:
                offsets = (ctypes.c_uint64 * (n + 1))()
        off_address, off_bytes, off_keep = _writable_buffer(offsets)
        if off_bytes < 8 * (n + 1):
            raise ValueError("offsets needs %d entries of 8 bytes" % (n + 1))
        h = self._handle
        _check(h.lib.dlc_batch_copy(h.ptr, address, nbytes, int(stride),
                                    off_address))
        del keep, off_keep
        return offsets

    def to_numpy(self):
        """The batch as numpy, copied in C++: a [B, size] uint8 array when
        every item is OK and of one size, else (flat uint8 array, int64
        offsets of B + 1 entries). Raises DlcacheError if an item failed."""
        if _np is None:
            raise ImportError("Batch.to_numpy needs numpy")
        self.raise_for_status()
        u = self.uniform_size
        if u is not None:
            out = _np.empty((self._n, u), dtype=_np.uint8)
            self.copy_into(out, stride=u)
            return out
        flat = _np.empty(self.total_size, dtype=_np.uint8)
        offsets = self.copy_into(flat)
        return flat, offsets

    def to_tensor(self, pin_memory=False):
        """The batch as torch tensors, copied in C++ (straight into pinned
        memory with pin_memory=True): a [B, size] uint8 tensor when every
        item is OK and of one size, else (flat uint8 tensor, int64 offsets
        tensor of B + 1 entries). Raises DlcacheError if an item failed."""
        import torch
        self.raise_for_status()
        u = self.uniform_size
        if u is not None:
            out = torch.empty((self._n, u), dtype=torch.uint8,
                              pin_memory=pin_memory)
            self.copy_into(out, stride=u)
            return out
        flat = torch.empty(self.total_size, dtype=torch.uint8,
                           pin_memory=pin_memory)
        offsets = torch.empty(self._n + 1, dtype=torch.int64)
        self.copy_into(flat, offsets=offsets)
        return flat, offsets

    def release(self):
        """Drops this Batch's hold on the leases; Items, views and arrays
        taken earlier keep theirs until they are garbage."""
        self._a = None
        self._cache = None
        self._handle = None
        self._n = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        if self._a is None:
            return "Batch(released)"
        return "Batch(%d items, %d failed, %d bytes)" % (
            self._n, self._a.num_failed, self._a.total_size)


class Segment:
    __slots__ = ("id", "address", "size")

    def __init__(self, id, address, size):
        self.id, self.address, self.size = id, address, size

    def __repr__(self):
        return "Segment(id=%d, address=0x%x, size=%d)" % (
            self.id, self.address, self.size)


class Client:
    """A session with the node's dlcached.

        with dlcache.Client() as c:   # socket: $DLCACHE_SOCKET or the default
            batch = c.get_batch("imagenet", ["train/a.jpg", "train/b.jpg"])
            batch.raise_for_status()
            x = batch.to_tensor()          # [2, size] or (flat, offsets)
            for item in batch:             # or per item, zero-copy
                decode(item.view())

    socket: dlcached's Unix socket; None: $DLCACHE_SOCKET, else
    /run/dlcache/dlcached.sock.
    numa_node: the NUMA node of this process's GPU
    (dlcache.numa.cuda_device_numa_node), sent when the session opens so
    that dlcached places the chunks this client fills on that node's
    memory; None (default) or -1 = no preference.

    Thread-safe: calls release the GIL and may run from several threads.
    Not fork-safe: in a forked child every call raises
    DlcacheError(FAILED_PRECONDITION); make a Client per process.

    Raises DlcacheError: UNAVAILABLE at once when the socket file does not
    exist, or when a server whose socket exists (still starting) does not
    answer within connect_timeout seconds; OSError when libdlcache_c.so is
    not found.
    """

    def __init__(self, socket=None, client_name="python",
                 connect_timeout=10.0, rpc_timeout=60.0,
                 verify_checksums=False, numa_node=None, **renamed):
        self._ptr = None
        if renamed:
            from ._listing import refuse_renamed
            refuse_renamed(renamed, "Client")
        self._pid = os.getpid()
        self._gen = _fork_generation
        self._inherited = False
        self._lib = _lib.load()
        # socket=None: $DLCACHE_SOCKET, else dlcached's default socket.
        if not socket:
            socket = os.environ.get("DLCACHE_SOCKET") or DEFAULT_SOCKET
        self.socket = socket
        sock = socket.encode()
        name = client_name.encode() if client_name else None
        ptr = ctypes.c_void_p()
        opts = _lib.Options()
        self._lib.dlc_options_init(ctypes.byref(opts))
        opts.socket_path = sock
        opts.client_name = name
        opts.connect_timeout_s = float(connect_timeout)
        opts.rpc_timeout_s = float(rpc_timeout)
        opts.verify_checksums = 1 if verify_checksums else 0
        # The NUMA node of this process's GPU (dlcache.numa), so dlcached
        # places this client's fills near it; None / -1 = no preference.
        opts.numa_node = -1 if numa_node is None else int(numa_node)
        _check(self._lib.dlc_connect_with_options(ctypes.byref(opts),
                                                  ctypes.byref(ptr)))
        self._ptr = ptr.value
        _live_clients.add(self)

    def _mark_inherited(self):
        self._inherited = True

    @property
    def inherited(self):
        """True in a forked child for a Client made by an ancestor."""
        return self._inherited or self._gen != _fork_generation

    def _client(self):
        if self._inherited or self._gen != _fork_generation:
            self._inherited = True
            raise _inherited_error(self)
        if not self._ptr:
            raise DlcacheError(FAILED_PRECONDITION, "client is closed")
        return self._ptr

    def get_batch(self, dataset, keys, plan_position=None):
        """Handles for `keys` (dataset-relative paths), in order, as a
        Batch (one C call). Per-file errors are in Batch.codes / Item.code;
        the call raises only when the server is unreachable, the dataset is
        bad or unknown, or the Client was inherited through fork().
        plan_position=(epoch, offset): `keys` are keys [offset, offset +
        len) of that epoch of the order this session registered as its
        plan (register_plan; in a job plan, register_job_plan, the offset
        counts this rank's reads: read j is index rank + j * world_size
        of the job's order): the server counts the progress by position
        (docs/epoch_plans.md); ignored by a library or server before it."""
        ptr = self._client()
        keys = _key_list(keys)
        packed = _pack_keys(keys)
        out = ctypes.c_void_p()
        arrays = ctypes.POINTER(_lib.BatchArrays)()
        at = (getattr(self._lib, "dlc_get_batch_packed_at", None)
              if plan_position is not None else None)
        if at is not None:
            _check(at(ptr, dataset.encode(), packed, len(packed), len(keys),
                      plan_position[0], plan_position[1],
                      ctypes.byref(out), ctypes.byref(arrays)))
        else:
            _check(self._lib.dlc_get_batch_packed(
                ptr, dataset.encode(), packed, len(packed), len(keys),
                ctypes.byref(out), ctypes.byref(arrays)))
        return Batch(_BatchHandle(self._lib, out.value), keys,
                     arrays.contents)

    def read_range(self, dataset: str, key: str, offset: int = 0,
                   length: Optional[int] = None) -> bytes:
        """Bytes [offset, offset + length) of one file (length None: to its
        end; fewer where the file ends first), reading only the chunks
        that cover them: parts of large files, past 4 GiB included. Raises
        DlcacheError: OUT_OF_RANGE for an offset past the end, the file's
        own code (NOT_FOUND, DATA_LOSS...) otherwise."""
        ptr = self._client()
        fn = getattr(self._lib, "dlc_read_range", None)
        if fn is None:
            raise DlcacheError(UNIMPLEMENTED, "libdlcache_c predates "
                               "dlc_read_range")
        if offset < 0 or (length is not None and length < 0):
            raise ValueError("offset and length must be >= 0")
        if length == 0:
            return b""
        want = ctypes.c_uint64()
        if length is None:
            # dst_size 0 asks for the range's size (INVALID_ARGUMENT).
            code = fn(ptr, dataset.encode(), key.encode(), offset, 0, None,
                      0, ctypes.byref(want))
            if code != 0 and code != INVALID_ARGUMENT:
                _check(code)
            if code == 0:
                return b""
            length = want.value
        buf = ctypes.create_string_buffer(length)
        _check(fn(ptr, dataset.encode(), key.encode(), offset, length, buf,
                  length, ctypes.byref(want)))
        return buf.raw[:want.value]

    def prefetch(self, dataset, keys):
        """Asks the server to fill `keys` in the background; takes no lease."""
        ptr = self._client()
        keys = _key_list(keys)
        _, arr = _encode_keys(keys)
        _check(self._lib.dlc_prefetch(ptr, dataset.encode(), arr, len(keys)))

    def report_stall(self, dataset, plan, wait_s, step_s, batches,
                     final=False):
        """The stall a loader measured (issue 34; docs/monitoring.md):
        since its last report the training loop waited `wait_s` seconds
        inside next() for `batches` batches and spent `step_s` seconds
        between them (its own work), reading `dataset` as epoch plan `plan`
        (None or "" = no plan). dlcached sums the reports per dataset, plan
        and the caller's uid (dlcache_job_wait_seconds_total,
        dlcache_job_step_seconds_total, `dlcachectl status`). Never blocks
        and gets no answer: what cannot be sent now goes with the next
        report, the next batch or close(); final=True (a pass's last report)
        waits for another thread's write instead. Returns False when the
        library or the Client cannot report
        (an older libdlcache_c.so, a Client inherited through fork);
        raises DlcacheError for bad arguments."""
        fn = getattr(self._lib, "dlc_report_stall", None)
        if fn is None or self.inherited or not self._ptr:
            return False
        _check(fn(self._ptr, dataset.encode(), (plan or "").encode(),
                  float(wait_s), float(step_s), int(batches),
                  1 if final else 0))
        return True

    def register_plan(self, dataset, plan, epoch, keys, offset=0,
                      reset=False):
        """Epoch plans (docs/epoch_plans.md): tells the server that this
        loader reads `keys` in this order as keys [offset, offset + len) of
        epoch `epoch`, in the plan named `plan`, shared with every session
        that registers or attaches to that name (keys=[]: attach only).
        The server then evicts by Belady's rule and fills the next planned
        keys ahead; GetBatch calls count as progress. Register epoch e + 1
        while e runs. reset=True starts the plan afresh. Raises
        DlcacheError (RESOURCE_EXHAUSTED over the server's plan limits,
        UNIMPLEMENTED when plans are off or the library predates them)."""
        ptr = self._client()
        fn = getattr(self._lib, "dlc_register_plan", None)
        if fn is None:
            raise DlcacheError(UNIMPLEMENTED,
                              "libdlcache_c.so has no epoch plans")
        keys = _key_list(keys)
        _, arr = _encode_keys(keys)
        _check(fn(ptr, dataset.encode(), plan.encode(), int(epoch),
                  int(offset), arr, len(keys), 1 if reset else 0))

    def register_job_plan(self, dataset, plan, world_size, rank, epoch, keys,
                          offset=0):
        """One epoch plan for the ranks of a job (docs/epoch_plans.md):
        `keys` are indices [offset, offset + len) of the job's whole epoch
        order (DistributedSampler's padded permutation: index i is read by
        rank i % world_size); this session reads as `rank`. Attaches first
        and sends only what the plan lacks (the first local rank sends the
        epoch, the others attach; keys=[]: attach only). Returns (epoch,
        next_offset) of what the plan holds, epoch None if none. Raises
        DlcacheError (FAILED_PRECONDITION when `plan` exists with another
        world size; UNIMPLEMENTED when the library predates job plans)."""
        ptr = self._client()
        fn = getattr(self._lib, "dlc_register_job_plan", None)
        if fn is None:
            raise DlcacheError(UNIMPLEMENTED,
                              "libdlcache_c.so has no job plans")
        keys = _key_list(keys)
        _, arr = _encode_keys(keys)
        has = ctypes.c_int()
        held = ctypes.c_uint64()
        nxt = ctypes.c_uint64()
        _check(fn(ptr, dataset.encode(), plan.encode(), int(world_size),
                  int(rank), int(epoch), int(offset), arr, len(keys),
                  ctypes.byref(has), ctypes.byref(held), ctypes.byref(nxt)))
        return (held.value if has.value else None), nxt.value

    @property
    def sessions_opened(self):
        """Sessions opened with dlcached so far: 1 after connecting, +1
        each time the Client reconnected by itself (a dlcached restart).
        What a session registered (epoch plans) ended with it: register
        again when this changes. 0 when the library predates it."""
        ptr = self._client()
        fn = getattr(self._lib, "dlc_sessions_opened", None)
        if fn is None:
            return 0
        n = ctypes.c_uint64()
        _check(fn(ptr, ctypes.byref(n)))
        return n.value

    def list_pages(self, dataset: str, prefix: str = "",
                   page_size: int = 0,
                   refresh: bool = False) -> Iterator[List[FileEntry]]:
        """The dataset's files through the cache (docs/listing.md), one
        page (a list of FileEntry sorted by name) at a time: up to
        `page_size` entries each (0 = the server's default, 10,000; the
        server caps it). `prefix` ("" = all) names a directory or a file
        relative to the dataset's root. refresh=True: dlcached lists its
        source again before the first page (else it answers from the
        listing it keeps, refreshed by warm-up, revalidate and sync).
        Raises DlcacheError: PERMISSION_DENIED for a caller who may not
        read the dataset, NOT_FOUND for an unknown dataset, UNIMPLEMENTED
        from a dlcached or libdlcache_c.so that predates listing."""
        fn = getattr(self._lib, "dlc_list_page", None)
        if fn is None:
            raise DlcacheError(UNIMPLEMENTED,
                               "libdlcache_c.so has no listing (dlc_list_page)")
        token = b""
        first = True
        while True:
            ptr = self._client()
            out = ctypes.c_void_p()
            _check(fn(ptr, dataset.encode(), _fs_encode(prefix), token,
                      int(page_size), 1 if (refresh and first) else 0,
                      ctypes.byref(out)))
            first = False
            try:
                entries, next_token = _list_page_entries(self._lib, out.value)
            finally:
                self._lib.dlc_list_free(out.value)
            # Tokens are names and only grow; one that does not would page
            # forever.
            if next_token and next_token <= token:
                raise DlcacheError(DATA_LOSS, "list: the page token does not "
                                   "advance (%r after %r)" % (next_token, token))
            token = next_token
            yield entries
            if not token:
                return

    def list(self, dataset: str, prefix: str = "",
             refresh: bool = False) -> List[FileEntry]:
        """Every file of the dataset under `prefix` ("" = all), sorted by
        name, as FileEntry(name, size, mtime_ns); `name` is the key that
        get_batch takes. Pages through the server's listing (list_pages);
        1.3M names take a few seconds. Raises as list_pages."""
        out: List[FileEntry] = []
        for page in self.list_pages(dataset, prefix, refresh=refresh):
            out.extend(page)
        return out

    def segments(self):
        """The mapped shared-memory segments (read-only), e.g. to register
        them with CUDA."""
        ptr = self._client()
        count = ctypes.c_size_t()
        cap = 64
        while True:
            arr = (_lib.Segment * cap)()
            _check(self._lib.dlc_segments(ptr, arr, cap, ctypes.byref(count)))
            if count.value <= cap:
                break
            cap = count.value
        return [Segment(s.id, s.base or 0, s.size) for s in arr[:count.value]]

    def close(self):
        """Ends the session. Batches taken earlier stay readable. On an
        inherited Client (forked child) it only forgets the handle."""
        ptr, self._ptr = self._ptr, None
        if ptr and not self.inherited:
            self._lib.dlc_close(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __reduce__(self):
        raise TypeError(
            "a dlcache.Client cannot be pickled (it is a connection of one "
            "process); pickle the socket path and create a Client in the "
            "other process")
