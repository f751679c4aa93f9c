#!/usr/bin/env bash
# A real, throwaway Slurm for tests: munged, slurmctld and slurmd (Debian's
# slurm-wlm and munge, scripts/setup.sh) with every file they use inside one
# directory. Needs root (slurmd runs jobs as their users).
#
#   scripts/slurm.sh up DIR [--cluster NAME]   start it; prints SLURM_CONF=DIR/slurm.conf
#   scripts/slurm.sh down DIR                  stop what `up` started in DIR, remove DIR
#   scripts/slurm.sh status DIR                the daemons and `sinfo`
#
# up: DIR must not exist, or be empty, or be a previous `up`'s (then, when
# all its daemons still run, nothing is done: idempotent). One node, this
# host, at 127.0.0.1; with --cluster NAME one node per node of the simulated
# cluster NAME (scripts/cluster.sh --name NAME up N, first), each slurmd
# inside its node's namespaces with NodeHostname/NodeAddr of that node and the
# controller on the cluster's bridge. Returns once every node is idle (at most
# 60 s); on any failure it takes down what it started and exits 1.
# Jobs: `SLURM_CONF=DIR/slurm.conf srun --mpi=pmi2 -n 2 PROG` (MpiDefault is
# pmi2 anyway; more tasks than CPUs need -O).
#
# down: cancels the jobs, stops the daemons by their pid files (only
# processes whose command line names DIR), then any slurmstepd left of this
# Slurm, and removes DIR (only a directory `up` made: it holds a marker).
# Idempotent; nothing outside DIR is created or left.
#
# Ports: the controller and slurmd listen on the first free pair from 16817
# (IOFWD_SLURM_PORT sets the first).
set -euo pipefail
self=$(realpath "$0")
here=$(dirname "$self")
die() { echo "slurm.sh: $*" >&2; exit 1; }
usage() { sed -n '2,25p' "$self" | sed 's/^# \{0,1\}//'; }
marker=.iofwd-slurm

