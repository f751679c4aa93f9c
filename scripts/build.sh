#!/usr/bin/env bash
# Configures (once) and builds iofwd into ./build with at most 2 jobs.
# Optional parts (the Ceph RADOS backend, PnetCDF for the shim's tests) are found at configure time: when
# the libraries they need were installed or removed since (scripts/setup.sh
# --ceph after a plain setup), the build is configured again, so that it
# does not go on without them.
set -euo pipefail
cd "$(dirname "$0")/.."
optional=""
for h in /usr/include/rados/librados.h /usr/include/rados/librados.hpp; do
  [ -e "$h" ] && optional+="$h "
done
# PnetCDF for MPICH, when scripts/pnetcdf.sh built it (the shim's PnetCDF test).
if pnetcdf_prefix=$(bash scripts/pnetcdf.sh --prefix 2>/dev/null); then
  export PKG_CONFIG_PATH=$pnetcdf_prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  optional+="$pnetcdf_prefix "
fi
stamp=build/.iofwd-optional
setup=(meson setup build --buildtype=debugoptimized)
if [ ! -f build/build.ninja ]; then
  "${setup[@]}"
elif [ "$(cat "$stamp" 2>/dev/null)" != "$optional" ]; then
  echo "build.sh: optional libraries changed (now: ${optional:-none}); configuring again"
  # --wipe: meson 1.0 keeps a header check's old answer across --reconfigure
  # and --clearcache.
  "${setup[@]}" --wipe
fi
echo "$optional" > "$stamp"
# A project default added after a build directory was made does not reach
# it: the ones the install depends on are set here too.
if ! meson introspect build --buildoptions 2>/dev/null |
    python3 -c 'import json,sys; o={x["name"]:x["value"] for x in json.load(sys.stdin)}; sys.exit(0 if o.get("pkgconfig.relocatable") else 1)'; then
  meson configure build -Dpkgconfig.relocatable=true
fi
ninja -C build -j2
