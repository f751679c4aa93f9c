#!/usr/bin/env bash
# Starts a throwaway single-node Ceph cluster for tests: one mon, one mgr, one
# OSD (bluestore on a sparse file), cephx on, bound to one address only
# (127.0.0.1, or ADDR: for example a simulated cluster's bridge, so that its
# nodes reach it), everything (config, keys, data, logs, pid files, sockets)
# inside DIR. Prints the path of its ceph.conf once a `rados put` succeeds.
#   scripts/ceph-start.sh DIR [POOL [ADDR]]   stop it with scripts/ceph-stop.sh DIR
# Needs: scripts/setup.sh --ceph
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
dir=$(realpath -m "$1")
pool=${2:-iofwd}
addr=${3:-127.0.0.1}
if [ -e "$dir/ceph.conf" ]; then
  echo "ceph-start.sh: $dir already holds a cluster; stop it first (scripts/ceph-stop.sh $dir)" >&2
  exit 2
fi
for cmd in ceph-mon ceph-mgr ceph-osd ceph ceph-authtool monmaptool rados; do
  command -v "$cmd" >/dev/null || { echo "ceph-start.sh: $cmd missing: run scripts/setup.sh --ceph" >&2; exit 2; }
done
mkdir -p "$dir"/{mon,mgr,osd,run,log}
port=$(python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$addr") ||
  { echo "ceph-start.sh: $addr is not an address of this machine" >&2; exit 2; }
fsid=$(cat /proc/sys/kernel/random/uuid)
conf=$dir/ceph.conf
cat > "$conf" <<CONF
[global]
fsid = $fsid
mon_host = [v2:$addr:$port]
public_addr = $addr
cluster_addr = $addr
ms_bind_msgr1 = false
ms_bind_ipv6 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_crush_chooseleaf_type = 0
osd_objectstore = bluestore
bluestore_block_create = true
bluestore_block_size = 21474836480
osd_memory_target = 1073741824
keyring = $dir/keyring
run_dir = $dir/run
pid_file = $dir/run/\$name.pid
admin_socket = $dir/run/\$name.asok
log_file = $dir/log/\$name.log
[mon.a]
mon_data = $dir/mon
[mgr.x]
mgr_data = $dir/mgr
keyring = $dir/mgr/keyring
[osd.0]
osd_data = $dir/osd
keyring = $dir/osd/keyring
CONF
ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$dir/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
  --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
monmaptool --create --fsid "$fsid" --addv a "[v2:$addr:$port]" "$dir/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring"
ceph-mon -c "$conf" -i a
ceph -c "$conf" --connect-timeout 30 auth get-or-create mgr.x mon 'allow profile mgr' \
  osd 'allow *' mds 'allow *' > "$dir/mgr/keyring"
ceph-mgr -c "$conf" -i x
uuid=$(cat /proc/sys/kernel/random/uuid)
key=$(ceph-authtool --gen-print-key)
id=$(echo "{\"cephx_secret\": \"$key\"}" | ceph -c "$conf" osd new "$uuid" -i -)
ceph-authtool --create-keyring "$dir/osd/keyring" --name "osd.$id" --add-key "$key" >/dev/null
ceph-osd -c "$conf" -i "$id" --mkfs --osd-uuid "$uuid" >/dev/null 2>&1
ceph-osd -c "$conf" -i "$id"
ceph -c "$conf" osd pool create "$pool" 8 >/dev/null 2>&1
# Ready means a real write goes through, not that the PG statistics say so.
echo ready > "$dir/probe"
for _ in $(seq 1 120); do
  if timeout 10 rados -c "$conf" -p "$pool" put iofwd-probe "$dir/probe" 2>/dev/null; then
    rados -c "$conf" -p "$pool" rm iofwd-probe
    echo "$conf"
    exit 0
  fi
  sleep 0.5
done
echo "ceph-start.sh: the cluster in $dir did not accept a write within 60 s; logs in $dir/log" >&2
exit 1
