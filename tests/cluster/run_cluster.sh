#!/usr/bin/env bash
# Multi-node tests on a simulated cluster (scripts/cluster.sh): N nodes, each
# a network namespace with its own hostname, SysV IPC and /dev/shm; MPI between
# them over TCP; one daemon per node; the store in /tmp, shared as a parallel
# file system would be. Every run is bounded; the cluster is removed at the
# end, also after a failure. Where namespaces cannot be made the test fails,
# saying so: it is never skipped.
#
#   run_cluster.sh SCENARIO NODES
#   SCENARIO: hang | example | node-killed | late-node | shim-mpiio | shim-hdf5 | rados
# The programs come from the environment (meson sets them): IOFWD_TEST_CHECKPOINT,
# IOFWD_TEST_VERIFY, IOFWD_TEST_SHIM, IOFWD_TEST_MPIIO_APP, IOFWD_TEST_HDF5_APP.
set -euo pipefail
scenario=$1 nodes=$2
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/cluster.sh"
checkpoint=${IOFWD_TEST_CHECKPOINT:?} verify=${IOFWD_TEST_VERIFY:?}

# A cluster of the tests' own, apart from one a user may have up.
export IOFWD_CLUSTER_NAME=ifct IOFWD_CLUSTER_SUBNET=10.213.79
work=$(mktemp -d /tmp/iofwd-cluster-XXXXXX)
chmod 755 "$work"
cleanup() {
  [ -e "$work/ceph/ceph.conf" ] && bash "$here/../../scripts/ceph-stop.sh" "$work/ceph" >/dev/null 2>&1
  bash "$cluster" down >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL ($scenario, $nodes nodes): $*" >&2; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
  fail "the simulated cluster needs root (network namespaces); run the tests as root"
fi
bash "$cluster" down >/dev/null 2>&1 || true
bash "$cluster" up "$nodes" || fail "cannot create the simulated cluster (network namespaces unavailable?)"
hosts=$(bash "$cluster" hosts)
last=${hosts##*,}

export IOFWD_RUNTIME_DIR=$work/rt IOFWD_LAUNCH_TIMEOUT=60 IOFWD_JOB=clustertest
store=$work/store
# The newest version of which the journal file $1 holds the records of all
# $2 ranks of its node, 0 for none (store/journal.hpp: records from 8192, a
# 4 KiB header block, "IOJ2" or, with packs, "IOJ3", the version at 16, the
# size at 24, the rank at 32, then the bytes padded to 4 KiB).
journal_newest() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
ranks = {}
try:
    data = open(sys.argv[1], "rb").read()
except OSError:
    data = b""
at = 8192
while at + 4096 <= len(data) and data[at:at + 4] in (b"IOJ2", b"IOJ3"):
    version, size, rank = struct.unpack_from("<QQI", data, at + 16)
    ranks.setdefault(version, set()).add(rank)
    at += 4096 + (size + 4095) // 4096 * 4096
print(max([v for v, r in ranks.items() if len(r) == int(sys.argv[2])], default=0))
PY
}
# Whether version $2 of job $1 is complete (on $3 nodes, when given), as the
# store's files say (own directory or pack).
# (Read whole first: grep -q in a pipe would close it early, and pipefail
# would take the checker's broken pipe for an answer.)
complete() {
  local listed
  listed=$(python3 "$here/../support/store_complete.py" "$store" "$1") ||
    fail "cannot read the store's complete versions of job $1"
  grep -Eqx "$2 ${3:-[0-9]+}" <<< "$listed"
}
# mpiexec onto the cluster, bounded.
cmpiexec() { timeout --kill-after=10 "${limit:-180}" bash "$cluster" mpiexec "$@"; }
ranks=$((nodes * 2))

case "$scenario" in
hang)
  # The two-node hang in MPI_Finalize: 16 and 64 MiB buffers, push and get,
  # huge pages on and off, 10 runs each; every run must end by itself.
  n=0
  for size in 16M 64M; do
    for pull in push get; do
      for huge in 1 0; do
        for i in $(seq 1 10); do
          n=$((n + 1))
          start=$(date +%s%N)
          limit=60 cmpiexec -ppn 2 -n "$ranks" -genv IOFWD_PULL "$pull" \
            -genv IOFWD_HUGEPAGES "$huge" -genv IOFWD_JOB "hang$n" \
            "$checkpoint" --size "$size" --versions 2 --store "$store" > "$work/out" 2>&1
          status=$?
          if [ "$status" -ne 0 ]; then
            cat "$work/out" >&2
            [ "$status" -ge 124 ] &&
              fail "run $n ($size, $pull, huge pages $huge) did not end by itself within 60 s (status $status)"
            fail "run $n ($size, $pull, huge pages $huge) failed (status $status)"
          fi
          grep -q "nodes              $nodes (each with its own daemon)" "$work/out" ||
            fail "run $n: not on $nodes nodes"
          # Only the first run is verified below; the 80 runs together would
          # hold 25 GiB, so each later one leaves the store as it came.
          [ "$n" -gt 1 ] && rm -rf "$store/hang$n"
          echo "run $n: $size $pull huge=$huge $(( ($(date +%s%N) - start) / 1000000 )) ms"
        done
      done
    done
  done
  timeout 300 "$verify" --store "$store" --job hang1 --expect-versions 2 --expect-ranks "$ranks"
  echo "cluster hang: $n runs, every one ended by itself"
  ;;
