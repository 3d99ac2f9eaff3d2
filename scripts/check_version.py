#!/usr/bin/env python3
"""Checks that every place that states dlcache's version agrees with the one
source, CMakeLists.txt's project(dlcache VERSION ...) (passed as the first
argument by ctest's version_agrees): the Python package's metadata
(client/python/pyproject.toml) and dlcache.__version__, and what the built
binaries print: `dlcached --version`, `dlcachectl --version` and the C ABI's
dlc_version() in libdlcache_c.so.

  check_version.py VERSION DLCACHED DLCACHECTL LIBDLCACHE_C
"""

import ctypes
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    want, dlcached, ctl, lib = argv[1:]
    found = {}
    with open(os.path.join(ROOT, "client", "python", "pyproject.toml")) as f:
        m = re.search(r'^version = "([^"]*)"', f.read(), re.M)
        found["pyproject.toml"] = m.group(1) if m else None
    with open(os.path.join(ROOT, "client", "python", "dlcache",
                           "__init__.py")) as f:
        m = re.search(r'^__version__ = "([^"]*)"', f.read(), re.M)
        found["dlcache.__version__"] = m.group(1) if m else None
    for name, binary in (("dlcached", dlcached), ("dlcachectl", ctl)):
        out = subprocess.run([binary, "--version"], capture_output=True,
                             text=True, timeout=60)
        words = out.stdout.split()
        found[name + " --version"] = (
            words[1] if out.returncode == 0 and len(words) >= 2 and
            words[0] == name else "exit %d: %r" % (out.returncode,
                                                  out.stdout))
    c = ctypes.CDLL(lib)
    c.dlc_version.restype = ctypes.c_char_p
    found["dlc_version()"] = c.dlc_version().decode()
    bad = {k: v for k, v in found.items() if v != want}
    for k, v in sorted(found.items()):
        print("%-22s %s%s" % (k, v, "" if v == want else "  <- differs"))
    if bad:
        print("FAIL: CMakeLists.txt says %s" % want)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