[ $# -ge 1 ] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac
cmd=$1; shift
[ $# -ge 1 ] || die "$cmd needs a directory"
dir=$1; shift
case "$dir" in /*) ;; *) dir=$(pwd)/$dir ;; esac
dir=${dir%/}
[ "$dir" != "" ] && [ "$dir" != "/" ] || die "refusing directory '/'"
cluster=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cluster) [ $# -ge 2 ] || die "--cluster needs a name"; cluster=$2; shift 2 ;;
    *) die "unknown option '$1' (try --help)" ;;
  esac
done
conf=$dir/slurm.conf
export SLURM_CONF=$conf

need_root() { [ "$(id -u)" -eq 0 ] || die "needs root"; }
alive() {  # PID: runs, and is not a zombie
  [ -n "$1" ] && [ -d "/proc/$1" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null
}
ours() {  # PID: a live process whose command line names this directory
  alive "$1" && { tr '\0' ' ' < "/proc/$1/cmdline"; } 2>/dev/null | grep -qF "$dir/"
}
pid_files() {
  ls "$dir"/slurmd-*.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid 2>/dev/null || true
}
all_up() {
  [ -f "$dir/$marker" ] && [ -f "$conf" ] || return 1
  local f n=0
  for f in $(pid_files); do ours "$(cat "$f" 2>/dev/null)" || return 1; n=$((n + 1)); done
  # munged, slurmctld, and one slurmd per node line of the configuration
  [ "$n" -eq $((2 + $(grep -c '^NodeName=' "$conf"))) ]
}
stop_pid() {  # PID: TERM, then KILL after 10 s
  local pid=$1 i
  ours "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do alive "$pid" || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

cmd_down() {
  need_root
  [ -e "$dir" ] || { echo "slurm.sh: $dir: nothing to take down"; return 0; }
  [ -f "$dir/$marker" ] || die "$dir was not made by slurm.sh up (no $marker); not touching it"
  # Jobs first, while the controller still answers (bounded).
  if [ -f "$dir/slurmctld.pid" ] && ours "$(cat "$dir/slurmctld.pid")"; then
    timeout 10 scancel --quiet --full --signal=KILL --state=RUNNING --user=root 2>/dev/null || true
    timeout 10 scancel --quiet --user=root 2>/dev/null || true
    for _ in $(seq 1 50); do
      [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null || true)" ] && break
      sleep 0.2
    done
  fi
  local f
  for f in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$f" ] && stop_pid "$(cat "$f" 2>/dev/null)"
  done
  # Step daemons of this Slurm that outlived their slurmd (they carry its
  # SLURM_CONF in their environment), and their tasks.
  local pid
  for pid in $(pgrep -x slurmstepd || true); do
    alive "$pid" || continue
    if { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf"; then
      pkill -KILL -P "$pid" 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  # The cgroup mount `up` made in each node of a simulated cluster.
  if [ -f "$dir/cluster" ]; then
    local c n
    c=$(cat "$dir/cluster")
    for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$c[0-9]+$" || true); do
      "$here/cluster.sh" --name "$c" exec "$n" sh -c \
        'if mount | grep -q "^iofwd-slurm-cgroup on /sys/fs/cgroup "; then umount -R /sys/fs/cgroup; fi' \
        2>/dev/null || true
    done
  fi
  rm -rf "$dir"
  echo "slurm.sh: $dir: stopped and removed"
}

free_port() {  # first free TCP port from $1 on, with $1+1 free too
  local p=$1
  while [ "$p" -lt 65000 ]; do
    if [ -z "$(ss -Htan "sport = :$p or sport = :$((p + 1))" 2>/dev/null)" ]; then echo "$p"; return; fi
    p=$((p + 2))
  done
  die "no free ports"
}

write_conf() {
  local host ctld_port=$1 slurmd_port=$2 ctld_addr nodes=()
  host=$(hostname -s)
  if [ -n "$cluster" ]; then
    # The addresses as they are: the bridge's, and each node's eth0.
    local n addr
    ctld_addr=$(ip -4 -o addr show dev "$cluster-br" 2>/dev/null | awk '{print $4}' | cut -d/ -f1 ||
      true)
    [ -n "$ctld_addr" ] || die "cluster $cluster is not up (scripts/cluster.sh --name $cluster up N)"
    for n in $(ip netns list | awk '{print $1}' | grep -E "^$cluster[0-9]+$" | sort -V); do
      addr=$(ip -n "$n" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}' | cut -d/ -f1 || true)
      [ -n "$addr" ] || die "node $n of cluster $cluster has no address"
      nodes+=("NodeName=$n NodeHostname=$n NodeAddr=$addr CPUs=$(nproc) State=UNKNOWN")
    done
    [ ${#nodes[@]} -gt 0 ] || die "cluster $cluster has no node up"
  else
    ctld_addr=127.0.0.1
    nodes=("NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN")
  fi
  {
    echo "# Written by scripts/slurm.sh up; everything lives in $dir"
    echo "ClusterName=iofwdtest"
    echo "SlurmctldHost=$host($ctld_addr)"
    echo "SlurmctldPort=$ctld_port"
    echo "SlurmdPort=$slurmd_port"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$dir/munge/munge.socket.2"
    echo "CredType=cred/munge"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=pmi2"
    echo "ReturnToService=2"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "MailProg=/bin/true"
    echo "KillWait=5"
    printf '%s\n' "${nodes[@]}"
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8"
  } > "$conf"
}

cmd_up() {
  need_root
  for p in munged mungekey slurmctld slurmd sinfo; do
    command -v "$p" >/dev/null || die "$p is missing: run scripts/setup.sh"
  done
  if [ -e "$dir" ]; then
    if all_up; then
      echo "slurm.sh: $dir is up already"
      echo "SLURM_CONF=$conf"
      return 0
    fi
    if [ -f "$dir/$marker" ]; then
      cmd_down >/dev/null
    elif [ -n "$(ls -A "$dir")" ]; then
      die "$dir exists and is not empty: give up a new directory"
    fi
  fi
  # munged wants every directory above its socket searchable by all.
  local up=$dir
  while up=$(dirname "$up"); [ "$up" != / ]; do
    if [ -d "$up" ] && [ "$(( $(stat -c %a "$up") % 10 & 1 ))" -eq 0 ]; then
      die "munged needs $up searchable by all (chmod o+x $up), or another DIR"
    fi
  done
  mkdir -p "$dir"
  chmod 755 "$dir"
  touch "$dir/$marker"
  # From here on a failure takes down what was started.
  trap 'rc=$?; if [ $rc -ne 0 ]; then
          echo "slurm.sh: up failed; taking down what it started" >&2; cmd_down >&2 || true
        fi; exit $rc' EXIT
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/munge" "$dir/key"
  chmod 755 "$dir/munge"  # munged wants its socket's directory searchable by all
  chmod 700 "$dir/key"
  mungekey --create --keyfile="$dir/key/munge.key"
  munged --key-file="$dir/key/munge.key" --socket="$dir/munge/munge.socket.2" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed"
  timeout 10 munge -S "$dir/munge/munge.socket.2" -n | timeout 10 unmunge -S "$dir/munge/munge.socket.2" \
    >/dev/null || { echo "slurm.sh: munge does not work" >&2; false; }
  local port
  port=$(free_port "${IOFWD_SLURM_PORT:-16817}")
  write_conf "$port" $((port + 1))
  slurmctld -f "$conf"
  local n
  if [ -n "$cluster" ]; then
    # `ip netns exec` gave each node a sysfs of its own, without cgroups, and
    # slurmd 22.05 will not start where nothing is mounted on /sys/fs/cgroup
    # (even with proctrack/linuxproc and task/none): an empty tmpfs there, in
    # the node's own mount namespace, and the v1 plugin, which asks for no
    # controller with this configuration. `down` unmounts it.
    printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' > "$dir/cgroup.conf"
    for n in $(sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$conf"); do
      mkdir -p "$dir/spool/$n"
      "$here/cluster.sh" --name "$cluster" exec "$n" sh -c \
        'mountpoint -q /sys/fs/cgroup || mount -t tmpfs -o mode=755,size=64k iofwd-slurm-cgroup /sys/fs/cgroup
         SLURM_CONF=$1 exec slurmd -f "$1" -N "$2"' sh "$conf" "$n"
    done
    echo "$cluster" > "$dir/cluster"
  else
    slurmd -f "$conf"
  fi
  local nodes idle
  nodes=$(grep -c '^NodeName=' "$conf")
  for _ in $(seq 1 300); do
    idle=$(timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l || true)
    [ "$idle" -eq "$nodes" ] && break
    sleep 0.2
  done
  if [ "$idle" -ne "$nodes" ]; then
    echo "slurm.sh: $idle of $nodes nodes idle after 60 s:" >&2
    timeout 5 sinfo -N >&2 || true
    tail -n 5 "$dir"/log/*.log >&2 || true
    false
  fi
  all_up || { echo "slurm.sh: a daemon did not stay up" >&2; false; }
  trap - EXIT
  echo "slurm.sh: $dir up: $nodes node(s) idle, controller port $port"
  echo "SLURM_CONF=$conf"
}

cmd_status() {
  [ -f "$dir/$marker" ] || { echo "slurm.sh: $dir: not up"; return 0; }
  local f
  for f in $(pid_files); do
    echo "$(basename "$f" .pid): pid $(cat "$f") $(ours "$(cat "$f")" && echo running || echo gone)"
  done
  timeout 5 sinfo -N || true
}

case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) die "unknown command '$cmd' (try --help)" ;;
esac
