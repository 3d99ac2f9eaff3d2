"""cache.proto's CacheService from Python grpcio against a real dlcached.

Stubs are generated at test time from proto/dlcache/v1/cache.proto with
grpc_tools.protoc (Debian's python3-grpc-tools) into a temporary directory;
the segments are opened by the paths the server gives (SessionOpened) and
mapped read-only, and what they hold is compared byte for byte with what the
framed path (dlcache.Client, over libdlcache_c.so) reads for the same keys.

Run by ctest (python_grpc_handles_test) with DLCACHED, DLCACHECTL and
DLCACHE_LIB set; exits 77 (skipped) without them or without grpcio /
grpc_tools.
"""

import ctypes
import mmap
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import dlcache  # noqa: E402
from python_server import (Server, private_dir, random_bytes,  # noqa: E402
                           run_tests, wait_for, watchdog)

try:
    import grpc
    import grpc_tools  # noqa: F401
    HAVE_GRPC = True
except ImportError:
    HAVE_GRPC = False

CHUNK = 1 << 20
TEST_DEADLINE_S = 60
MAX_KEYS = 64

FILES = {}
for i in range(40):
    FILES["train/%02d.jpg" % i] = random_bytes(10000 + 2711 * i, 3000 + i)
FILES["big/shard.bin"] = random_bytes(2 * CHUNK + 4321, 77)
FILES["empty.txt"] = b""
KEYS = sorted(k for k in FILES if k.startswith("train/"))

pb = None
pb_grpc = None
SERVER = None
STUB_DIR = None


def generate_stubs():
    """cache_pb2 and cache_pb2_grpc, generated into a private temp dir (as
    top-level modules: a `dlcache` package would shadow the client's)."""
    global pb, pb_grpc, STUB_DIR
    out = private_dir()
    STUB_DIR = out
    proto_dir = os.path.join(ROOT, "proto", "dlcache", "v1")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc",
                    "-I" + proto_dir, "--python_out=" + out,
                    "--grpc_python_out=" + out,
                    os.path.join(proto_dir, "cache.proto")], check=True)
    sys.path.insert(0, out)
    import cache_pb2
    import cache_pb2_grpc
    pb, pb_grpc = cache_pb2, cache_pb2_grpc


def setUpModule():
    global SERVER
    generate_stubs()
    SERVER = Server(FILES, extra=["--max_keys_per_batch=%d" % MAX_KEYS])


def tearDownModule():
    if SERVER is not None:
        SERVER.stop(cleanup=True)


