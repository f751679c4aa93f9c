#!/usr/bin/env bash
# iofwd under a real Slurm (slurm-wlm and munge, started and stopped by
# scripts/slurm.sh in a directory of this test): MPICH programs under
# `srun --mpi=pmi2`, every byte verified.
#   run_slurm.sh SCENARIO SOURCE_DIR CHECKPOINT VERIFY MPIIO_APP IOFWD_SRUN LIBIOFWD
# SCENARIO:
#   checkpoint  one node: the checkpoint example (io_init_comm), 3 versions; a
#               restart as an sbatch job through io_init (--plain-init: nodes
#               and run name from Slurm's environment), 2 more; verify
#   shim        one node: the MPI-IO program plain and through iofwd-srun, cmp
#   two-nodes   two slurmd "nodes", each in a network namespace of a simulated
#               cluster (scripts/cluster.sh): both of the above across them
set -euo pipefail
scenario=$1 src=$2 checkpoint=$3 verify=$4 app=$5 iofwd_srun=$6 libiofwd=$7
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root: slurmd runs jobs as their users"
work=$(mktemp -d /tmp/iofwd-slurm-XXXXXX)
chmod 755 "$work"  # munged's socket is below it
slurm_dir=$work/slurm
cluster_name=iofs  # not iofc or ifct, which other suites use
cleanup() {
  "$src/scripts/slurm.sh" down "$slurm_dir" >/dev/null 2>&1 || true
  if [ "$scenario" = two-nodes ]; then
    "$src/scripts/cluster.sh" --name "$cluster_name" down >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # meson's timeout: clean up all the same
export IOFWD_RUNTIME_DIR=$work/rt IOFWD_LAUNCH_TIMEOUT=30
unset IOFWD_SHIM_PREFIXES IOFWD_SHIM_VERBOSE IOFWD_NODES IOFWD_RUN IOFWD_IOD
cd "$work"
# Every job is bounded, in Slurm and outside it.
job() { timeout --kill-after=5 150 srun --mpi=pmi2 --time=2 "$@"; }
logs() { cat "$IOFWD_RUNTIME_DIR"/*.log 2>/dev/null || true; }

nodes=1 ranks=2 place=(-n 2)
if [ "$scenario" = two-nodes ]; then
  # A subnet of its own: the cluster suite's default is 10.213.77.
  "$src/scripts/cluster.sh" --name "$cluster_name" --subnet 10.213.91 up 2
  "$src/scripts/slurm.sh" up "$slurm_dir" --cluster "$cluster_name"
  nodes=2 ranks=4 place=(-N 2 -n 4 --ntasks-per-node 2)
else
  "$src/scripts/slurm.sh" up "$slurm_dir"
fi
export SLURM_CONF=$slurm_dir/slurm.conf
timeout 10 sinfo -N

# Whether version $1 of slurmtest is complete on $nodes nodes, as the
# store's files say (own directory or pack).
# Read whole first: grep -q in a pipe would close it early, and pipefail
# would take the checker's broken pipe for an answer.
complete_on() {
  local listed
  listed=$(python3 "$src/tests/support/store_complete.py" "$work/store" slurmtest) ||
    fail "cannot read the store's complete versions"
  grep -qx "$1 $nodes" <<< "$listed"
}

run_checkpoint() {
  export IOFWD_JOB=slurmtest
  job "${place[@]}" "$checkpoint" --size 3M --versions 3 --store "$work/store" | tee "$work/first"
  grep -q "in 3 versions (v1..v3)" "$work/first" || fail "the first job did not write v1..v3"
  grep -q "nodes              $nodes (each with its own daemon)" "$work/first" ||
    fail "io_init_comm did not count $nodes nodes"
  for v in 1 2 3; do
    complete_on "$v" || fail "version $v is not complete on $nodes nodes"
  done
  timeout 120 "$verify" --store "$work/store" --job slurmtest --expect-versions 3 \
    --expect-ranks "$ranks"
  # The restart as a batch job, shaped like the README's sbatch script, and
  # through io_init without a communicator: the node count and the run's
  # name come from the step's environment (SLURM_STEP_NUM_NODES,
  # slurm-JOB.STEP).
  printf '#!/bin/bash\n#SBATCH --time=2\nsrun --mpi=pmi2 %q --plain-init --restart --size 3M --versions 2 --store %q\n' \
    "$checkpoint" "$work/store" > "$work/restart.sbatch"
  timeout --kill-after=5 150 sbatch --wait --quiet "${place[@]}" --output="$work/second" \
    "$work/restart.sbatch" || { cat "$work/second" >&2; fail "the batch job failed"; }
  cat "$work/second"
  grep -q "restart            from v3, complete job-wide" "$work/second" || fail "no restart from v3"
  grep -q "in 2 versions (v4..v5)" "$work/second" || fail "the restart did not write v4..v5"
  logs | grep -Eq "job slurmtest run slurm-[0-9]+\.[0-9]+: 2 ranks on this node, $nodes nodes? in the job$" ||
    fail "the plain io_init did not take the run and $nodes node(s) from Slurm"
  for v in 4 5; do
    complete_on "$v" || fail "version $v is not complete on $nodes nodes"
  done
  timeout 120 "$verify" --store "$work/store" --job slurmtest --expect-versions 5 \
    --expect-ranks "$ranks"
}

# What iofwd-srun hands srun (SRUN=echo): the shim's variables through
# --export, merged into an --export of the user's among srun's options,
# never into the program's arguments.
check_wrapper() {
  local lib vars got
  lib=$(dirname "$iofwd_srun")/libiofwd_shim.so
  vars="LD_PRELOAD=$lib,IOFWD_SHIM_PREFIXES=/p,IOFWD_SHIM_VERBOSE=0"
  got=$(SRUN=echo IOFWD_SHIM_VERBOSE=0 "$iofwd_srun" --prefix /p -n 2 "$app" --export=x)
  [ "$got" = "--export=ALL,$vars -n 2 $app --export=x" ] || fail "iofwd-srun made: $got"
  got=$(SRUN=echo IOFWD_SHIM_VERBOSE=0 "$iofwd_srun" --prefix /p --export FOO=1 -n 2 "$app")
  [ "$got" = "--export=FOO=1,$vars -n 2 $app" ] || fail "iofwd-srun made: $got"
  got=$(SRUN=echo IOFWD_SHIM_VERBOSE=0 "$iofwd_srun" --prefix /p --export=NONE "$app")
  [ "$got" = "--export=$vars $app" ] || fail "iofwd-srun made: $got"
  if SRUN=echo "$iofwd_srun" --prefix /p,q "$app" 2>/dev/null; then
    fail "iofwd-srun passed a prefix with a comma"
  fi
}

run_shim() {
  check_wrapper
  mkdir -p "$work/plain" "$work/shim" "$work/outside-plain" "$work/outside"
  # Without the shim, MPICH 4.0 alone can hang in MPI_Finalize over tcp (two
  # nodes; see finalize_progress.cpp): libiofwd preloaded carries the remedy,
  # nothing else, as in the cluster suite.
  local plain_env=()
  [ "$nodes" -eq 1 ] || plain_env=("--export=ALL,LD_PRELOAD=$libiofwd")
  job "${plain_env[@]}" "${place[@]}" "$app" "$work/plain" "$work/outside-plain" > "$work/plain-out"
  grep -q "0 failed checks" "$work/plain-out" || fail "the MPI-IO program failed without the shim"
  # The wrapper: LD_PRELOAD and the prefixes as srun passes them (--export).
  IOFWD_SHIM_VERBOSE=1 timeout --kill-after=5 150 "$iofwd_srun" --prefix "$work/shim" \
    --mpi=pmi2 --time=2 "${place[@]}" "$app" "$work/shim" "$work/outside" \
    > "$work/shim-out" 2> "$work/shim-err" ||
    { cat "$work/shim-out" "$work/shim-err" >&2; fail "the MPI-IO program failed under the shim"; }
  cat "$work/shim-err" >&2
  grep -q "0 failed checks" "$work/shim-out" || fail "the program's own checks failed under the shim"
  [ "$(grep -c 'attached to iod' "$work/shim-err")" -eq "$ranks" ] || fail "not every rank attached"
  # mpiio_app forwards 12 writes per rank (tests/shim/run_shim.sh says which).
  [ "$(grep -c ' 1 files, 12 writes' "$work/shim-err")" -eq "$ranks" ] ||
    fail "not 12 writes forwarded per rank"
  cmp "$work/plain/data.bin" "$work/shim/data.bin" || fail "data.bin differs with the shim"
  cmp "$work/outside-plain/other.bin" "$work/outside/other.bin" || fail "other.bin differs"
  # One daemon per node, each told the job's node count by the shim.
  [ "$(logs | grep -c "ranks on this node, $nodes nodes\? in the job (files through the MPI shim)")" \
    -eq "$nodes" ] || fail "not every node's daemon saw $nodes node(s) from the shim"
  if logs | grep -q "$work/outside"; then fail "a daemon touched a file outside the prefix"; fi
}

case "$scenario" in
  checkpoint) run_checkpoint ;;
  shim) run_shim ;;
  two-nodes) run_checkpoint; run_shim ;;
  *) fail "unknown scenario $scenario" ;;
esac
echo "PASS: $scenario"
