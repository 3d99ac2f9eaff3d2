"""The wheel, as a trainer image would use it (issue 30).

From the build under test: scripts/build_wheel.sh writes the wheel into a
temporary directory; only the wheel is copied to a fresh directory, where
`python3 -m venv --system-site-packages v && v/bin/pip install --no-index
dlcache-*.whl` installs it offline. Then:
  * the installed libdlcache_c.so needs nothing at load time but the C
    and C++ runtimes (ldd) and exports dlc_* only;
  * with DLCACHE_SOCKET set, a script run by the venv's Python, from a
    directory outside the source tree and with no PYTHONPATH or
    DLCACHE_LIB, loads the system's shared Abseil and protobuf with global
    symbols (where installed), imports the installed package, lists the dataset through
    dlcached and reads every file; the digests it prints match the source
    files' (the script is never told where the source is).

Run by ctest (python_wheel_test) with DLCACHED and DLCACHE_BUILD_DIR set;
exits 77 (skipped) without them, without the venv module, or when the
build's library is not self-contained (DLCACHE_C_STATIC_DEPS=OFF).
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

from python_server import (Server, private_dir, random_bytes,  # noqa: E402
                           run_tests, watchdog)

TEST_DEADLINE_S = 300

FILES = {}
for i in range(40):
    FILES["train/c%d/%03d.jpg" % (i % 3, i)] = random_bytes(1000 + 997 * i, i)
FILES["train/big.bin"] = random_bytes(3 * (1 << 20) + 5, 77)
FILES["val/x.jpg"] = random_bytes(123, 5)

# What the trainer runs: nothing but the installed package and the socket
# from the environment.
USER_SCRIPT = r'''
import ctypes, hashlib, json, os, sys
# Another Abseil and protobuf in the process first, their symbols global
# (as a framework's extension modules may load them): the same mangled
# names as the Abseil inside libdlcache_c.so, which must keep its own.
others = []
for name in ("libabsl_synchronization.so.20220623", "libabsl_status.so.20220623",
             "libabsl_raw_hash_set.so.20220623", "libprotobuf.so.32"):
    try:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        others.append(name)
    except OSError:
        pass
import dlcache
from dlcache import _lib
assert "DLCACHE_LIB" not in os.environ
c = dlcache.Client()
files = c.list("ds")
digests = {}
keys = [f.name for f in files]
for i in range(0, len(keys), 16):
    batch = c.get_batch("ds", keys[i:i + 16])
    batch.raise_for_status()
    for key, item in zip(keys[i:i + 16], batch):
        data = item.tobytes()
        digests[key] = [hashlib.sha256(data).hexdigest(), len(data)]
print(json.dumps({"package": dlcache.__file__, "others": others,
                  "library": _lib.load()._dlcache_path,
                  "sizes": {f.name: f.size for f in files},
                  "digests": digests}))
'''


def build_dir():
    if os.environ.get("DLCACHE_C_STATIC_DEPS", "ON").upper() in (
            "OFF", "0", "FALSE", "NO"):
        raise unittest.SkipTest(
            "this build's libdlcache_c.so links the shared Abseil "
            "(DLCACHE_C_STATIC_DEPS=OFF: no Abseil sources; "
            "scripts/fetch_absl_pic_sources.sh, then reconfigure)")
    d = os.environ.get("DLCACHE_BUILD_DIR")
    if not d or not os.path.exists(os.path.join(d, "client",
                                                "libdlcache_c.so")):
        raise unittest.SkipTest("DLCACHE_BUILD_DIR (a build with "
                                "client/libdlcache_c.so) not set")
    return d


class WheelTest(unittest.TestCase):
    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))

    def test_wheel_installs_offline_and_reads_through_the_cache(self):
        bdir = build_dir()
        work = private_dir()
        self.addCleanup(shutil.rmtree, work, True)
        dist = os.path.join(work, "dist")
        r = subprocess.run(
            ["bash", os.path.join(ROOT, "scripts", "build_wheel.sh"),
             "--out", dist, "--no-relink"],
            cwd=ROOT, env=dict(os.environ, BUILD_DIR=bdir),
            capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wheels = [f for f in os.listdir(dist) if f.endswith(".whl")]
        self.assertEqual(len(wheels), 1, wheels)
        self.assertRegex(wheels[0],
                         r"^dlcache-[0-9.]+-py3-none-manylinux_2_\d+_\w+\.whl$")

        # Elsewhere, with the wheel only.
        elsewhere = os.path.join(work, "elsewhere")
        os.makedirs(elsewhere)
        shutil.copy(os.path.join(dist, wheels[0]), elsewhere)
        venv = os.path.join(elsewhere, "v")
        r = subprocess.run([sys.executable, "-m", "venv",
                            "--system-site-packages", venv],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0 and "ensurepip" in (r.stdout + r.stderr):
            self.skipTest("no venv/ensurepip for %s" % sys.executable)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        py = os.path.join(venv, "bin", "python")
        clean = {k: v for k, v in os.environ.items()
                 if k not in ("PYTHONPATH", "DLCACHE_LIB", "LD_LIBRARY_PATH",
                              "DLCACHE_SOCKET")}
        r = subprocess.run([py, "-m", "pip", "install", "--no-index",
                            "--disable-pip-version-check", "-q",
                            os.path.join(elsewhere, wheels[0])],
                           cwd=elsewhere, env=clean, capture_output=True,
                           text=True, timeout=180)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

        # The installed library needs only the C runtime.
        r = subprocess.run([py, "-c", "import dlcache, os; print(os.path."
                            "dirname(dlcache.__file__))"], cwd=elsewhere,
                           env=clean, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        pkg = r.stdout.strip()
        self.assertTrue(pkg.startswith(venv), pkg)
        lib = os.path.join(pkg, "libdlcache_c.so.0")
        self.assertTrue(os.path.exists(lib))
        ldd = subprocess.run(["ldd", lib], capture_output=True, text=True,
                             timeout=30).stdout
        for line in ldd.splitlines():
            name = line.split()[0]
            self.assertRegex(
                name, r"^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|"
                r"libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|"
                r"libstdc\+\+\.so\.6|libgcc_s\.so\.1|"
                r"/lib64/ld-linux-x86-64\.so\.2|ld-linux.*)$", ldd)
        exported = subprocess.run(["nm", "-D", "--defined-only", lib],
                                  capture_output=True, text=True,
                                  timeout=30).stdout.split("\n")
        names = [ln.split()[-1] for ln in exported if ln.strip()]
        self.assertTrue(names)
        self.assertEqual([n for n in names if not n.startswith("dlc_")], [])

        # A trainer that knows only DLCACHE_SOCKET.
        server = Server(FILES)
        self.addCleanup(server.stop, cleanup=True)
        env = dict(clean, DLCACHE_SOCKET=server.socket)
        r = subprocess.run([py, "-c", USER_SCRIPT], cwd=elsewhere, env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = json.loads(r.stdout)
        self.assertTrue(out["package"].startswith(venv), out["package"])
        self.assertTrue(out["library"].startswith(venv), out["library"])
        print("other libraries loaded first: %s" % out["others"])
        want = {k: [hashlib.sha256(v).hexdigest(), len(v)]
                for k, v in FILES.items()}
        self.assertEqual(out["digests"], want)
        self.assertEqual(out["sizes"], {k: len(v) for k, v in FILES.items()})


if __name__ == "__main__":
    run_tests(__name__)
