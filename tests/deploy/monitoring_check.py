#!/usr/bin/env python3
"""deploy/monitoring/ against a live dlcached.

Starts a real dlcached (SSD tier, epoch plans, and a one-node static peer
list so that the cluster families are served too), warms and syncs a small
dataset with dlcachectl, scrapes /metrics, and checks:
  - `promtool check metrics` accepts the scrape;
  - `promtool check rules` accepts deploy/monitoring/alerts.yaml;
  - every metric name the alert rules and the Grafana dashboard's queries
    use is one the scrape has (histograms by their _bucket/_sum/_count);
  - integers print as integers (no 2.68435e+08);
  - the warm-up's fills are not trainers' misses: after it, hits and
    misses are 0 and dlcache_warmup_fills_total counts every chunk;
  - the latency histograms observed the warm-up, the sync and the fills.

Env: DLCACHED, DLCACHECTL (ctest sets them). Without promtool the test is
skipped (77) after the name checks, unless DLCACHE_PROMTOOL_REQUIRED=1
(.ci/run), which makes that a failure.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MONITORING = os.path.join(ROOT, "deploy", "monitoring")
FILES = 12


def fail(message):
    print("monitoring_check: FAIL: " + message)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    fail("timed out waiting for " + what)


def exported_names(text):
    """Metric names a scrape serves, histograms with their suffixes."""
    names = set()
    for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M):
        name, kind = m.groups()
        names.add(name)
        if kind == "histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names


def referenced_names(exprs):
    names = set()
    for e in exprs:
        names |= set(re.findall(r"\bdlcache_[a-z0-9_]+", e))
    return names


def dashboard_exprs(path):
    with open(path) as f:
        dash = json.load(f)
    exprs = []
    for panel in dash.get("panels", []):
        exprs += [t["expr"] for t in panel.get("targets", []) if "expr" in t]
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        if isinstance(q, str):
            exprs.append(q)
    if not exprs:
        fail("%s has no queries" % path)
    return exprs


def rule_exprs(path):
    # The rules file is YAML; its expressions are the `expr:` values,
    # folded (|) or plain. PyYAML is a test dependency already
    # (deploy/validate.sh), so parse it properly.
    import yaml
    with open(path) as f:
        doc = yaml.safe_load(f)
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def sample(text, name, labels=""):
    pattern = r"^%s%s (\S+)$" % (re.escape(name),
                                 re.escape("{%s}" % labels) if labels else "")
    m = re.search(pattern, text, re.M)
    return m.group(1) if m else None


def main():
    dlcached = os.environ.get("DLCACHED", "")
    dlcachectl = os.environ.get("DLCACHECTL", "")
    if not (os.access(dlcached, os.X_OK) and os.access(dlcachectl, os.X_OK)):
        fail("DLCACHED and DLCACHECTL must name the built binaries")
    promtool = shutil.which("promtool")
    required = os.environ.get("DLCACHE_PROMTOOL_REQUIRED") == "1"

    tmp = tempfile.mkdtemp(prefix="dlcache-monitoring-")
    shm = tempfile.mkdtemp(prefix="dlcache-monitoring-", dir="/dev/shm")
    server = None
    try:
        data = os.path.join(tmp, "data", "train")
        os.makedirs(data)
        for i in range(FILES):
            with open(os.path.join(data, "f%02d.bin" % i), "wb") as f:
                f.write(os.urandom(20000 + i))
        sock = os.path.join(tmp, "dlcached.sock")
        peer = "127.0.0.1:%d" % free_port()
        log = open(os.path.join(tmp, "dlcached.log"), "w+")
        server = subprocess.Popen(
            [dlcached, "--source=" + os.path.join(tmp, "data"),
             "--socket=" + sock, "--shm_dir=" + shm,
             "--arena_bytes=64MiB", "--segment_bytes=16MiB",
             "--ssd_dir=" + os.path.join(tmp, "ssd"), "--ssd_bytes=256MiB",
             "--metrics_address=127.0.0.1:0", "--peer_address=" + peer,
             "--peers=" + peer, "--insecure_peers"],
            stdout=log, stderr=subprocess.STDOUT)

        def metrics_port():
            if server.poll() is not None:
                log.seek(0)
                fail("dlcached exited with %d:\n%s" % (server.returncode,
                                                       log.read()))
            log.seek(0)
            m = re.search(r"metrics: http://[0-9.]+:([0-9]+)/metrics",
                          log.read())
            return int(m.group(1)) if m else None

        port = wait_for(metrics_port, 30, "the metrics port in the log")
        ctl = [dlcachectl, "--socket", sock]
        wait_for(lambda: subprocess.run(ctl + ["status"],
                                        capture_output=True).returncode == 0,
                 30, "dlcached to serve")
        for cmd in (["warmup", "default"], ["sync", "default"]):
            r = subprocess.run(ctl + cmd, capture_output=True, text=True,
                               timeout=120)
            if r.returncode != 0:
                fail("dlcachectl %s: %s%s" % (" ".join(cmd), r.stdout,
                                              r.stderr))
        url = "http://127.0.0.1:%d/metrics" % port
        text = urllib.request.urlopen(url, timeout=10).read().decode()

        # Integers as integers: no exponent in any sample.
        bad = [l for l in text.splitlines()
               if not l.startswith("#") and re.search(r" \S*e\+\d+$", l)]
        if bad:
            fail("samples printed with an exponent:\n" + "\n".join(bad))
        arena = sample(text, "dlcache_arena_bytes")
        if arena != str(64 << 20):
            fail("dlcache_arena_bytes is %r, not %d" % (arena, 64 << 20))

        # The warm-up's fills are not trainers' misses.
        ds = 'dataset="default"'
        for name, want in (("dlcache_hits_total", "0"),
                           ("dlcache_misses_total", "0"),
                           ("dlcache_warmup_fills_total", str(FILES))):
            got = sample(text, name, ds)
            if got != want:
                fail("%s{%s} is %r after the warm-up, not %s"
                     % (name, ds, got, want))
        for name in ("dlcache_warmup_duration_seconds_count",
                     "dlcache_sync_duration_seconds_count"):
            if sample(text, name) != "1":
                fail("%s is %r after one job, not 1"
                     % (name, sample(text, name)))
        source_fills = sample(text, "dlcache_fill_duration_seconds_count",
                              'tier="source"')
        if source_fills != str(FILES):
            fail("dlcache_fill_duration_seconds_count{tier=\"source\"} is %r,"
                 " not %d" % (source_fills, FILES))

        exported = exported_names(text)
        rules = os.path.join(MONITORING, "alerts.yaml")
        dashboard = os.path.join(MONITORING, "grafana-dashboard.json")
        for what, exprs in (("alerts.yaml", rule_exprs(rules)),
                            ("grafana-dashboard.json",
                             dashboard_exprs(dashboard))):
            missing = sorted(referenced_names(exprs) - exported)
            if missing:
                fail("%s uses names dlcached does not export: %s"
                     % (what, ", ".join(missing)))
            print("monitoring_check: %s: %d names, all exported"
                  % (what, len(referenced_names(exprs))))

        if promtool is None:
            message = "promtool not found (Debian package prometheus)"
            if required:
                fail(message + " and DLCACHE_PROMTOOL_REQUIRED=1")
            print("monitoring_check: SKIP: " + message)
            return SKIP
        r = subprocess.run([promtool, "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail("promtool check metrics:\n" + r.stdout + r.stderr)
        print("monitoring_check: promtool check metrics: OK (%d families)"
              % text.count("# TYPE "))
        r = subprocess.run([promtool, "check", "rules", rules],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail("promtool check rules:\n" + r.stdout + r.stderr)
        print("monitoring_check: promtool check rules: " +
              r.stdout.strip().splitlines()[-1].strip())
        return 0
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
