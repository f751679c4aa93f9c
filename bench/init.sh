#!/usr/bin/env bash
# io_init's start-up time: launching the daemon, and attaching to a running
# one, each with the first io_write after it; with the daemon's staging
# faulted in before it answers (IOFWD_STAGING_PREFAULT=1, the old way) and in
# the background (0, the default), alternating, in one run.
#   bench/init.sh [RUNS (10)] [BYTES (64M as a number of bytes: 67108864)]
# Prints medians (and min-max) per mode, in milliseconds.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
bytes=${2:-67108864}
bash scripts/setup.sh > /dev/null
bash scripts/build.sh > /dev/null
exe=build/bench/init_bench
work=$(mktemp -d /tmp/iofwd-init-XXXXXX)
trap 'rm -rf "$work"' EXIT
export IOFWD_STORE=$work/store
for i in $(seq 1 "$runs"); do
  for prefault in 1 0; do
    # Launch: a runtime directory of its own, so no daemon is found.
    IOFWD_RUNTIME_DIR=$work/rt-launch-$prefault-$i IOFWD_STAGING_PREFAULT=$prefault \
      IOFWD_JOB=launch-$prefault-$i timeout 120 "$exe" 0 1 0 "$bytes" | sed "s/^/launch $prefault /" >> "$work/results"
    # Attach: rank 0 launches and stays; rank 1 attaches (timed).
    rt=$work/rt-attach-$prefault-$i
    # One session for both (ranks of one job share it; here they have no
    # common parent to derive it from).
    export IOFWD_JOB=attach-$prefault-$i IOFWD_SESSION=attach-$prefault-$i
    IOFWD_RUNTIME_DIR=$rt IOFWD_STAGING_PREFAULT=$prefault \
      timeout 120 "$exe" 0 2 3 "$bytes" > /dev/null &
    holder=$!
    for _ in $(seq 1 100); do
      grep -q "connect job" "$rt"/*.log 2>/dev/null && break
      sleep 0.05
    done
    IOFWD_RUNTIME_DIR=$rt IOFWD_STAGING_PREFAULT=$prefault \
      timeout 120 "$exe" 1 2 0 "$bytes" | sed "s/^/attach $prefault /" >> "$work/results"
    wait "$holder"
  done
done
echo "io_init and the first io_write of $bytes bytes, $runs runs each (ms: median, min-max)"
python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, prefault, _, init, _, first = line.split()
    rows.setdefault((mode, prefault), []).append((float(init), float(first)))
print(f"{'':8} {'staging faulted':18} {'io_init':>24} {'first io_write':>24}")
for mode in ("launch", "attach"):
    for prefault, what in (("1", "before it answers"), ("0", "in the background")):
        v = rows.get((mode, prefault), [])
        if not v:
            continue
        i = [x[0] for x in v]; f = [x[1] for x in v]
        print(f"{mode:8} {what:18} {statistics.median(i):10.1f} ({min(i):6.1f}-{max(i):6.1f}) "
              f"{statistics.median(f):10.1f} ({min(f):6.1f}-{max(f):6.1f})")
PY
