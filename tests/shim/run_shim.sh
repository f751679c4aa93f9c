#!/usr/bin/env bash
# The MPI shim under real mpiexec: unmodified programs run with and without it
# and their files compared byte for byte.
#   run_shim.sh SCENARIO MPIEXEC SHIM_LIB WRAPPER MPIIO_APP [HDF5_APP|TOOL_LIB]
# SCENARIO: mpiio | views | hdf5 | hdf5-chunked | pnetcdf | stack | enospc | fortran | daemon-killed |
#           ranks-killed | attach-split | open-split | settle-split | prefix-split | huge-pages
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
# An MPMD run whose ranks disagree about something: it must end by itself
# within 60 s (exit status 124 or 137 means the timeout killed it: the ranks
# hung). Each
# rank's daemon waits at MPI_Finalize for a node's other rank it never
# sees: bounded to 2 s. Its output in $work/out and $work/err.
#   run_split WHAT MPIEXEC_ARGS...
run_split() {
  local what=$1
  shift
  IOFWD_FINALIZE_TIMEOUT=2 timeout --kill-after=5 60 "$mpiexec" "$@" > "$work/out" \
    2> "$work/err" || {
    local rc=$?
    cat "$work/out" "$work/err" >&2
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the ranks hung$what"
    fail "the program failed (exit status $rc$what)"
  }
  cat "$work/out" "$work/err" >&2
}

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
  # 12 writes per rank: 3 through file views (a dense one of ints, two
  # strided), 2 from memory datatypes that are not one run in order (strided,
  # out of order); the external32 view's write and the shared pointer's go
  # to MPI-IO.
  [ "$(grep -c ' 1 files, 12 writes ([0-9]* bytes) forwarded (3 through file views, 2 from non-contiguous memory)' "$work/err")" -eq 4 ] ||
    fail "not 12 writes forwarded per rank"
  daemon_log | grep -q "forwarding writes to $work/shim/data.bin" || fail "daemon never saw data.bin"
  # ... and never touched the file outside the prefix.
  if daemon_log | grep -q "$work/outside"; then fail "the daemon touched a file outside the prefix"; fi
  daemon_log | grep -q "exit status 0" || fail "the daemon did not exit cleanly"
  ;;
views)
  # Every kind of filetype, every form of write call, 3 ranks (an odd count)
  # on 2 cores: the files equal MPI-IO's, and every write is forwarded but
  # those of a view of 4-byte pieces.
  views_app=$extra
  run "$mpiexec" -n 3 "$views_app" "$work/plain" | tee "$work/out-plain"
  grep -q "0 failed checks" "$work/out-plain" || fail "the program's own checks failed without the shim"
  IOFWD_SHIM_VERBOSE=1 run "$wrapper" --prefix "$work/shim" -n 3 "$views_app" "$work/shim" \
    2> "$work/err" | tee "$work/out"
  cat "$work/err" >&2
  grep -q "0 failed checks" "$work/out" || fail "the program's own checks failed under the shim"
  for kind in vector indexed hindexed struct resized subarray darray tiny; do
    cmp "$work/plain/$kind.bin" "$work/shim/$kind.bin" || fail "$kind.bin differs with the shim"
  done
  # 7 kinds x 7 writes (one of nothing), all through views, 7 from strided
  # memory; of the tiny kind's (4-byte runs) only the write of nothing.
  [ "$(grep -c ' 8 files, 50 writes ([0-9]* bytes) forwarded (50 through file views, 7 from non-contiguous memory)' "$work/err")" -eq 3 ] ||
    fail "not every write was forwarded through its view"
  # What went to MPI-IO: the tiny kind's writes and the negative offsets
  # (which MPI-IO refuses), each said once per rank.
  [ "$(grep -c 'tiny.bin: the write.s runs in the file are on average smaller than 64 bytes' "$work/err")" -ge 3 ] ||
    fail "the tiny pieces' fallback to MPI-IO was not said"
  if grep "go to MPI-IO" "$work/err" | grep -v "tiny.bin: the write.s runs in the file are on average smaller" |
      grep -qv ": a negative offset;"; then
    fail "some writes were not forwarded"
  fi
  ;;
