#!/usr/bin/env python3
"""Runs the DaemonSet's probes and the warm-up Job's command against a real
dlcached started from the ConfigMap's flagfile.

The flagfile is taken as shipped, with only what cannot work outside a
cluster rewritten: paths move into a temp dir (the arena into a fresh
/dev/shm directory), addresses become 127.0.0.1:0, --peer_dns is dropped
(no cluster DNS), the arena and SSD sizes shrink to 64MiB. Flags the binary
does not define yet (tools/check_manifests.py's PENDING sets) are dropped
with a warning; any other flag the binary rejects fails the run.

Then: the startup, readiness and liveness probe commands, exactly as in
daemonset.yaml but for the socket path, must succeed once dlcached serves;
the Job's `dlcachectl warmup` must warm a small dataset; after SIGTERM
dlcached must exit 0 within terminationGracePeriodSeconds, and then the
readiness and liveness probes must fail. With --keep_arena on, a second
dlcached on the same directories (as after a DaemonSet rollout, the hostPath
arena surviving the pod) must become ready with the warmed chunks still
cached.

Usage: smoke_probes.py DLCACHED DLCACHECTL MANIFEST.yaml...
Exit 0 ok, 1 failure.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import check_manifests as cm

SMALL = "64MiB"


def fail(message):
    print("smoke_probes: FAIL: " + message)
    sys.exit(1)


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    fail("timed out after %ds waiting for %s" % (timeout_s, what))


def rewrite_flags(text, tmp, shm, known):
    """The flagfile with cluster-only values replaced; (text, datasets)."""
    lines, datasets = [], {}
    for raw in text.split("\n"):
        line = raw.strip()
        m = cm._FLAG_LINE_RE.match(line)
        if not m:
            continue
        name, value = m.groups()
        if name not in known:
            if name in cm.PENDING_DLCACHED_FLAGS:
                print("smoke_probes: warning: dropping --%s (not in this "
                      "dlcached yet)" % name)
                continue
            fail("dlcached does not define --%s" % name)
        if name == "socket":
            value = os.path.join(tmp, "run", "dlcached.sock")
        elif name == "shm_dir":
            value = shm
        elif name == "ssd_dir":
            value = os.path.join(tmp, "ssd")
        elif name == "peer_token_file":
            value = os.path.join(tmp, "token")
            with open(value, "w") as f:
                f.write("smoke-test-token\n")
            os.chmod(value, 0o600)  # dlcached refuses a token others read
        elif name == "arena_bytes":
            value = SMALL
        elif name == "ssd_bytes":
            # The SSD tier needs room for at least one of its data files.
            value = "512MiB"
        elif name == "segment_bytes":
            value = "16MiB"
        elif name in ("metrics_address", "admin_address", "peer_address"):
            value = "127.0.0.1:0"
        elif name == "peer_dns":
            continue
        elif name in ("tls_cert", "tls_key", "tls_ca"):
            # The Secret's files are not here; the peer port keeps its token.
            # mTLS itself is tests/integration/tls_auth_test.cc's.
            continue
        elif name in ("source", "dataset"):
            items = []
            for item in value.split(","):
                ds, _, path = (item.partition("=") if name == "dataset"
                               else ("default", "=", item))
                local = os.path.join(tmp, "data", ds)
                os.makedirs(local, exist_ok=True)
                datasets[ds] = local
                items.append(local if name == "source" else ds + "=" + local)
            value = ",".join(items)
        lines.append("--%s=%s" % (name, value))
    return "\n".join(lines) + "\n", datasets


def run_shell(cmd, env, timeout):
    try:
        return subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "(timed out)")


def main():
    dlcached, dlcachectl = sys.argv[1], sys.argv[2]
    docs = cm.load(sys.argv[3:])
    checker = cm.Checker(docs)
    if checker.run():
        fail("check_manifests.py finds problems; run it first")
    config = checker.one("ConfigMap", cm.CONFIGMAP)
    ds = checker.one("DaemonSet", cm.DAEMONSET)
    pod = ds["spec"]["template"]["spec"]
    container = [c for c in pod["containers"] if c["name"] == cm.CONTAINER][0]
    socket = checker.flags["socket"]
    grace = pod.get("terminationGracePeriodSeconds", 30)

    known = cm.binary_flags([[dlcached, "--helpfull"]]) | \
        cm.ABSL_BUILTIN_FLAGS
    if "socket" not in known:
        fail("%s --helpfull lists no --socket" % dlcached)
    ctl_known = cm.binary_flags([[dlcachectl, "--help"],
                                 [dlcachectl, "help", "warmup"]])

    tmp = tempfile.mkdtemp(prefix="dlcache-smoke-")
    shm = tempfile.mkdtemp(prefix="dlcache-smoke-", dir="/dev/shm")
    server = None
    try:
        os.makedirs(os.path.join(tmp, "run"))
        os.makedirs(os.path.join(tmp, "bin"))
        os.symlink(os.path.abspath(dlcachectl),
                   os.path.join(tmp, "bin", "dlcachectl"))
        text, datasets = rewrite_flags(
            config["data"][cm.FLAGFILE_KEY], tmp, shm, known)
        flagfile = os.path.join(tmp, "dlcached.flags")
        with open(flagfile, "w") as f:
            f.write(text)
        local_socket = os.path.join(tmp, "run", "dlcached.sock")
        args = [dlcached, "--flagfile=" + flagfile]
        if "node_id" in known:
            # host:port as peers would reach it (unused: no --peer_dns).
            args.append("--node_id=127.0.0.1:7070")
        log = open(os.path.join(tmp, "dlcached.log"), "w+")
        server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        keep_arena = "keep_arena" in known and \
            checker.flags.get("keep_arena", "true").lower() in (
                "true", "1", "yes", "t", "y")

        env = dict(os.environ)
        env["PATH"] = os.path.join(tmp, "bin") + os.pathsep + env["PATH"]
        env.pop("DLCACHE_SOCKET", None)

        def probe(kind):
            p = container[kind]
            cmd = [part.replace(socket, local_socket)
                   for part in p["exec"]["command"]]
            return run_shell(cmd, env, p.get("timeoutSeconds", 1) + 5)

        def serving():
            if server.poll() is not None:
                log.seek(0)
                fail("dlcached exited with %d:\n%s"
                     % (server.returncode, log.read()))
            return probe("readinessProbe").returncode == 0

        def cached_chunks():
            status = run_shell([dlcachectl, "--socket", local_socket,
                                "--json", "status"], env, 20)
            m = re.search(r'"cached_chunks"\s*:\s*([0-9]+)', status.stdout)
            return int(m.group(1)) if m else -1

        wait_for(serving, 60, "the readiness probe to pass")
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if kind not in container:
                continue
            r = probe(kind)
            if r.returncode != 0:
                fail("%s failed (%d): %s" % (kind, r.returncode, r.stdout))
            print("smoke_probes: %s passes" % kind)

        # The warm-up Job's command, on a dataset with a few files.
        for job in checker.find("Job"):
            c = job["spec"]["template"]["spec"]["containers"][0]
            cmd = [w.replace(socket, local_socket) for w in c["command"] +
                   c.get("args", [])]
            if "warmup" not in cmd:
                continue
            i = cmd.index("warmup")
            dataset = cmd[i + 1]
            prefix = cmd[i + 2] if len(cmd) > i + 2 and \
                not cmd[i + 2].startswith("-") else ""
            root = os.path.join(datasets[dataset], prefix)
            os.makedirs(root, exist_ok=True)
            for n in range(5):
                with open(os.path.join(root, "f%d.bin" % n), "wb") as f:
                    f.write(os.urandom(1000 + n))
            dropped = [w for w in cmd if w.startswith("--") and
                       w[2:].split("=")[0] not in ctl_known]
            for w in dropped:
                if w[2:] not in cm.PENDING_DLCACHECTL_FLAGS:
                    fail("dlcachectl does not define %s" % w)
                print("smoke_probes: warning: dropping %s (not in this "
                      "dlcachectl yet)" % w)
            cmd = [w for w in cmd if w not in dropped]
            r = run_shell(cmd, env, 60)
            if r.returncode != 0:
                fail("Job/%s command %r: rc %d\n%s"
                     % (job["metadata"]["name"], cmd, r.returncode, r.stdout))
            if cached_chunks() < 5:
                fail("after Job/%s the cache holds %d chunks, want >= 5"
                     % (job["metadata"]["name"], cached_chunks()))
            print("smoke_probes: Job/%s warms %s/%s"
                  % (job["metadata"]["name"], dataset, prefix))

        server.send_signal(signal.SIGTERM)
        try:
            rc = server.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            fail("dlcached did not stop within terminationGracePeriodSeconds "
                 "(%ds) of SIGTERM" % grace)
        server = None
        if rc != 0:
            fail("dlcached exited %d on SIGTERM" % rc)
        for kind in ("readinessProbe", "livenessProbe"):
            if probe(kind).returncode == 0:
                fail("%s passes with dlcached stopped" % kind)
        print("smoke_probes: dlcached stops on SIGTERM; probes then fail")

        if keep_arena:
            warmed = 5 * len(checker.find("Job"))
            log.seek(0)
            log.truncate()
            server = subprocess.Popen(args, stdout=log,
                                      stderr=subprocess.STDOUT)
            wait_for(serving, 60, "the restarted dlcached to be ready")
            if cached_chunks() < warmed:
                log.seek(0)
                fail("restart with --keep_arena: %d chunks cached, want >= "
                     "%d\n%s" % (cached_chunks(), warmed, log.read()))
            server.send_signal(signal.SIGTERM)
            if server.wait(timeout=grace) != 0:
                fail("restarted dlcached exited %d" % server.returncode)
            server = None
            print("smoke_probes: restart re-adopts the arena (%d chunks "
                  "warm)" % warmed)
        return 0
    finally:
        if server is not None:
            server.kill()
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
