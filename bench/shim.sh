#!/usr/bin/env bash
# An unmodified MPI-IO program with and without the shim, side by side.
#   bench/shim.sh [RANKS] [--sizes 1M,16M,64M,256M] [--reps 5]
# (scripts/pnetcdf.sh first for the PnetCDF pattern.)
# Columns: the time a rank was blocked in MPI_File_write_at_all, and the time
# until MPI_File_sync returned (the data durable), medians of the slowest rank;
# for a contiguous block per rank, a strided subarray view and PnetCDF. The
# last two columns: MPI-IO's blocked time over the shim's, and MPI-IO's time
# until durable over the shim's blocked time (the yardstick of io_write's
# goal: how long a rank waits for a safe checkpoint without the shim, against
# how long it waits with it). The daemon's settings come from the environment:
# IOFWD_STAGING_SIZE=2G IOFWD_STAGING_PREFAULT=1 measures as bench/run.sh's
# published run did (every rank's largest write fits in staging, faulted
# before the first write, as the daemon did then by default).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-2}
shift || true
bash scripts/setup.sh
bash scripts/build.sh
out=$PWD/bench-out/shim
rm -rf "$out"
mkdir -p "$out/plain" "$out/shim"
export IOFWD_RUNTIME_DIR=${IOFWD_RUNTIME_DIR:-$PWD/bench-out/rt} IOFWD_STORE=$out/store
# The patterns: each rank's block one run of the file; each rank's columns
# of a 2-D array of doubles through a subarray view (one 32 KiB run per row,
# the ranks' runs interleaved; mpiio_bench.c); and the same array as a
# PnetCDF variable, when PnetCDF for MPICH is built (scripts/pnetcdf.sh).
patterns=(contiguous subarray)
if bash scripts/pnetcdf.sh --prefix > /dev/null 2>&1; then
  patterns+=(pnetcdf)
else
  echo "shim.sh: no PnetCDF for MPICH (scripts/pnetcdf.sh builds it); its pattern is left out" >&2
fi
for pattern in "${patterns[@]}"; do
  timeout --kill-after=10 1800 mpiexec -n "$ranks" build/bench/mpiio_bench "$out/plain" "$@" \
    --pattern "$pattern" > "$out/plain-$pattern.txt"
  timeout --kill-after=10 1800 build/mpi_shim/iofwd-mpiexec --prefix "$out/shim" -n "$ranks" \
    build/bench/mpiio_bench "$out/shim" "$@" --pattern "$pattern" > "$out/shim-$pattern.txt"
done
echo "$ranks ranks, MPI_File_write_at_all + MPI_File_sync per rank and size (medians, slowest rank);" \
  "staging ${IOFWD_STAGING_SIZE:-256M (the default)}, prefault ${IOFWD_STAGING_PREFAULT:-0}"
printf '%10s %10s | %12s %12s | %12s %12s | %s\n' pattern size "mpiio write" "shim write" \
  "mpiio durable" "shim durable" "mpiio write/shim write, mpiio durable/shim write"
for pattern in "${patterns[@]}"; do
  paste "$out/plain-$pattern.txt" "$out/shim-$pattern.txt" | awk -v p="$pattern" '{
    printf "%10s %10s | %10.2fms %10.2fms | %11.2fms %11.2fms | %8.1fx %8.1fx\n", p,
           ($2 >= 1048576 ? $2/1048576 " MiB" : $2/1024 " KiB"), $4, $10, $6, $12,
           ($10 > 0 ? $4/$10 : 0), ($10 > 0 ? $6/$10 : 0) }'
done
