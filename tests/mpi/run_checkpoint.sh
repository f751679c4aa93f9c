#!/usr/bin/env bash
# The checkpoint example under real mpiexec with N ranks, then the verifier:
# every version complete, every byte as written.
#   run_checkpoint.sh MPIEXEC N CHECKPOINT VERIFY
set -euo pipefail
mpiexec=$1 n=$2 checkpoint=$3 verify=$4
work=$(mktemp -d /tmp/iofwd-mpi-XXXXXX)
trap 'rm -rf "$work"' EXIT
export IOFWD_RUNTIME_DIR=$work/rt IOFWD_JOB=mpitest IOFWD_LAUNCH_TIMEOUT=30
versions=3
# Every wait is bounded: the whole job gets 120 s.
timeout --kill-after=5 120 "$mpiexec" -n "$n" "$checkpoint" --size 5M --versions "$versions" \
  --store "$work/store" | tee "$work/out"
grep -q "in $versions versions (v1..v$versions)" "$work/out"
timeout 120 "$verify" --store "$work/store" --job mpitest --expect-versions "$versions" \
  --expect-ranks "$n"
