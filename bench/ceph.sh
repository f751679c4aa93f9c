#!/usr/bin/env bash
# iofwd flushing to Ceph next to `rados bench` with the same object size and
# concurrency, in one run, on a throwaway cluster.
#   bench/ceph.sh [RANKS] [bench options...]
# Prints rados bench's write bandwidth, then the benchmark's table (its
# "durable GB/s agg" column is the figure to compare).
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
export IOFWD_CEPH_CONF=$conf IOFWD_RUNTIME_DIR=$PWD/bench-out/rt
# Same shape as the daemon's flushing: 16 MiB writes, 4 in flight.
export IOFWD_CHUNK_SIZE=16M IOFWD_FLUSH_THREADS=4
echo "== rados bench 10 write -b 16M -t 4"
rados -c "$conf" -p iofwd bench 10 write -b 16777216 -t 4 2>/dev/null \
  | grep -E "Bandwidth \(MB/sec\)|Average Latency"
rados -c "$conf" -p iofwd cleanup >/dev/null 2>&1 || true
echo "== mpiexec -n $ranks bench --store rados:iofwd $*"
mkdir -p bench-out
timeout --kill-after=10 1800 mpiexec -n "$ranks" build/bench/bench --store rados:iofwd \
  --dir bench-out --csv bench-out/bench-ceph.csv "$@"
