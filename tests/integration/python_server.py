"""Test fixture for the Python tests: a real dlcached on a temporary Unix
socket, arena and source directory.

The server runs in its own process group, gets SIGKILL if the test process
dies (PR_SET_PDEATHSIG), and is stopped (SIGTERM, then SIGKILL after a
deadline) by stop() and at exit. Waits poll a condition with a deadline;
nothing sleeps as synchronisation.
"""

import argparse
import atexit
import ctypes
import faulthandler
import fnmatch
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

# The exit code that ctest's SKIP_RETURN_CODE maps to "skipped".
SKIP_RETURN_CODE = 77

PR_SET_PDEATHSIG = 1


def die_with_parent(sig=signal.SIGKILL):
    """In a child process: get `sig` when the parent thread exits."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def wait_for(predicate, timeout, what, interval=0.02):
    """Polls predicate() until it returns a true value (returned) or the
    deadline passes (AssertionError naming `what` and the last value)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s "
                                 "(last: %r)" % (timeout, what, last))
        time.sleep(interval)


def random_bytes(n, seed):
    return random.Random(seed).randbytes(n)


# The test process: set on first import, inherited by every worker (fork,
# spawn, forkserver) through the environment.
MAIN_PID_ENV = "DLC_TEST_MAIN_PID"
os.environ.setdefault(MAIN_PID_ENV, str(os.getpid()))

_GUARDS = {}  # (pid, parent dir) -> the cleanup guard of that process


def _start_cleanup_guard(base):
    """Removes this process's dlc-PID-* directories under `base` once the
    process is gone, however it ends (a test killed by ctest runs no
    cleanup): a shell in a session of its own waits for end of file on a
    pipe whose write end only this process holds (and its forked children;
    exec'd ones do not inherit it)."""
    key = (os.getpid(), base)
    if key in _GUARDS:
        return
    script = ('read -r _; for d in "$1"/dlc-"$2"-*; do '
              '[ -e "$d" ] && rm -rf -- "$d"; done; exit 0')
    r, w = os.pipe()  # both close-on-exec
    try:
        # posix_spawn rather than Popen: no Popen object left to warn at
        # exit that its child still runs.
        os.posix_spawn("/bin/sh", ["sh", "-c", script, "dlc-cleanup", base,
                                   str(os.getpid())], os.environ,
                       file_actions=[
                           (os.POSIX_SPAWN_DUP2, r, 0),
                           (os.POSIX_SPAWN_OPEN, 1, "/dev/null",
                            os.O_WRONLY, 0),
                           (os.POSIX_SPAWN_DUP2, 1, 2)],
                       setsid=True)
        _GUARDS[key] = w  # held open for the life of the process
    except (AttributeError, OSError):
        os.close(w)  # best effort: the next private_dir's sweep removes them
    finally:
        os.close(r)


def private_dir(parent=None):
    """A new directory named dlc-PID-XXXXXX (the C++ TempDir's scheme)
    under `parent` (default: the temp dir), removed by a guard process when
    this process ends. Directories of that scheme whose process is gone (a
    test killed before its guard existed) are removed first."""
    base = parent or tempfile.gettempdir()
    for name in os.listdir(base):
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "dlc" or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        except OSError:
            pass  # alive (another user's)
    _start_cleanup_guard(base)
    return tempfile.mkdtemp(prefix="dlc-%d-" % os.getpid(), dir=base)


def die_with_test_process(sig=signal.SIGKILL):
    """In a DataLoader worker: die with the test process. The parent death
    signal alone is not enough for forkserver workers: their parent is the
    forkserver, which outlives a killed test because each worker holds its
    liveness pipe open, so a watcher thread follows the test process itself
    (pidfd) and exits the worker when it is gone."""
    die_with_parent(sig)
    pid = int(os.environ.get(MAIN_PID_ENV, "0"))
    if pid <= 0 or pid == os.getpid():
        return
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):
        return  # no pidfd here: the parent death signal only

    def watch():
        select.select([fd], [], [])
        os._exit(1)

    threading.Thread(target=watch, name="die-with-test", daemon=True).start()


def binaries_or_skip():
    """(dlcached, dlcachectl or None) from the environment, or SkipTest."""
    dlcached = os.environ.get("DLCACHED")
    if not dlcached or not os.access(dlcached, os.X_OK):
        raise unittest.SkipTest("DLCACHED (the dlcached binary) not set")
    ctl = os.environ.get("DLCACHECTL")
    if not ctl:
        guess = os.path.join(os.path.dirname(os.path.dirname(dlcached)),
                             "client", "dlcachectl")
        ctl = guess if os.access(guess, os.X_OK) else None
    return dlcached, ctl