example)
  # The checkpoint example, then a restart in a new job; every byte verified.
  cmpiexec -ppn 2 -n "$ranks" "$checkpoint" --size 4M --versions 3 --store "$store" | tee "$work/first"
  grep -q "nodes              $nodes (each with its own daemon)" "$work/first" || fail "not on $nodes nodes"
  grep -q "in 3 versions (v1..v3)" "$work/first" || fail "first job's versions"
  for v in 1 2 3; do
    complete clustertest "$v" "$nodes" || fail "v$v not complete on $nodes nodes"
  done
  cmpiexec -ppn 2 -n "$ranks" "$checkpoint" --size 4M --versions 2 --restart --store "$store" | tee "$work/second"
  grep -q "restart            from v3, complete job-wide" "$work/second" || fail "restart not from v3"
  grep -q "in 2 versions (v4..v5)" "$work/second" || fail "second job's versions"
  timeout 300 "$verify" --store "$store" --job clustertest --expect-versions 5 --expect-ranks "$ranks"
  ;;
node-killed)
  # The last node's daemon writes slowly (each pwrite three seconds late:
  # one second was too short a window on a loaded machine) and one version
  # at a time (one flush thread: with two, its parts of versions 2 and 3
  # were written side by side and completed within milliseconds of each
  # other), so that when version 2 is complete everywhere its part of
  # version 3 is still on its way; then every process of that node is killed.
  # The job writes versions 2 to 6 after one of version 1. Twice:
  #  - its versions straight to their objects (IOFWD_JOURNAL_MAX=0): version
  #    3 must never become complete, and every node restarts from 2;
  #  - with the journal (the default), killed once its ranks' records of
  #    version 3 are in the node's journal (they were told it was durable;
  #    the journal's thread may have appended later versions too, in the
  #    same batch):
  #    the next claim on the node completes the versions each of whose
  #    ranks is in the journal or committed, and every rank must restart
  #    from the newest one the journal holds whole (the example fails when
  #    ranks restart from different versions: io_init_comm returns once
  #    every node's daemon has claimed).
  # A version there takes up to 6 slow pwrites (each rank's journal record
  # and object, the manifest, COMPLETE): the other nodes' ranks, through with
  # their flush at once, wait for that node's in io_finalize longer than the
  # default 60 s.
  # Without packs (IOFWD_PACK_VERSIONS=0): with them a node's versions
  # complete a pack at a time, so version 3 may complete with version 2
  # (both in one pack, both told durable) and the window this case needs
  # is not there; the packs' crashes have tests of their own (failure
  # packs-crash*).
  export IOFWD_PACK_VERSIONS=0
  k=3
  for journal_max in 0 1M; do
    export IOFWD_JOB=killed-journal-$journal_max
    # Version 1 by a job of its own: it leaves each node's journal filled
    # with zeros, so that the next job's appends are taken from its first
    # version on (a journal still being filled takes none, and the ranks
    # hand over all their versions within milliseconds).
    cmpiexec -ppn 2 -n "$ranks" -genv IOFWD_JOURNAL_MAX "$journal_max" "$checkpoint" \
      --size 1M --versions 1 --store "$store" > "$work/first" 2>&1 ||
      { cat "$work/first" >&2; fail "the job before failed"; }
    limit=180 cmpiexec -ppn 2 -genv IOFWD_FINALIZE_TIMEOUT 110 \
      -n $((ranks - 2)) "$checkpoint" --size 1M --versions 5 --store "$store" \
      : -n 2 -env IOFWD_FAULT pwrite:DELAY3 -env IOFWD_FLUSH_THREADS 1 \
      -env IOFWD_JOURNAL_MAX "$journal_max" "$checkpoint" --size 1M --versions 5 --store "$store" \
      > "$work/first" 2>&1 &
    job=$!
    dir=$store/$IOFWD_JOB
    ready() {
      complete "$IOFWD_JOB" $((k - 1)) || return 1
      [ "$journal_max" = 0 ] || [ "$(journal_newest "$dir/.$last.journal" 2)" -ge $k ]
    }
    for _ in $(seq 1 1800); do
      ready && break
      kill -0 "$job" 2>/dev/null || { cat "$work/first" >&2; fail "the job ended before version $((k - 1)) was complete"; }
      sleep 0.05
    done
    ready || fail "version $((k - 1)) never completed, or version $k never reached node $last's journal"
    bash "$cluster" kill "$last"
    # The rest of the job ends by itself (MPI aborts it), within the bound.
    wait "$job" && fail "the job reported success after a node died" || true
    complete "$IOFWD_JOB" "$k" && fail "version $k is complete though node $last died in it"
    journaled=$(journal_newest "$dir/.$last.journal" 2)
    # The surviving nodes' daemons finish what their ranks handed over, then
    # exit; the restart comes after them (a daemon still writing the job
    # holds its claim on the node and refuses a second writer).
    for _ in $(seq 1 600); do
      pgrep -f -- "--runtime-dir $IOFWD_RUNTIME_DIR" > /dev/null || break
      sleep 0.1
    done
    pgrep -f -- "--runtime-dir $IOFWD_RUNTIME_DIR" > /dev/null && fail "the old job's daemons never exited"
    # Every node restarts from one version, byte for byte.
    bash "$cluster" up "$nodes" >/dev/null
    cmpiexec -ppn 2 -n "$ranks" "$checkpoint" --size 1M --versions 2 --restart --store "$store" | tee "$work/second"
    if [ "$journal_max" = 0 ]; then
      from=$((k - 1))
      complete "$IOFWD_JOB" "$k" && fail "version $k became complete"
    else
      from=$journaled
      echo "journal $journal_max: node $last's journal held versions up to $from whole"
      complete "$IOFWD_JOB" "$from" || fail "version $from, in node $last's journal, was not completed"
    fi
    grep -q "restart            from v$from, complete job-wide, every rank's bytes read back and verified" "$work/second" ||
      fail "the restart did not take version $from (journal $journal_max)"
    timeout 300 "$verify" --store "$store" --job "$IOFWD_JOB" --expect-ranks "$ranks" | tee "$work/verify"
    grep -q "all match" "$work/verify" || fail "the verifier found damage"
  done
  ;;
