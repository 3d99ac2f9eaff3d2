#!/usr/bin/env bash
# Fails when a suite CI is meant to run was Skipped or absent: every test
# carrying a label of tests/required_labels.txt must be in ctest's JUnit
# report as run and passed, and every label must have at least one test.
# Also lists every other skipped test and the disabled (DISABLED_) tests of
# required labels; those do not fail the check.
#   scripts/check_required_tests.sh BUILD_DIR JUNIT_XML
# scripts/test.sh runs it after ctest when DLCACHE_REQUIRE_LABELS=1.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build=${1:?build dir}
junit=${2:?ctest --output-junit file}
ctest --test-dir "$build" --show-only=json-v1 > "$build/ctest_tests.json"
python3 - "$here/tests/required_labels.txt" "$build/ctest_tests.json" \
  "$junit" <<'PY'
import json
import sys
import xml.etree.ElementTree as ET

labels_file, tests_json, junit = sys.argv[1:4]
required = []
with open(labels_file) as f:
    for line in f:
        line = line.split("#", 1)[0].strip()
        if line:
            required.append(line)

labels_of = {}
disabled = set()  # DISABLED_ gtests: never run, listed, not required
for t in json.load(open(tests_json))["tests"]:
    labels = []
    for p in t.get("properties", []):
        if p["name"] == "LABELS":
            labels = p["value"]
        if p["name"] == "DISABLED" and p["value"]:
            disabled.add(t["name"])
    labels_of[t["name"]] = labels

# status per test from the JUnit report: passed, failed, skipped, notrun.
result = {}
for tc in ET.parse(junit).getroot().iter("testcase"):
    name = tc.get("name")
    if tc.find("failure") is not None or tc.get("status") == "fail":
        result[name] = "failed"
    elif tc.find("skipped") is not None:
        msg = tc.find("skipped").get("message", "")
        out = tc.findtext("system-out") or ""
        why = [l for l in out.splitlines()
               if "SKIP" in l or "skip" in l.lower()][-3:]
        result[name] = "skipped (%s)%s" % (msg, "".join(
            "\n        " + w.strip()[:160] for w in why))
    elif tc.get("status") == "run":
        result[name] = "passed"
    else:
        result[name] = tc.get("status") or "unknown"

bad = []
print("required test labels (tests/required_labels.txt):")
for label in required:
    tests = sorted(n for n, ls in labels_of.items()
                   if label in ls and n not in disabled)
    if not tests:
        bad.append(label)
        print("  FAIL %-10s no test has this label (suite not configured?)"
              % label)
        continue
    problems = [(n, result.get(n, "not run")) for n in tests
                if result.get(n) != "passed"]
    if problems:
        bad.append(label)
        print("  FAIL %-10s %d of %d tests did not pass:"
              % (label, len(problems), len(tests)))
        for n, r in problems:
            print("         %s: %s" % (n, r))
    else:
        print("  ok   %-10s %d tests passed" % (label, len(tests)))
others = sorted(n for n, r in result.items() if r.startswith("skipped")
                and not any(l in required for l in labels_of.get(n, [])))
if others:
    print("skipped, not required (%d):" % len(others))
    for n in others:
        print("  %s: %s" % (n, result[n]))
off = sorted(n for n in disabled
             if any(l in required for l in labels_of.get(n, [])))
if off:
    print("disabled, not required (%d):" % len(off))
    for n in off:
        print("  " + n)
if bad:
    print("required labels not satisfied: " + " ".join(bad))
    sys.exit(1)
PY
