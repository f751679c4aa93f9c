#!/usr/bin/env bash
# An install used as a user would use it, with the build tree out of reach:
#   1. `meson install --destdir` into a temporary directory (the .pc file is
#      relocatable and the library finds iod relative to itself, so the
#      prefix works from where it landed);
#   2. the checkpoint example and the shim's MPI-IO program, copied out of the
#      source tree, built against that prefix only: `pkg-config iofwd`
#      (PKG_CONFIG_PATH of the prefix) and mpicxx/mpicc, no LD_LIBRARY_PATH;
#   3. a checkpoint of 3 versions and a restart under mpiexec, inside a mount
#      namespace where the build directory is an empty tmpfs, and the MPI-IO
#      program through the prefix's iofwd-mpiexec there too;
#   4. a run with the build tree in plain sight: still the prefix's iod;
#   5. librados only in the rados module: no program or library of the
#      prefix loads it, the module loads from the prefix when a rados: store
#      is opened, and a missing module is an error in words.
# Which daemon ran is proven by its binary: the example prints
# /proc/<daemon pid>/exe and the daemon logs its own. Every byte is checked:
# by the restart, by build/examples/verify (run outside, on the store), and
# by cmp against a run without the shim.
#   run_install.sh MESON BUILD_DIR SOURCE_DIR MPIEXEC VERIFY RADOS(0|1)
set -euo pipefail
meson=$1 build=$(realpath "$2") src=$(realpath "$3") mpiexec=$4 verify=$5 rados=$6
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root: the build tree is hidden in a mount namespace"
work=$(mktemp -d /tmp/iofwd-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
# Nothing from the test's own environment points anywhere.
unset IOFWD_IOD LD_LIBRARY_PATH LD_PRELOAD IOFWD_SHIM_PREFIXES IOFWD_SHIM_LIB PKG_CONFIG_PATH
export IOFWD_RUNTIME_DIR=$work/rt IOFWD_JOB=installtest IOFWD_LAUNCH_TIMEOUT=30
bounded() { timeout --kill-after=5 "$@"; }
# Runs a command with the build directory replaced by an empty tmpfs (only
# for this command and its children: a private mount namespace).
hidden() {
  bounded 180 unshare --mount --propagation private -- sh -c \
    'mount -t tmpfs -o size=1m,mode=0755 iofwd-hidden "$0" && exec "$@"' "$build" "$@"
}

# 1. Install.
bounded 300 "$meson" install -C "$build" --no-rebuild --quiet --destdir "$work/dest" >/dev/null
pc=$(find "$work/dest" -name iofwd.pc)
[ -n "$pc" ] || fail "no iofwd.pc installed"
export PKG_CONFIG_PATH=$(dirname "$pc")
prefix=$(realpath "$(pkg-config --variable=prefix iofwd)")
case "$prefix" in "$work/dest/"*) ;; *) fail "pkg-config's prefix $prefix is not the install's" ;; esac
iod=$prefix/bin/iod
[ -x "$iod" ] || fail "no iod at $iod"
[ -x "$prefix/bin/iofwd-mpiexec" ] || fail "no iofwd-mpiexec in $prefix/bin"
flags="$(pkg-config --cflags --libs iofwd)"
echo "pkg-config --cflags --libs iofwd: $flags"
case "$flags" in *"$build"*) fail "pkg-config names the build tree: $flags" ;; esac
case "$flags" in *-Wl,-rpath,*) ;; *) fail "no rpath in the .pc's Libs: $flags" ;; esac

# 2. Build against the prefix only, from copies of the sources.
mkdir -p "$work/src" "$work/app"
cp "$src/examples/checkpoint.cpp" "$src/examples/pattern.hpp" "$src/tests/shim/mpiio_app.c" \
  "$work/src/"
# shellcheck disable=SC2086 # the flags are words
bounded 300 mpicxx -std=c++20 -O2 -o "$work/app/checkpoint" "$work/src/checkpoint.cpp" $flags
bounded 120 mpicc -O2 -o "$work/app/mpiio_app" "$work/src/mpiio_app.c"
if readelf -d "$work/app/checkpoint" | grep -q "$build"; then fail "the program refers to the build tree"; fi
lib=$(ldd "$work/app/checkpoint" | awk '/libiofwd\.so/ {print $3}')
case "$(realpath "$lib")" in "$prefix/"*) ;; *) fail "the program loads libiofwd from '$lib'" ;; esac

# 3. The build tree out of reach.
hidden sh -c '[ ! -e "$0/iod/iod" ] && [ -z "$(ls -A "$0")" ]' "$build" ||
  fail "the build tree is still visible in the hidden namespace"
daemon_is_installed() {  # OUTPUT_FILE: the example's daemon line names the prefix's iod
  local exe
  exe=$(sed -n 's/^  daemon  *pid [0-9]*, \(.*\) (rank 0.s)$/\1/p' "$1")
  [ -n "$exe" ] || fail "no daemon line in the example's output"
  [ "$exe" = "$(realpath "$iod")" ] || fail "the daemon ran $exe, not the installed $iod"
}
hidden "$mpiexec" -n 2 "$work/app/checkpoint" --size 3M --versions 3 --store "$work/store" |
  tee "$work/first"
