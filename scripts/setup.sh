#!/usr/bin/env bash
# Install whatever iofwd needs from the Debian archive that this machine lacks.
# (iproute2 builds the simulated cluster of the multi-node tests, scripts/cluster.sh;
# gfortran, libhdf5-mpich-dev and hdf5-tools serve the MPI shim's tests:
# Fortran and parallel HDF5 programs run with and without it, compared by h5diff;
# clang-15 and libfuzzer-15-dev build the libFuzzer harnesses of tests/fuzz, see
# scripts/fuzz.sh; slurm-wlm and munge are the real Slurm the `slurm` test suite
# starts and stops itself, scripts/slurm.sh; their packages start no service;
# libcli11-dev, nlohmann-json3-dev and help2man build the iofwd command: its
# arguments, its --json output, and the man pages of iofwd and iod.)
# Non-interactive and idempotent: running it twice installs nothing the second time.
#
#   scripts/setup.sh            build + test dependencies
#   scripts/setup.sh --ceph     also the Ceph packages for the rados backend
#   scripts/setup.sh --pnetcdf  also PnetCDF built for MPICH (scripts/pnetcdf.sh)
set -euo pipefail

pkgs=(g++ meson ninja-build pkg-config
      mpich libmpich-dev
      libucx-dev ucx-utils
      iproute2 procps util-linux
      libboost-dev libfmt-dev catch2
      gnuplot-nox
      gfortran libhdf5-mpich-dev hdf5-tools
      clang-15 libfuzzer-15-dev
      slurm-wlm munge
      libcli11-dev nlohmann-json3-dev help2man)
pnetcdf=0
for arg in "$@"; do
  case "$arg" in
    --ceph) pkgs+=(ceph-mon ceph-mgr ceph-osd ceph-common librados-dev libradospp-dev) ;;
    --pnetcdf) pnetcdf=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all ${#pkgs[@]} packages present"
  [ "$pnetcdf" = 0 ] || bash "$(dirname "$0")/pnetcdf.sh" > /dev/null
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o DPkg::Lock::Timeout=300 -y -q --no-install-recommends)
$sudo apt-get -o DPkg::Lock::Timeout=300 update -q
$sudo apt-get "${apt_opts[@]}" install "${missing[@]}"
[ "$pnetcdf" = 0 ] || bash "$(dirname "$0")/pnetcdf.sh" > /dev/null
