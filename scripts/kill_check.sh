#!/bin/bash
# Issue 18/33: SIGKILLs a test's process mid-run (as an OOM kill, a crash
# or a ctest timeout would) and lists what it left behind: new entries in
# /tmp and /dev/shm, new mounts in /proc/mounts, and processes it started
# (daemons, helpers, workers) still running. Nothing should be listed;
# exit 1 if anything is.
#   scripts/kill_check.sh [BUILD_DIR [SPEC...]]     # default: build, all
# A SPEC is "CTEST_REGEX:SECONDS": the test to start and how long to let it
# run before the kill; or "CTEST_REGEX:mount": kill it as soon as it has a
# tmpfs mounted under a dlc- temp dir (its own mount namespace's); or
# "CTEST_REGEX:child=REGEX": as soon as it has a child process whose
# command line matches REGEX (e.g. its dlcached). The last two do not
# depend on the machine's speed. .ci/run runs a few.
# Entries of the guarded temp scheme (dlc-PID-*) whose process is still
# alive belong to other runs (a shared machine) and are not counted, nor
# are /tmp entries of other names than dlc*, tmp*, scale* (compilers'
# files). Processes count when they are new and name this build dir, or a
# dlc-PID- temp dir whose process is gone.
build=$(cd "${1:-build}" && pwd) || exit 2
shift || true
all=("^RestartTest.KillDuringReadsThenRestartServesIdenticalBytes$:5" "^ClusterProcessTest.KillingANodeMidRunLosesNothing$:1"
     "^CephFsClusterTest.ConformanceAndRevalidateThroughTheCache$:child=ceph-mds" "^python_client_test$:child=dlcached"
     "^python_dataloader_test$:4" "^MetricsProcessTest:0.15"
     "^python_epoch_plan_test$:1" "^python_gpu_loader_test$:2"
     "^python_job_plan_test$:9"
     "^SsdTierFaultTest.SmallDiskKeepsItsHeadroomAndNeverFills$:mount"
     "^DlcachedFlagsTest.ArenaBytesZeroTakesHalfTheFreeSpace$:mount"
     "^PosixSourceRootTest.ReadsNoticeALateMountWithinASecond$:mount"
     "^torch_adapter_test$:child=dlcached" "^NfsSourceTest.ManyCallersShareFewConnectionsWithManyRpcsInFlight$:3")
if [ $# -gt 0 ]; then specs=("$@"); else specs=("${all[@]}"); fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Entries of $1 (a dir) that count: all but dlc-PID-* of a live process.
entries() {
  ls -A "$1" 2>/dev/null | while read -r e; do
    if [[ $e =~ ^dlc-([0-9]+)- ]] && kill -0 "${BASH_REMATCH[1]}" 2>/dev/null
    then continue; fi
    echo "$e"
  done | sort
}
# Processes of this build or of a dead test's temp dir ("PID ARGS").
procs() {
  ps -eo pid=,args= | while read -r pid args; do
    [ "$pid" = $$ ] && continue
    case "$args" in *kill_check*|"ps -eo"*) continue ;; esac
    if [[ $args == *"$build"* ]]; then echo "$pid $args"; continue; fi
    if [[ $args =~ /dlc-([0-9]+)- ]] &&
       ! kill -0 "${BASH_REMATCH[1]}" 2>/dev/null; then
      echo "$pid $args"
    fi
  done | sort
}
snap() {
  entries /tmp | grep -E "^(dlc|tmp|scale)" > "$work/tmp_$1"
  entries /dev/shm > "$work/shm_$1"
  sort /proc/mounts > "$work/mounts_$1"
  procs > "$work/procs_$1"
}
new() { comm -13 "$work/$1_before" "$work/$1_after" | tr '\n' ' '; }

left=0
for spec in "${specs[@]}"; do
  name=${spec%:*}
  t=${spec#*:}
  if [ -z "$(ctest --test-dir "$build" -N -R "$name" | grep 'Test *#')" ]; then
    echo "== $name: no such test in $build"
    left=1
    continue
  fi
  snap before
  ctest --test-dir "$build" -R "$name" > "$work/ctest.log" 2>&1 &
  ctest_pid=$!
  if [ "$t" = mount ] || [[ $t == child=* ]]; then
    # ctest runs the test as its direct child; kill it once a tmpfs of its
    # is mounted (polled every 5 ms, for up to 30 s).
    victim=""
    for _ in $(seq 1 6000); do
      [ -z "$victim" ] && victim=$(pgrep -P "$ctest_pid" | head -1)
      if [ -n "$victim" ]; then
        if [ "$t" = mount ]; then
          grep -q "^tmpfs [^ ]*/dlc-[0-9]*-" "/proc/$victim/mounts" \
            2>/dev/null && break
        elif pgrep -P "$victim" -f "${t#child=}" > /dev/null; then
          break
        fi
      fi
      kill -0 "$ctest_pid" 2>/dev/null || { victim=""; break; }
      sleep 0.005
    done
  else
    sleep "$t"
    # ctest runs the test as its direct child.
    victim=$(pgrep -P "$ctest_pid" | head -1)
  fi
  what="(already finished: the delay is too long)"
  if [ -n "$victim" ]; then
    what=$(ps -o args= -p "$victim" | cut -c1-70)
    kill -9 "$victim"
  else
    left=1
  fi
  wait "$ctest_pid"
  # Guards and parent-death signals act at once; daemons may take a while
  # to exit.
  for _ in $(seq 1 60); do
    snap after
    [ -z "$(new tmp)$(new shm)$(new mounts)$(new procs)" ] && break
    sleep 0.5
  done
  case "$t" in
    mount) t="its first mount" ;;
    child=*) t="its first child matching ${t#child=}" ;;
    *) t="$t s" ;;
  esac
  echo "== $name: SIGKILL after $t of: $what"
  for k in procs tmp shm mounts; do
    n=$(new $k)
    echo "   $k left: ${n:-none}"
    [ -n "$n" ] && left=1
  done
done
exit $left