hdf5)
  hdf5_app=$extra
  run "$mpiexec" -n 4 "$hdf5_app" "$work/plain/out.h5"
  # The raw form, no wrapper: LD_PRELOAD and the prefix by hand; 4 ranks on 2 cores.
  run "$mpiexec" -n 4 -genv LD_PRELOAD "$shim" -genv IOFWD_SHIM_PREFIXES "$work/shim" \
    -genv IOFWD_SHIM_VERBOSE 1 "$hdf5_app" "$work/shim/out.h5" 2> "$work/err" | tee "$work/out"
  cat "$work/err" >&2
  grep -q "0 values read back wrong" "$work/out" || fail "read back under the shim failed"
  cmp "$work/plain/out.h5" "$work/shim/out.h5" || fail "out.h5 differs with the shim"
  h5diff "$work/plain/out.h5" "$work/shim/out.h5" || fail "h5diff finds differences"
  # Every rank forwarded something, and nothing went to MPI-IO unforwarded.
  [ "$(grep -Ec ' 1 files, [1-9][0-9]* writes' "$work/err")" -eq 4 ] || fail "HDF5 writes not forwarded"
  if grep -q "go to MPI-IO" "$work/err"; then fail "some HDF5 writes were not forwarded"; fi
  ;;
hdf5-chunked)
  # Chunked (collective, strided file selection), an independent hyperslab
  # write from strided memory, and deflate: HDF5's derived datatypes and
  # file views, all forwarded.
  hdf5_app=$extra
  run "$mpiexec" -n 4 "$hdf5_app" "$work/plain/out.h5" > "$work/out-plain"
  IOFWD_SHIM_VERBOSE=1 run "$wrapper" --prefix "$work/shim" -n 4 "$hdf5_app" "$work/shim/out.h5" \
    2> "$work/err" | tee "$work/out"
  cat "$work/err" >&2
  grep -q "0 values read back wrong" "$work/out" || fail "read back under the shim failed"
  grep -q "compression: written" "$work/out" ||
    fail "this HDF5 did not write the compressed dataset: $(grep compression "$work/out")"
  cmp "$work/plain/out.h5" "$work/shim/out.h5" || fail "out.h5 differs with the shim"
  h5diff "$work/plain/out.h5" "$work/shim/out.h5" || fail "h5diff finds differences"
  # Every rank's writes forwarded, most of them through file views; none to MPI-IO.
  sed -n 's/.* 1 files, \([0-9]*\) writes ([0-9]* bytes) forwarded (\([0-9]*\) through file views.*/\1 \2/p' \
    "$work/err" > "$work/counts"
  [ "$(wc -l < "$work/counts")" -eq 4 ] || fail "not every rank forwarded"
  while read -r writes views; do
    [ "$writes" -ge 4 ] && [ "$views" -ge 3 ] || fail "a rank forwarded $writes writes, $views through views"
  done < "$work/counts"
  if grep -q "go to MPI-IO" "$work/err"; then fail "some HDF5 writes were not forwarded"; fi
  ;;
