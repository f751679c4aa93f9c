#!/usr/bin/env bash
# The rados store against a real throwaway Ceph cluster started by the
# project's own script: the checkpoint example under mpiexec with objects
# larger than a RADOS piece, a restart, the stored objects checked with the
# rados command-line tool, and the errors io_init gives for a missing pool
# and a wrong key.
# The iofwd command lists, verifies, restores and removes through the same store.
# Eight simulated nodes commit versions at once through the pool's tallies.
#   run_ceph.sh MPIEXEC CHECKPOINT VERIFY RANK_CLIENT SOURCE_ROOT IOFWD COMMIT_SIM
set -euo pipefail
mpiexec=$1 checkpoint=$2 verify=$3 rank_client=$4 src=$5 iofwd=$6 commit_sim=$7
work=$(mktemp -d /tmp/iofwd-ceph-XXXXXX)
# No daemon of this test outlives it, whatever the test did to its ranks.
cleanup() {
  pkill -9 -f -- "--runtime-dir $work/rt" 2>/dev/null || true
  bash "$src/scripts/ceph-stop.sh" "$work/cluster"; rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

conf=$(timeout 120 bash "$src/scripts/ceph-start.sh" "$work/cluster" iofwd 2>"$work/start.err") \
  || { cat "$work/start.err" >&2; fail "the cluster did not start"; }
export IOFWD_CEPH_CONF=$conf IOFWD_RUNTIME_DIR=$work/rt IOFWD_JOB=cephjob IOFWD_LAUNCH_TIMEOUT=60

# 1. The example: 2 ranks x 2 versions of 130 MiB + 1 byte (three pieces each,
#    more than one RADOS object can hold), then a restart that reads the
#    newest complete version back and writes one more.
timeout 300 "$mpiexec" -n 2 "$checkpoint" --size $((130 * 1048576 + 1)) --versions 2 \
  --store rados:iofwd | tee "$work/first"
grep -q "store              rados pool iofwd/cephjob" "$work/first" || fail "not stored in rados"
timeout 300 "$mpiexec" -n 2 "$checkpoint" --size $((130 * 1048576 + 1)) --versions 1 --restart \
  --store rados:iofwd | tee "$work/second"
grep -q "restart            from v2, complete job-wide" "$work/second" || fail "no restart from v2"
timeout 300 "$verify" --store rados:iofwd --job cephjob --expect-versions 3 --expect-ranks 2

# 2. What the rados tool sees: heads, pieces, manifests, COMPLETE records.
rados -c "$conf" -p iofwd ls | sort > "$work/objects"
for v in 1 2 3; do
  grep -qx "cephjob/v0000000$v/COMPLETE" "$work/objects" || fail "no COMPLETE for v$v"
done
node=$(hostname -s)
grep -qx "cephjob/v00000003/$node.r0001" "$work/objects" || fail "no head for rank 1 of v3"
pieces=$(grep -c "^cephjob/v00000003/$node.r0001@" "$work/objects")
[ "$pieces" -eq 3 ] || fail "expected 3 pieces for a 130 MiB object, found $pieces"
rados -c "$conf" -p iofwd get "cephjob/v00000003/$node.r0001" "$work/head"
grep -q "^size $((130 * 1048576 + 1))$" "$work/head" || fail "head does not give the size"
piece=$(grep "^cephjob/v00000003/COMPLETE@" "$work/objects")
rados -c "$conf" -p iofwd get "$piece" "$work/complete"
grep -q "^nodes 1$" "$work/complete" || fail "COMPLETE record malformed"
! grep -q "\.tmp" "$work/objects" || fail "temporary objects left behind"

# 3. Errors at io_init, in words and with the cause's errno: a pool that does
#    not exist (ENOENT), a wrong key (EACCES).
out=$(IOFWD_STORE=rados:nopool IOFWD_SESSION=bad1 timeout 60 "$rank_client" --rank 0 --ranks 1 \
  --size 4096 || true)
echo "$out"
echo "$out" | grep -q "^init 2$" || fail "missing pool: expected io_init to fail with ENOENT"
echo "$out" | grep -q "Ceph pool 'nopool' cannot be opened" || fail "missing pool not named"
printf '[client.admin]\n\tkey = AQBmZXJvAAAAABAAzBJG4RL6hCE3i/9ebsO6Dg==\n' > "$work/bad.keyring"
out=$(IOFWD_STORE=rados:iofwd IOFWD_SESSION=bad2 IOFWD_CEPH_KEYRING=$work/bad.keyring \
  timeout 90 "$rank_client" --rank 0 --ranks 1 --size 4096 || true)
echo "$out"
echo "$out" | grep -q "^init 13$" || fail "wrong key: expected io_init to fail with EACCES"
echo "$out" | grep -q "cannot connect to the Ceph cluster" || fail "wrong key not explained"
# 3b. An unreachable cluster (a monitor address nobody listens on), quickly
#     with a 3 s timeout.
sed "s/^mon_host = .*/mon_host = [v2:127.0.0.1:9]/" "$conf" > "$work/dead.conf"
out=$(IOFWD_STORE=rados:iofwd IOFWD_SESSION=bad3 IOFWD_CEPH_CONF=$work/dead.conf \
  IOFWD_CEPH_OP_TIMEOUT=3 timeout 90 "$rank_client" --rank 0 --ranks 1 --size 4096 || true)
echo "$out"
echo "$out" | grep -q "^init 110$" || fail "unreachable cluster: expected io_init to fail with ETIMEDOUT"
echo "$out" | grep -q "cannot connect to the Ceph cluster" || fail "unreachable cluster not explained"

# 3c. Retention as with the directory store: keep the newest 2 of 4 versions.
IOFWD_STORE=rados:iofwd IOFWD_SESSION=keep IOFWD_JOB=keepjob IOFWD_KEEP=2 timeout 120 \
  "$rank_client" --rank 0 --ranks 1 --size 3000000 --versions 4 --pause-ms 100 >/dev/null
rados -c "$conf" -p iofwd ls | grep "^keepjob/" | grep -v "@" | sort > "$work/keep"
cat "$work/keep"
grep -q "^keepjob/v00000001/" "$work/keep" && fail "retention left version 1"
grep -q "^keepjob/v00000002/" "$work/keep" && fail "retention left version 2"
grep -qx "keepjob/v00000003/COMPLETE" "$work/keep" || fail "retention removed version 3"
grep -qx "keepjob/v00000004/COMPLETE" "$work/keep" || fail "retention removed version 4"
rados -c "$conf" -p iofwd ls | grep -q "^keepjob/v0000000[12]/" && fail "pieces of removed versions left"

# 3d. The iofwd command on the rados store: list, verify, restore and cat what
#     the example wrote; rm through the job's claims (found by a pool scan);
#     gc, which scans the pool for pieces no head points to and finds none.
store=(--store rados:iofwd --ceph-conf "$conf")
timeout 120 "$iofwd" ls "${store[@]}" cephjob --json > "$work/ls.json" || fail "iofwd ls"
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
got = [(v["version"], v["state"], v["nodes"], v["ranks"], v["bytes"]) for v in d["versions"]]
want = [(v, "complete", 1, 2, 2 * (130 * 1048576 + 1)) for v in (1, 2, 3)]
assert got == want and d["leftovers"] == [] and d["live_nodes"] == [], d' "$work/ls.json" \
  || fail "iofwd ls: $(cat "$work/ls.json")"
timeout 300 "$iofwd" verify "${store[@]}" cephjob > "$work/verify.out" \
  || fail "iofwd verify: $(cat "$work/verify.out")"
grep -q "^job cephjob: 3 of 3 complete versions intact, 0 damaged objects or records; 6 objects" \
  "$work/verify.out" || fail "iofwd verify: $(cat "$work/verify.out")"
timeout 300 "$iofwd" restore "${store[@]}" cephjob 3 "$work/restored" > /dev/null \
  || fail "iofwd restore"
timeout 300 "$iofwd" cat "${store[@]}" cephjob 3 1 | cmp - "$work/restored/$node.r0001" \
  || fail "iofwd cat and restore differ"
timeout 120 "$iofwd" rm "${store[@]}" keepjob 3 | grep -qx "removed version 3 of job keepjob" \
  || fail "iofwd rm"
rados -c "$conf" -p iofwd ls | grep -q "^keepjob/v00000003/" && fail "iofwd rm left objects of v3"
out=$(timeout 120 "$iofwd" gc "${store[@]}") || fail "iofwd gc: $out"
echo "$out" | grep -qx "gc: 0 versions and 0 leftovers removed" || fail "iofwd gc: $out"

# 4. A second concurrent job under the same name is refused in words.
# (No `timeout` in front: $! must be the rank itself, which the kill below ends.)
IOFWD_STORE=rados:iofwd IOFWD_SESSION=claim1 IOFWD_JOB=claimjob "$rank_client" \
  --rank 0 --ranks 1 --size 4096 --versions 1 --stall-at 0 > "$work/claim1.out" 2>&1 &
holder=$!
for _ in $(seq 1 100); do grep -q "^stalled" "$work/claim1.out" 2>/dev/null && break; sleep 0.1; done
grep -q "^stalled" "$work/claim1.out" || fail "the first job did not start"
out=$(IOFWD_STORE=rados:iofwd IOFWD_SESSION=claim2 IOFWD_JOB=claimjob timeout 60 "$rank_client" \
  --rank 0 --ranks 1 --size 4096 || true)
kill -9 "$holder" 2>/dev/null || true
echo "$out"
echo "$out" | grep -q "^init 98$" || fail "second job: expected EADDRINUSE at io_init"
echo "$out" | grep -q "is being written by another daemon" || fail "second job: refusal not explained"

# 4b. Eight nodes of one job (simulated: a process and a daemon each, one
#     rank per node) commit 2 versions at once: each version's tally holds
#     one 256-byte record per node, COMPLETE lists the 8 nodes, every byte
#     verifies, and removing a version takes its tally along.
pids=()
for i in 1 2 3 4 5 6 7 8; do
  IOFWD_STORE=rados:iofwd IOFWD_JOB=simjob IOFWD_RUN=sim-1 IOFWD_NODES=8 IOFWD_NODE=sim$i \
    IOFWD_STAGING_SIZE=1M IOFWD_CHUNK_SIZE=256K IOFWD_PULL_THREADS=0 IOFWD_FINALIZE_TIMEOUT=120 \
    timeout 200 "$commit_sim" 2 4096 2> "$work/sim$i.err" &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { cat "$work/sim$((i + 1)).err" >&2; fail "simulated node $((i + 1)) failed"; }
done
for v in 1 2; do
  size=$(rados -c "$conf" -p iofwd stat ".arrivals/simjob/v0000000$v/ARRIVED" | sed 's/.*size //')
  [ "$size" = 2048 ] || fail "version $v's tally holds $size bytes, not 8 records of 256"
  rados -c "$conf" -p iofwd get "simjob/v0000000$v/COMPLETE" "$work/simhead"
  # The piece the head names: two daemons that both saw the tally full
  # (an arrival retried counts twice) each write COMPLETE, and the piece of
  # the one replaced may stay behind as a leftover until gc.
  id=$(sed -n 's/^id //p' "$work/simhead")
  [ -n "$id" ] || fail "version $v's COMPLETE head names no write: $(cat "$work/simhead")"
  rados -c "$conf" -p iofwd get "simjob/v0000000$v/COMPLETE@$id.0" "$work/simcomplete" ||
    fail "version $v's COMPLETE head names piece $id.0, which is not there"
  grep -q "^nodes 8$" "$work/simcomplete" || fail "version $v's COMPLETE does not list 8 nodes"
  [ "$(grep -c '^node sim[1-8] ranks 1 manifest-crc32c ' "$work/simcomplete")" = 8 ] ||
    fail "version $v's COMPLETE does not give each node's manifest"
done
timeout 120 "$iofwd" verify --store rados:iofwd simjob | tee "$work/simverify"
grep -q "2 of 2 complete versions intact" "$work/simverify" || fail "the 8 nodes' versions do not verify"
timeout 120 "$iofwd" rm --store rados:iofwd simjob 1
! rados -c "$conf" -p iofwd stat .arrivals/simjob/v00000001/ARRIVED 2>/dev/null ||
  fail "version 1's tally outlived its version"
echo "8 simulated nodes committed 2 versions through the tallies"

# 5. The OSD dies while the daemon holds a version: bounded retries, then the
#    error reaches io_finalize; nothing is reported durable. (3 s op timeout.)
out_file=$work/osd.out
IOFWD_STORE=rados:iofwd IOFWD_SESSION=osd IOFWD_JOB=osdjob IOFWD_CEPH_OP_TIMEOUT=3 \
  timeout 240 "$rank_client" --rank 0 --ranks 1 --size 1048576 --versions 1 --pause-ms 3000 \
  > "$out_file" 2>&1 &
client=$!
for _ in $(seq 1 100); do grep -q "^init 0$" "$out_file" 2>/dev/null && break; sleep 0.1; done
grep -q "^init 0$" "$out_file" || fail "the client did not attach"
kill -9 "$(cat "$work/cluster/run/osd.0.pid")"
start=$(date +%s)
wait "$client" && fail "io_finalize claimed durability with the OSD dead"
took=$(( $(date +%s) - start ))
cat "$out_file"
grep -q "^write 0 0 1 " "$out_file" || fail "io_write should succeed (the daemon holds the bytes)"
grep -Eq "^finalize (110|5) " "$out_file" || fail "io_finalize should fail with ETIMEDOUT or EIO"
grep -q "version 1 lost" "$work/rt/osd.log" || fail "the daemon log should say version 1 was lost"
[ "$took" -lt 180 ] || fail "the failure took $took s to surface (bounded retries expected)"
echo "OSD killed: io_finalize failed after $took s, as it should"
echo "ceph tests passed"
