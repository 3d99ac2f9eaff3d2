#!/usr/bin/env python3
"""Checks the fields of dlcache's Kubernetes manifests that dlcache relies on.

kubectl's client-side dry run only proves the objects decode; this checks
that they fit together: the flagfile in the ConfigMap holds only flags
dlcached knows, the DaemonSet mounts the socket dir, arena and SSD dir where
the flags point and from the host, its memory limit covers the arena, the
probes ask the right socket, the peers Service is headless and matches the
peer port, and the example trainer and warm-up Job reach the socket.

Usage:
  check_manifests.py [--kustomized FILE] [--dlcached BIN] [--dlcachectl BIN]
                     MANIFEST.yaml...
  check_manifests.py --self-test MANIFEST.yaml...

--kustomized: `kubectl kustomize deploy/k8s/base` output, checked to hold the
same objects (namespaced ones in the kustomization's namespace).
--dlcached / --dlcachectl: built binaries; their --helpfull output must
list every flag the manifests pass them.
--self-test: breaks the manifests in known ways, in memory, and fails unless
each break is reported (so the checks themselves can fail).

Exit status 0 when everything holds; otherwise 1, one line per problem.
"""

import argparse
import copy
import os
import posixpath
import re
import shlex
import subprocess
import sys

import yaml

# Every flag dlcached defines (server/main.cc). Keep in sync; the list is
# also checked against server/*.cc's ABSL_FLAG definitions and, with
# --dlcached, against the binary.
DLCACHED_FLAGS = {
    "socket", "shm_dir", "arena_bytes", "segment_bytes", "chunk_size",
    "keep_arena", "source", "dataset", "fill_threads", "warmup_parallelism",
    "metrics_address", "admin_address", "log_level",
    "ssd_dir", "ssd_bytes", "ssd_verify_on_start", "node_id",
    "peer_address", "peers", "peer_dns", "peer_token_file", "peer_timeout",
    "peer_data_port", "peer_sendfile",
    "flagfile",
    # Issue 9: identity and access, mTLS and tokens, warm-up bounds.
    "dataset_readers", "default_readers", "admin_uids", "admin_gids",
    "tls_cert", "tls_key", "tls_ca", "tls_server_name", "insecure_peers",
    "admin_token_file", "insecure_admin", "max_warmup_parallelism",
    "max_concurrent_warmups",
    # Issues 10-19: the data socket's bounds, eviction, epoch plans, NUMA,
    # warm restarts, heap, the SSD index's memory.
    "admin_socket", "borrowed_share", "data_event_loops", "epoch_plans",
    "eviction_policy", "malloc_arenas", "max_connections", "max_frame_bytes",
    "max_inflight_per_connection", "max_keys_per_batch",
    "max_leases_per_session", "max_plan_keys", "max_plans_per_session",
    "max_reply_queue_bytes", "numa", "numa_sysfs_root",
    "plan_lookahead_bytes", "plan_prefetch_in_flight", "readopt_verify",
    "session_lease_share", "shared_group", "ssd_demote",
    "ssd_index_block_cache", "ssd_index_flush_on_drain",
    "ssd_index_write_buffer",
}
# Defined by absl itself, not by an ABSL_FLAG of ours.
ABSL_BUILTIN_FLAGS = {"flagfile", "fromenv", "tryfromenv", "undefok"}
SIZE_FLAGS = {"arena_bytes", "segment_bytes", "chunk_size", "ssd_bytes"}
BOOL_FLAGS = {"keep_arena"}
_ABSL_BOOLS = {"true", "false", "1", "0", "yes", "no", "t", "f", "y", "n"}
ADDRESS_FLAGS = {"metrics_address", "admin_address", "peer_address",
                 "peer_dns"}
# Per-node or structural: never in the shared flagfile.
NOT_IN_FLAGFILE = {"node_id", "flagfile"}
# dlcachectl's flags (client/cli/commands.cc): global ones and warmup's.
DLCACHECTL_FLAGS = {"socket", "address", "json", "timeout", "help",
                    "parallel", "interval", "cluster"}
# dlcachectl's default --timeout.
DLCACHECTL_DEFAULT_TIMEOUT_S = 10
# Flags the manifests already use whose implementation is still to land
# (SSD tier: issue 3; peers: issue 5). A source tree or binary without them
# gets a warning, not a failure. Empty these sets once they are in.
PENDING_DLCACHED_FLAGS = set()
PENDING_DLCACHECTL_FLAGS = {"cluster"}

# Memory the process needs besides the arena (gRPC, index, fill buffers,
# RocksDB). The limit must be at least arena + this.
MIN_OVERHEAD_BYTES = 1 << 30

# The image deploy/docker/build_image.sh produces: IMAGE_NAME:<version of
# project() in CMakeLists.txt>. Every container of the DaemonSet and of the
# warm-up Jobs runs it; with --source-root the tag must be that version.
IMAGE_NAME = "dlcache/dlcached"

CONFIGMAP = "dlcached-config"
FLAGFILE_KEY = "dlcached.flags"
DAEMONSET = "dlcached"
CONTAINER = "dlcached"
SERVICE = "dlcached-peers"
# Any of these makes dlcached a member of a cluster.
PEER_FLAGS = ("peer_address", "peers", "peer_dns")
# What each overlay of deploy/k8s/overlays must (not) hold.
OVERLAYS = ("single-node", "cluster")

# As common/byte_size.h's ParseByteSize: K/M/G/T and KiB/MiB/GiB/TiB are
# powers of 1024, KB/MB/GB/TB powers of 1000.
_SIZE_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)"
                      r"(KiB|MiB|GiB|TiB|KB|MB|GB|TB|K|M|G|T)?$")