late-node)
  # The last node starts seconds after the others: its proxy late (the
  # launcher's delay), and its ranks 3 s late into io_init (--stagger) with
  # plain io_init, the run named by IOFWD_RUN as iofwd-mpiexec or Slurm name it.
  run=late-$(date +%s%N)
  IOFWD_CLUSTER_DELAY="$last:2" cmpiexec -ppn 2 -n "$ranks" -genv IOFWD_NODES "$nodes" \
    -genv IOFWD_RUN "$run" "$checkpoint" --size 2M --versions 3 --store "$store" --plain-init \
    --stagger 3 | tee "$work/first"
  grep -q "in 3 versions (v1..v3)" "$work/first" || fail "the late node numbered differently"
  timeout 300 "$verify" --store "$store" --job clustertest --expect-versions 3 --expect-ranks "$ranks"
  # io_init_comm names the run itself.
  IOFWD_JOB=late2 IOFWD_CLUSTER_DELAY="$last:2" cmpiexec -ppn 2 -n "$ranks" "$checkpoint" --size 2M \
    --versions 3 --store "$store" --stagger 3 | tee "$work/second"
  grep -q "in 3 versions (v1..v3)" "$work/second" || fail "io_init_comm: versions"
  timeout 300 "$verify" --store "$store" --job late2 --expect-versions 3 --expect-ranks "$ranks"
  # Without a run name the nodes disagree; that must not pass in silence.
  set +e
  IOFWD_JOB=late3 cmpiexec -ppn 2 -n "$ranks" -genv IOFWD_NODES "$nodes" \
    -genv IOFWD_FINALIZE_TIMEOUT 5 "$checkpoint" --size 2M --versions 3 --store "$store" \
    --plain-init --stagger 3 > "$work/third" 2>&1
  status=$?
  set -e
  cat "$work/third"
  [ "$status" -ne 0 ] || fail "a job whose versions never completed reported success"
  grep -q "io_finalize failed: Input/output error" "$work/third" || fail "no io_finalize error"
  grep -q "not complete job-wide" "$work/third" || fail "the error does not say why"
  grep -q "without a run name" "$work/third" || fail "the error does not say how to fix it"
  ;;
