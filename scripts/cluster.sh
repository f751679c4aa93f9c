#!/usr/bin/env bash
# A simulated cluster on one machine: N "nodes", each a network namespace
# with its own address on a bridge, its own hostname (UTS namespace), its own
# SysV IPC and its own /dev/shm (IPC and mount namespaces), so that nothing of
# one node's shared memory is visible on another. /tmp stays shared, as a
# parallel file system would be. hydra's mpiexec launches onto the nodes as if
# over ssh, with this script as its launcher. Needs root (ip netns, unshare).
#
#   scripts/cluster.sh up N            create nodes <name>1..<name>N (idempotent)
#   scripts/cluster.sh down            remove everything `up` created
#   scripts/cluster.sh status          what exists now
#   scripts/cluster.sh hosts           the node names, comma-separated
#   scripts/cluster.sh exec NODE CMD.. run a command on a node
#   scripts/cluster.sh kill NODE       SIGKILL every process of a node (a node
#                                      failure); `up` brings it back
#   scripts/cluster.sh mpiexec ARGS..  hydra's mpiexec onto the nodes: adds
#                                      -launcher ssh -launcher-exec THIS
#                                      -iface BRIDGE, and -hosts NODES unless
#                                      ARGS place the ranks (-host, -hosts, -f)
#   scripts/cluster.sh -x NODE CMD..   what hydra calls (as it would call ssh)
#
# Options before the command, or variables:
#   --name NAME   IOFWD_CLUSTER_NAME  node names NAME1.., bridge NAME-br (iofc)
#   --subnet A.B.C IOFWD_CLUSTER_SUBNET  nodes get A.B.C.1.., the bridge A.B.C.254
#                                      (10.213.77); refused if it is in use
# Launch delays, for tests of nodes that start late: IOFWD_CLUSTER_DELAY="NODE:SECONDS ..."
# in mpiexec's environment makes this launcher wait that long before starting
# the node's proxy.
#
# Only addresses of the namespaces and bridge created here are used. Each node
# has a holder process (in its namespaces, sleeping) so that all the node's
# processes share one /dev/shm, IPC and hostname across launches; its pid is
# in $IOFWD_CLUSTER_STATE/<node>.pid (default /run/iofwd-cluster/<name>).
set -euo pipefail

