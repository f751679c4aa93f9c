#!/usr/bin/env bash
# The MPI shim under real mpiexec: unmodified programs run with and without it
# and their files compared byte for byte.
#   run_shim.sh SCENARIO MPIEXEC SHIM_LIB WRAPPER MPIIO_APP [HDF5_APP|TOOL_LIB]
# SCENARIO: mpiio | hdf5 | stack | enospc
set -euo pipefail
scenario=$1 mpiexec=$2 shim=$3 wrapper=$4 app=$5 extra=${6:-}
work=$(mktemp -d /tmp/iofwd-shim-XXXXXX)
trap 'rm -rf "$work"' EXIT
export IOFWD_RUNTIME_DIR=$work/rt IOFWD_STORE=$work/store IOFWD_LAUNCH_TIMEOUT=30
unset IOFWD_SHIM_PREFIXES IOFWD_SHIM_VERBOSE
mkdir -p "$work/plain" "$work/shim" "$work/outside-plain" "$work/outside"
cd "$work"
# Every run is bounded.
run() { timeout --kill-after=5 120 "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
daemon_log() { cat "$IOFWD_RUNTIME_DIR"/*.log 2>/dev/null || true; }

case "$scenario" in
mpiio)
  # 4 ranks on 2 cores; the wrapper command; a second file outside the prefix.
  run "$mpiexec" -n 4 "$app" "$work/plain" "$work/outside-plain"
  IOFWD_SHIM_VERBOSE=1 run "$wrapper" --prefix "$work/shim" -n 4 "$app" "$work/shim" \
    "$work/outside" 2> "$work/err" | tee "$work/out"
  cat "$work/err" >&2
  grep -q "0 failed checks" "$work/out" || fail "the program's own checks failed under the shim"
  cmp "$work/plain/data.bin" "$work/shim/data.bin" || fail "data.bin differs with the shim"
  cmp "$work/outside-plain/other.bin" "$work/outside/other.bin" || fail "other.bin differs"
  # Forwarded: every rank attached and forwarded writes to data.bin ...
  [ "$(grep -c 'attached to iod' "$work/err")" -eq 4 ] || fail "not every rank attached"
  [ "$(grep -c ' 1 files, 8 writes' "$work/err")" -eq 4 ] || fail "not 8 writes forwarded per rank"
  daemon_log | grep -q "forwarding writes to $work/shim/data.bin" || fail "daemon never saw data.bin"
  # ... and never touched the file outside the prefix.
  if daemon_log | grep -q "$work/outside"; then fail "the daemon touched a file outside the prefix"; fi
  daemon_log | grep -q "exit status 0" || fail "the daemon did not exit cleanly"
  ;;
hdf5)
  hdf5_app=$extra
  run "$mpiexec" -n 2 "$hdf5_app" "$work/plain/out.h5"
  # The raw form, no wrapper: LD_PRELOAD and the prefix by hand.
  run "$mpiexec" -n 2 -genv LD_PRELOAD "$shim" -genv IOFWD_SHIM_PREFIXES "$work/shim" \
    -genv IOFWD_SHIM_VERBOSE 1 "$hdf5_app" "$work/shim/out.h5" 2> "$work/err" | tee "$work/out"
  cat "$work/err" >&2
  grep -q "0 values read back wrong" "$work/out" || fail "read back under the shim failed"
  cmp "$work/plain/out.h5" "$work/shim/out.h5" || fail "out.h5 differs with the shim"
  h5diff "$work/plain/out.h5" "$work/shim/out.h5" || fail "h5diff finds differences"
  # Every rank forwarded something, and nothing went to MPI-IO unforwarded.
  [ "$(grep -Ec ' 1 files, [1-9][0-9]* writes' "$work/err")" -eq 2 ] || fail "HDF5 writes not forwarded"
  if grep -q "go to MPI-IO" "$work/err"; then fail "some HDF5 writes were not forwarded"; fi
  ;;
stack)
  tool=$extra
  # The shim first, the PMPI tool after it: the tool still sees what the shim passes on.
  run "$mpiexec" -n 2 -genv LD_PRELOAD "$shim:$tool" -genv IOFWD_SHIM_PREFIXES "$work/shim" \
    "$app" "$work/shim" "$work/outside" | tee "$work/out"
  run "$mpiexec" -n 2 "$app" "$work/plain" "$work/outside-plain"
  cmp "$work/plain/data.bin" "$work/shim/data.bin" || fail "data.bin differs with shim + tool"
  # Two opens per rank reach the tool; of the write_at calls only the one the
  # shim hands to MPI-IO (the strided datatype) plus the strided view's.
  [ "$(grep -c 'saw 2 MPI_File_open, 2 MPI_File_write_at' "$work/out")" -eq 2 ] ||
    fail "the tool did not see the calls the shim passed on"
  # Only the MPI symbols the shim wraps are exported.
  others=$(nm -D --defined-only "$shim" | awk '{print $3}' | grep -Ev '^(MPI_|mpi_.*_f08_$)' || true)
  [ -z "$others" ] || fail "the shim exports more than MPI symbols: $others"
  ;;
enospc)
  # The disk fills under the daemon: the program's sync fails with an MPI
  # error naming the file; the daemon says so; nothing is claimed durable.
  set +e
  IOFWD_FAULT=pwrite:ENOSPC:3 run "$wrapper" --prefix "$work/shim" -n 2 "$app" "$work/shim" \
    > "$work/out" 2> "$work/err"
  rc=$?
  set -e
  cat "$work/err" >&2
  [ "$rc" -ne 0 ] || fail "the program succeeded on a full disk"
  grep -q "No space left on device" "$work/err" || fail "no ENOSPC in words"
  grep -q "$work/shim/data.bin" "$work/err" || fail "the failing file is not named"
  daemon_log | grep -q "No space left on device" || fail "the daemon log does not say ENOSPC"
  ;;
*) fail "unknown scenario $scenario" ;;
esac
echo "shim $scenario: ok"
