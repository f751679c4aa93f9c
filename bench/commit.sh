#!/usr/bin/env bash
# What the job-wide commit costs in store operations, against the number of
# nodes: a simulated job of N nodes on this machine, each node one process
# (bench/commit_sim) with its own daemon, its own node name and tiny staging,
# all writing into one store as the nodes of a cluster write into a parallel
# file system or a Ceph pool.
#   bench/commit.sh [--nodes 8,16,32,64,128] [--stores dir,rados] [--csv FILE]
#
# Every daemon counts what it asks of the store (store/counting.hpp) and
# writes the counts of the job into its summary (<job>/reports/<run>/). For
# each N the job runs twice, with 1 and with 5 versions of 4 KiB per node;
# the difference over 4 is what one version costs, the first run's setup
# (claim, run record) taken out. Printed per version: all the nodes' store
# operations together ("job"), the most one node did ("max node"), the
# names listings returned across the job ("listed") and the arrivals reads
# of tallies returned ("tallied"). The rados store needs scripts/setup.sh
# --ceph; a throwaway cluster is started for it. The daemons take the
# environment: on the directory store they pack (IOFWD_PACK_VERSIONS, 64 by
# default since 2026-11-29); IOFWD_PACK_VERSIONS=0 measures a directory per
# version, as README's first table.
# Counts, not times: this machine's noise does not touch them.
set -euo pipefail
cd "$(dirname "$0")/.."
nodes_list=8,16,32,64,128
stores=dir
csv=
while (($#)); do
  case $1 in
    --nodes) nodes_list=${2:?--nodes wants a list like 8,16,128}; shift 2 ;;
    --stores) stores=${2:?--stores wants dir, rados or dir,rados}; shift 2 ;;
    --csv) csv=${2:?--csv wants a file}; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "bench/commit.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh $([[ $stores == *rados* ]] && echo --ceph) > /dev/null
bash scripts/build.sh > /dev/null
exe=$PWD/build/bench/commit_sim
work=$(mktemp -d /tmp/iofwd-commit-XXXXXX)
cleanup() {
  pkill -f "$work" 2>/dev/null || true
  [ -e "$work/ceph/ceph.conf" ] && bash scripts/ceph-stop.sh "$work/ceph" > /dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
if [[ $stores == *rados* ]]; then
  export IOFWD_CEPH_CONF
  IOFWD_CEPH_CONF=$(bash scripts/ceph-start.sh "$work/ceph" iofwd 2>/dev/null)
fi

# One simulated job: N processes at once, each its own node; waits for all
# (each at most 300 s). Leaves the summaries under $store.
run_job() {  # STORE_LOCATION JOB RUN NODES VERSIONS
  local location=$1 job=$2 run=$3 n=$4 versions=$5 pids=() failed=0
  for i in $(seq 1 "$n"); do
    IOFWD_STORE=$location IOFWD_JOB=$job IOFWD_RUN=$run IOFWD_NODES=$n \
      IOFWD_NODE=$(printf 'node%04d' "$i") IOFWD_RUNTIME_DIR=$work/rt \
      IOFWD_STAGING_SIZE=1M IOFWD_CHUNK_SIZE=256K IOFWD_PULL_THREADS=0 \
      IOFWD_LAUNCH_TIMEOUT=300 IOFWD_FINALIZE_TIMEOUT=300 \
      timeout 400 "$exe" "$versions" 4096 2>> "$work/errors" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  if ((failed)); then
    echo "bench/commit.sh: a node of job $job failed:" >&2
    sort -u "$work/errors" | head -5 >&2
    exit 1
  fi
}

# The summaries of a run (iofwd report --json).
summaries() {  # STORE JOB RUN
  build/tools/iofwd report --store "$1" --run "$3" --json "$2" ||
    { echo "bench/commit.sh: no summaries for job $2 run $3" >&2; exit 1; }
}

results=$work/results
for store in ${stores//,/ }; do
  for n in ${nodes_list//,/ }; do
    case $store in
      dir) location=$work/store-$n ;;
      rados) location=rados:iofwd ;;
      *) echo "bench/commit.sh: unknown store $store (dir or rados)" >&2; exit 2 ;;
    esac
    for versions in 1 5; do
      job=commit-$n-$versions-$$
      run=r$versions
      start=$(date +%s.%N)
      run_job "$location" "$job" "$run" "$n" "$versions"
      secs=$(python3 -c "import sys,time; print(f'{time.time()-float(sys.argv[1]):.1f}')" "$start")
      summaries "$location" "$job" "$run" |
        python3 -c '
import json, sys
store, n, versions, secs = sys.argv[1:5]
for r in json.load(sys.stdin)["nodes"]:
    if "store_ops" not in r:
        sys.exit("bench/commit.sh: a summary without store_ops (an older daemon)")
    print(json.dumps({"store": store, "nodes": int(n), "versions": int(versions),
                      "secs": float(secs), "node": r["node"], "ops": r["store_ops"]}))
' "$store" "$n" "$versions" "$secs" >> "$results"
      echo "  $store, $n nodes, $versions version(s): ${secs} s" >&2
    done
  done
done

python3 - "$results" "$csv" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
metadata = ["created", "commits", "reads", "stats", "lists", "removes", "arrives",
            "arrival_reads", "claims", "arrival_keys"]
runs = collections.defaultdict(list)
for r in rows:
    runs[(r["store"], r["nodes"], r["versions"])].append(r["ops"])
def total(nodes_ops, key=None):
    return sum((sum(o[k] for k in metadata) if key is None else o[key]) for o in nodes_ops)
print("store operations per version (5 versions less 1, over 4); listed: names the listings "
      "returned; tallied: arrivals the reads of tallies returned")
print(f"{'store':6} {'nodes':>6} {'job':>9} {'per node':>9} {'max node':>9} {'listed':>9} "
      f"{'tallied':>9} "
      f"{'reads':>8} {'stats':>8} {'lists':>7} {'objects':>8} {'arrives':>8}")
out = []
for (store, n, versions), five in sorted(runs.items()):
    if versions != 5 or (store, n, 1) not in runs:
        continue
    one = runs[(store, n, 1)]
    if len(five) != n or len(one) != n:
        sys.exit(f"bench/commit.sh: {store} {n} nodes: {len(one)} and {len(five)} summaries, not {n}")
    per = lambda key=None: (total(five, key) - total(one, key)) / 4
    # The most one node did per version: nodes' 5-version counts less the
    # mean 1-version count (who completes a version changes between runs).
    base = total(one) / n
    worst = max(sum(o[k] for k in metadata) for o in five)
    row = dict(store=store, nodes=n, job=per(), per_node=per() / n, max_node=(worst - base) / 4,
               listed=per("listed"), tallied=per("arrival_entries"), reads=per("reads"),
               stats=per("stats"), lists=per("lists"), objects=per("commits"),
               arrives=per("arrives"))
    out.append(row)
    print(f"{store:6} {n:6d} {row['job']:9.1f} {row['per_node']:9.2f} {row['max_node']:9.1f} "
          f"{row['listed']:9.1f} {row['tallied']:9.1f} {row['reads']:8.1f} {row['stats']:8.1f} "
          f"{row['lists']:7.1f} {row['objects']:8.1f} {row['arrives']:8.1f}")
if sys.argv[2]:
    with open(sys.argv[2], "w") as f:
        keys = list(out[0].keys()) if out else []
        f.write(",".join(keys) + "\n")
        for row in out:
            f.write(",".join(str(row[k]) for k in keys) + "\n")
PY
