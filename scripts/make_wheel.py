#!/usr/bin/env python3
"""Writes the dlcache wheel: the Python package, libdlcache_c.so and the C
headers in one py3-none-<platform> wheel (PEP 427), with no build backend
(only the standard library), so that it is the same file wherever it is
made. Called by scripts/build_wheel.sh, which checks the library first.

    make_wheel.py --package client/python/dlcache --lib LIB --headers DIR \
        --version 0.1.0 --platform manylinux_2_36_x86_64 --out dist
"""

import argparse
import base64
import hashlib
import os
import sys
import zipfile

# A fixed timestamp: the same inputs give the same wheel.
_DATE = (2026, 1, 1, 0, 0, 0)


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return "%s,sha256=%s,%d" % (arcname, digest.rstrip(b"=").decode(),
                                len(data))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--headers", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--platform", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--readme")
    a = ap.parse_args(argv)

    files = []  # (arcname, bytes, mode)
    for dirpath, dirnames, filenames in os.walk(a.package):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith((".pyc", ".so")) or ".so." in f:
                continue  # a stray copy of the library is not packaged
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, os.path.dirname(a.package))
            with open(full, "rb") as fh:
                files.append((rel.replace(os.sep, "/"), fh.read(), 0o644))
    # The library under its soname, which is what a program linked against
    # it (the LibTorch adapter: -l:libdlcache_c.so.0) records as needed.
    with open(a.lib, "rb") as fh:
        files.append(("dlcache/libdlcache_c.so.0", fh.read(), 0o755))
    for f in sorted(os.listdir(a.headers)):
        if f.startswith("dlcache_") and f.endswith(".h"):  # the C ABI
            with open(os.path.join(a.headers, f), "rb") as fh:
                files.append(("dlcache/include/dlcache/" + f, fh.read(),
                              0o644))

    tag = "py3-none-" + a.platform
    info = "dlcache-%s.dist-info" % a.version
    description = ""
    if a.readme and os.path.exists(a.readme):
        with open(a.readme, encoding="utf-8") as fh:
            description = "\n" + fh.read()
    metadata = (
        "Metadata-Version: 2.1\n"
        "Name: dlcache\n"
        "Version: %s\n"
        "Summary: Client of dlcache, the node-local shared cache for "
        "training data\n"
        "Requires-Python: >=3.8\n"
        "Provides-Extra: numpy\n"
        "Requires-Dist: numpy; extra == \"numpy\"\n"
        "Provides-Extra: torch\n"
        "Requires-Dist: torch; extra == \"torch\"\n"
        "Requires-Dist: numpy; extra == \"torch\"\n"
        "Description-Content-Type: text/markdown\n" % a.version
        + description)
    wheel = ("Wheel-Version: 1.0\n"
             "Generator: dlcache scripts/make_wheel.py\n"
             "Root-Is-Purelib: false\n"
             "Tag: %s\n" % tag)
    files.append((info + "/METADATA", metadata.encode(), 0o644))
    files.append((info + "/WHEEL", wheel.encode(), 0o644))
    files.append((info + "/top_level.txt", b"dlcache\n", 0o644))
    record = [_record_line(n, d) for n, d, _ in files]
    record.append(info + "/RECORD,,")
    files.append((info + "/RECORD", ("\n".join(record) + "\n").encode(),
                  0o644))

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "dlcache-%s-%s.whl" % (a.version, tag))
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in files:
            zi = zipfile.ZipInfo(name, _DATE)
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, path)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
