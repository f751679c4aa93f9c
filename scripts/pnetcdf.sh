#!/usr/bin/env bash
# PnetCDF built for MPICH, for the MPI shim's PnetCDF test and benchmark.
#
# Debian bookworm's libpnetcdf-dev is built against Open MPI only, and the
# shim (like the rest of iofwd) is built against MPICH: a PnetCDF program
# must use the MPICH that the shim wraps. This builds the C library of the
# same PnetCDF release from Debian's own source package (apt-get source;
# nothing from outside the Debian archive) with mpicc.mpich, into a prefix
# that outlives build directories and fresh clones, so it is built once per
# machine (about 6 minutes on 2 cores). Idempotent: with the prefix complete
# it does nothing.
#
#   scripts/pnetcdf.sh            build it unless it is there; print the prefix
#   scripts/pnetcdf.sh --prefix   only print where it goes (and exit 1 if absent)
#
# IOFWD_PNETCDF_PREFIX: where it goes (default /var/cache/iofwd/pnetcdf-mpich).
set -euo pipefail
prefix=${IOFWD_PNETCDF_PREFIX:-/var/cache/iofwd/pnetcdf-mpich}
stamp=$prefix/.iofwd-complete
case "${1:-}" in
  --prefix) [ -f "$stamp" ] && { echo "$prefix"; exit 0; } || exit 1 ;;
  -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
  "") ;;
  *) echo "pnetcdf.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac
if [ -f "$stamp" ]; then
  echo "$prefix"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
need=()
for p in autoconf automake libtool m4 mpich libmpich-dev xz-utils; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "pnetcdf.sh: installing ${need[*]}" >&2
  $sudo apt-get -o DPkg::Lock::Timeout=300 update -q >&2
  $sudo apt-get -o DPkg::Lock::Timeout=300 -y -q --no-install-recommends install "${need[@]}" >&2
fi

work=$(mktemp -d /tmp/iofwd-pnetcdf-XXXXXX)
chmod 755 "$work"  # apt-get source drops privileges to _apt to download
trap 'rm -rf "$work"' EXIT
cd "$work"
# The source package needs a deb-src line; a machine that has none gets one
# for the same archive and release as its binary packages.
if ! apt-get source --download-only pnetcdf >&2 2>"$work/source.err"; then
  if grep -q "deb-src" "$work/source.err"; then
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    echo "pnetcdf.sh: adding a deb-src entry for Debian $codename main" >&2
    $sudo tee /etc/apt/sources.list.d/iofwd-deb-src.sources > /dev/null <<EOF
# Added by iofwd's scripts/pnetcdf.sh: source packages (PnetCDF for MPICH).
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $codename
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    $sudo apt-get -o DPkg::Lock::Timeout=300 update -q >&2
    apt-get source --download-only pnetcdf >&2
  else
    cat "$work/source.err" >&2
    exit 1
  fi
fi
tar xf pnetcdf_*.orig.tar.*
cd pnetcdf-*/
echo "pnetcdf.sh: building $(basename "$PWD") for MPICH into $prefix" >&2
{
  autoreconf -fi
  ./configure --prefix="$prefix" MPICC=mpicc.mpich --disable-fortran --disable-cxx \
    --enable-shared --disable-static
  make -j2
  $sudo make install
} > "$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; exit 1; }
$sudo touch "$stamp"
echo "$prefix"
