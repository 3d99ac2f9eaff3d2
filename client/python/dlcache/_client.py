"""dlcache.Client over the C ABI (ctypes; no compile step)."""

import ctypes
import warnings

from . import _lib

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


def status_name(code):
    return _lib.load().dlc_status_name(code).decode()


class DlcacheError(Exception):
    """A failed call or item. `code` is the absl status code number,
    `name` its name ("NOT_FOUND", ...)."""

    def __init__(self, code, message):
        self.code = code
        self.name = status_name(code)
        self.message = message
        super().__init__("%s: %s" % (self.name, message))


def _check(code):
    if code != OK:
        msg = _lib.load().dlc_last_error() or b""
        raise DlcacheError(code, msg.decode(errors="replace"))


def _key_list(keys):
    if isinstance(keys, (str, bytes)):
        raise TypeError("keys must be a sequence of paths, not one string")
    return list(keys)


def _encode_keys(keys):
    enc = [k.encode() if isinstance(k, str) else bytes(k) for k in keys]
    arr = (ctypes.c_char_p * len(enc))(*enc)
    return enc, arr


class _BatchHandle:
    """Owns one dlc_batch. Every memoryview handed out references it, so the
    leases are released only when the Batch and all its views are gone."""

    __slots__ = ("ptr", "lib", "__weakref__")

    def __init__(self, lib, ptr):
        self.lib = lib
        self.ptr = ptr

    def __del__(self):
        if self.ptr:
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


class Item:
    """One requested file of a Batch.

    Attributes: key, code (0 = OK), ok, error (message, "" if OK), file_size,
    size (bytes returned), num_chunks, chunk_count (of the whole file), hit.
    """

    __slots__ = ("_handle", "_index", "key", "code", "error", "file_size",
                 "size", "num_chunks", "chunk_count", "hit")

    def __init__(self, handle, index, key):
        lib = handle.lib
        info = _lib.ItemInfo()
        _check(lib.dlc_batch_item(handle.ptr, index, ctypes.byref(info)))
        self._handle = handle
        self._index = index
        self.key = key
        self.code = info.code
        self.error = "" if info.code == OK else (
            lib.dlc_batch_item_error(handle.ptr, index) or b"").decode(
                errors="replace")
        self.file_size = info.file_size
        self.size = info.size
        self.num_chunks = info.num_chunks
        self.chunk_count = info.chunk_count
        self.hit = bool(info.hit)

    @property
    def ok(self):
        return self.code == OK

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
        out = []
        c = _lib.Chunk()
        for k in range(self.num_chunks):
            _check(h.lib.dlc_batch_chunk(h.ptr, self._index, k, ctypes.byref(c)))
            out.append(_view(h, c.data, c.size))
        return out

    def view(self, copy_if_needed=True):
        """The item's bytes as one read-only memoryview: zero-copy when the
        item is one chunk (files below the server's chunk size); otherwise a
        copy, or FAILED_PRECONDITION if copy_if_needed is False."""
        self.raise_for_status()
        if self.num_chunks <= 1:
            chunks = self.chunks()
            return chunks[0] if chunks else memoryview(b"")
        if not copy_if_needed:
            raise DlcacheError(FAILED_PRECONDITION,
                               "%s has %d chunks" % (self.key, self.num_chunks))
        return memoryview(self.tobytes())

    def tobytes(self):
        """A copy of the item's bytes."""
        self.raise_for_status()
        h = self._live()
        buf = ctypes.create_string_buffer(self.size)
        _check(h.lib.dlc_batch_copy_item(h.ptr, self._index, buf, self.size))
        return buf.raw[:self.size]

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


