#!/usr/bin/env python3
"""Smoke test of the container image deploy/docker/build_image.sh builds.

Loads the image archive into a private buildah store (vfs driver, --root and
--runroot in a temp dir, so the machine's container storage is untouched)
and runs it the way deploy/k8s/ does, with buildah run (chroot isolation):

  * the archive holds exactly the tag build_image.sh gives
    (dlcache/dlcached:<project version>), and every DaemonSet and Job
    container in deploy/k8s references that tag;
  * the image's config: USER 10001:10001, ENTRYPOINT tini; its root file
    system has dlcached, dlcachectl, libdlcache_c.so and tini, and no
    compiler or -dev headers;
  * the DaemonSet's prepare-dirs init container command (as root), then
    dlcached started with the DaemonSet's command and args and the
    ConfigMap's flagfile, the DaemonSet's volume mounts backed by temp dirs
    (the arena on a /dev/shm tmpfs); only what needs a cluster is changed:
    sizes shrink, addresses become 127.0.0.1:0, --peer_dns and the mTLS
    files are dropped (as tools/smoke_probes.py does for the host build);
  * the process runs as uid/gid 10001;
  * the startup, readiness and liveness probe commands, exactly as written,
    pass; the warm-up Job's command, as the Job's user, fills the dataset;
  * the image's Python client, as the example trainer's user, reads every
    file and gets the bytes of the source files; a team without access is
    refused;
  * SIGTERM to tini (PID 1 of the container in a pod) stops dlcached, the
    container exits 0 within terminationGracePeriodSeconds, and the probes
    then fail.

Network: dlcached listens on Unix sockets and 127.0.0.1 only.

Usage: image_smoke.py IMAGE_ARCHIVE
Env: DLCACHE_IMAGE_REQUIRED=1 turns every skip into a failure (CI).
Exit: 0 passed, 1 failed, 77 skipped (no buildah, not root, no archive).
Cleans up what it made (processes, buildah containers and images, temp
dirs) also when a check fails or it is interrupted.
"""

import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
K8S = os.path.join(ROOT, "deploy", "k8s")
# The kustomize base and the examples; the overlays hold patches, not objects.
K8S_DIRS = [os.path.join(K8S, "base"), os.path.join(K8S, "examples")]
sys.path.insert(0, os.path.join(ROOT, "deploy", "tools"))
# The tests' guarded temp dirs (dlc-PID-XXXXXX, removed by a guard process
# however this one ends) and the parent death signal.
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

DLCACHE_UID = 10001
# What the runtime image must not carry (a slim stage: no toolchain).
NOT_IN_IMAGE = ["usr/bin/gcc", "usr/bin/g++", "usr/bin/cc", "usr/bin/c++",
                "usr/bin/cpp", "usr/bin/as", "usr/bin/ld", "usr/bin/make",
                "usr/bin/cmake", "usr/bin/ninja", "usr/bin/clang",
                "usr/bin/protoc", "usr/lib/gcc", "usr/include/grpcpp",
                "usr/include/absl", "usr/include/rocksdb",
                "usr/include/google/protobuf", "src"]
IN_IMAGE = ["usr/local/bin/dlcached", "usr/local/bin/dlcachectl",
            "usr/local/lib/libdlcache_c.so", "usr/bin/tini",
            "usr/local/include/dlcache/dlcache_c.h"]


class Failure(Exception):
    pass


def log(message):
    print("image_smoke: " + message, flush=True)


def fail(message):
    raise Failure(message)


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    fail("timed out after %ds waiting for %s" % (timeout_s, what))


def skip(message):
    if os.environ.get("DLCACHE_IMAGE_REQUIRED") == "1":
        print("image_smoke: FAIL (DLCACHE_IMAGE_REQUIRED=1): " + message)
        sys.exit(1)
    print("image_smoke: SKIP: " + message)
    sys.exit(SKIP)


