#!/usr/bin/env bash
# The main job: install what is missing, build, run the checkpoint example with
# 4 MPI ranks (the daemon launches itself) into the default directory store,
# read every byte back, then restart: a second job resumes from the newest
# complete version (read back and checked) and writes two more.
#   scripts/run-example.sh [--size 64M] [--versions 3] [--ranks 4]
set -euo pipefail
cd "$(dirname "$0")/.."
size=64M versions=3 ranks=4
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --versions) versions=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "run-example.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh
bash scripts/build.sh
store=$PWD/iofwd-store
echo "== mpiexec -n $ranks build/examples/checkpoint --size $size --versions $versions --store $store"
timeout --kill-after=10 600 mpiexec -n "$ranks" build/examples/checkpoint \
  --size "$size" --versions "$versions" --store "$store"
echo "== build/examples/verify --store $store --job checkpoint"
timeout 600 build/examples/verify --store "$store" --job checkpoint --expect-ranks "$ranks"
echo "== restart: mpiexec -n $ranks build/examples/checkpoint --restart --size $size --versions 2 --store $store"
timeout --kill-after=10 600 mpiexec -n "$ranks" build/examples/checkpoint \
  --restart --size "$size" --versions 2 --store "$store"
echo "== build/examples/verify --store $store --job checkpoint"
timeout 600 build/examples/verify --store "$store" --job checkpoint --expect-ranks "$ranks"
