#!/usr/bin/env bash
# iofwd flushing to Ceph against `rados bench` writing the same bytes in the
# same shape, interleaved on one throwaway cluster.
#   bench/ceph.sh [RANKS] [--sizes 64M,256M,1G] [--rounds 5] [--reps 3]
#
# The shape is the daemon's: 16 MiB writes (IOFWD_CHUNK_SIZE) into objects of
# 64 MiB (the rados store's pieces), 4 in flight (IOFWD_FLUSH_THREADS). For
# each round and size:
#   1. `rados bench -b 16M -O 64M -t 4 --max-objects N`, three times (the
#      median): N objects hold what the ranks are about to write (RANKS x size);
#   2. the benchmark, iofwd only, --reps REPS: RANKS ranks each write the size
#      and wait until it is durable (medians of the reps);
#   3. the same three `rados bench` runs again.
# iofwd's flush is timed as rados bench times its writes: from the daemon's
# first write to the store (its data then in memory, as rados bench's is) to
# the last rank durable, commit included (the benchmark's flush column,
# io_flush_span). Beside it, end to end: from io_write, the pull from the
# ranks included, to io_wait's return (the durable column).
# Both are held against the mean of the two rados bench runs around them: the
# cluster's own speed drifts by 10-20 % within minutes, and pairing cancels
# that. The summary gives, per size, the median shares over the rounds.
# A 10 s `rados bench` at the start and the end shows the steady speed.
set -euo pipefail
shopt -s inherit_errexit  # a failed rados bench inside $(...) ends the script
cd "$(dirname "$0")/.."
ranks=2
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
  ranks=$1
  shift
fi
sizes=64M,256M,1G
rounds=5
reps=3
while (($#)); do
  case $1 in
    --sizes) sizes=${2:?--sizes wants a list like 64M,256M,1G}; shift 2 ;;
    --rounds) rounds=${2:?--rounds wants a number}; shift 2 ;;
    --reps) reps=${2:?--reps wants a number}; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "bench/ceph.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

bash scripts/setup.sh --ceph
bash scripts/build.sh
work=$PWD/bench-out/ceph
bash scripts/ceph-stop.sh "$work"
trap 'bash scripts/ceph-stop.sh "$work"' EXIT
conf=$(bash scripts/ceph-start.sh "$work" iofwd 2>/dev/null)
# Every repetition writes a version: keep the newest two (the OSD has 20 GiB).
export IOFWD_CEPH_CONF=$conf IOFWD_RUNTIME_DIR=$PWD/bench-out/rt IOFWD_KEEP=${IOFWD_KEEP:-2}
op=16777216 object=67108864 inflight=4
export IOFWD_CHUNK_SIZE=$op IOFWD_FLUSH_THREADS=$inflight
mkdir -p bench-out

bytes_of() {  # 64M -> 67108864
  numfmt --from=iec "${1^^}"
}

# rados bench SECONDS [--max-objects N]: prints MiB/s ("MB/sec" there is MiB/s).
rados_bench() {
  local seconds=$1 out mibs
  shift
  out=$(timeout --kill-after=10 300 rados -c "$conf" -p iofwd bench "$seconds" write \
    -b $op -O $object -t $inflight "$@" 2>/dev/null) || true
  rados -c "$conf" -p iofwd cleanup >/dev/null 2>&1 || true
  mibs=$(awk '/Bandwidth \(MB\/sec\)/ {print $3}' <<<"$out")
  if [[ -z $mibs ]]; then
    echo "bench/ceph.sh: rados bench failed; is the cluster up? ($work/log)" >&2
    exit 1
  fi
  echo "$mibs"
}

# The median of three bursts: one burst is a fraction of a second.
rados_burst() {
  local runs=() i
  for i in 1 2 3; do
    runs+=("$(rados_bench 60 --max-objects "$1")")
  done
  printf '%s\n' "${runs[@]}" | sort -g | sed -n 2p
}

echo "== rados bench 10 write -b 16M -O 64M -t 4 (steady, before): $(rados_bench 10) MiB/s"
csv=bench-out/ceph-rounds.csv
echo "size,round,rados_before_mibs,iofwd_flush_mibs,iofwd_durable_mibs,rados_after_mibs,flush_share,durable_share" >"$csv"
IFS=, read -r -a size_list <<<"$sizes"
for ((round = 1; round <= rounds; round++)); do
  for s in "${size_list[@]}"; do
    size=$(bytes_of "$s")
    per_rank=$(((size + object - 1) / object))
    objects=$((ranks * per_rank))
    before=$(rados_burst "$objects")
    # A job per size: retention (the newest two kept) then removes versions
    # of this size only, as in an application's steady run, not the last
    # round's 2 GiB under a 128 MiB flush.
    IOFWD_JOB=bench-$s timeout --kill-after=10 900 mpiexec -n "$ranks" build/bench/bench --store rados:iofwd \
      --dir bench-out --csv bench-out/bench-ceph.csv --sizes "$s" --reps "$reps" --iofwd-only \
      >bench-out/bench-ceph.out
    read -r durable flush < <(awk -F, 'NR == 2 {print $4, $16}' bench-out/bench-ceph.csv)
    after=$(rados_burst "$objects")
    awk -v s="$s" -v r="$round" -v n="$ranks" -v size="$size" -v d="$durable" -v f="$flush" \
      -v b="$before" -v a="$after" -v csv="$csv" 'BEGIN {
      fl = n * size / f / 1048576; io = n * size / d / 1048576; ref = (b + a) / 2
      printf "round %d %6s x %d ranks: rados bench %7.1f MiB/s, iofwd flush %7.1f MiB/s (end to end %7.1f), rados bench %7.1f MiB/s: %5.1f %% (%5.1f %%)\n",
             r, s, n, b, fl, io, a, 100 * fl / ref, 100 * io / ref
      printf "%d,%d,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n", size, r, b, fl, io, a, 100 * fl / ref, 100 * io / ref >> csv
    }'
  done
done
echo "== rados bench 10 write -b 16M -O 64M -t 4 (steady, after): $(rados_bench 10) MiB/s"

# share_summary SIZE COLUMN [verdict]: the median of a share over the rounds,
# its range, how many rounds reached 90 % (and met when every round did).
share_summary() {
  awk -F, -v size="$(bytes_of "$1")" -v c="$2" '$1 == size {print $c}' "$csv" | sort -g |
    awk -v verdict="${3:-}" '
    { v[NR] = $1 }
    END {
      m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      met = 0
      for (i = 1; i <= NR; i++) if (v[i] >= 90) met++
      printf "median %5.1f %% (%d rounds, %.1f-%.1f %%, %d of them at 90 %% or more)", m, NR, v[1], v[NR], met
      # The goal is every round at 90 %, not the median.
      if (verdict) printf "  %s", (NR > 0 && met == NR ? "met" : sprintf("MISSED in %d of %d rounds", NR - met, NR))
      printf "\n"
    }'
}
echo "== iofwd's flush throughput as a share of rados bench writing the same bytes (goal: 90 %)"
for s in "${size_list[@]}"; do
  printf '%6s per rank: %s\n' "$s" "$(share_summary "$s" 7 verdict)"
done
echo "== end to end, the pull from the ranks included (io_write to io_wait), as a share of it"
for s in "${size_list[@]}"; do
  printf '%6s per rank: %s\n' "$s" "$(share_summary "$s" 8)"
done
echo "csv: $csv"
