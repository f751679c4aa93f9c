#!/usr/bin/env bash
# io_init's start-up time: launching the daemon and attaching to a running
# one, each with the first io_write after it (at once, and 1 s later, as a
# program that computes before its first checkpoint), with the buffer's
# pages collapsed into 2 MiB pages within io_init (IOFWD_HUGEPAGES=init), on
# a thread after it (1, the default) and not at all (0: the baseline of the
# first write, which the thread must not slow), alternating, in one run. The
# daemon's staging is faulted in the background (the default).
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
# One transfer mode for all: without huge pages, `auto` would read a lone
# rank's buffer with get rather than push.
export IOFWD_PULL=push
for i in $(seq 1 "$runs"); do
  for huge in init 1 0; do
    export IOFWD_HUGEPAGES=$huge
    # Launch: a runtime directory of its own, so no daemon is found.
    IOFWD_RUNTIME_DIR=$work/rt-launch-$huge-$i IOFWD_JOB=launch-$huge-$i \
      timeout 120 "$exe" 0 1 0 "$bytes" | sed "s/^/launch $huge 0 /" >> "$work/results"
    # Attach: rank 0 launches and stays; rank 1 attaches (timed), and then
    # rank 2, whose first write comes 1 s after its io_init.
    rt=$work/rt-attach-$huge-$i
    # One session for all (ranks of one job share it; here they have no
    # common parent to derive it from).
    export IOFWD_JOB=attach-$huge-$i IOFWD_SESSION=attach-$huge-$i
    IOFWD_RUNTIME_DIR=$rt timeout 120 "$exe" 0 3 4 "$bytes" > /dev/null &
    holder=$!
    for _ in $(seq 1 100); do
      grep -q "connect job" "$rt"/*.log 2>/dev/null && break
      sleep 0.05
    done
    IOFWD_RUNTIME_DIR=$rt timeout 120 "$exe" 1 3 0 "$bytes" | sed "s/^/attach $huge 0 /" >> "$work/results"
    IOFWD_RUNTIME_DIR=$rt timeout 120 "$exe" 2 3 0 "$bytes" 1 | sed "s/^/attach $huge 1 /" >> "$work/results"
    wait "$holder"
    unset IOFWD_JOB IOFWD_SESSION
  done
done
echo "io_init and the first io_write of $bytes bytes, $runs runs each (ms: median, min-max)"
python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, huge, delay, _, init, _, first = line.split()
    rows.setdefault((mode, huge, delay), []).append((float(init), float(first)))
print(f"{'':7} {'2 MiB pages made':18} {'first write':12} {'io_init':>24} {'first io_write':>24}")
for mode, delay in (("launch", "0"), ("attach", "0"), ("attach", "1")):
    for huge, what in (("init", "within io_init"), ("1", "after, on a thread"), ("0", "none")):
        v = rows.get((mode, huge, delay), [])
        if not v:
            continue
        i = [x[0] for x in v]; f = [x[1] for x in v]
        when = "at once" if delay == "0" else f"{delay} s later"
        print(f"{mode:7} {what:18} {when:12} {statistics.median(i):10.1f} ({min(i):6.1f}-{max(i):6.1f}) "
              f"{statistics.median(f):10.1f} ({min(f):6.1f}-{max(f):6.1f})")
PY