shim-mpiio|shim-hdf5)
  # An unmodified MPI-IO or parallel HDF5 program writing one shared file
  # from every node, with and without the shim: the same bytes.
  shim=${IOFWD_TEST_SHIM:?}
  mkdir -p "$work/plain" "$work/shim" "$work/outside-plain" "$work/outside"
  if [ "$scenario" = shim-mpiio ]; then
    app=${IOFWD_TEST_MPIIO_APP:?} file=data.bin
    plain_args=("$work/plain" "$work/outside-plain") shim_args=("$work/shim" "$work/outside")
  else
    app=${IOFWD_TEST_HDF5_APP:?} file=out.h5
    plain_args=("$work/plain/$file") shim_args=("$work/shim/$file")
  fi
  # Without the shim, MPICH 4.0 alone hangs in MPI_Finalize over tcp (see
  # finalize_progress.cpp): libiofwd preloaded carries the remedy, nothing else.
  cmpiexec -ppn 2 -n "$ranks" -genv LD_PRELOAD "${IOFWD_TEST_LIBIOFWD:?}" "$app" "${plain_args[@]}" \
    > "$work/plain.out"
  cmpiexec -ppn 2 -n "$ranks" -genv LD_PRELOAD "$shim" -genv IOFWD_SHIM_PREFIXES "$work/shim" \
    -genv IOFWD_SHIM_VERBOSE 1 "$app" "${shim_args[@]}" > "$work/shim.out" 2> "$work/shim.err"
  cat "$work/shim.out" "$work/shim.err"
  [ "$(grep -c 'attached to iod' "$work/shim.err")" -eq "$ranks" ] || fail "not every rank attached"
  if [ "$scenario" = shim-mpiio ]; then
    grep -q "0 failed checks" "$work/shim.out" || fail "the program's own checks failed under the shim"
  else
    grep -q "0 values read back wrong" "$work/shim.out" || fail "read back under the shim failed"
    h5diff "$work/plain/$file" "$work/shim/$file" || fail "h5diff finds differences"
  fi
  cmp "$work/plain/$file" "$work/shim/$file" || fail "$file differs with the shim"
  forwarded=$(grep -Eo ' 1 files, [0-9]+ writes' "$work/shim.err" | awk '{s += $3} END {print s + 0}')
  [ "$(grep -Ec ' 1 files, [1-9][0-9]* writes' "$work/shim.err")" -eq "$ranks" ] ||
    fail "not every rank forwarded writes"
  # One daemon per node, each wrote its ranks' part of the one shared file.
  for h in ${hosts//,/ }; do
    cat "$IOFWD_RUNTIME_DIR"/"$h"-*.log | grep -q "forwarding writes to $work/shim/$file" ||
      fail "the daemon of $h never saw $file"
  done
  echo "cluster $scenario: byte-identical on $nodes nodes, $forwarded writes forwarded"
  ;;
rados)
  # The rados store reached from every node over the bridge: a throwaway Ceph
  # cluster bound to the bridge's address (in the root namespace, as a
  # storage cluster outside the compute nodes), the example and a restart on
  # all nodes, every byte read back from RADOS.
  bridge_ip=$IOFWD_CLUSTER_SUBNET.254
  conf=$(timeout 120 bash "$here/../../scripts/ceph-start.sh" "$work/ceph" iofwd "$bridge_ip" \
    2> "$work/ceph.err") || { cat "$work/ceph.err" >&2; fail "the Ceph cluster did not start on $bridge_ip"; }
  grep -q "mon_host = \[v2:$bridge_ip:" "$conf" || fail "Ceph is not bound to the bridge"
  cmpiexec -ppn 2 -n "$ranks" -genv IOFWD_CEPH_CONF "$conf" "$checkpoint" --size 70M --versions 2 \
    --store rados:iofwd | tee "$work/first"
  grep -q "nodes              $nodes (each with its own daemon)" "$work/first" || fail "not on $nodes nodes"
  grep -q "store              rados pool iofwd/clustertest" "$work/first" || fail "not stored in rados"
  cmpiexec -ppn 2 -n "$ranks" -genv IOFWD_CEPH_CONF "$conf" "$checkpoint" --size 70M --versions 1 \
    --restart --store rados:iofwd | tee "$work/second"
  grep -q "restart            from v2, complete job-wide" "$work/second" || fail "restart not from v2"
  rados -c "$conf" -p iofwd get clustertest/v00000003/COMPLETE "$work/head"
  IOFWD_CEPH_CONF=$conf timeout 300 "$verify" --store rados:iofwd --job clustertest \
    --expect-versions 3 --expect-ranks "$ranks"
  # Each node's daemon wrote its own ranks' objects, from its own namespace.
  for h in ${hosts//,/ }; do
    rados -c "$conf" -p iofwd ls | grep -q "^clustertest/v00000003/$h.r0001\$" ||
      fail "no object of node $h in version 3"
  done
  echo "cluster rados: $nodes nodes wrote to Ceph over the bridge"
  ;;
*)
  fail "unknown scenario"
  ;;
esac
echo "cluster $scenario on $nodes nodes: ok"