pnetcdf)
  # Real PnetCDF (built for MPICH): header and attributes by rank 0, a 3-D
  # variable decomposed along its fastest dimension (a strided subarray
  # view) and a 2-D one, collectively.
  pnetcdf_app=${extra%%:*} ncmpidiff=${extra#*:}
  run "$mpiexec" -n 4 "$pnetcdf_app" "$work/plain/out.nc" > "$work/out-plain"
  grep -q "0 values read back wrong" "$work/out-plain" || fail "the program failed without the shim"
  IOFWD_SHIM_VERBOSE=1 run "$wrapper" --prefix "$work/shim" -n 4 "$pnetcdf_app" \
    "$work/shim/out.nc" 2> "$work/err" | tee "$work/out"
  cat "$work/err" >&2
  grep -q "0 values read back wrong" "$work/out" || fail "read back under the shim failed"
  cmp "$work/plain/out.nc" "$work/shim/out.nc" || fail "out.nc differs with the shim"
  "$ncmpidiff" "$work/plain/out.nc" "$work/shim/out.nc" || fail "ncmpidiff finds differences"
  # Rank 0: the header and both variables; the others both variables; the
  # 3-D one through its subarray view. Nothing to MPI-IO.
  [ "$(grep -c ' 1 files, 3 writes (295356 bytes) forwarded (1 through file views, 0 from non-contiguous memory)' "$work/err")" -eq 1 ] ||
    fail "rank 0 did not forward the header and both variables"
  [ "$(grep -c ' 1 files, 2 writes (294912 bytes) forwarded (1 through file views, 0 from non-contiguous memory)' "$work/err")" -eq 3 ] ||
    fail "not every rank forwarded both variables"
  if grep -q "go to MPI-IO" "$work/err"; then fail "some PnetCDF writes were not forwarded"; fi
  ;;
stack)
  tool=$extra
  # The shim first, the PMPI tool after it: the tool still sees what the shim passes on.
  run "$mpiexec" -n 2 -genv LD_PRELOAD "$shim:$tool" -genv IOFWD_SHIM_PREFIXES "$work/shim" \
    "$app" "$work/shim" "$work/outside" | tee "$work/out"
  run "$mpiexec" -n 2 "$app" "$work/plain" "$work/outside-plain"
  cmp "$work/plain/data.bin" "$work/shim/data.bin" || fail "data.bin differs with shim + tool"
  # Two opens per rank reach the tool; of the write_at calls only the one the
  # shim hands to MPI-IO (the external32 view's).
  [ "$(grep -c 'saw 2 MPI_File_open, 1 MPI_File_write_at' "$work/out")" -eq 2 ] ||
    fail "the tool did not see the calls the shim passed on"
  # Only the MPI symbols the shim wraps are exported, and the four calls that
  # keep MPICH's MPI_Finalize from hanging over UCX tcp (finalize_progress.cpp).
  others=$(nm -D --defined-only "$shim" | awk '{print $3}' |
    grep -Ev '^(MPI_|mpi_.*_f08_$|read$|ucp_worker_create$|ucp_worker_destroy$|ucp_disconnect_nb$)' || true)
  [ -z "$others" ] || fail "the shim exports more than MPI symbols: $others"
  ;;
enospc)
  # The disk fills under the daemon: the program's sync fails with an MPI
  # error naming the file; the daemon says so; nothing is claimed durable.
  set +e
  # The program counts its failed calls and goes on instead of MPI_Abort,
  # which can cut the ranks' stderr short.
  IOFWD_FAULT=pwrite:ENOSPC:3 MPIIO_APP_KEEP_GOING=1 run "$wrapper" --prefix "$work/shim" -n 2 \
    "$app" "$work/shim" > "$work/out" 2> "$work/err"
  rc=$?
  set -e
  cat "$work/err" >&2
  [ "$rc" -ne 0 ] || fail "the program succeeded on a full disk"
  grep -q "No space left on device" "$work/err" || fail "no ENOSPC in words"
  grep -q "$work/shim/data.bin" "$work/err" || fail "the failing file is not named"
  daemon_log | grep -q "No space left on device" || fail "the daemon log does not say ENOSPC"
  ;;
