#!/usr/bin/env python3
"""A minimal, read-only stand-in for a Kubernetes API server, on loopback.

`kubectl apply --dry-run=client` still needs the server for API discovery
(kind -> resource mapping) and a GET of each object (to choose create or
patch). This serves just that, so deploy/validate.sh can run the real kubectl
code path offline: discovery lists only the kinds dlcache's manifests use
(an unknown kind or wrong apiVersion fails, as on a real cluster), and every
object GET answers 404 (so every object is a dry-run "create"). Writes are
refused: client-side dry run must never send one.

Usage: fake_kube_api.py PORT_FILE   (binds 127.0.0.1 on a free port, writes
the port to PORT_FILE, serves until killed).
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# group/version -> [(resource, kind, namespaced)]
RESOURCES = {
    "v1": [
        ("configmaps", "ConfigMap", True),
        ("secrets", "Secret", True),
        ("services", "Service", True),
        ("pods", "Pod", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("namespaces", "Namespace", False),
    ],
    "apps/v1": [("daemonsets", "DaemonSet", True)],
    "batch/v1": [("jobs", "Job", True)],
    "scheduling.k8s.io/v1": [("priorityclasses", "PriorityClass", False)],
}


def resource_list(group_version):
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {
                "name": name,
                "singularName": kind.lower(),
                "namespaced": namespaced,
                "kind": kind,
                "verbs": ["create", "delete", "get", "list", "patch",
                          "update", "watch"],
            }
            for name, kind, namespaced in RESOURCES[group_version]
        ],
    }


def group_list():
    groups = []
    for gv in RESOURCES:
        if "/" not in gv:
            continue
        group, version = gv.split("/")
        entry = {"groupVersion": gv, "version": version}
        groups.append({"name": group, "versions": [entry],
                       "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


class Handler(BaseHTTPRequestHandler):
    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server naming)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                                    "serverAddressByClientCIDRs": []})
        if path == "/apis":
            return self._send(200, group_list())
        if path == "/api/v1":
            return self._send(200, resource_list("v1"))
        if path.startswith("/apis/") and path[len("/apis/"):] in RESOURCES:
            return self._send(200, resource_list(path[len("/apis/"):]))
        if path == "/version":
            return self._send(200, {"major": "1", "minor": "32",
                                    "gitVersion": "v1.32.0-fake"})
        self._send(404, {"kind": "Status", "apiVersion": "v1",
                         "status": "Failure", "reason": "NotFound",
                         "code": 404, "message": "not found: " + path})

    def _refuse(self):
        self._send(405, {"kind": "Status", "apiVersion": "v1",
                         "status": "Failure", "reason": "MethodNotAllowed",
                         "code": 405,
                         "message": "fake API server: writes are refused"})

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

    def log_message(self, fmt, *args):
        if "-v" in sys.argv:
            sys.stderr.write("fake_kube_api: " + (fmt % args) + "\n")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    # Rename so a reader never sees a partial port number.
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
