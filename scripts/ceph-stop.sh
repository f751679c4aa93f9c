#!/usr/bin/env bash
# Stops a cluster started by scripts/ceph-start.sh DIR (through its own pid
# files) and removes DIR.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/ceph-stop.sh DIR" >&2; exit 2; }
dir=$(realpath -m "$1")
for pidfile in "$dir"/run/*.pid; do
  [ -f "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2>/dev/null
done
sleep 0.5
rm -rf "$dir"
