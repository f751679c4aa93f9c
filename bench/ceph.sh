#!/usr/bin/env bash
# iofwd flushing to Ceph next to `rados bench` with the same object size and
# concurrency, in one run, on a throwaway cluster.
#   bench/ceph.sh [RANKS] [bench options...]
# Prints rados bench's write bandwidth before and after the benchmark, the
# benchmark's table, and iofwd's flush throughput (its "durable" column) as a
# share of the mean of the two rados bench runs.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-2}
shift || true
bash scripts/setup.sh --ceph
bash scripts/build.sh
work=$PWD/bench-out/ceph
bash scripts/ceph-stop.sh "$work"
trap 'bash scripts/ceph-stop.sh "$work"' EXIT
conf=$(bash scripts/ceph-start.sh "$work" iofwd 2>/dev/null)
# Every repetition writes a version: keep the newest two (the OSD has 20 GiB).
export IOFWD_CEPH_CONF=$conf IOFWD_RUNTIME_DIR=$PWD/bench-out/rt IOFWD_KEEP=${IOFWD_KEEP:-2}
# Same shape as the daemon's flushing: 16 MiB writes, 4 in flight.
export IOFWD_CHUNK_SIZE=16M IOFWD_FLUSH_THREADS=4
# rados bench before and after iofwd: the cluster's speed drifts during a run
# (the OSD fills, the host is shared); iofwd is compared with their mean.
rados_bench() {
  echo "== rados bench 10 write -b 16M -t 4 ($1)" >&2
  local out mibs
  out=$(rados -c "$conf" -p iofwd bench 10 write -b 16777216 -t 4 2>/dev/null)
  rados -c "$conf" -p iofwd cleanup >/dev/null 2>&1 || true
  grep -E "Bandwidth \(MB/sec\)|Average Latency" <<<"$out" >&2
  mibs=$(awk '/Bandwidth \(MB\/sec\)/ {print $3}' <<<"$out")
  echo "${mibs:-0}"
}
before=$(rados_bench before)
echo "== mpiexec -n $ranks bench --store rados:iofwd $*"
mkdir -p bench-out
timeout --kill-after=10 1800 mpiexec -n "$ranks" build/bench/bench --store rados:iofwd \
  --dir bench-out --csv bench-out/bench-ceph.csv "$@"
after=$(rados_bench after)
# rados bench's "MB/sec" is MiB/s; the benchmark's durable figure is all
# writers' bytes over the time until io_wait said durable.
echo "== iofwd flush throughput against rados bench (MiB/s; mean of before and after)"
awk -F, -v b="$before" -v a="$after" 'NR > 1 {
  mibs = $1 * $2 / $4 / 1048576; ref = (b + a) / 2
  printf "%10.0f MiB/rank  iofwd %7.1f MiB/s  rados bench %7.1f (%s, %s)  %5.1f %%\n",
         $1 / 1048576, mibs, ref, b, a, (ref > 0 ? 100 * mibs / ref : 0)
}' bench-out/bench-ceph.csv
