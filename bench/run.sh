#!/usr/bin/env bash
# Builds and runs the benchmark, then plots it.
#   bench/run.sh [RANKS] [bench options...]   e.g. bench/run.sh 2 --sizes 4K,64M --reps 5
# Writes bench-out/bench.csv and bench-out/bench.png.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-2}
shift || true
bash scripts/setup.sh
bash scripts/build.sh
# Every repetition writes a version; keep only the newest two, and start empty.
rm -rf bench-out/store
mkdir -p bench-out/store
export IOFWD_RUNTIME_DIR=${IOFWD_RUNTIME_DIR:-$PWD/bench-out/rt} IOFWD_KEEP=${IOFWD_KEEP:-2}
timeout --kill-after=10 1800 mpiexec -n "$ranks" build/bench/bench --store bench-out/store \
  --csv bench-out/bench.csv "$@"
gnuplot -e "csv='bench-out/bench.csv'; out='bench-out/bench.png'" bench/plot.gp
echo "plot: bench-out/bench.png"