attach-split)
  # The first daemon dies while starting: the rank that launched it cannot
  # attach, the other launches a second one and could. Forwarding must then
  # be off for every rank (half forwarding deadlocked in MPI_File_open), and
  # the program runs through MPI-IO, the same bytes.
  iod=$(dirname "$shim")/../iod/iod
  printf '#!/bin/sh\nif mkdir "%s" 2>/dev/null; then kill -9 $$; fi\nexec "%s" "$@"\n' \
    "$work/died" "$iod" > "$work/iod-dies-once"
  chmod +x "$work/iod-dies-once"
  run "$mpiexec" -n 2 "$app" "$work/plain" "$work/outside-plain"
  IOFWD_IOD="$work/iod-dies-once" IOFWD_SHIM_VERBOSE=1 run "$mpiexec" -n 2 \
    -genv LD_PRELOAD "$shim" -genv IOFWD_SHIM_PREFIXES "$work/shim" \
    "$app" "$work/shim" "$work/outside" > "$work/out" 2> "$work/err" ||
    { cat "$work/err" >&2; fail "the program failed"; }
  cat "$work/err" >&2
  [ -d "$work/died" ] || fail "the first daemon did not die"
  grep -q "0 failed checks" "$work/out" || fail "the program's own checks failed"
  cmp "$work/plain/data.bin" "$work/shim/data.bin" || fail "data.bin differs"
  [ "$(grep -c 'unforwarded, on every rank' "$work/err")" -eq 2 ] || fail "not every rank fell back"
  if grep -q "attached to iod" "$work/err"; then fail "a rank still forwards"; fi
  ;;
open-split)
  # The daemon takes the file for one rank and not for the other (two ranks,
  # each with a daemon of its own, session sb's unable to open files): the
  # file must go to MPI-IO on both. A rank forwarding while the other did
  # MPI-IO's collective write hung both (seen when a daemon was killed
  # between two ranks' FILE_OPEN).
  run "$mpiexec" -n 2 "$app" "$work/plain" "$work/outside-plain"
  common=(-env LD_PRELOAD "$shim" -env IOFWD_SHIM_PREFIXES "$work/shim" -env IOFWD_SHIM_VERBOSE 2)
  run_split "" \
    -n 1 -env IOFWD_SESSION sa "${common[@]}" "$app" "$work/shim" "$work/outside" : \
    -n 1 -env IOFWD_SESSION sb -env IOFWD_FAULT open:EACCES "${common[@]}" "$app" "$work/shim" \
    "$work/outside"
  grep -q "0 failed checks" "$work/out" || fail "the program's own checks failed"
  cmp "$work/plain/data.bin" "$work/shim/data.bin" || fail "data.bin differs"
  cmp "$work/outside-plain/other.bin" "$work/outside/other.bin" || fail "other.bin differs"
  grep -q "(rank 1): cannot forward $work/shim/data.bin: .*Permission denied; it goes to MPI-IO on every rank" "$work/err" ||
    fail "rank 1 did not say why it cannot forward"
  grep -q "(rank 0): another rank cannot forward $work/shim/data.bin; it goes to MPI-IO on every rank" "$work/err" ||
    fail "rank 0 did not give the file up"
  # Verbose 2 says every forwarded write: none.
  if grep -q "bytes to $work/shim/data.bin in" "$work/err"; then fail "a rank still forwarded"; fi
  ;;
