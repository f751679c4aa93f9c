#!/usr/bin/env bash
# Configures (once) and builds iofwd into ./build with at most 2 jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=debugoptimized
fi
ninja -C build -j2