grep -q "in 3 versions (v1..v3)" "$work/first" || fail "the first job did not write v1..v3"
daemon_is_installed "$work/first"
bounded 120 "$verify" --store "$work/store" --job installtest --expect-versions 3 --expect-ranks 2
hidden "$mpiexec" -n 2 "$work/app/checkpoint" --restart --size 3M --versions 2 \
  --store "$work/store" | tee "$work/second"
grep -q "restart            from v3, complete job-wide" "$work/second" || fail "no restart from v3"
grep -q "in 2 versions (v4..v5)" "$work/second" || fail "the restart did not write v4..v5"
daemon_is_installed "$work/second"
bounded 120 "$verify" --store "$work/store" --job installtest --expect-versions 5 --expect-ranks 2

# The shim and its wrapper from the prefix, against a run without them.
mkdir -p "$work/plain" "$work/shim" "$work/outside-plain" "$work/outside"
bounded 120 "$mpiexec" -n 2 "$work/app/mpiio_app" "$work/plain" "$work/outside-plain" >/dev/null
IOFWD_SHIM_VERBOSE=1 hidden "$prefix/bin/iofwd-mpiexec" --prefix "$work/shim" -n 2 \
  "$work/app/mpiio_app" "$work/shim" "$work/outside" > "$work/shim-out" 2> "$work/shim-err" ||
  { cat "$work/shim-out" "$work/shim-err" >&2; fail "the MPI-IO program failed under the shim"; }
cat "$work/shim-err" >&2
grep -q "0 failed checks" "$work/shim-out" || fail "the MPI-IO program's own checks failed"
[ "$(grep -c 'attached to iod' "$work/shim-err")" -eq 2 ] || fail "not every rank attached"
cmp "$work/plain/data.bin" "$work/shim/data.bin" || fail "data.bin differs with the installed shim"
cmp "$work/outside-plain/other.bin" "$work/outside/other.bin" || fail "other.bin differs"

# 4. In plain sight of the build tree, the installed library still runs its own iod.
IOFWD_JOB=installtest-visible bounded 120 "$mpiexec" -n 1 "$work/app/checkpoint" --size 1M \
  --versions 1 --store "$work/store" | tee "$work/third"
daemon_is_installed "$work/third"
bounded 120 "$verify" --store "$work/store" --job installtest-visible --expect-versions 1 \
  --expect-ranks 1

# Every daemon of this test, whatever launched it, logged the installed binary.
started=$(cat "$IOFWD_RUNTIME_DIR"/*.log | grep -c "\] iod [0-9.]* at ")
installed=$(cat "$IOFWD_RUNTIME_DIR"/*.log | grep -c "\] iod [0-9.]* at $(realpath "$iod")$")
echo "daemons started: $started, all of them $(realpath "$iod"): $installed"
[ "$started" -eq 4 ] || fail "expected 4 daemons (3 example jobs, 1 shim job), the logs show $started"
[ "$installed" -eq "$started" ] || fail "a daemon ran another binary than the installed one"

# 5. The internals from the prefix; librados in the rados module alone.
libdir=$(realpath "$(pkg-config --variable=libdir iofwd)")
for f in "$iod" "$prefix/bin/iofwd" "$libdir/libiofwd.so" "$libdir/libiofwd_shim.so" \
         "$work/app/checkpoint"; do
  internal=$(ldd "$f" | awk '/libiofwd_internal\.so/ {print $3}')
  case "$(realpath "${internal:-/nonexistent}" 2>/dev/null)" in "$libdir/"*) ;;
    *) fail "$f loads libiofwd_internal from '$internal', not from $libdir" ;; esac
  if ldd "$f" | grep -q librados; then fail "$f loads librados"; fi
done
module=$libdir/libiofwd_rados.so
if [ "$rados" = 1 ]; then
  [ -f "$module" ] || fail "no rados module installed at $module"
  if ldd "$module" | grep -q 'not found'; then ldd "$module" >&2; fail "the module's libraries are not found"; fi
  # The module loads from the prefix: what stops the command is the cluster's
  # configuration, which only the module reads.
  out=$(IOFWD_CEPH_CONF=$work/no-ceph.conf bounded 60 "$prefix/bin/iofwd" ls --store rados:p 2>&1) &&
    fail "iofwd ls of a rados store without a cluster succeeded: $out"
  echo "$out"
  case "$out" in *"cannot read the Ceph configuration $work/no-ceph.conf"*) ;;
    *) fail "iofwd ls did not reach the rados module: $out" ;; esac
  mv "$module" "$module.aside"
  out=$(IOFWD_CEPH_CONF=$work/no-ceph.conf bounded 60 "$prefix/bin/iofwd" ls --store rados:p 2>&1) &&
    fail "iofwd ls of a rados store without the module succeeded: $out"
  mv "$module.aside" "$module"
  echo "$out"
  case "$out" in *"iofwd's rados module is not installed: no $module"*) ;;
    *) fail "a missing module is not said in words: $out" ;; esac
else
  [ ! -e "$module" ] || fail "a build without librados installed $module"
fi
echo "PASS: built against $prefix only; checkpoint, restart and shim ran the installed iod; librados only in its module"