class Server:
    """dlcached serving dataset "ds" from generated files."""

    def __init__(self, files, arena="64MiB", chunk="1MiB", extra=()):
        self.binary, self.ctl = binaries_or_skip()
        self.root = private_dir()
        self.shm = private_dir("/dev/shm")
        self.src = os.path.join(self.root, "src")
        for path, data in files.items():
            full = os.path.join(self.src, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
        self.socket = os.path.join(self.root, "d.sock")
        self.args = [self.binary, "--socket=" + self.socket,
                     "--shm_dir=" + self.shm, "--arena_bytes=" + arena,
                     "--segment_bytes=16MiB", "--chunk_size=" + chunk,
                     "--dataset=ds=" + self.src, "--metrics_address=",
                     "--keep_arena=false"] + list(extra)
        self.proc = None
        self.log = None
        self.starts = 0
        atexit.register(self.stop, cleanup=True)
        self.start()

    def start(self, timeout=30):
        assert self.proc is None or self.proc.poll() is not None
        self.starts += 1
        self.log = open(os.path.join(self.root, "dlcached.%d.log" %
                                     self.starts), "wb")
        self.proc = subprocess.Popen(
            self.args, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent)
        if self.ctl:
            wait_for(lambda: self._try_status() is not None, timeout,
                     "dlcached to serve on " + self.socket, interval=0.05)
        else:
            wait_for(lambda: os.path.exists(self.socket), timeout,
                     "dlcached's socket", interval=0.05)

    def stop(self, sig=signal.SIGTERM, timeout=20, cleanup=False):
        p = self.proc
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if self.log is not None:
            self.log.close()
            self.log = None
        if cleanup:
            shutil.rmtree(self.root, ignore_errors=True)
            shutil.rmtree(self.shm, ignore_errors=True)

    def restart(self):
        self.stop()
        self.start()

    def log_tail(self, n=2000):
        try:
            with open(os.path.join(self.root, "dlcached.%d.log" %
                                   self.starts), "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def _try_status(self, command="status"):
        try:
            r = subprocess.run([self.ctl, "--socket", self.socket, "--json",
                                command], capture_output=True, timeout=10)
        except subprocess.TimeoutExpired:
            return None
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)
        except ValueError:
            return None

    def status(self):
        """`dlcachectl --json status` as a dict (leases, sessions, ...)."""
        if not self.ctl:
            raise unittest.SkipTest("DLCACHECTL (dlcachectl) not set")
        st = self._try_status()
        if st is None:
            raise AssertionError("dlcachectl status failed")
        return st


    def dataset_stats(self, name="ds"):
        """Dataset `name` of `dlcachectl --json stats` (hits, misses,
        source_reads, ...)."""
        if not self.ctl:
            raise unittest.SkipTest("DLCACHECTL (dlcachectl) not set")
        st = self._try_status("stats")
        if st is None:
            raise AssertionError("dlcachectl stats failed")
        for d in st.get("datasets", []):
            if d.get("dataset") == name:
                return d
        raise AssertionError("no dataset %r in %r" % (name, st))


def watchdog(seconds):
    """Arms a per-test deadline: past it, every thread's traceback is
    dumped and the process exits (children die with it), so a hang is a
    failure, never a stuck run. Returns the disarm function."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    return faulthandler.cancel_dump_traceback_later


def _selected(suite, include, exclude):
    """The tests of `suite` (flattened) whose id matches one of the
    `include` patterns (all when none) and none of the `exclude` ones
    (fnmatch patterns, "*" added on both sides, as unittest's -k)."""
    out = unittest.TestSuite()
    stack = [suite]
    while stack:
        s = stack.pop(0)
        if isinstance(s, unittest.TestSuite):
            stack[0:0] = list(s)
            continue
        tid = s.id()
        if include and not any(fnmatch.fnmatchcase(tid, "*%s*" % p)
                               for p in include):
            continue
        if any(fnmatch.fnmatchcase(tid, "*%s*" % p) for p in exclude):
            continue
        out.addTest(s)
    return out


def run_tests(module_name, require=()):
    """unittest.main for a test file. Command line: -k PATTERN runs only
    the tests whose id matches (repeatable), -x PATTERN leaves those out
    (repeatable); ctest splits a file into entries this way, so that the
    cases that may skip on a host are entries of their own.

    Exit codes: 1 when a test failed or nothing was selected;
    SKIP_RETURN_CODE (ctest: Skipped) when a requirement is missing or any
    selected test skipped (each is listed with its reason), so a partly
    skipped entry never shows as Passed; 0 when every selected test ran and
    passed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("-k", action="append", default=[], dest="include")
    parser.add_argument("-x", action="append", default=[], dest="exclude")
    args = parser.parse_args()
    for what, ok in require:
        if not ok:
            print("SKIPPED: %s" % what)
            sys.exit(SKIP_RETURN_CODE)
    module = sys.modules[module_name]
    suite = _selected(unittest.defaultTestLoader.loadTestsFromModule(module),
                      args.include, args.exclude)
    if suite.countTestCases() == 0:
        print("no test matches -k %r -x %r" % (args.include, args.exclude))
        sys.exit(1)
    # Every selected case skipped by a decorator (a class or method marked
    # skipUnless(HAVE_CUDA)...): report them without running the module's
    # set-up (a server, datasets) for nothing.
    decorated = []
    for t in suite:
        for obj in (type(t), getattr(t, t._testMethodName, None)):
            if getattr(obj, "__unittest_skip__", False):
                decorated.append((t, getattr(obj, "__unittest_skip_why__",
                                             "")))
                break
    if len(decorated) == suite.countTestCases():
        print("SKIPPED %d of %d test(s):" % (len(decorated), len(decorated)))
        for test, reason in decorated:
            print("  %s: %s" % (test.id(), reason))
        sys.exit(SKIP_RETURN_CODE)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    skipped = len(result.skipped)
    if skipped:
        print("SKIPPED %d of %d test(s):" % (skipped, result.testsRun))
        for test, reason in result.skipped:
            print("  %s: %s" % (test.id(), reason))
    if not result.wasSuccessful():
        sys.exit(1)
    if skipped:
        sys.exit(SKIP_RETURN_CODE)
    sys.exit(0)
