"""Loads libdlcache_c.so and declares the C ABI (client/include/dlcache/dlcache_c.h).

The library is looked for, in order, at:
  1. $DLCACHE_LIB (a path to the .so);
  2. next to this package (an installed wheel/tarball layout);
  3. build*/client/libdlcache_c.so* in the source tree this package sits in
     (the most recently built one);
  4. the system's library path (ctypes.util.find_library("dlcache_c")).
"""

import ctypes
import ctypes.util
import glob
import os
import threading

c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_size_t = ctypes.c_size_t
c_uint32 = ctypes.c_uint32
c_uint64 = ctypes.c_uint64
c_void_p = ctypes.c_void_p


class ItemInfo(ctypes.Structure):
    _fields_ = [
        ("code", c_int),
        ("file_size", c_uint64),
        ("size", c_uint64),
        ("num_chunks", c_uint32),
        ("chunk_count", c_uint32),
        ("hit", c_int),
    ]


class Chunk(ctypes.Structure):
    _fields_ = [
        ("data", c_void_p),
        ("size", c_uint64),
        ("index", c_uint32),
        ("segment", c_uint32),
        ("offset", c_uint64),
        ("checksum", c_uint64),
    ]


class Segment(ctypes.Structure):
    _fields_ = [("id", c_uint32), ("base", c_void_p), ("size", c_uint64)]


class Options(ctypes.Structure):
    # Filled by dlc_options_init; fields may be appended in later versions,
    # so the struct gets spare room and is never initialised by hand.
    _fields_ = [
        ("socket_path", c_char_p),
        ("client_name", c_char_p),
        ("connect_timeout_s", ctypes.c_double),
        ("rpc_timeout_s", ctypes.c_double),
        ("release_delay_s", ctypes.c_double),
        ("verify_checksums", c_int),
        ("_spare", ctypes.c_char * 256),
    ]


_lock = threading.Lock()
_lib = None


def _candidates():
    env = os.environ.get("DLCACHE_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libdlcache_c.so", "libdlcache_c.so.0"):
        yield os.path.join(here, name)
    # client/python/dlcache -> the source tree's root.
    root = os.path.abspath(os.path.join(here, "..", "..", ".."))
    built = glob.glob(os.path.join(root, "build*", "client", "libdlcache_c.so*"))
    built.sort(key=lambda p: os.path.getmtime(p), reverse=True)
    for p in built:
        yield p
    found = ctypes.util.find_library("dlcache_c")
    if found:
        yield found


def _declare(lib):
    P = ctypes.POINTER
    sig = {
        "dlc_last_error": (c_char_p, []),
        "dlc_status_name": (c_char_p, [c_int]),
        "dlc_connect": (c_int, [c_char_p, c_char_p, P(c_void_p)]),
        "dlc_close": (None, [c_void_p]),
        "dlc_get_batch": (c_int, [c_void_p, c_char_p, P(c_char_p), c_size_t,
                                  P(c_void_p)]),
        "dlc_prefetch": (c_int, [c_void_p, c_char_p, P(c_char_p), c_size_t]),
        "dlc_batch_size": (c_size_t, [c_void_p]),
        "dlc_batch_item": (c_int, [c_void_p, c_size_t, P(ItemInfo)]),
        "dlc_batch_item_error": (c_char_p, [c_void_p, c_size_t]),
        "dlc_batch_chunk": (c_int, [c_void_p, c_size_t, c_uint32, P(Chunk)]),
        "dlc_batch_copy_item": (c_int, [c_void_p, c_size_t, c_void_p,
                                        c_uint64]),
        "dlc_batch_free": (None, [c_void_p]),
        "dlc_segments": (c_int, [c_void_p, P(Segment), c_size_t,
                                 P(c_size_t)]),
    }
    optional = {
        "dlc_options_init": (None, [P(Options)]),
        "dlc_connect_with_options": (c_int, [P(Options), P(c_void_p)]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    for name, (res, args) in optional.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = res
            fn.argtypes = args
    return lib


def load():
    """Returns the loaded library; raises OSError listing where it looked."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.path.sep in path and not os.path.exists(path):
                tried.append(path + " (missing)")
                continue
            try:
                _lib = _declare(ctypes.CDLL(path))
                _lib._dlcache_path = path
                return _lib
            except (OSError, AttributeError) as e:
                tried.append("%s (%s)" % (path, e))
        raise OSError(
            "libdlcache_c.so not found; set DLCACHE_LIB to its path. Tried: "
            + "; ".join(tried or ["nothing"]))