huge-pages)
  # A forwarded write from the program's array: the shim collapses the
  # array's 2 MiB pages afterwards (IOFWD_HUGEPAGES=1, the default), so that
  # the next write of it is read faster; with 0, or where the program keeps
  # the range off huge pages (MADV_NOHUGEPAGE), its pages stay as they are.
  # The file holds the bytes every time. khugepaged, the kernel's own
  # collapser, could blur the first two cases: the program counts its work.
  huge_app=$extra
  huge_run() {  # huge_run WAIT_SECONDS allow|refuse [VAR=VALUE...]
    local wait=$1 how=$2
    shift 2
    rm -f "$work/shim/huge.bin"
    (
      for setting in "$@"; do export "${setting?}"; done
      IOFWD_SHIM_VERBOSE=1 run "$wrapper" --prefix "$work/shim" -n 1 "$huge_app" \
        "$work/shim/huge.bin" "$wait" "$how" 2> "$work/err"
    ) | tee "$work/out"
    cat "$work/err" >&2
    if grep -q "^skip:" "$work/out"; then exit 77; fi
    grep -qx "file ok" "$work/out" || fail "the file does not hold the array twice ($how $*)"
    grep -q " 1 files, 2 writes (16777216 bytes) forwarded" "$work/err" ||
      fail "not both writes forwarded ($how $*)"
  }
  khugepaged_quiet() { grep -qx "khugepaged 0" "$work/out"; }
  huge_run 10 allow
  if ! grep -qx "huge 8192" "$work/out"; then
    grep -qx "spare-huge-page no" "$work/out" ||
      fail "the array was not on 2 MiB pages 10 s after its write"
    echo "warning: the kernel has no free 2 MiB page (a collapse fails with ENOMEM): the shim's collapse not checked"
  fi
  khugepaged_quiet || echo "warning: khugepaged collapsed pages meanwhile: it may have done the shim's work"
  huge_run 2 allow IOFWD_HUGEPAGES=0
  if khugepaged_quiet; then
    grep -qx "huge 0" "$work/out" || fail "IOFWD_HUGEPAGES=0, and the array's pages changed"
  else
    echo "warning: khugepaged collapsed pages meanwhile: IOFWD_HUGEPAGES=0 not checked"
  fi
  huge_run 2 refuse
  grep -qx "huge 0" "$work/out" || fail "the program kept its array off huge pages, and the shim collapsed it"
  ;;
settle-split)
  # A rank's forwarded write fails on its daemon (session sb's pwrite EIO, a
  # second late, so that the rank's settling waits for it), the other rank's
  # lands; then both call a collective MPI-IO serves (read_at_all), whose
  # settling of the writes fails on one rank only. That rank must still enter
  # the collective, then return the error: returning at once left the other
  # rank in it for good. And the settling must see the failure: the daemon
  # once answered a sync before it recorded the failure of the write the sync
  # waited for.
  split_app=$extra
  # Session sa's writes land, a second late each: a read that did not wait
  # for them would miss them.
  common=(-env LD_PRELOAD "$shim" -env IOFWD_SHIM_PREFIXES "$work/shim")
  run_split "" \
    -n 1 -env IOFWD_SESSION sa -env IOFWD_FAULT pwrite:DELAY1 "${common[@]}" "$split_app" \
    "$work/shim" : \
    -n 1 -env IOFWD_SESSION sb -env IOFWD_FAULT pwrite:DELAY1+EIO "${common[@]}" "$split_app" \
    "$work/shim"
  grep -qx "rank 0: write_at class 0 read_at_all class 0 block a" "$work/out" ||
    fail "rank 0 did not read its block back"
  # MPI_ERR_IO is class 32 in MPICH.
  grep -qx "rank 1: write_at class 0 read_at_all class 32 block -" "$work/out" ||
    fail "rank 1 did not get MPI_ERR_IO from read_at_all"
  grep -q "(rank 1): .*split.bin.*Input/output error" "$work/err" ||
    fail "rank 1 did not say its write failed"
  # A collective that starts a request is entered and its request completes;
  # the failure comes back at the next MPI_File_sync.
  grep -qx "rank 0: write_at class 0 iread_at_all class 0 wait class 0 sync class 0" "$work/out" ||
    fail "rank 0's nonblocking collective or sync failed"
  grep -qx "rank 1: write_at class 0 iread_at_all class 0 wait class 0 sync class 32" "$work/out" ||
    fail "rank 1's failure did not come back at MPI_File_sync"
  # The large-count calls settle too (they once went to MPI-IO unwrapped:
  # rank 0 read zeros).
  grep -qx "rank 0: iread_at_c class 0 wait class 0 block A" "$work/out" ||
    fail "rank 0's MPI_File_iread_at_c did not read its forwarded write"
  grep -qx "rank 1: iread_at_c class 32 wait class 0 block -" "$work/out" ||
    fail "rank 1's MPI_File_iread_at_c did not fail with MPI_ERR_IO"
  # A failure a started collective could not return comes back at close.
  grep -qx "rank 0: iread_at_all class 0 wait class 0 close class 0" "$work/out" ||
    fail "rank 0's last nonblocking collective or close failed"
  grep -qx "rank 1: iread_at_all class 0 wait class 0 close class 32" "$work/out" ||
    fail "rank 1's failure did not come back at MPI_File_close"
  # The error handler runs once per error returned (read_at_all, sync,
  # iread_at_c, close), never under the shim's lock (its MPI_File_get_size
  # once deadlocked), never for the error a started collective could not
  # return.
  grep -qx "rank 0: handler calls 0 get_size class 0" "$work/out" ||
    fail "rank 0's error handler ran"
  grep -qx "rank 1: handler calls 4 get_size class 0" "$work/out" ||
    fail "rank 1's error handler did not run exactly 4 times"
  ;;