_SIZE_UNITS = {None: 1, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20,
               "MiB": 1 << 20, "G": 1 << 30, "GiB": 1 << 30, "T": 1 << 40,
               "TiB": 1 << 40, "KB": 10**3, "MB": 10**6, "GB": 10**9,
               "TB": 10**12}
_QUANTITY_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_QUANTITY_UNITS = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30,
                   "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60, "k": 10**3,
                   "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
                   "E": 10**18}
_FLAG_LINE_RE = re.compile(r"^--([a-z][a-z0-9_]*)=(.*)$")


def parse_size(text):
    m = _SIZE_RE.match(text)
    if not m:
        return None
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def parse_quantity(text):
    m = _QUANTITY_RE.match(str(text))
    if not m:
        return None
    return int(float(m.group(1)) * _QUANTITY_UNITS[m.group(2)])


def parse_duration(text):
    """Seconds of a dlcachectl --timeout ("5s", "500ms", "2m"); the
    default when text is None; None when unparsable."""
    if text is None:
        return DLCACHECTL_DEFAULT_TIMEOUT_S
    m = re.match(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)$", text)
    if not m:
        return None
    return float(m.group(1)) * {"ms": 1e-3, "s": 1, "m": 60,
                                "h": 3600}[m.group(2)]


def parse_host_port(text):
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def under(path, root):
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def project_version(root):
    """project(dlcache VERSION x.y.z) of root/CMakeLists.txt, or None."""
    try:
        with open(os.path.join(root, "CMakeLists.txt")) as f:
            m = re.search(r"project\(\s*dlcache\s+VERSION\s+([0-9][0-9.]*)",
                          f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def image_references(docs):
    """[(where, image, imagePullPolicy)] of every container and init
    container of the
    DaemonSets and Jobs: the ones that run dlcache's image (trainer Pods run
    their own)."""
    refs = []
    for d in docs:
        if d.get("kind") not in ("DaemonSet", "Job"):
            continue
        spec = (d.get("spec") or {}).get("template", {}).get("spec") or {}
        for field in ("initContainers", "containers"):
            for c in spec.get(field) or []:
                refs.append(("%s/%s %s" % (d["kind"], d["metadata"].get(
                    "name"), c.get("name")), c.get("image"),
                    c.get("imagePullPolicy")))
    return refs


class Checker:
    def __init__(self, docs, image_tag=None):
        """image_tag: the tag build_image.sh gives the image (the project
        version); None: only require one pinned tag across the manifests."""
        self.docs = docs
        self.image_tag = image_tag
        self.errors = []
        self.flags = {}
        # Flag names the manifests pass to each binary.
        self.used_dlcached = set()
        self.used_dlcachectl = set()

    def error(self, where, message):
        self.errors.append("%s: %s" % (where, message))

    def find(self, kind, name=None):
        return [d for d in self.docs if d.get("kind") == kind and
                (name is None or d.get("metadata", {}).get("name") == name)]

    def one(self, kind, name):
        found = self.find(kind, name)
        if len(found) != 1:
            self.error("%s/%s" % (kind, name),
                       "expected exactly one, found %d" % len(found))
            return None
        return found[0]

    # --- ConfigMap -------------------------------------------------------

    def parse_flagfile(self, text, where):
        """Returns {flag: value} from absl flagfile text, reporting what
        absl would reject or misread."""
        flags = {}
        for number, raw in enumerate(text.split("\n"), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            at = "%s line %d" % (where, number)
            if raw != raw.rstrip():
                # absl keeps trailing blanks as part of the value.
                self.error(at, "trailing whitespace (absl keeps it in the "
                           "value): %r" % raw)
            m = _FLAG_LINE_RE.match(line)
            if not m:
                self.error(at, "not a --flag=value line: %r" % line)
                continue
            name, value = m.group(1), m.group(2)
            if name not in DLCACHED_FLAGS:
                self.error(at, "unknown dlcached flag --%s" % name)
            elif name in NOT_IN_FLAGFILE:
                self.error(at, "--%s does not belong in the shared flagfile"
                           % name)
            if name in flags:
                # absl: the last one wins, even for list flags.
                self.error(at, "--%s given twice (the last silently wins; "
                           "use one comma list)" % name)
            flags[name] = value
        return flags

    def check_flag_values(self, flags, where):
        for name in SIZE_FLAGS & flags.keys():
            if parse_size(flags[name]) is None:
                self.error(where, "--%s=%s is not a size (N, NKiB, NMiB, "
                           "NGiB, NG, NGB ...)" % (name, flags[name]))
        for name in BOOL_FLAGS & flags.keys():
            if flags[name].lower() not in _ABSL_BOOLS:
                self.error(where, "--%s=%s is not a bool" % (name, flags[name]))
        for name in ADDRESS_FLAGS & flags.keys():
            if parse_host_port(flags[name]) is None:
                self.error(where, "--%s=%s is not HOST:PORT"
                           % (name, flags[name]))
        if "fill_threads" in flags and not (
                flags["fill_threads"].isdigit() and
                int(flags["fill_threads"]) > 0):
            self.error(where, "--fill_threads must be a positive integer")
        for name in ("socket", "shm_dir", "ssd_dir", "peer_token_file",
                     "tls_cert", "tls_key", "tls_ca", "admin_token_file"):
            if name in flags and not flags[name].startswith("/"):
                self.error(where, "--%s must be an absolute path" % name)
        for name in ("socket", "shm_dir"):
            if name not in flags:
                self.error(where, "--%s must be set explicitly" % name)
        arena = parse_size(flags.get("arena_bytes", ""))
        segment = parse_size(flags.get("segment_bytes", "256MiB"))
        chunk = parse_size(flags.get("chunk_size", "4MiB"))
        if not arena:
            # 0 (= half the free space) cannot be checked against a limit.
            self.error(where, "--arena_bytes must be set to a non-zero size "
                       "so the memory limit can be checked against it")
        elif segment and chunk:
            if not chunk <= segment <= arena:
                self.error(where, "need chunk_size <= segment_bytes <= "
                           "arena_bytes")
            elif arena % segment:
                self.error(where, "arena_bytes is not a multiple of "
                           "segment_bytes")

    def datasets(self, flags):
        """{name: dir} from --dataset and --source."""
        result = {}
        if flags.get("source"):
            result["default"] = flags["source"]
        for item in filter(None, flags.get("dataset", "").split(",")):
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                self.error("--dataset", "%r is not NAME=DIR" % item)
                continue
            result[name] = path
        return result

    # --- pod specs -------------------------------------------------------

    @staticmethod
    def volume(pod_spec, name):
        for v in pod_spec.get("volumes") or []:
            if v.get("name") == name:
                return v
        return None

    def mount_for(self, pod_spec, container, path):
        """(mount, volume) of the deepest volumeMount covering path."""
        best = (None, None)
        for m in container.get("volumeMounts") or []:
            if under(path, m["mountPath"]) and (
                    best[0] is None or
                    len(m["mountPath"]) > len(best[0]["mountPath"])):
                best = (m, self.volume(pod_spec, m["name"]))
        return best

    def expect_host_dir(self, where, pod_spec, container, path,
                        read_only=None):
        """path must be reached through a hostPath volume of the same host
        path (other pods on the node use the host path)."""
        mount, vol = self.mount_for(pod_spec, container, path)
        if mount is None or vol is None:
            self.error(where, "%s is not on a volume" % path)
            return None
        if "hostPath" not in vol:
            self.error(where, "%s must be a hostPath volume, is %s"
                       % (path, sorted(k for k in vol if k != "name")))
            return None
        host = vol["hostPath"].get("path", "")
        rel = posixpath.relpath(path, mount["mountPath"])
        if posixpath.normpath(posixpath.join(host, rel)) != \
                posixpath.normpath(path):
            self.error(where, "%s maps to host path %s; use the same path "
                       "on host and in the container" % (path, host))
        if read_only is not None and bool(mount.get("readOnly")) != read_only:
            self.error(where, "mount of %s: readOnly should be %s"
                       % (path, read_only))
        return vol

    def volume_sources(self, vol, kind):
        """configMap/secret sources of a plain or projected volume."""
        if kind in vol:
            return [vol[kind]]
        return [s[kind] for s in vol.get("projected", {}).get("sources", [])
                if kind in s]

    def expect_file_from(self, where, pod_spec, container, path, kind, name,
                         key):
        mount, vol = self.mount_for(pod_spec, container, path)
        if mount is None or vol is None:
            self.error(where, "%s is not on a volume" % path)
            return
        if mount.get("subPath"):
            self.error(where, "%s uses subPath: updates would never reach "
                       "the pod" % path)
        rel = posixpath.relpath(path, mount["mountPath"])
        for src in self.volume_sources(vol, kind):
            if src.get("name") != name:
                continue
            items = src.get("items")
            paths = ({i["key"]: i["path"] for i in items} if items
                     else {key: key})
            if paths.get(key) == rel:
                return
        self.error(where, "%s is not %s %s key %s" % (path, kind, name, key))

    @staticmethod
    def exec_command(probe):
        cmd = (probe or {}).get("exec", {}).get("command") or []
        # sh -c 'a | b' probes: look at the words of the script too.
        words = []
        for part in cmd:
            try:
                words.extend(shlex.split(part))
            except ValueError:
                words.append(part)
        return cmd, words

    @staticmethod
    def flag_value(words, name):
        for i, w in enumerate(words):
            if w == "--" + name and i + 1 < len(words):
                return words[i + 1]
            if w.startswith("--" + name + "="):
                return w.split("=", 1)[1]
        return None

    def check_dlcachectl_words(self, where, words):
        for w in words[words.index("dlcachectl") + 1:]:
            if w in ("|", "&&", ";"):
                break
            if w.startswith("--"):
                name = w[2:].split("=", 1)[0]
                self.used_dlcachectl.add(name)
                if name and name not in DLCACHECTL_FLAGS:
                    self.error(where, "unknown dlcachectl flag %s" % w)

    # --- the checks ------------------------------------------------------

    def run(self):
        cm = self.one("ConfigMap", CONFIGMAP)
        ds = self.one("DaemonSet", DAEMONSET)
        svcs = self.find("Service", SERVICE)
        svc = self.one("Service", SERVICE) if svcs else None
        if cm is None or ds is None:
            return self.errors
        text = (cm.get("data") or {}).get(FLAGFILE_KEY)
        if text is None:
            self.error("ConfigMap/" + CONFIGMAP, "no key " + FLAGFILE_KEY)
            return self.errors
        fileflags = self.parse_flagfile(text, "ConfigMap/%s %s"
                                        % (CONFIGMAP, FLAGFILE_KEY))

        where = "DaemonSet/" + DAEMONSET
        tmpl = ds["spec"]["template"]
        pod = tmpl["spec"]
        containers = [c for c in pod.get("containers", [])
                      if c.get("name") == CONTAINER]
        if len(containers) != 1:
            self.error(where, "no container named " + CONTAINER)
            return self.errors
        c = containers[0]
        argflags = {}
        for arg in c.get("args") or []:
            m = _FLAG_LINE_RE.match(arg)
            if not m:
                self.error(where, "arg %r is not --flag=value" % arg)
                continue
            if m.group(1) not in DLCACHED_FLAGS:
                self.error(where, "unknown dlcached flag in args: " + arg)
            argflags[m.group(1)] = m.group(2)
        flags = dict(fileflags)
        flags.update(argflags)
        self.flags = flags
        self.used_dlcached = set(flags)
        # $(VAR) is expanded by the kubelet; check the shape, not the value.
        self.check_flag_values(
            {k: re.sub(r"\$\((\w+)\)", "x", v) for k, v in flags.items()},
            where + " flags")
        # A node with peers needs its id; one on its own (the single-node
        # overlay) has no peer flag at all.
        self.clustered = any(flags.get(f) for f in PEER_FLAGS)
        if "node_id" not in argflags:
            if self.clustered:
                self.error(where, "--node_id=$(POD_IP):<peer port> must be "
                           "in args")
        else:
            self.check_node_id(where, c, argflags["node_id"], flags)

        flagfile = argflags.get("flagfile")
        if not flagfile:
            self.error(where, "args lack --flagfile")
        else:
            self.expect_file_from(where, pod, c, flagfile, "configMap",
                                  CONFIGMAP, FLAGFILE_KEY)
        if flags.get("peer_token_file"):
            self.expect_file_from(where, pod, c, flags["peer_token_file"],
                                  "secret", "dlcached-peer-token", "token")
            self.check_token_secret()
        # mTLS files come from the Secret dlcached-tls (kubernetes.io/tls
        # key names plus ca.crt).
        for flag, key in (("tls_cert", "tls.crt"), ("tls_key", "tls.key"),
                          ("tls_ca", "ca.crt")):
            if flags.get(flag):
                self.expect_file_from(where, pod, c, flags[flag], "secret",
                                      "dlcached-tls", key)
        if any(flags.get(f) for f in ("tls_cert", "tls_key", "tls_ca")) and \
                not all(flags.get(f) for f in ("tls_cert", "tls_key",
                                               "tls_ca")):
            self.error(where, "--tls_cert, --tls_key and --tls_ca go "
                       "together")
        if flags.get("peer_address") and not (
                flags.get("peer_token_file") or flags.get("tls_cert") or
                flags.get("insecure_peers", "false").lower() in
                ("true", "1", "yes", "t", "y")):
            self.error(where, "--peer_address without --peer_token_file or "
                       "--tls_*: dlcached refuses to start (or give "
                       "--insecure_peers)")

        socket = flags.get("socket", "/run/dlcache/dlcached.sock")
        self.socket_dir = posixpath.dirname(socket)
        self.expect_host_dir(where, pod, c, self.socket_dir, read_only=False)
        self.check_arena(where, pod, c, flags)
        if flags.get("ssd_dir"):
            self.expect_host_dir(where, pod, c, flags["ssd_dir"],
                                 read_only=False)
        for name, path in self.datasets(flags).items():
            mount, _ = self.mount_for(pod, c, path)
            if mount is None:
                self.error(where, "dataset %s dir %s is on no volume"
                           % (name, path))

        self.check_probes(where, c, socket)
        self.check_resources(where, c, flags)
        self.check_ports(where, c, flags, svc, tmpl)
        self.socket_group = (pod.get("securityContext") or {}).get(
            "runAsGroup")
        self.check_clients()
        self.check_images()
        return self.errors

    def check_images(self):
        refs = image_references(self.docs)
        if not refs:
            self.error("images", "no DaemonSet or Job container")
        tags = set()
        for where, image, policy in refs:
            if policy == "Always":
                self.error(where, "imagePullPolicy Always: a node loaded "
                           "without a registry cannot start it")
            name, sep, tag = (image or "").rpartition(":")
            if not sep or "/" in tag or name != IMAGE_NAME:
                self.error(where, "image %r is not %s:<tag> (the image "
                           "deploy/docker/build_image.sh builds)"
                           % (image, IMAGE_NAME))
                continue
            if tag == "latest":
                self.error(where, "image %r: pin the tag (a node loaded "
                           "without a registry never pulls :latest right)"
                           % image)
            if self.image_tag is not None and tag != self.image_tag:
                self.error(where, "image %r, but build_image.sh tags %s:%s "
                           "(project version in CMakeLists.txt)"
                           % (image, IMAGE_NAME, self.image_tag))
            tags.add(tag)
        if len(tags) > 1:
            self.error("images", "containers run different tags of %s: %s"
                       % (IMAGE_NAME, sorted(tags)))

    def check_token_secret(self):
        for s in self.find("Secret", "dlcached-peer-token"):
            data = dict(s.get("data") or {})
            data.update(s.get("stringData") or {})
            if "token" not in data:
                self.error("Secret/dlcached-peer-token", "no key token")

    def check_arena(self, where, pod, c, flags):
        shm = flags["shm_dir"]
        arena = parse_size(flags.get("arena_bytes", "")) or 0
        mount, vol = self.mount_for(pod, c, shm)
        if vol is None:
            self.error(where, "shm_dir %s is on no volume (the container's "
                       "/dev/shm is 64 MB)" % shm)
        elif "emptyDir" in vol:
            ed = vol["emptyDir"] or {}
            if ed.get("medium") != "Memory":
                self.error(where, "arena emptyDir must be medium: Memory")
            size = parse_quantity(ed.get("sizeLimit", "0"))
            if not size or size < arena:
                self.error(where, "arena emptyDir sizeLimit %s < arena_bytes"
                           % ed.get("sizeLimit"))
        elif "hostPath" in vol:
            self.expect_host_dir(where, pod, c, shm, read_only=False)
            if not under(vol["hostPath"].get("path", ""), "/dev/shm"):
                self.error(where, "arena hostPath %s is not under the node's "
                           "/dev/shm tmpfs" % vol["hostPath"].get("path"))
        else:
            self.error(where, "arena must be a hostPath tmpfs dir or an "
                       "emptyDir medium: Memory")

    def check_probes(self, where, c, socket):
        for kind in ("readinessProbe", "livenessProbe"):
            probe = c.get(kind)
            if not probe:
                self.error(where, "no " + kind)
                continue
            cmd, words = self.exec_command(probe)
            if "dlcachectl" not in words or "status" not in words:
                self.error(where, "%s is not a `dlcachectl status` exec "
                           "probe: %r" % (kind, cmd))
                continue
            if self.flag_value(words, "socket") != socket:
                self.error(where, "%s asks socket %r, dlcached listens on %r"
                           % (kind, self.flag_value(words, "socket"), socket))
            self.check_dlcachectl_words(where + " " + kind, words)
            # dlcachectl should give up (with a message) before the kubelet
            # kills it.
            deadline = parse_duration(self.flag_value(words, "timeout"))
            limit = probe.get("timeoutSeconds", 1)
            if deadline is None:
                self.error(where, "%s: bad dlcachectl --timeout %r"
                           % (kind, self.flag_value(words, "timeout")))
            elif deadline >= limit:
                self.error(where, "%s: dlcachectl --timeout (%gs) must be "
                           "below the probe's timeoutSeconds (%ds)"
                           % (kind, deadline, limit))
            if kind == "readinessProbe" and (
                    "--json" not in words or "SERVING" not in " ".join(cmd)):
                self.error(where, "readinessProbe must require state SERVING "
                           "from `status --json`")

    def check_resources(self, where, c, flags):
        arena = parse_size(flags.get("arena_bytes", "")) or 0
        res = c.get("resources") or {}
        need = arena + MIN_OVERHEAD_BYTES
        for kind in ("limits", "requests"):
            mem = parse_quantity((res.get(kind) or {}).get("memory", ""))
            if mem is None:
                self.error(where, "no resources.%s.memory (tmpfs pages of "
                           "the arena are charged to the pod)" % kind)
            elif mem < need:
                self.error(where, "resources.%s.memory %s < arena_bytes %s + "
                           "%d MiB overhead" % (kind, res[kind]["memory"],
                                                flags.get("arena_bytes"),
                                                MIN_OVERHEAD_BYTES >> 20))

    def check_node_id(self, where, c, node_id, flags):
        # Placement hashes node ids and DNS lists pods as IP:port, so the id
        # must be that same pod-IP:peer-port or the node counts twice.
        m = re.fullmatch(r"\$\((\w+)\):(\d+)", node_id)
        if not m:
            self.error(where, "--node_id=%s is not $(POD_IP):<peer port>, the "
                       "address --peer_dns resolves this pod to" % node_id)
            return
        var, port = m.group(1), int(m.group(2))
        env = {e.get("name"): e for e in c.get("env") or []}
        path = (((env.get(var) or {}).get("valueFrom") or {})
                .get("fieldRef") or {}).get("fieldPath")
        if path != "status.podIP":
            self.error(where, "--node_id uses $(%s), which is not the pod IP "
                       "(env %s from fieldRef status.podIP)" % (var, var))
        peer = parse_host_port(flags.get("peer_address", "") or "")
        if peer and peer[1] != port:
            self.error(where, "--node_id port %d is not the --peer_address "
                       "port %d" % (port, peer[1]))

    def check_ports(self, where, c, flags, svc, tmpl):
        ports = {p.get("containerPort"): p.get("name")
                 for p in c.get("ports") or []}
        peer = parse_host_port(flags.get("peer_address", "") or "")
        metrics = parse_host_port(flags.get("metrics_address", "") or "")
        for label, hp in (("peer_address", peer),
                          ("metrics_address", metrics)):
            if hp and hp[1] not in ports:
                self.error(where, "--%s port %d is not a containerPort"
                           % (label, hp[1]))
            if hp and hp[0] in ("127.0.0.1", "localhost", "::1"):
                self.error(where, "--%s listens on loopback only" % label)
        if svc is None:
            if peer or flags.get("peer_dns"):
                self.error(where, "peers configured but no Service/" +
                           SERVICE)
            return
        swhere = "Service/" + SERVICE
        spec = svc.get("spec") or {}
        if spec.get("clusterIP") != "None":
            self.error(swhere, "must be headless (clusterIP: None), is %r"
                       % spec.get("clusterIP"))
        labels = tmpl.get("metadata", {}).get("labels") or {}
        selector = spec.get("selector") or {}
        if not selector or any(labels.get(k) != v
                               for k, v in selector.items()):
            self.error(swhere, "selector %r does not select the DaemonSet's "
                       "pods %r" % (selector, labels))
        if not peer:
            return
        svc_ports = [p for p in spec.get("ports") or []
                     if p.get("port") == peer[1]]
        if not svc_ports:
            self.error(swhere, "no port %d (peers)" % peer[1])
        for p in svc_ports:
            target = p.get("targetPort", p.get("port"))
            if target not in (peer[1], ports.get(peer[1])):
                self.error(swhere, "port %d targets %r, not the peer port"
                           % (peer[1], target))
        dns = parse_host_port(
            re.sub(r"\$\((\w+)\)", "x", self.flags.get("peer_dns", "")))
        if not dns:
            self.error(where, "--peer_dns not set (peers are found through "
                       "the headless Service)")
        elif not dns[0].startswith(SERVICE + ".") or dns[1] != peer[1]:
            self.error(where, "--peer_dns %s is not %s.<ns>...:%d"
                       % (self.flags["peer_dns"], SERVICE, peer[1]))

    def client_pod_specs(self):
        for pod in self.find("Pod"):
            yield "Pod/" + pod["metadata"]["name"], pod["spec"]
        for job in self.find("Job"):
            yield ("Job/" + job["metadata"]["name"],
                   job["spec"]["template"]["spec"])

    def check_clients(self):
        datasets = self.datasets(self.flags)
        found_pod = found_job = False
        for where, spec in self.client_pod_specs():
            groups = (spec.get("securityContext") or {}).get(
                "supplementalGroups") or []
            if self.socket_group is not None and \
                    self.socket_group not in groups:
                self.error(where, "supplementalGroups %r lacks %s, the "
                           "socket's group" % (groups, self.socket_group))
            for c in spec.get("containers") or []:
                self.expect_host_dir(where, spec, c, self.socket_dir,
                                     read_only=True)
                words = list(c.get("command") or []) + list(c.get("args")
                                                            or [])
                if "warmup" in words and "dlcachectl" in words:
                    found_job = found_job or where.startswith("Job/")
                    self.check_dlcachectl_words(where, words)
                    sock = self.flag_value(words, "socket")
                    if sock != self.flags.get("socket"):
                        self.error(where, "warmup uses socket %r" % sock)
                    dataset = words[words.index("warmup") + 1:][:1]
                    if not dataset or dataset[0] not in datasets:
                        self.error(where, "warmup dataset %r is not one of "
                                   "%s" % (dataset, sorted(datasets)))
                elif where.startswith("Pod/"):
                    found_pod = True
                    # Segments arrive as fds over the data socket: a trainer
                    # needs no arena mount (the directory is 0700), and one
                    # it has anyway must be read-only.
                    # (A pod's own /dev/shm, an emptyDir, covers the path
                    # but is not the host's arena.)
                    mount, vol = self.mount_for(spec, c,
                                                self.flags["shm_dir"])
                    if (mount is not None and vol is not None and
                            "hostPath" in vol and
                            not mount.get("readOnly")):
                        self.error(where, "mounts the arena dir %s writable"
                                   % self.flags["shm_dir"])
        if not found_pod:
            self.error("examples", "no trainer Pod")
        if not found_job:
            self.error("examples", "no warm-up Job running dlcachectl "
                       "warmup")


def check_overlay(docs, name):
    """What deploy/k8s/overlays/NAME must give, beyond the Checker's rules:
    single-node: no peers, no Service, no Secret the pods would wait for;
    cluster: peers found through the Service, authenticated by the token
    and mTLS Secrets."""
    errors = []
    checker = Checker(docs)
    checker.run()
    flags = getattr(checker, "flags", {})
    services = checker.find("Service", SERVICE)
    secrets = set()
    for ds in checker.find("DaemonSet", DAEMONSET):
        for vol in ds["spec"]["template"]["spec"].get("volumes") or []:
            if vol.get("secret"):
                secrets.add(vol["secret"].get("secretName"))
            for src in (vol.get("projected") or {}).get("sources") or []:
                if src.get("secret"):
                    secrets.add(src["secret"].get("name"))
    where = "overlay " + name
    if name == "single-node":
        for f in PEER_FLAGS + ("node_id", "peer_token_file", "tls_cert",
                               "tls_key", "tls_ca"):
            if flags.get(f):
                errors.append("%s: dlcached has --%s" % (where, f))
        if services:
            errors.append("%s: ships Service/%s" % (where, SERVICE))
        if secrets:
            errors.append("%s: pods would wait for Secret(s) %s"
                          % (where, ", ".join(sorted(map(str, secrets)))))
    elif name == "cluster":
        if not flags.get("peer_address") or not flags.get("peer_dns"):
            errors.append("%s: no --peer_address/--peer_dns" % where)
        if not services:
            errors.append("%s: no Service/%s" % (where, SERVICE))
        for want in ("dlcached-peer-token", "dlcached-tls"):
            if want not in secrets:
                errors.append("%s: Secret %s not mounted" % (where, want))
    else:
        errors.append("unknown overlay %r (one of %s)"
                      % (name, ", ".join(OVERLAYS)))
    return errors


def load(paths):
    docs = []
    for path in paths:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc is None:
                    continue
                if not isinstance(doc, dict) or "kind" not in doc:
                    raise SystemExit("%s: not a Kubernetes object" % path)
                doc.setdefault("metadata", {})
                docs.append(doc)
    return docs


def check_kustomized(docs, path, image_tag=None):
    """The kustomize output must hold the base objects (everything but the
    examples), namespaced ones moved to one namespace."""
    errors = []
    with open(path) as f:
        out = [d for d in yaml.safe_load_all(f) if d]
    key = lambda d: (d["kind"], d["metadata"]["name"])
    got = {key(d): d for d in out}
    namespaces = {d["metadata"]["name"] for d in out
                  if d["kind"] == "Namespace"}
    if len(namespaces) != 1:
        errors.append("kustomize: expected one Namespace, got %r"
                      % sorted(namespaces))
    cluster_scoped = {"Namespace", "PriorityClass"}
    for d in out:
        ns = d["metadata"].get("namespace")
        if d["kind"] not in cluster_scoped and ns not in namespaces:
            errors.append("kustomize: %s/%s in namespace %r"
                          % (d["kind"], d["metadata"]["name"], ns))
    for k in [("ConfigMap", CONFIGMAP), ("DaemonSet", DAEMONSET),
              ("Service", SERVICE)]:
        if k not in got:
            errors.append("kustomize: output lacks %s/%s" % k)
    base = {key(d): d for d in docs}
    if ("ConfigMap", CONFIGMAP) in got and ("ConfigMap", CONFIGMAP) in base:
        if got[("ConfigMap", CONFIGMAP)].get("data") != \
                base[("ConfigMap", CONFIGMAP)].get("data"):
            errors.append("kustomize: changed the flagfile")
    if ("Secret", "dlcached-peer-token") in got:
        errors.append("kustomize: must not ship the placeholder token "
                      "Secret (it would overwrite the real one)")
    # The checks that matter must hold for what is actually applied.
    examples = [d for d in docs if key(d) not in got and
                d["kind"] in ("Pod", "Job", "Secret")]
    errors += ["kustomize: " + e
               for e in Checker(out + examples, image_tag).run()]
    return errors


def source_flags(root):
    """Flag names defined with ABSL_FLAG in server/ (None: no sources)."""
    names, seen = set(), False
    for dirpath, _, files in os.walk(os.path.join(root, "server")):
        for f in files:
            if f.endswith(".cc") and not f.endswith("_test.cc"):
                seen = True
                with open(os.path.join(dirpath, f), errors="replace") as fh:
                    names |= set(re.findall(
                        r"ABSL_FLAG\(\s*[^,]+,\s*([A-Za-z0-9_]+)\s*,",
                        fh.read()))
    return names if seen and names else None


def binary_flags(argvs):
    """Every --name in the help output of the given command lines."""
    names = set()
    for argv in argvs:
        proc = subprocess.run(argv, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              timeout=60)
        names |= set(re.findall(r"(?<![A-Za-z0-9_-])--([a-z][a-z0-9_]*)",
                                proc.stdout))
    return names


def compare_flags(what, used, defined, pending, errors, warnings):
    for name in sorted(used - defined):
        if name in pending:
            warnings.append("%s does not define --%s yet (pending; the "
                            "manifests use it)" % (what, name))
        else:
            errors.append("%s does not define --%s (used by the manifests)"
                          % (what, name))


def self_test(docs):
    """Each mutation must produce at least one error."""

    def ds_container(d):
        return [x for x in d if x["kind"] == "DaemonSet"][0][
            "spec"]["template"]["spec"]["containers"][0]

    def cm(d):
        return [x for x in d if x["kind"] == "ConfigMap"][0]["data"]

    def svc(d):
        return [x for x in d if x["kind"] == "Service"][0]["spec"]

    def trainer(d):
        return [x for x in d if x["kind"] == "Pod"][0]["spec"]

    def pod(d):
        return [x for x in d if x["kind"] == "DaemonSet"][0][
            "spec"]["template"]["spec"]

    def drop_volume(spec, mount_path):
        c = spec["containers"][0]
        c["volumeMounts"] = [m for m in c["volumeMounts"]
                             if m["mountPath"] != mount_path]

    def set_flag(d, name, value):
        cm(d)[FLAGFILE_KEY] = re.sub(r"(?m)^--%s=.*$" % name,
                                     "--%s=%s" % (name, value),
                                     cm(d)[FLAGFILE_KEY])

    mutations = {
        "memory limit below arena": lambda d: ds_container(d)[
            "resources"]["limits"].update(memory="8Gi"),
        "memory request below arena": lambda d: ds_container(d)[
            "resources"]["requests"].update(memory="4Gi"),
        "arena grown past limit": lambda d: set_flag(d, "arena_bytes",
                                                     "16GiB"),
        "unknown flag": lambda d: cm(d).update(
            {FLAGFILE_KEY: cm(d)[FLAGFILE_KEY] + "--arena_size=1GiB\n"}),
        "flag without =": lambda d: cm(d).update(
            {FLAGFILE_KEY: cm(d)[FLAGFILE_KEY] + "--fill_threads 8\n"}),
        "duplicate flag": lambda d: cm(d).update(
            {FLAGFILE_KEY: cm(d)[FLAGFILE_KEY] + "--dataset=x=/datasets/x\n"}),
        "trailing blank": lambda d: set_flag(d, "chunk_size", "4MiB "),
        "bad size": lambda d: set_flag(d, "segment_bytes", "256 MiB"),
        "bad bool": lambda d: set_flag(d, "keep_arena", "on"),
        "probe outlives its timeout": lambda d: ds_container(d)[
            "livenessProbe"].update(timeoutSeconds=3),
        "no readiness probe": lambda d: ds_container(d).pop("readinessProbe"),
        "readiness on wrong socket": lambda d: ds_container(d).update(
            readinessProbe={"exec": {"command": [
                "sh", "-c", "dlcachectl --socket /tmp/x.sock status --json "
                "| grep SERVING"]}}),
        "no liveness probe": lambda d: ds_container(d).pop("livenessProbe"),
        "socket dir not mounted": lambda d: drop_volume(pod(d),
                                                        "/run/dlcache"),
        "arena on container /dev/shm": lambda d: drop_volume(
            pod(d), "/dev/shm/dlcache"),
        "arena emptyDir not memory": lambda d: [
            v.update(emptyDir={}) or v.pop("hostPath")
            for v in pod(d)["volumes"] if v["name"] == "arena"],
        "ssd not hostPath": lambda d: [
            v.update(emptyDir={}) or v.pop("hostPath")
            for v in pod(d)["volumes"] if v["name"] == "ssd"],
        "service not headless": lambda d: svc(d).pop("clusterIP"),
        "service wrong port": lambda d: svc(d)["ports"][0].update(port=7071),
        "service selects nothing": lambda d: svc(d).update(
            selector={"app": "other"}),
        "trainer without socket": lambda d: drop_volume(trainer(d),
                                                        "/run/dlcache"),
        "trainer socket writable": lambda d: [
            m.pop("readOnly") for m in trainer(d)["containers"][0][
                "volumeMounts"] if m["mountPath"] == "/run/dlcache"],
        "trainer not in socket group": lambda d: trainer(d)[
            "securityContext"].pop("supplementalGroups"),
        "flagfile not from configmap": lambda d: ds_container(d).update(
            args=["--flagfile=/tmp/dlcached.flags"] +
            ds_container(d)["args"][1:]),
        "node_id is the node name": lambda d: ds_container(d).update(
            args=[a if not a.startswith("--node_id=")
                  else "--node_id=$(NODE_NAME)"
                  for a in ds_container(d)["args"]]),
        "node_id on another port": lambda d: ds_container(d).update(
            args=[a if not a.startswith("--node_id=")
                  else "--node_id=$(POD_IP):7071"
                  for a in ds_container(d)["args"]]),
        "POD_IP not the pod IP": lambda d: [
            e["valueFrom"]["fieldRef"].update(fieldPath="spec.nodeName")
            for e in ds_container(d)["env"] if e["name"] == "POD_IP"],
        "node_id in flagfile": lambda d: cm(d).update(
            {FLAGFILE_KEY: cm(d)[FLAGFILE_KEY] + "--node_id=a\n"}),
        "warmup of unknown dataset": lambda d: [
            j["spec"]["template"]["spec"]["containers"][0].update(
                command=["dlcachectl", "--socket",
                         "/run/dlcache/dlcached.sock", "warmup", "nope"])
            for j in d if j["kind"] == "Job"],
        "dataset dir not mounted": lambda d: set_flag(
            d, "dataset", "imagenet=/elsewhere/imagenet"),
        "image :latest": lambda d: [
            c.update(image=IMAGE_NAME + ":latest")
            for c in pod(d)["containers"] + pod(d)["initContainers"]],
        "image pulled always": lambda d: pod(d)["containers"][0].update(
            imagePullPolicy="Always"),
        "init container on another tag": lambda d: pod(d)[
            "initContainers"][0].update(image=IMAGE_NAME + ":0.0.1"),
        "job runs another image": lambda d: [
            j["spec"]["template"]["spec"]["containers"][0].update(
                image="dlcache/dlcachectl:" + pod(d)["containers"][0][
                    "image"].rpartition(":")[2])
            for j in d if j["kind"] == "Job"],
    }
    if Checker(copy.deepcopy(docs)).run():
        print("self-test: the unmodified manifests do not pass")
        return 1
    failed = 0
    for name, mutate in mutations.items():
        d = copy.deepcopy(docs)
        mutate(d)
        errors = Checker(d).run()
        if not errors:
            print("self-test: %r was not detected" % name)
            failed += 1
    print("self-test: %d/%d breakages detected"
          % (len(mutations) - failed, len(mutations)))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("manifests", nargs="+")
    ap.add_argument("--kustomized")
    ap.add_argument("--dlcached")
    ap.add_argument("--dlcachectl")
    ap.add_argument("--source-root",
                    help="repository root: check flags against server/*.cc")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--overlay", choices=OVERLAYS,
                    help="the manifests are `kubectl kustomize "
                    "deploy/k8s/overlays/NAME` (plus the examples): check "
                    "what that overlay promises too")
    args = ap.parse_args()
    docs = load(args.manifests)
    if args.self_test:
        return self_test(docs)
    image_tag = None
    if args.source_root:
        image_tag = project_version(args.source_root)
        if image_tag is None:
            print("no project(dlcache VERSION ...) in %s/CMakeLists.txt"
                  % args.source_root)
            return 1
    checker = Checker(docs, image_tag)
    errors = checker.run()
    if args.kustomized:
        errors += check_kustomized(docs, args.kustomized, image_tag)
    if args.overlay:
        errors += check_overlay(docs, args.overlay)
    warnings = []
    if args.source_root:
        defined = source_flags(args.source_root)
        if defined is None:
            warnings.append("no ABSL_FLAG in %s/server: flags not checked "
                            "against the sources" % args.source_root)
        else:
            defined |= ABSL_BUILTIN_FLAGS
            compare_flags("server/*.cc", checker.used_dlcached, defined,
                          PENDING_DLCACHED_FLAGS, errors, warnings)
            for name in sorted(DLCACHED_FLAGS - defined -
                               PENDING_DLCACHED_FLAGS):
                errors.append("DLCACHED_FLAGS lists --%s, which server/*.cc "
                              "does not define" % name)
            for name in sorted(defined - DLCACHED_FLAGS -
                               ABSL_BUILTIN_FLAGS):
                warnings.append("server/*.cc defines --%s, missing from "
                                "DLCACHED_FLAGS" % name)
    for what, argvs, used, pending in (
            ("dlcached", [[args.dlcached, "--helpfull"]]
             if args.dlcached else [], checker.used_dlcached,
             PENDING_DLCACHED_FLAGS),
            ("dlcachectl", [[args.dlcachectl, "--help"],
                            [args.dlcachectl, "help", "warmup"]]
             if args.dlcachectl else [], checker.used_dlcachectl,
             PENDING_DLCACHECTL_FLAGS)):
        if not argvs:
            continue
        known = binary_flags(argvs)
        if not known:
            errors.append("%s: its help listed no flags" % argvs[0][0])
            continue
        compare_flags(what + " binary", used, known | ABSL_BUILTIN_FLAGS
                      if what == "dlcached" else known, pending, errors,
                      warnings)
    for w in warnings:
        print("warning: " + w)
    for e in errors:
        print(e)
    print("check_manifests: %d objects, %s" % (
        len(docs), "%d problem(s)" % len(errors) if errors else "OK"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
