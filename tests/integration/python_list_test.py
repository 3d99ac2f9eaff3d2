"""Listing through the cache (issue 30): Client.list / list_pages, the
C++ and C ABI beneath them and `dlcachectl ls`, against a real dlcached.

Run by ctest (python_list_test) with DLCACHED, DLCACHECTL and DLCACHE_LIB
set; exits 77 (skipped) without DLCACHED. What it checks: every file comes
back sorted with its size and mtime; a prefix is a directory or a file;
pages of any size add up to the whole; the listing is kept until a
revalidate or a refresh; a reader outside the dataset's readers gets
PERMISSION_DENIED (as another uid: only when run as root, else skipped);
unknown datasets and bad prefixes fail as they should.
"""

import json
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import dlcache  # noqa: E402
from python_server import (Server, random_bytes, run_tests,  # noqa: E402
                           watchdog)

TEST_DEADLINE_S = 60

FILES = {}
for i in range(23):
    FILES["train/n%02d/img_%03d.jpg" % (i % 4, i)] = random_bytes(100 + i, i)
FILES["train-extra/a.bin"] = b"x" * 7
FILES["train.txt"] = b"list"
FILES["val/0.jpg"] = random_bytes(5000, 99)
FILES["empty"] = b""


def connect():
    return dlcache.Client(SERVER.socket, connect_timeout=20.0)


def setUpModule():
    global SERVER
    SERVER = Server(FILES)


def tearDownModule():
    SERVER.stop(cleanup=True)


def expected(prefix=""):
    out = []
    for name in FILES:
        if prefix and not (name == prefix or name.startswith(prefix + "/")):
            continue
        st = os.stat(os.path.join(SERVER.src, name))
        out.append(dlcache.FileEntry(name, st.st_size, st.st_mtime_ns))
    return sorted(out)


