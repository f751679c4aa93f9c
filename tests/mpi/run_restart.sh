#!/usr/bin/env bash
# Two simulated nodes (each with its own daemon) under mpiexec -n 4: every
# version is committed job-wide; then a second job restarts from the newest
# complete version, checks its bytes, and continues.
#   run_restart.sh MPIEXEC CHECKPOINT VERIFY
set -euo pipefail
mpiexec=$1 checkpoint=$2 verify=$3
complete=$(cd "$(dirname "$0")" && pwd)/../support/store_complete.py
work=$(mktemp -d /tmp/iofwd-mpi-XXXXXX)
trap 'rm -rf "$work"' EXIT
export IOFWD_RUNTIME_DIR=$work/rt IOFWD_JOB=restarttest IOFWD_LAUNCH_TIMEOUT=30
timeout --kill-after=5 120 "$mpiexec" -n 4 "$checkpoint" --sim-nodes 2 --size 3M --versions 3 \
  --store "$work/store" | tee "$work/first"
grep -q "nodes              2 (each with its own daemon)" "$work/first"
# Complete on both nodes, as the store's files say (own directory or pack).
python3 "$complete" "$work/store" restarttest > "$work/complete"
for v in 1 2 3; do
  grep -qx "$v 2" "$work/complete"
done
timeout --kill-after=5 120 "$mpiexec" -n 4 "$checkpoint" --sim-nodes 2 --size 3M --versions 2 \
  --restart --store "$work/store" | tee "$work/second"
grep -q "restart            from v3, complete job-wide" "$work/second"
grep -q "in 2 versions (v4..v5)" "$work/second"
timeout 120 "$verify" --store "$work/store" --job restarttest --expect-versions 5 --expect-ranks 4