class GrpcSession:
    """A CacheService session: the Session stream held open, the segments
    mapped read-only by path."""

    def __init__(self, socket):
        self.channel = grpc.insecure_channel("unix:" + socket)
        self.stub = pb_grpc.CacheServiceStub(self.channel)
        self.stream = self.stub.Session(
            pb.OpenSession(client_name="python-grpc"), timeout=120)
        self.opened = next(self.stream)
        self.id = self.opened.session_id
        self.maps = {}
        for s in self.opened.segments:
            fd = os.open(s.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                self.maps[s.id] = mmap.mmap(fd, s.size, mmap.MAP_SHARED,
                                            mmap.PROT_READ)
            finally:
                os.close(fd)

    def get_batch(self, keys, dataset=b"ds", release=()):
        return self.stub.GetBatch(pb.GetBatchRequest(
            session_id=self.id, dataset=dataset,
            items=[pb.ItemKey(path=k.encode()) for k in keys],
            release=list(release)), timeout=30)

    def read(self, item):
        return b"".join(self.maps[c.segment][c.offset:c.offset + c.length]
                        for c in item.chunks)

    def close(self):
        self.stream.cancel()
        self.channel.close()
        for m in self.maps.values():
            m.close()


def leases():
    return SERVER.status().get("leases", 0)


class GrpcHandlesTest(unittest.TestCase):
    def setUp(self):
        self.addCleanup(watchdog(TEST_DEADLINE_S))
        self.session = GrpcSession(SERVER.socket + ".grpc")
        self.addCleanup(self.session.close)

    def test_session_tells_the_arena(self):
        o = self.session.opened
        self.assertGreater(o.session_id, 0)
        self.assertEqual(o.chunk_size, CHUNK)
        self.assertEqual(o.max_keys_per_batch, MAX_KEYS)
        self.assertTrue(o.segments)
        for s in o.segments:
            self.assertTrue(os.path.isabs(s.path), s.path)
            self.assertTrue(s.path.startswith(SERVER.shm), s.path)
        # Read-only: the mapping cannot be written.
        with self.assertRaises(TypeError):
            self.session.maps[o.segments[0].id][0] = 1

    def test_bytes_and_handles_match_the_framed_path(self):
        keys = KEYS + ["big/shard.bin", "empty.txt"]
        r = self.session.get_batch(keys)
        self.assertEqual(len(r.items), len(keys))
        with dlcache.Client(SERVER.socket, connect_timeout=20.0) as client:
            framed = client.get_batch("ds", keys)
            segments = {s.id: s for s in client.segments()}
            for key, item, f in zip(keys, r.items, framed):
                self.assertEqual(item.code, 0, item.message)
                self.assertTrue(f.ok, f)
                self.assertEqual(item.file_size, len(FILES[key]))
                self.assertEqual(item.file_size, f.size)
                self.assertEqual(item.chunk_count, f.num_chunks)
                got = self.session.read(item)
                self.assertEqual(got, f.tobytes(), key)
                self.assertEqual(got, FILES[key], key)
                # The same handles: each framed chunk view lies at the
                # segment and offset the gRPC handle names.
                for c, v in zip(item.chunks, f.chunks()):
                    self.assertEqual(c.length, len(v))
                    if c.length == 0:
                        continue
                    a = address_of(v)
                    s = segments[c.segment]
                    self.assertEqual(a - s.address, c.offset, key)
            self.assertEqual([len(i.chunks) for i in r.items[-2:]], [3, 0])

    def test_leases_are_released_and_die_with_the_stream(self):
        before = leases()
        r = self.session.get_batch(KEYS[:8])
        ids = [c.lease for i in r.items for c in i.chunks]
        self.assertEqual(len(ids), 8)
        self.assertEqual(leases(), before + 8)
        got = self.session.stub.Release(
            pb.ReleaseRequest(session_id=self.session.id, leases=ids[:3]),
            timeout=30)
        self.assertEqual(got.released, 3)
        self.assertEqual(leases(), before + 5)
        # Batched release: the rest goes with the next batch.
        self.session.get_batch(KEYS[8:9], release=ids[3:])
        self.assertEqual(leases(), before + 1)
        self.session.get_batch(KEYS[9:12])
        # The client goes away without releasing: the stream's end closes
        # the session and its leases.
        self.session.close()
        wait_for(lambda: leases() == before, 20, "the session's leases to go")
        other = GrpcSession(SERVER.socket + ".grpc")
        self.addCleanup(other.close)
        with self.assertRaises(grpc.RpcError) as e:
            other.stub.GetBatch(pb.GetBatchRequest(
                session_id=self.session.id, dataset=b"ds",
                items=[pb.ItemKey(path=KEYS[0].encode())]), timeout=30)
        self.assertEqual(e.exception.code(),
                         grpc.StatusCode.FAILED_PRECONDITION)

    def test_errors(self):
        r = self.session.get_batch(["train/none.jpg", "../etc/passwd"])
        self.assertEqual([i.code for i in r.items],
                         [grpc.StatusCode.NOT_FOUND.value[0],
                          grpc.StatusCode.INVALID_ARGUMENT.value[0]])
        cases = [
            (dict(dataset=b"nope"), grpc.StatusCode.NOT_FOUND),
            (dict(keys=KEYS[:1] * (MAX_KEYS + 1)),
             grpc.StatusCode.INVALID_ARGUMENT),
        ]
        for kw, code in cases:
            with self.assertRaises(grpc.RpcError) as e:
                self.session.get_batch(kw.get("keys", KEYS[:1]),
                                       dataset=kw.get("dataset", b"ds"))
            self.assertEqual(e.exception.code(), code, kw)
        with self.assertRaises(grpc.RpcError) as e:
            self.session.stub.GetBatch(pb.GetBatchRequest(
                session_id=self.session.id + 1000, dataset=b"ds",
                items=[pb.ItemKey(path=KEYS[0].encode())]), timeout=30)
        self.assertEqual(e.exception.code(),
                         grpc.StatusCode.FAILED_PRECONDITION)

    def test_stat(self):
        r = self.session.stub.Stat(pb.StatRequest(
            dataset=b"ds", paths=[b"big/shard.bin", b"train/none.jpg"]),
            timeout=30)
        self.assertEqual(r.files[0].code, 0)
        self.assertEqual(r.files[0].size, len(FILES["big/shard.bin"]))
        self.assertEqual(r.files[0].chunk_count, 3)
        self.assertEqual(r.files[1].code, grpc.StatusCode.NOT_FOUND.value[0])


# Run as another user by SharedGroupTest: maps a segment by path read-only
# and compares a chunk with the expected bytes (stdin); a write open must
# fail. Prints what it found.
READER = r"""
import mmap, os, sys
path, size, offset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
want = sys.stdin.buffer.read()
try:
    fd = os.open(path, os.O_RDONLY)
except PermissionError:
    print("read-denied")
    sys.exit(0)
m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
same = m[offset:offset + len(want)] == want
try:
    os.close(os.open(path, os.O_RDWR))
    writable = True
except PermissionError:
    writable = False
print("read-%s %s" % ("same" if same else "differs",
                      "writable" if writable else "read-only"))
"""

# Run as another user by SharedGroupTest: a gRPC client that is not a
# reader of dataset "ds" and tries another process's session.
INTRUDER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import grpc, cache_pb2 as pb, cache_pb2_grpc as pb_grpc
stub = pb_grpc.CacheServiceStub(grpc.insecure_channel("unix:" + sys.argv[2]))
stream = stub.Session(pb.OpenSession(client_name="intruder"), timeout=60)
mine = next(stream).session_id
def code(call, *args):
    try:
        call(*args, timeout=30)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name
key = [pb.ItemKey(path=b"train/00.jpg")]
print(code(stub.GetBatch, pb.GetBatchRequest(session_id=mine, dataset=b"ds",
                                             items=key)),
      code(stub.Stat, pb.StatRequest(dataset=b"ds", paths=[b"empty.txt"])),
      code(stub.GetBatch, pb.GetBatchRequest(session_id=int(sys.argv[3]),
                                             dataset=b"ds", items=key)),
      code(stub.Release, pb.ReleaseRequest(session_id=int(sys.argv[3]),
                                           leases=[1])))
stream.cancel()
"""

SHARED_GID = 4242
NOBODY = 65534


class SharedGroupTest(unittest.TestCase):
    """Clients of another uid: with --shared_group a process in that group
    opens the segments named in SessionOpened by path, read-only, and one
    outside it cannot open them; a client who is not a reader of the
    dataset is refused GetBatch and Stat (SO_PEERCRED, --dataset_readers),
    and another process's session is not its to use. Needs root (to start
    clients as another user)."""

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to run a client as another uid")
        self.addCleanup(watchdog(TEST_DEADLINE_S))
        # Only root reads "ds" (admins read everything anyway).
        self.server = Server(FILES, extra=[
            "--shared_group=%d" % SHARED_GID, "--dataset_readers=ds=uid:0"])
        self.addCleanup(self.server.stop, cleanup=True)

    def read_as(self, groups, path, size, offset, want):
        r = subprocess.run(
            [sys.executable, "-c", READER, path, str(size), str(offset)],
            input=want, capture_output=True, timeout=30, user=NOBODY,
            group=NOBODY, extra_groups=groups)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.decode().strip()

    def test_members_read_in_place_read_only(self):
        session = GrpcSession(self.server.socket + ".grpc")
        self.addCleanup(session.close)
        key = KEYS[5]
        item = session.get_batch([key]).items[0]
        self.assertEqual(item.code, 0, item.message)
        c = item.chunks[0]
        seg = {s.id: s for s in session.opened.segments}[c.segment]
        self.assertEqual(os.stat(seg.path).st_gid, SHARED_GID)
        self.assertEqual(
            self.read_as([SHARED_GID], seg.path, seg.size, c.offset,
                         FILES[key]),
            "read-same read-only")
        self.assertEqual(
            self.read_as([], seg.path, seg.size, c.offset, FILES[key]),
            "read-denied")

    def test_calls_are_checked_against_the_callers_credentials(self):
        session = GrpcSession(self.server.socket + ".grpc")
        self.addCleanup(session.close)
        # The stubs and the socket where another uid can reach them (the
        # socket itself is 0666, as --socket).
        stubs = tempfile.mkdtemp(dir=private_dir())
        for name in ("cache_pb2.py", "cache_pb2_grpc.py"):
            with open(os.path.join(STUB_DIR, name), "rb") as f:
                data = f.read()
            with open(os.path.join(stubs, name), "wb") as f:
                f.write(data)
            os.chmod(os.path.join(stubs, name), 0o644)
        for d in (stubs, os.path.dirname(stubs), self.server.root):
            os.chmod(d, 0o711 if d == self.server.root else 0o755)
        r = subprocess.run(
            [sys.executable, "-c", INTRUDER, stubs,
             self.server.socket + ".grpc", str(session.id)],
            capture_output=True, timeout=60, user=NOBODY, group=NOBODY,
            extra_groups=[SHARED_GID])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.decode().split(),
                         ["PERMISSION_DENIED", "PERMISSION_DENIED",
                          "FAILED_PRECONDITION", "FAILED_PRECONDITION"])
        # The owner's session is untouched.
        self.assertEqual(session.get_batch(KEYS[:1]).items[0].code, 0)


def address_of(view):
    """Where a framed-path view's bytes lie (a view over a ctypes array)."""
    return ctypes.addressof(view.obj)


if __name__ == "__main__":
    run_tests(__name__, require=[
        ("python3-grpcio and python3-grpc-tools (import grpc, grpc_tools)",
         HAVE_GRPC)])