class ListTest(unittest.TestCase):
    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))
        self.client = connect()
        self.addCleanup(self.client.close)

    def test_lists_every_file_sorted_with_size_and_mtime(self):
        got = self.client.list("ds")
        self.assertEqual(got, expected())
        self.assertIsInstance(got[0], dlcache.FileEntry)
        self.assertEqual(got[0]._fields, ("name", "size", "mtime_ns"))
        # The names are keys: every file reads back byte-exact.
        batch = self.client.get_batch("ds", [e.name for e in got])
        for e, item in zip(got, batch):
            self.assertTrue(item.ok, item.error)
            self.assertEqual(bytes(item.view()), FILES[e.name])

    def test_prefix_is_a_directory_or_a_file(self):
        self.assertEqual(self.client.list("ds", "train"), expected("train"))
        self.assertEqual(self.client.list("ds", "train/"), expected("train"))
        self.assertEqual(self.client.list("ds", "train/n01"),
                         expected("train/n01"))
        self.assertEqual([e.name for e in self.client.list("ds", "train.txt")],
                         ["train.txt"])
        self.assertEqual(self.client.list("ds", "nothing/here"), [])
        self.assertEqual(dlcache.list_keys(self.client, "ds", "val"),
                         ["val/0.jpg"])

    def test_pages_of_any_size_add_up_to_the_whole(self):
        whole = self.client.list("ds")
        for size in (1, 2, 7, 1000):
            pages = list(self.client.list_pages("ds", page_size=size))
            self.assertTrue(all(0 < len(p) <= size for p in pages))
            self.assertEqual([e for p in pages for e in p], whole)
            self.assertEqual(len(pages), -(-len(whole) // size))
        pages = list(self.client.list_pages("ds", "train", page_size=5))
        self.assertEqual([e for p in pages for e in p], expected("train"))

    def test_unknown_dataset_and_bad_prefix(self):
        with self.assertRaises(dlcache.DlcacheError) as cm:
            self.client.list("nope")
        self.assertEqual(cm.exception.code, dlcache.NOT_FOUND)
        with self.assertRaises(dlcache.DlcacheError) as cm:
            self.client.list("ds", "../etc")
        self.assertEqual(cm.exception.code, dlcache.INVALID_ARGUMENT)

    def test_dlcachectl_ls(self):
        if not SERVER.ctl:
            self.skipTest("DLCACHECTL not set")
        env = dict(os.environ, DLCACHE_SOCKET=SERVER.socket)
        r = subprocess.run([SERVER.ctl, "--json", "ls", "ds", "train"],
                           env=env, capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual([(f["name"], f["size"], f["mtime_ns"])
                          for f in out["files"]],
                         [tuple(e) for e in expected("train")])
        self.assertEqual(out["count"], len(expected("train")))
        r = subprocess.run([SERVER.ctl, "ls", "ds", "val"], env=env,
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split()[0], "5000")
        self.assertTrue(r.stdout.rstrip().endswith("val/0.jpg"), r.stdout)
        r = subprocess.run([SERVER.ctl, "ls", "nope"], env=env,
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("NOT_FOUND", r.stderr)


class TrainExampleTest(unittest.TestCase):
    """deploy/k8s/examples/train.py: --data=dlcache://DATASET/PREFIX with
    DLCACHE_SOCKET and nothing else reads every file through dlcached."""

    SCRIPT = os.path.join(HERE, "..", "..", "deploy", "k8s", "examples",
                          "train.py")

    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))

    def run_train(self, *args):
        env = dict(os.environ, DLCACHE_SOCKET=SERVER.socket,
                   PYTHONPATH=os.path.join(HERE, "..", "..", "client",
                                           "python"))
        return subprocess.run([sys.executable, self.SCRIPT] + list(args),
                              env=env, capture_output=True, text=True,
                              timeout=60, cwd="/")

    def test_reads_the_prefix_through_the_cache(self):
        r = self.run_train("--data=dlcache://ds/train", "--epochs=2",
                           "--batch-size=5", "--verify")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        n = len(expected("train"))
        self.assertIn("listed %d files of ds under 'train'" % n, r.stdout)
        self.assertIn("epoch 1: %d files" % n, r.stdout)
        total = sum(sum(FILES[e.name]) for e in expected("train"))
        self.assertIn("byte sum %d" % total, r.stdout)

    def test_bad_url_is_a_usage_error(self):
        r = self.run_train("--data=/mnt/imagenet/train")
        self.assertEqual(r.returncode, 2)
        self.assertIn("dlcache://DATASET", r.stderr)


class RefreshTest(unittest.TestCase):
    """The listing is kept until a revalidate (or sync, or warm-up) or a
    refresh asks for a new one."""

    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))
        self.client = connect()
        self.addCleanup(self.client.close)

    def test_refresh_and_revalidate_show_source_changes(self):
        before = self.client.list("ds")
        added = os.path.join(SERVER.src, "val", "new.jpg")
        with open(added, "wb") as f:
            f.write(b"new file")
        try:
            # Kept: the listing does not walk the source per call.
            self.assertEqual(self.client.list("ds"), before)
            got = self.client.list("ds", refresh=True)
            self.assertIn(dlcache.FileEntry(
                "val/new.jpg", 8, os.stat(added).st_mtime_ns), got)
            self.assertEqual(len(got), len(before) + 1)
            self.assertEqual(self.client.get_batch(
                "ds", ["val/new.jpg"])[0].view().tobytes(), b"new file")
        finally:
            os.unlink(added)
        self.assertEqual(len(self.client.list("ds")), len(before) + 1)
        if not SERVER.ctl:
            self.skipTest("DLCACHECTL not set")
        r = subprocess.run([SERVER.ctl, "--socket", SERVER.socket,
                            "revalidate", "ds"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.client.list("ds"), before)

    def test_warmup_refreshes_the_listing(self):
        if not SERVER.ctl:
            self.skipTest("DLCACHECTL not set")
        before = self.client.list("ds")
        added = os.path.join(SERVER.src, "val", "warm.jpg")
        with open(added, "wb") as f:
            f.write(b"warm")
        try:
            self.assertEqual(self.client.list("ds"), before)  # kept
            r = subprocess.run([SERVER.ctl, "--socket", SERVER.socket,
                                "warmup", "ds", "val"], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            names = [e.name for e in self.client.list("ds")]
            self.assertIn("val/warm.jpg", names)
            self.assertEqual(len(names), len(before) + 1)
        finally:
            os.unlink(added)
            self.client.list("ds", refresh=True)


class PermissionTest(unittest.TestCase):
    """A caller outside the dataset's readers cannot list it."""

    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))

    def test_reader_outside_the_policy_is_denied(self):
        if os.getuid() != 0:
            self.skipTest("needs root to act as another uid (the server's "
                          "own uid and root read everything)")
        server = Server({"a.bin": b"a"}, extra=(
            "--dataset_readers=ds=uid:4242", "--default_readers=none"))
        self.addCleanup(server.stop, cleanup=True)
        os.chmod(server.root, 0o755)
        script = (
            "import sys\n"
            "sys.path.insert(0, %r)\n"
            "import dlcache\n"
            "c = dlcache.Client(%r, connect_timeout=20)\n"
            "try:\n"
            "    c.list('ds')\n"
            "    print('LISTED')\n"
            "except dlcache.DlcacheError as e:\n"
            "    print(e.name)\n"
            % (os.path.join(HERE, "..", "..", "client", "python"),
               server.socket))
        lib = os.environ.get("DLCACHE_LIB", "")
        if lib:
            # nobody must be able to load the library from the build tree.
            self.assertTrue(os.access(lib, os.R_OK))
        r = subprocess.run([sys.executable, "-c", script], user=65534,
                           group=65534, extra_groups=[], capture_output=True,
                           text=True, timeout=60, cwd="/")
        if "Permission denied" in r.stderr and "libdlcache_c" in r.stderr:
            self.skipTest("uid 65534 cannot read the build tree: %s"
                          % r.stderr[-300:])
        self.assertEqual(r.stdout.strip(), "PERMISSION_DENIED",
                         r.stdout + r.stderr)
        # Root (an admin) still lists.
        with dlcache.Client(server.socket, connect_timeout=20.0) as c:
            self.assertEqual([e.name for e in c.list("ds")], ["a.bin"])


if __name__ == "__main__":
    run_tests(__name__)
