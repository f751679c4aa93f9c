#!/usr/bin/env bash
# The whole test suite: install what is missing, build, and run
#  1. every test of the build (unit; integration, failure and security tests
#     with real iod and UCX processes; mpiexec; the MPI shim with unmodified
#     MPI-IO, HDF5 and Fortran programs; the multi-node tests on a simulated
#     cluster of network namespaces; a chaos run; the rados store against a
#     real throwaway Ceph cluster; a program built against a temporary
#     install; jobs under a real throwaway Slurm, scripts/slurm.sh);
#  2. the same suites under AddressSanitizer + UndefinedBehaviorSanitizer and
#     the threaded ones under ThreadSanitizer (scripts/sanitize.sh says which);
#  3. the libFuzzer harnesses, 60 s each (scripts/fuzz.sh).
# It ends with the line "N passed, N failed", every test of the three counted
# from their real results (meson's test logs, the fuzzers' verdicts).
#
#   scripts/test.sh [--quick] [meson test arguments...]
#   --quick   only part 1 (what a developer runs between commits)
set -uo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
# Where the time goes, for keeping CI inside its 90 minutes.
phase() { echo "== $1 ($(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s in)"; }
quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
bash scripts/setup.sh --ceph --pnetcdf || exit 1
bash scripts/build.sh || exit 1
phase "tests"
# A test's processes must not find a daemon of an earlier run or of the user.
export TMPDIR=${TMPDIR:-/tmp}
status=0
meson test -C build --num-processes 1 --print-errorlogs "$@" || status=1
logs=(build/meson-logs/testlog.json)
fuzz_passed=0 fuzz_failed=0
if [ "$quick" = 0 ] && [ $# -eq 0 ]; then
  phase "sanitizers"
  bash scripts/sanitize.sh || status=1
  for d in build-asan build-tsan; do
    [ -f "$d/meson-logs/testlog.json" ] && logs+=("$d/meson-logs/testlog.json")
  done
  phase "fuzzers"
  bash scripts/fuzz.sh --seconds 60 | tee build/fuzz.log || status=1
  fuzz_passed=$(grep -c ' PASS$' build/fuzz.log || true)
  fuzz_failed=$(grep -Ec ' FAIL' build/fuzz.log || true)
  [ "$fuzz_passed" -gt 0 ] || [ "$fuzz_failed" -gt 0 ] || fuzz_failed=1  # it never ran
fi
phase "done"
python3 - "$fuzz_passed" "$fuzz_failed" "${logs[@]}" <<'PY'
import json, sys
sys.stdout.reconfigure(errors="backslashreplace")  # a test's output in any locale
passed, failed = int(sys.argv[1]), int(sys.argv[2])
skipped = 0
names = []  # what failed, named here, since a log's tail is often all one sees
for path in sys.argv[3:]:
    build = path.split("/meson-logs/")[0]
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            t = json.loads(line)
            r = t["result"]
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
                names.append((f"{build}: {t['name']} ({r}, {t.get('duration') or 0:.1f} s)",
                              t.get("stdout") or ""))
# The end of the first few failures' output again, here at the end.
for n, out in names[:3]:
    print(f"== the end of {n}:")
    print("\n".join(out.rstrip().splitlines()[-40:]))
for n, _ in names:
    print(f"failed: {n}")
if int(sys.argv[2]):
    print(f"failed: {sys.argv[2]} fuzzer(s) (or the fuzzers did not run), see build/fuzz.log")
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
PY
exit $status
