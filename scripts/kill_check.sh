#!/bin/bash
# Issue 18: SIGKILLs a test's process mid-run (as an OOM kill, a crash or a
# ctest timeout would) and lists what it left in /dev/shm, /tmp and the
# process table. Nothing should be listed. Run it with no other test
# running (their directories would show).
#   scripts/kill_check.sh [BUILD_DIR]      # default build
# Each entry: a ctest regex and the seconds to let it run before the kill.
build=${1:-build}
specs=("RestartTest.KillDuringReads:10" "ClusterProcessTest.KillingANode:1"
       "CephFsClusterTest.Conformance:4" "python_client_test:2"
       "python_dataloader_test:6" "MetricsProcessTest:0.15"
       "python_epoch_plan_test:1" "python_gpu_loader_test:2"
       "python_job_plan_test:9")
snap() {
  ls /dev/shm | sort > "$work/shm_$1"
  ls /tmp | grep "^dlc\|^tmp\|^scale" | sort > "$work/tmp_$1"
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
left=0
for spec in "${specs[@]}"; do
  name=${spec%:*}
  t=${spec#*:}
  snap before
  ctest --test-dir "$build" -R "$name" > "$work/ctest.log" 2>&1 &
  ctest_pid=$!
  sleep "$t"
  # ctest runs the test as its direct child.
  victim=$(pgrep -P "$ctest_pid" | head -1)
  what="(already finished)"
  if [ -n "$victim" ]; then
    what=$(ps -o args= -p "$victim" | cut -c1-60)
    kill -9 "$victim"
  fi
  wait "$ctest_pid"
  procs=""
  for _ in $(seq 1 40); do  # daemons get their parent-death signal
    procs=$(pgrep -af "dlcached|ceph-mon|ceph-osd|ceph-mds|ganesha.nfsd|lease_holder" |
            grep -v pgrep)
    [ -z "$procs" ] && break
    sleep 0.5
  done
  snap after
  shm=$(comm -13 "$work/shm_before" "$work/shm_after" | tr '\n' ' ')
  tmp=$(comm -13 "$work/tmp_before" "$work/tmp_after" | tr '\n' ' ')
  echo "== $name: SIGKILL after $t s of: $what"
  echo "   processes left: ${procs:-none}"
  echo "   /dev/shm new: ${shm:-none}"
  echo "   /tmp new: ${tmp:-none}"
  [ -n "$procs$shm$tmp" ] && left=1
done
exit $left