prefix-split)
  # Ranks launched with different IOFWD_SHIM_PREFIXES (MPMD, or a launcher
  # that passes the environment per node): data.bin is under rank 0's
  # prefix and not under rank 1's, then rank 1 has none at all. The shim's
  # own collectives (MPI_Init's agreement, MPI_File_open's barrier and
  # agreement) ran on the matching rank only, and the ranks hung. Now the
  # file goes to MPI-IO on both, and rank 0 says why.
  run "$mpiexec" -n 2 "$app" "$work/plain" "$work/outside-plain"
  for other in "$work/elsewhere" ":"; do
    rm -f "$work/shim/data.bin" "$work/outside/other.bin"
    run_split " (rank 1's prefixes: $other)" -genv LD_PRELOAD "$shim" \
      -genv IOFWD_SHIM_VERBOSE 2 -n 1 -env IOFWD_SHIM_PREFIXES "$work/shim" \
      "$app" "$work/shim" "$work/outside" : -n 1 -env IOFWD_SHIM_PREFIXES "$other" \
      "$app" "$work/shim" "$work/outside"
    grep -q "0 failed checks" "$work/out" || fail "the program's own checks failed"
    cmp "$work/plain/data.bin" "$work/shim/data.bin" || fail "data.bin differs"
    cmp "$work/outside-plain/other.bin" "$work/outside/other.bin" || fail "other.bin differs"
    if [ "$other" = ":" ]; then
      grep -q "(rank 0): IOFWD_SHIM_PREFIXES is empty on another rank (its environment differs from this one's); every file goes through MPI-IO unforwarded, on every rank" "$work/err" ||
        fail "rank 0 did not say why nothing is forwarded"
    else
      grep -q "(rank 0): $work/shim/data.bin is not under IOFWD_SHIM_PREFIXES on every rank (their prefixes or working directories differ); it goes to MPI-IO on every rank" "$work/err" ||
        fail "rank 0 did not say why data.bin is not forwarded"
    fi
    if grep -q "bytes to $work/shim/data.bin in" "$work/err"; then fail "a rank still forwarded"; fi
  done
  ;;
daemon-killed)
  # The daemon dies while ranks wait for it (its writes made slow): every rank
  # gets an error in words at once; nobody hangs.
  set +e
  IOFWD_FAULT=pwrite:DELAY MPIIO_APP_KEEP_GOING=1 run "$wrapper" --prefix "$work/shim" -n 2 \
    "$app" "$work/shim" > "$work/out" 2> "$work/err" &
  job=$!
  for _ in $(seq 1 200); do
    daemon_log | grep -q "forwarding writes" && break
    sleep 0.1
  done
  pid=$(daemon_log | sed -n 's/.*iod\[\([0-9]*\)\] ready.*/\1/p' | head -1)
  [ -n "$pid" ] || fail "no daemon started"
  sleep 0.5
  kill -9 "$pid"
  start=$(date +%s)
  wait "$job"
  rc=$?
  set -e
  cat "$work/err" >&2
  [ "$rc" -ne 0 ] || fail "the program succeeded although its daemon was killed"
  [ $(( $(date +%s) - start )) -le 20 ] || fail "the ranks took more than 20 s to notice"
  grep -q "closed the connection\|exited or was killed\|broken" "$work/err" ||
    fail "no error in words about the daemon"
  ;;