def children_map():
    """{ppid: [pid]} of every process now."""
    tree = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid):
    tree, out, todo = children_map(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def ids(pid, field):
    """The real, effective, saved and fs ids of `field` (Uid or Gid)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return [int(x) for x in line.split()[1:]]
    return []


def processes_in(rootfs):
    """Processes whose root directory is the container's root file system."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink("/proc/%s/root" % entry) == rootfs:
                    found.append(int(entry))
            except OSError:
                pass
    return found


def private_mounts(smoke):
    """Moves this process (and so every buildah run it starts) into its own
    mount namespace, which goes away with it, even after a SIGKILL:
      * a fresh tmpfs on /dev/shm: buildah's chroot isolation binds the
        host's /dev into the container and ignores volumes under it, so the
        DaemonSet's arena volume at /dev/shm/dlcache would otherwise be the
        machine's real /dev/shm/dlcache;
      * tmp/containers over /var/lib/containers, where buildah (as root)
        keeps its blob-info cache whatever --root says.
    Notes on smoke whether /var/lib/containers had to be created, so that
    its cleanup removes it."""
    tmp = smoke.tmp
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newns = 0x00020000
    if libc.unshare(clone_newns) != 0:
        fail("unshare(CLONE_NEWNS): %s" % os.strerror(ctypes.get_errno()))
    if not os.path.isdir("/var/lib/containers"):
        os.mkdir("/var/lib/containers", 0o700)
        smoke.made_var_lib_containers = True
    os.makedirs(os.path.join(tmp, "containers"))
    for argv in (["mount", "--make-rprivate", "/"],
                 ["mount", "-t", "tmpfs", "-o", "size=512m,mode=1777",
                  "dlcache-image-smoke", "/dev/shm"],
                 ["mount", "--bind", os.path.join(tmp, "containers"),
                  "/var/lib/containers"]):
        r = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            fail("%s: %s" % (" ".join(argv), r.stdout))


def shrink_flags(text, known, pending):
    """The ConfigMap's flagfile with only what needs a cluster changed.
    Paths stay as shipped: the DaemonSet's volume mounts are reproduced."""
    out = []
    for raw in text.split("\n"):
        m = re.match(r"^--([a-z][a-z0-9_]*)=(.*)$", raw.strip())
        if not m:
            continue
        name, value = m.groups()
        if name not in known:
            if name in pending:
                log("warning: dropping --%s (not in this dlcached yet)" % name)
                continue
            fail("the image's dlcached does not define --%s" % name)
        if name == "arena_bytes":
            value = "64MiB"
        elif name == "segment_bytes":
            value = "16MiB"
        elif name == "ssd_bytes":
            value = "512MiB"
        elif name in ("metrics_address", "admin_address", "peer_address"):
            value = "127.0.0.1:0"
        elif name in ("peer_dns", "tls_cert", "tls_key", "tls_ca"):
            # No cluster DNS and no mTLS Secret here; the peer port keeps
            # its token (mTLS is tests/integration/tls_auth_test.cc's).
            continue
        out.append("--%s=%s" % (name, value))
    return "\n".join(out) + "\n"


class Smoke:
    def __init__(self, archive):
        self.archive = archive
        # The buildah store (GBs in vfs) lives in here: a guarded dir, so a
        # SIGKILLed run (ctest's timeout) leaves none of it behind.
        from python_server import private_dir
        self.tmp = private_dir()
        os.chmod(self.tmp, 0o755)
        store = os.path.join(self.tmp, "storage")
        os.makedirs(os.path.join(store, "tmp"))
        self.bh = ["buildah", "--root", os.path.join(store, "root"),
                   "--runroot", os.path.join(store, "runroot"),
                   "--storage-driver", "vfs"]
        self.env = dict(os.environ, TMPDIR=os.path.join(store, "tmp"),
                        BUILDAH_ISOLATION="chroot")
        self.ctr = None
        self.rootfs = None
        self.server = None
        self.server_log = os.path.join(self.tmp, "dlcached.log")
        self.made_var_lib_containers = False

    # --- helpers ---------------------------------------------------------

    def buildah(self, *args, timeout=300, check=True):
        r = subprocess.run(self.bh + list(args), env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout)
        if check and r.returncode != 0:
            fail("buildah %s: rc %d\n%s%s" % (" ".join(args[:2]), r.returncode,
                                             r.stdout, r.stderr))
        return r

    def run_in(self, mounts, argv, user=None, timeout=60):
        """argv in the container with mounts [(host, container, ro)];
        CompletedProcess with stdout and stderr together."""
        cmd = self.bh + ["run", "--isolation", "chroot"]
        if user is not None:
            cmd += ["--user", user]
        cmd += self.volume_args(mounts) + [self.ctr, "--"] + list(argv)
        try:
            return subprocess.run(cmd, env=self.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(cmd, 124, (e.stdout or "") +
                                               "(timed out)")

    @staticmethod
    def volume_args(mounts):
        args = []
        for host, path, ro in mounts:
            if path.startswith("/dev/"):
                continue  # buildah binds /dev itself (private_mounts)
            args += ["-v", "%s:%s%s" % (host, path, ":ro" if ro else "")]
        return args

    def as_user(self, uid, gid, groups, argv):
        """argv run by root in the container, switched to uid/gid/groups as
        a pod's securityContext would (buildah run has no supplementary
        groups)."""
        groups = (["--groups", ",".join(str(g) for g in groups)] if groups
                  else ["--clear-groups"])
        return ["setpriv", "--reuid", str(uid), "--regid", str(gid)] + \
            groups + ["--"] + list(argv)

    def server_log_text(self):
        try:
            with open(self.server_log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # --- the test --------------------------------------------------------

    def check_tags(self, cm, docs, version):
        expected = "%s:%s" % (cm.IMAGE_NAME, version)
        with tarfile.open(self.archive) as t:
            manifest = json.load(t.extractfile("manifest.json"))
        tags = [re.sub(r"^(docker\.io|localhost)/", "", tag)
                for entry in manifest for tag in entry.get("RepoTags") or []]
        if tags != [expected]:
            fail("the archive is tagged %r, want [%r] (build_image.sh's tag)"
                 % (tags, expected))
        refs = cm.image_references(docs)
        if not refs:
            fail("no DaemonSet or Job container in deploy/k8s")
        for where, image, _ in refs:
            if image != expected:
                fail("%s runs %r, but the image is %s" % (where, image,
                                                          expected))
        import yaml
        with open(os.path.join(K8S, "base", "kustomization.yaml")) as f:
            kust = yaml.safe_load(f)
        for entry in kust.get("images") or []:
            if entry.get("name") == cm.IMAGE_NAME and \
                    str(entry.get("newTag", version)) != version:
                fail("kustomization.yaml retags %s to %r, not %s"
                     % (cm.IMAGE_NAME, entry.get("newTag"), version))
        log("archive and %d manifest references are %s" % (len(refs),
                                                           expected))
        return expected

    def load_image(self):
        image_id = self.buildah("pull", "--quiet",
                                "docker-archive:" + self.archive).stdout
        image_id = image_id.strip().splitlines()[-1]
        info = json.loads(self.buildah("inspect", "--type", "image",
                                       image_id).stdout)
        config = (info.get("Docker") or {}).get("config") or \
            (info.get("OCIv1") or {}).get("config") or {}
        if config.get("User") != "%d:%d" % (DLCACHE_UID, DLCACHE_UID):
            fail("image USER is %r, want 10001:10001" % config.get("User"))
        if config.get("Entrypoint") != ["/usr/bin/tini", "--"]:
            fail("image ENTRYPOINT is %r" % config.get("Entrypoint"))
        self.ctr = self.buildah("from", "--pull=never", "--quiet",
                                image_id).stdout.strip()
        self.rootfs = self.buildah("mount", self.ctr).stdout.strip()
        for path in IN_IMAGE:
            if not os.path.exists(os.path.join(self.rootfs, path)):
                fail("the image lacks /" + path)
        present = [p for p in NOT_IN_IMAGE
                   if os.path.lexists(os.path.join(self.rootfs, p))]
        if present:
            fail("the runtime image carries build tools or headers: %s"
                 % ", ".join("/" + p for p in present))
        size = int(subprocess.run(["du", "-sxb", self.rootfs],
                                  stdout=subprocess.PIPE, text=True,
                                  check=True).stdout.split()[0])
        log("image USER 10001:10001, ENTRYPOINT tini, no compiler or "
            "headers; root file system %.1f MiB" % (size / 2**20))

    def volumes(self, pod, container, shm_dir):
        """[(host, container path, ro)] backing the container's
        volumeMounts: temp dirs per volume; the arena is the same path in
        the private /dev/shm (private_mounts), which buildah binds."""
        mounts = []
        for m in container.get("volumeMounts") or []:
            if m["mountPath"] == shm_dir:
                if not shm_dir.startswith("/dev/shm/"):
                    fail("--shm_dir %s is not under /dev/shm" % shm_dir)
                host = shm_dir
            else:
                host = os.path.join(self.tmp, "vol", m["name"])
                os.makedirs(host, exist_ok=True)
            mounts.append((host, m["mountPath"], bool(m.get("readOnly"))))
        return mounts

    @staticmethod
    def host_path(mounts, path):
        best = None
        for host, cpath, _ in mounts:
            if path == cpath or path.startswith(cpath.rstrip("/") + "/"):
                if best is None or len(cpath) > len(best[1]):
                    best = (host, cpath)
        if best is None:
            fail("%s is on no volume of the DaemonSet" % path)
        return os.path.join(best[0], os.path.relpath(path, best[1]))

    def run(self):
        import check_manifests as cm
        version = cm.project_version(ROOT)
        if not version:
            fail("no project(dlcache VERSION ...) in CMakeLists.txt")
        manifests = sorted(
            os.path.join(k, f) for k in K8S_DIRS for f in os.listdir(k)
            if f.endswith(".yaml") and f != "kustomization.yaml")
        docs = cm.load(manifests)
        checker = cm.Checker(docs, version)
        if checker.run():
            fail("check_manifests.py finds problems:\n" +
                 "\n".join(checker.errors))
        self.check_tags(cm, docs, version)
        self.load_image()

        ds = checker.one("DaemonSet", cm.DAEMONSET)
        pod = ds["spec"]["template"]["spec"]
        container = [c for c in pod["containers"]
                     if c["name"] == cm.CONTAINER][0]
        flags = checker.flags
        socket = flags["socket"]
        grace = pod.get("terminationGracePeriodSeconds", 30)
        mounts = self.volumes(pod, container, flags["shm_dir"])

        # The flagfile and the token where the projected config volume puts
        # them, as the kubelet writes them (0440, group fsGroup 10001).
        known = cm.binary_flags([self.bh + [
            "run", "--isolation", "chroot", self.ctr, "--",
            "/usr/local/bin/dlcached", "--helpfull"]]) | cm.ABSL_BUILTIN_FLAGS
        if "socket" not in known:
            fail("the image's dlcached --helpfull lists no --socket")
        text = shrink_flags(
            checker.one("ConfigMap", cm.CONFIGMAP)["data"][cm.FLAGFILE_KEY],
            known, cm.PENDING_DLCACHED_FLAGS)
        flagfile = [a.split("=", 1)[1] for a in container["args"]
                    if a.startswith("--flagfile=")][0]
        files = {flagfile: text}
        if "peer_token_file" in flags:
            files[flags["peer_token_file"]] = "image-smoke-token\n"
        for path, content in files.items():
            host = self.host_path(mounts, path)
            os.makedirs(os.path.dirname(host), exist_ok=True)
            with open(host, "w") as f:
                f.write(content)
            os.chown(host, 0, DLCACHE_UID)
            os.chmod(host, 0o440)

        # The dataset the Job warms, with files of several chunks' sizes.
        job = checker.find("Job")[0]
        job_spec = job["spec"]["template"]["spec"]
        job_c = job_spec["containers"][0]
        job_cmd = list(job_c.get("command") or []) + list(job_c.get("args")
                                                          or [])
        i = job_cmd.index("warmup")
        dataset = job_cmd[i + 1]
        prefix = job_cmd[i + 2] if len(job_cmd) > i + 2 and \
            not job_cmd[i + 2].startswith("-") else ""
        # Every configured dataset must be a readable directory at start.
        for path in checker.datasets(flags).values():
            os.makedirs(self.host_path(mounts, path), exist_ok=True)
        dataset_dir = checker.datasets(flags)[dataset]
        data_root = self.host_path(mounts, os.path.join(dataset_dir, prefix))
        os.makedirs(data_root, exist_ok=True)
        chunk = cm.parse_size(flags.get("chunk_size", "4MiB"))
        sizes = [0, 1, 4097, chunk, chunk + 1, 2 * chunk + 12345]
        expected = {}
        for n, size in enumerate(sizes):
            key = os.path.join(prefix, "f%d.bin" % n)
            blob = os.urandom(size)
            with open(os.path.join(data_root, "f%d.bin" % n), "wb") as f:
                f.write(blob)
            expected[key] = hashlib.sha256(blob).hexdigest()
        for d, subdirs, fs in os.walk(os.path.join(self.tmp, "vol")):
            os.chmod(d, 0o755)

        # prepare-dirs, as root, on the same volumes.
        for init in pod.get("initContainers") or []:
            r = self.run_in(self.volumes(pod, init, flags["shm_dir"]),
                            init["command"] + init.get("args", []),
                            user="0:0")
            if r.returncode != 0:
                fail("init container %s: rc %d\n%s" % (init["name"],
                                                       r.returncode, r.stdout))
        for host, path, _ in mounts:
            if path in (os.path.dirname(socket), flags["shm_dir"],
                        flags.get("ssd_dir")):
                st = os.stat(host)
                if (st.st_uid, st.st_gid) != (DLCACHE_UID, DLCACHE_UID):
                    fail("after prepare-dirs %s is owned by %d:%d"
                         % (path, st.st_uid, st.st_gid))
        log("prepare-dirs gives the socket dir, arena and SSD dir to 10001")

        # dlcached with the DaemonSet's command and args.
        subst = {"POD_IP": "127.0.0.1", "POD_NAMESPACE": "dlcache"}
        argv = []
        for a in container["command"] + container.get("args", []):
            if a.startswith("--peer_dns="):
                continue
            argv.append(re.sub(r"\$\((\w+)\)",
                               lambda m: subst.get(m.group(1), m.group(0)), a))
        # Without a PID namespace tini is not PID 1: as a subreaper it still
        # reaps what dlcached leaves, as it would as PID 1 in the pod.
        cmd = self.bh + ["run", "--isolation", "chroot", "--env",
                         "TINI_SUBREAPER=1"] + \
            self.volume_args(mounts) + [self.ctr, "--"] + argv
        with open(self.server_log, "w") as out:
            from python_server import die_with_parent
            self.server = subprocess.Popen(
                cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=die_with_parent)
        log("started: " + " ".join(argv))

        def probe(kind):
            return self.run_in(mounts, container[kind]["exec"]["command"],
                               timeout=container[kind].get(
                                   "timeoutSeconds", 1) + 30)

        def serving():
            if self.server.poll() is not None:
                fail("dlcached exited with %d" % self.server.returncode)
            return probe("readinessProbe").returncode == 0

        wait_for(serving, 120, "the readiness probe to pass")
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            r = probe(kind)
            if r.returncode != 0:
                fail("%s: rc %d\n%s" % (kind, r.returncode, r.stdout))
        log("startup, readiness and liveness probes pass")

        procs = {comm(p): p for p in descendants(self.server.pid)}
        for name in ("tini", "dlcached"):
            if name not in procs:
                fail("no %s process under buildah run (have %s)"
                     % (name, sorted(k for k in procs if k)))
            for field in ("Uid", "Gid"):
                got = ids(procs[name], field)
                if set(got) != {DLCACHE_UID}:
                    fail("%s runs with %s %s, want 10001" % (name, field, got))
        log("tini (pid %d) and dlcached (pid %d) run as uid/gid 10001"
            % (procs["tini"], procs["dlcached"]))

        # The warm-up Job's command, as the Job's user, with its mounts.
        sc = job_spec.get("securityContext") or {}
        job_mounts = []
        for m in job_c.get("volumeMounts") or []:
            host_dir = self.host_path(mounts, m["mountPath"])
            job_mounts.append((host_dir, m["mountPath"],
                               bool(m.get("readOnly"))))
        r = self.run_in(job_mounts, self.as_user(
            sc["runAsUser"], sc["runAsGroup"],
            sc.get("supplementalGroups") or [], job_cmd), user="0:0",
            timeout=120)
        if r.returncode != 0:
            fail("Job/%s %r: rc %d\n%s" % (job["metadata"]["name"], job_cmd,
                                           r.returncode, r.stdout))
        status = self.run_in(mounts, ["dlcachectl", "--socket", socket,
                                      "--json", "status"])
        m = re.search(r'"cached_chunks"\s*:\s*"?([0-9]+)', status.stdout)
        want_chunks = sum(max(1, -(-s // chunk)) for s in sizes if s)
        if not m or int(m.group(1)) < want_chunks:
            fail("after the Job the cache holds %s chunks, want >= %d\n%s"
                 % (m.group(1) if m else "?", want_chunks, status.stdout))
        log("Job/%s's command (uid %d) warms %s/%s: %s chunks cached"
            % (job["metadata"]["name"], sc["runAsUser"], dataset, prefix,
               m.group(1)))

        # The image's Python client reads the files as the example trainer.
        trainer = checker.find("Pod")[0]["spec"]
        tsc = trainer.get("securityContext") or {}
        # Per-file errors are item codes; a refused dataset may fail the
        # whole call instead (DlcacheError).
        reader = ("import dlcache, hashlib, json, sys\n"
                  "keys = json.loads(sys.argv[2])\n"
                  "out = {}\n"
                  "with dlcache.Client(sys.argv[1]) as c:\n"
                  "    try:\n"
                  "        with c.get_batch(sys.argv[3], keys) as b:\n"
                  "            for k, item in zip(keys, b):\n"
                  "                out[k] = [dlcache.status_name(item.code),\n"
                  "                          hashlib.sha256(item.tobytes())"
                  ".hexdigest() if item.ok else None]\n"
                  "    except dlcache.DlcacheError as e:\n"
                  "        out = {k: [dlcache.status_name(e.code), None]"
                  " for k in keys}\n"
                  "print(json.dumps(out))\n")
        keys = sorted(expected)

        def read_as(gid):
            r = self.run_in(mounts, self.as_user(
                tsc["runAsUser"], gid, tsc.get("supplementalGroups") or [],
                ["python3", "-c", reader, socket, json.dumps(keys), dataset]),
                user="0:0")
            if r.returncode != 0:
                fail("python client as gid %d: rc %d\n%s" % (gid, r.returncode,
                                                            r.stdout))
            return json.loads(r.stdout.strip().splitlines()[-1])

        got = read_as(tsc["runAsGroup"])
        for key in keys:
            if got.get(key) != ["OK", expected[key]]:
                fail("%s/%s: the client got %r, want OK with sha256 %s"
                     % (dataset, key, got.get(key), expected[key]))
        log("python client (uid %d gid %d) reads %d files, %d bytes, "
            "byte-exact" % (tsc["runAsUser"], tsc["runAsGroup"], len(keys),
                            sum(sizes)))
        other = tsc["runAsGroup"] + 1
        denied = read_as(other)
        if any(v[0] == "OK" for v in denied.values()):
            fail("gid %d (not a reader of %s) got %r" % (other, dataset,
                                                         denied))
        log("gid %d is refused: %s" % (other, sorted(
            {v[0] for v in denied.values()})))

        # SIGTERM to tini, as the kubelet stops the container.
        os.kill(procs["tini"], signal.SIGTERM)
        try:
            rc = self.server.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            fail("still running %ds after SIGTERM:\n%s" % (
                grace, self.server_log_text()))
        text = self.server_log_text()
        if rc != 0:
            fail("the container exited %d on SIGTERM:\n%s" % (rc, text))
        if "shutting down" not in text:
            fail("dlcached's log has no shutdown line:\n" + text)
        self.server = None
        left = processes_in(self.rootfs)
        if left:
            fail("processes left in the container: %s" % left)
        for kind in ("readinessProbe", "livenessProbe"):
            if probe(kind).returncode == 0:
                fail("%s passes with dlcached stopped" % kind)
        log("SIGTERM: dlcached shuts down, the container exits 0, the "
            "probes then fail")
        return 0

    def cleanup(self):
        if self.server is not None and self.server.poll() is None:
            try:
                os.killpg(self.server.pid, signal.SIGKILL)
            except OSError:
                pass
            self.server.wait(timeout=60)
        if self.rootfs:
            for pid in processes_in(self.rootfs):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for args in (["umount", "--all"], ["rm", "--all"],
                     ["rmi", "--all", "--force"]):
            try:
                self.buildah(*args, check=False, timeout=120)
            except subprocess.TimeoutExpired:
                log("cleanup: buildah %s timed out" % args[0])
        subprocess.run(["umount", "/var/lib/containers"],
                       stderr=subprocess.DEVNULL)
        if self.made_var_lib_containers:
            try:
                os.rmdir("/var/lib/containers")
            except OSError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    archive = os.path.abspath(sys.argv[1])
    if shutil.which("buildah") is None:
        skip("buildah is not installed (scripts/install_deps.sh)")
    if os.geteuid() != 0:
        skip("needs root (buildah run in chroot isolation)")
    try:
        import yaml  # noqa: F401
    except ImportError:
        skip("no PyYAML (python3-yaml)")
    if not os.path.isfile(archive):
        skip("no image archive %s: build it with deploy/docker/"
             "build_image.sh --output %s" % (archive, archive))

    # ctest's timeout or ^C: still clean up.
    def stop(signum, frame):
        raise Failure("interrupted by signal %d" % signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    smoke = Smoke(archive)
    try:
        private_mounts(smoke)
        smoke.run()
        log("PASS")
        return 0
    except Failure as e:
        print("image_smoke: FAIL: %s" % e)
        if smoke.server is not None:
            print("--- dlcached log ---\n" + smoke.server_log_text())
        return 1
    finally:
        smoke.cleanup()


if __name__ == "__main__":
    sys.exit(main())
