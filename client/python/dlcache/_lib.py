"""Loads libdlcache_c.so and declares the C ABI (client/include/dlcache/dlcache_c.h).

The library is looked for, in order, at:
  1. $DLCACHE_LIB (a path to the .so; when set, nothing else is tried);
  2. inside this package (dlcache/libdlcache_c.so: the wheel that
     scripts/build_wheel.sh writes carries it there; `cmake --install
     --component python` installs package and library together);
  3. build*/client/libdlcache_c.so* in the source tree this package sits in
     (the most recently built one), when it runs from a checkout;
  4. the standard library directories: the dynamic loader's search
     (ctypes.util.find_library), <sys.prefix>/lib, /usr/local/lib, /usr/lib.
When none loads, OSError lists every place tried and how to fix it.
"""

import ctypes
import ctypes.util
import glob
import os
import sys
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


class BatchArrays(ctypes.Structure):
    """dlc_batch_arrays: per-item arrays owned by a dlc_batch."""
    _fields_ = [
        ("num_items", c_size_t),
        ("code", ctypes.POINTER(ctypes.c_int32)),
        ("size", ctypes.POINTER(c_uint64)),
        ("file_size", ctypes.POINTER(c_uint64)),
        ("data", ctypes.POINTER(c_void_p)),
        ("num_chunks", ctypes.POINTER(c_uint32)),
        ("hit", ctypes.POINTER(ctypes.c_uint8)),
        ("total_size", c_uint64),
        ("uniform_size", c_uint64),
        ("num_failed", c_size_t),
        ("num_multi_chunk", c_size_t),
    ]


NO_UNIFORM_SIZE = (1 << 64) - 1


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
        ("numa_node", c_int),  # -1 = no preference
        ("_spare", ctypes.c_char * 256),
    ]


_lock = threading.Lock()
_lib = None


_LIB_NAMES = ("libdlcache_c.so", "libdlcache_c.so.0")


def _candidates():
    """Yields (path, how) pairs in the order they are tried."""
    env = os.environ.get("DLCACHE_LIB")
    if env:
        yield env, "$DLCACHE_LIB"
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _LIB_NAMES:
        yield os.path.join(here, name), "inside the package"
    # client/python/dlcache -> the source tree's root.
    root = os.path.abspath(os.path.join(here, "..", "..", ".."))
    if os.path.exists(os.path.join(root, "client", "c_api")):
        built = glob.glob(os.path.join(root, "build*", "client",
                                       "libdlcache_c.so*"))
        built.sort(key=os.path.getmtime, reverse=True)
        if built:
            for p in built:
                yield p, "build tree"
        else:
            yield (os.path.join(root, "build*", "client", "libdlcache_c.so"),
                   "build tree")
    found = ctypes.util.find_library("dlcache_c")
    if found:
        yield found, "loader search path"
    seen = set()
    for d in (os.path.join(sys.prefix, "lib"), "/usr/local/lib",
              "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
              "/usr/lib"):
        for name in _LIB_NAMES:
            p = os.path.join(d, name)
            if p not in seen:
                seen.add(p)
                yield p, "standard library directory"


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
        # Whole-batch calls.
        "dlc_get_batch_packed": (c_int, [c_void_p, c_char_p, c_char_p,
                                         c_size_t, c_size_t, P(c_void_p),
                                         P(P(BatchArrays))]),
        "dlc_batch_arrays_get": (c_int, [c_void_p, P(P(BatchArrays))]),
        "dlc_batch_fill_arrays": (c_int, [c_void_p, c_size_t, c_size_t,
                                          c_void_p, c_void_p, c_void_p,
                                          c_void_p, c_void_p, c_void_p]),
        "dlc_batch_copy": (c_int, [c_void_p, c_void_p, c_uint64, c_uint64,
                                   c_void_p]),
    }
    optional = {
        "dlc_options_init": (None, [P(Options)]),
        "dlc_connect_with_options": (c_int, [P(Options), P(c_void_p)]),
        "dlc_pci_numa_node": (c_int, [c_char_p, P(c_int)]),
        "dlc_register_plan": (c_int, [c_void_p, c_char_p, c_char_p, c_uint64,
                                      c_uint64, P(c_char_p), c_size_t,
                                      c_int]),
        "dlc_sessions_opened": (c_int, [c_void_p, P(c_uint64)]),
        "dlc_get_batch_packed_at": (c_int, [c_void_p, c_char_p, c_char_p,
                                            c_size_t, c_size_t, c_uint64,
                                            c_uint64, P(c_void_p),
                                            P(P(BatchArrays))]),
        "dlc_register_job_plan": (c_int, [c_void_p, c_char_p, c_char_p,
                                          c_uint32, c_uint32, c_uint64,
                                          c_uint64, P(c_char_p), c_size_t,
                                          P(c_int), P(c_uint64),
                                          P(c_uint64)]),
        "dlc_read_range": (c_int, [c_void_p, c_char_p, c_char_p, c_uint64,
                                   c_uint64, c_void_p, c_uint64,
                                   P(c_uint64)]),
        # Listing through the cache (issue 30).
        "dlc_list_page": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p,
                                  c_uint32, c_int, P(c_void_p)]),
        "dlc_list_arrays": (c_int, [c_void_p, P(c_void_p), P(c_size_t),
                                    P(c_void_p), P(c_void_p), P(c_size_t)]),
        "dlc_list_next_page_token": (c_char_p, [c_void_p]),
        "dlc_list_free": (None, [c_void_p]),
        # The stall each job sees (issue 34).
        "dlc_report_stall": (c_int, [c_void_p, c_char_p, c_char_p,
                                     ctypes.c_double, ctypes.c_double,
                                     c_uint64, c_int]),
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
    """Returns the loaded library; raises OSError listing every place it
    looked and how to fix it."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path, how in _candidates():
            if os.path.sep in path and not os.path.exists(path):
                tried.append("%s [%s]: missing" % (path, how))
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s [%s]: %s" % (path, how, e))
                continue
            try:
                _lib = _declare(lib)
            except AttributeError as e:
                tried.append("%s [%s]: too old for this package (%s)" % (
                    path, how, e))
                continue
            _lib._dlcache_path = path
            return _lib
        here = os.path.dirname(os.path.abspath(__file__))
        tried_text = "\n  ".join(tried or ["nothing"])
        if os.environ.get("DLCACHE_LIB"):
            raise OSError(
                "dlcache: libdlcache_c.so could not be loaded. Tried:\n  "
                + tried_text
                + "\nDLCACHE_LIB names a library that does not load. Unset "
                "DLCACHE_LIB to use the one inside the package (in " + here
                + "; the wheel carries it), or point DLCACHE_LIB at a "
                "libdlcache_c.so that loads (a build writes "
                "build/client/libdlcache_c.so).")
        raise OSError(
            "dlcache: libdlcache_c.so could not be loaded. Tried, in order:\n  "
            + tried_text
            + "\nNothing loads inside the package (in " + here + "): it "
            "was installed from the source tree, not from the wheel. Fix it "
            "either way:\n"
            "  1. install the wheel, which carries the library: build it "
            "with `scripts/build.sh && scripts/build_wheel.sh` in a dlcache "
            "checkout, then `pip install dist/dlcache-*.whl` "
            "(docs/install.md), or\n"
            "  2. set DLCACHE_LIB=/path/to/libdlcache_c.so (a build writes "
            "it to build/client/libdlcache_c.so).")