ranks-killed)
  # Small writes return once they are in the rank's mailbox. Each of the
  # daemon's file writes sleeps 1 s and it has one staging slot, so most are
  # still in the mailboxes when every rank is killed (no sync, no close): the
  # daemon still writes each of them, and the file equals a plain run's.
  run "$mpiexec" -n 2 "$extra" "$work/plain/small.bin" 4 > /dev/null
  set +e
  SMALL_WRITES_HANG=1 IOFWD_FAULT=pwrite:DELAY IOFWD_STAGING_SIZE=1M IOFWD_CHUNK_SIZE=1M \
    run "$wrapper" --prefix "$work/shim" -n 2 "$extra" "$work/shim/small.bin" 4 \
    > "$work/out" 2> "$work/err" &
  job=$!
  for _ in $(seq 1 200); do
    [ "$(grep -c '^written' "$work/out")" -eq 2 ] && break
    sleep 0.05
  done
  [ "$(grep -c '^written' "$work/out")" -eq 2 ] || fail "the ranks did not finish writing"
  pkill -9 -f "$(basename "$extra") $work/shim/small.bin"
  wait "$job"
  set -e
  daemon_log | grep -q "mailbox 4 MiB" || fail "the ranks had no mailbox"
  for _ in $(seq 1 600); do
    daemon_log | grep -q "exit status" && break
    sleep 0.1
  done
  daemon_log >&2
  daemon_log | grep -q "exit status 0" || fail "the daemon did not exit cleanly"
  cmp "$work/plain/small.bin" "$work/shim/small.bin" || fail "small.bin lost writes"
  ;;
fortran)
  f90=${extra%%:*} f08=${extra#*:}
  run "$mpiexec" -n 2 "$f90" "$work/plain/f.bin"
  IOFWD_SHIM_VERBOSE=1 run "$wrapper" --prefix "$work/shim" -n 2 "$f90" "$work/shim/f.bin" \
    2> "$work/err"
  cat "$work/err" >&2
  cmp "$work/plain/f.bin" "$work/shim/f.bin" || fail "the Fortran program's file differs"
  [ "$(grep -c ' 1 files, 1 writes (1200000 bytes) forwarded' "$work/err")" -eq 2 ] ||
    fail "the Fortran MPI-IO writes were not forwarded"
  # use mpi_f08: MPI_Init, MPI_File_open, set_view, sync and close reach
  # PMPI_ directly; the shim's f08 wrappers attach, forward and detach.
  run "$mpiexec" -n 2 "$f08" "$work/plain/f08.bin" > /dev/null
  IOFWD_SHIM_VERBOSE=1 run "$wrapper" --prefix "$work/shim" -n 2 "$f08" "$work/shim/f08.bin" \
    2> "$work/err08" | tee "$work/out08"
  cat "$work/err08" >&2
  grep -q "fortran_f08: 0 failed checks" "$work/out08" || fail "the f08 program's checks failed"
  [ "$(grep -c 'attached to iod' "$work/err08")" -eq 2 ] || fail "the f08 ranks did not attach"
  cmp "$work/plain/f08.bin" "$work/shim/f08.bin" || fail "the f08 program's file differs"
  # Both writes forwarded through their views; the array section packed.
  [ "$(grep -c ' 1 files, 2 writes (36864 bytes) forwarded (2 through file views, 1 from non-contiguous memory)' "$work/err08")" -eq 2 ] ||
    fail "the f08 MPI-IO writes were not forwarded"
  ;;
*) fail "unknown scenario $scenario" ;;
esac
echo "shim $scenario: ok"