class Batch:
    """The items of one get_batch, in request order (a sequence of Item).

    The leases are released when the Batch and every view or tensor taken
    from it are gone (or at release(), once the views are gone)."""

    def __init__(self, handle, keys):
        self._handle = handle
        n = handle.lib.dlc_batch_size(handle.ptr)
        self._items = [Item(handle, i, keys[i] if i < len(keys) else None)
                       for i in range(n)]

    def __len__(self):
        return len(self._items)

    def __getitem__(self, i):
        return self._items[i]

    def __iter__(self):
        return iter(self._items)

    def memoryviews(self):
        """One read-only memoryview per item (None for failed items)."""
        return [it.view() if it.ok else None for it in self._items]

    def tensors(self):
        """One uint8 tensor per item (None for failed items)."""
        return [it.tensor() if it.ok else None for it in self._items]

    def release(self):
        """Drops this Batch's hold on the leases; views taken earlier keep
        theirs until they are garbage."""
        self._items = []
        self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class Segment:
    __slots__ = ("id", "address", "size")

    def __init__(self, id, address, size):
        self.id, self.address, self.size = id, address, size

    def __repr__(self):
        return "Segment(id=%d, address=0x%x, size=%d)" % (
            self.id, self.address, self.size)


class Client:
    """A session with the node's dlcached.

        with dlcache.Client("/run/dlcache/dlcached.sock") as c:
            batch = c.get_batch("imagenet", ["train/a.jpg", "train/b.jpg"])
            for item in batch:
                item.raise_for_status()
                decode(item.view())   # zero-copy, read-only

    Thread-safe: calls release the GIL and may run from several threads.
    Raises DlcacheError (UNAVAILABLE when no server answers in
    connect_timeout seconds).
    """

    def __init__(self, socket_path=None, client_name="python",
                 connect_timeout=10.0, rpc_timeout=60.0,
                 verify_checksums=False):
        self._lib = _lib.load()
        self._ptr = ctypes.c_void_p()
        self.socket_path = socket_path
        sock = socket_path.encode() if socket_path else None
        name = client_name.encode() if client_name else None
        if hasattr(self._lib, "dlc_connect_with_options") and hasattr(
                self._lib, "dlc_options_init"):
            opts = _lib.Options()
            self._lib.dlc_options_init(ctypes.byref(opts))
            opts.socket_path = sock
            opts.client_name = name
            opts.connect_timeout_s = float(connect_timeout)
            opts.rpc_timeout_s = float(rpc_timeout)
            opts.verify_checksums = 1 if verify_checksums else 0
            _check(self._lib.dlc_connect_with_options(ctypes.byref(opts),
                                                      ctypes.byref(self._ptr)))
        else:
            _check(self._lib.dlc_connect(sock, name, ctypes.byref(self._ptr)))

    def _client(self):
        if not self._ptr:
            raise DlcacheError(FAILED_PRECONDITION, "client is closed")
        return self._ptr

    def get_batch(self, dataset, keys):
        """Handles for `keys` (dataset-relative paths), in order. Per-file
        errors are in Item.code; the call raises only when the server is
        unreachable or the dataset name is bad."""
        keys = _key_list(keys)
        _, arr = _encode_keys(keys)
        out = ctypes.c_void_p()
        _check(self._lib.dlc_get_batch(self._client(), dataset.encode(), arr,
                                       len(keys), ctypes.byref(out)))
        return Batch(_BatchHandle(self._lib, out), keys)

    def prefetch(self, dataset, keys):
        """Asks the server to fill `keys` in the background; takes no lease."""
        keys = _key_list(keys)
        _, arr = _encode_keys(keys)
        _check(self._lib.dlc_prefetch(self._client(), dataset.encode(), arr,
                                      len(keys)))

    def segments(self):
        """The mapped shared-memory segments (read-only), e.g. to register
        them with CUDA."""
        count = ctypes.c_size_t()
        cap = 64
        while True:
            arr = (_lib.Segment * cap)()
            _check(self._lib.dlc_segments(self._client(), arr, cap,
                                          ctypes.byref(count)))
            if count.value <= cap:
                break
            cap = count.value
        return [Segment(s.id, s.base or 0, s.size) for s in arr[:count.value]]

    def close(self):
        """Ends the session. Batches taken earlier stay readable."""
        if self._ptr:
            self._lib.dlc_close(self._ptr)
            self._ptr = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