self=$(realpath "$0")
name=${IOFWD_CLUSTER_NAME:-iofc}
subnet=${IOFWD_CLUSTER_SUBNET:-10.213.77}

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '2,32p' "$self" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --name) [ $# -ge 2 ] || die "--name needs a value"; name=$2; shift 2 ;;
    --subnet) [ $# -ge 2 ] || die "--subnet needs a value"; subnet=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { usage >&2; exit 2; }
[[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "cluster name '$name': 1-8 lower-case letters and digits, a letter first"
[[ $subnet =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "subnet '$subnet' is not A.B.C"

state=${IOFWD_CLUSTER_STATE:-/run/iofwd-cluster/$name}
bridge=$name-br
hosts_tag="# iofwd-cluster $name"

node_ip() { echo "$subnet.${1#"$name"}"; }
is_node() { [[ $1 =~ ^$name[0-9]+$ ]]; }
nodes_up() {
  local n
  for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name[0-9]+$" | sort -V); do
    echo "$n"
  done
}
holder_pid() {
  local f=$state/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  # The holder is ours only while it still runs in the node's namespace.
  [ -d "/proc/$pid" ] && ip netns identify "$pid" 2>/dev/null | grep -qx "$1" || return 1
  echo "$pid"
}

need_root() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces); run as root"
  command -v ip >/dev/null || die "ip (iproute2) is missing: run scripts/setup.sh"
  command -v unshare >/dev/null && command -v nsenter >/dev/null || die "unshare/nsenter (util-linux) missing"
}

start_holder() {
  local node=$1
  mkdir -p "$state"
  # New UTS, IPC and mount namespaces inside the node's network namespace: its
  # own hostname, SysV IPC and /dev/shm, kept alive by a sleeping holder.
  ip netns exec "$node" unshare --uts --ipc --mount --propagation private --fork \
    sh -c "hostname '$node' && mount -t tmpfs -o mode=1777 iofwd-shm /dev/shm && exec sleep infinity" \
    </dev/null >/dev/null 2>&1 &
  local launcher=$! pid="" i
  for i in $(seq 1 100); do
    # unshare --fork: the holder is the child of unshare (which is $launcher).
    pid=$(pgrep -P "$launcher" -x sleep || true)
    if [ -n "$pid" ] && [ "$(nsenter -t "$pid" --uts hostname 2>/dev/null)" = "$node" ]; then
      echo "$pid" > "$state/$node.pid"
      return 0
    fi
    sleep 0.05
  done
  die "node $node: its namespaces did not come up (unshare failed?)"
}

cmd_up() {
  local n=${1:-}
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "up N: N from 1 to 64 nodes"
  need_root
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    if ip -4 route show | grep -q "^$subnet\."; then
      die "subnet $subnet.0/24 is already routed here; choose another with --subnet"
    fi
    ip link add "$bridge" type bridge || die "cannot create bridge $bridge (no network namespaces here?)"
    ip addr add "$subnet.254/24" dev "$bridge"
    ip link set "$bridge" up
  fi
  local i node veth
  for i in $(seq 1 "$n"); do
    node=$name$i
    veth=$name-v$i
    if ! ip netns list | awk '{print $1}' | grep -qx "$node"; then
      ip netns add "$node" || die "cannot create network namespace $node"
    fi
    if ! ip link show "$veth" >/dev/null 2>&1; then
      ip -n "$node" link del eth0 2>/dev/null || true
      ip link add "$veth" type veth peer name eth0 netns "$node"
      ip link set "$veth" master "$bridge" up
      ip -n "$node" addr add "$(node_ip "$node")/24" dev eth0
      ip -n "$node" link set eth0 up
      ip -n "$node" link set lo up
    fi
    holder_pid "$node" >/dev/null || start_holder "$node"
    if ! grep -q "[[:space:]]$node[[:space:]]*$hosts_tag\$" /etc/hosts; then
      sed -i "/[[:space:]]$node[[:space:]]*$hosts_tag\$/d" /etc/hosts
      echo "$(node_ip "$node") $node $hosts_tag" >> /etc/hosts
    fi
  done
  # Every node reaches the bridge (a refused TCP connection is an answer).
  for i in $(seq 1 "$n"); do
    local answer
    answer=$(timeout 3 ip netns exec "$name$i" bash -c "exec 3<>/dev/tcp/$subnet.254/1" 2>&1 || true)
    [[ $answer == *refused* ]] || die "node $name$i cannot reach the bridge at $subnet.254"
  done
  echo "cluster $name: $(cmd_hosts) on bridge $bridge ($subnet.0/24)"
}

cmd_down() {
  [ "$(id -u)" -eq 0 ] || die "needs root"
  local node pid
  for node in $(nodes_up); do
    # Every process of the node goes with it.
    for pid in $(ip netns pids "$node" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  for node in $(nodes_up); do
    ip link del "$name-v${node#"$name"}" 2>/dev/null || true
    ip netns del "$node" 2>/dev/null || true
  done
  # veths whose namespace is already gone
  for veth in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^$name-v[0-9]+$" || true); do
    ip link del "$veth" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  sed -i "/$hosts_tag\$/d" /etc/hosts
  rm -rf "$state"
  echo "cluster $name: removed"
}

cmd_hosts() {
  nodes_up | paste -sd, -
}

cmd_status() {
  local node any=0
  ip link show "$bridge" >/dev/null 2>&1 && echo "bridge $bridge: $subnet.254/24" || echo "bridge $bridge: absent"
  for node in $(nodes_up); do
    any=1
    local pid
    pid=$(holder_pid "$node" || echo "")
    echo "node $node: $(node_ip "$node"), $( [ -n "$pid" ] && echo "up (holder $pid), $(ip netns pids "$node" | wc -l) processes" || echo "down (no holder: run up again)")"
  done
  [ $any = 1 ] || echo "no nodes"
}

# Runs CMD (a shell command line) on NODE, in all of its namespaces.
run_on() {
  local node=$1; shift
  is_node "$node" || die "'$node' is not a node of cluster $name"
  local pid
  pid=$(holder_pid "$node") || die "node $node is down (no holder); run: $self up N"
  exec nsenter -t "$pid" --net --uts --ipc --mount -- "$@"
}

cmd_launch() {
  # hydra: THIS -x HOST <words of the proxy's command line>, as for ssh,
  # which joins them and hands them to the remote shell.
  local node=$1; shift
  local entry secs
  for entry in ${IOFWD_CLUSTER_DELAY:-}; do
    if [ "${entry%%:*}" = "$node" ]; then
      secs=${entry#*:}
      [[ $secs =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "IOFWD_CLUSTER_DELAY entry '$entry' is not NODE:SECONDS"
      sleep "$secs"
    fi
  done
  run_on "$node" /bin/sh -c "$*"
}

case "$1" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  hosts) cmd_hosts ;;
  exec) shift; [ $# -ge 2 ] || die "exec NODE CMD..."; node=$1; shift; run_on "$node" "$@" ;;
  kill)
    shift; [ $# -eq 1 ] || die "kill NODE"
    is_node "$1" || die "'$1' is not a node of cluster $name"
    for pid in $(ip netns pids "$1"); do kill -9 "$pid" 2>/dev/null || true; done
    rm -f "$state/$1.pid"
    echo "node $1: every process killed" ;;
  mpiexec)
    shift
    hosts=$(cmd_hosts)
    [ -n "$hosts" ] || die "no nodes: run $self up N first"
    # The launcher (this script, run by mpiexec) finds the same cluster.
    export IOFWD_CLUSTER_NAME=$name IOFWD_CLUSTER_SUBNET=$subnet IOFWD_CLUSTER_STATE=$state
    # Every node, unless the command places ranks itself (-host per block
    # of an MPMD line, -hosts, a host file).
    place=(-hosts "$hosts")
    for a in "$@"; do
      case "$a" in -host|-hosts|-f|-hostfile|-machinefile) place=() ;; esac
    done
    exec mpiexec -launcher ssh -launcher-exec "$self" -iface "$bridge" "${place[@]}" "$@" ;;
  -x) shift; [ $# -ge 2 ] || die "-x NODE CMD..."; cmd_launch "$@" ;;
  *) die "unknown command '$1' (try --help)" ;;
esac
