#!/usr/bin/env bash
# The test suite under the sanitizers, each build in a directory of its own:
#   build-asan  AddressSanitizer + UndefinedBehaviorSanitizer (gcc), everything
#               built and run but what cannot carry them (see below)
#   build-tsan  ThreadSanitizer (gcc): the daemon's and the client's threaded
#               tests (integration, failure, lifecycle)
# Any report fails the test it happened in (halt_on_error, exitcode 66 for
# TSan); suppressions (tests/sanitizers/*.supp) cover only third-party code,
# each with the reason beside it.
#
#   scripts/sanitize.sh [asan|tsan]...    (default: both)
#
# Not run under the sanitizers, and why:
#  - the MPI shim's tests and the cluster tests: the shim is LD_PRELOADed into
#    uninstrumented MPI programs, where the sanitizer runtime cannot come
#    first; the cluster tests spend their time in those same programs;
#  - the Ceph test: librados under ASan needs its own suppressions for its
#    allocator and adds ten minutes; the rados store runs unsanitized;
#  - "runtime memory" and "bounded huge-ranks": they bound the daemon's
#    resident memory, which the sanitizers' shadow memory inflates by design;
#  - "runtime over4g" under TSan only (see there).
# Prints "N passed, N failed" per build, from meson's test log.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(asan tsan)

# -O1 and line tables (-g1), what the sanitizers' own documentation asks
# for: reports name every frame's function, file and line, and the builds
# take about half the time of -O2 -g (job.cpp under ASan+UBSan: 72 s
# against 165 s, 2026-12-01), which keeps CI inside its 90 minutes.
options=(-Doptimization=1 -Ddebug=false -Db_lundef=false
         "-Dc_args=-g1 -fno-omit-frame-pointer" "-Dcpp_args=-g1 -fno-omit-frame-pointer")
configure() {
  local dir=$1 sanitize=$2
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" -Db_sanitize="$sanitize" "${options[@]}" >/dev/null || return 1
  else  # a directory of an earlier run: the same options (a no-op when they are)
    meson configure "$dir" -Db_sanitize="$sanitize" "${options[@]}" >/dev/null || return 1
  fi
}

# The tests of the suites, less those whose point a sanitizer defeats, from
# meson's own description of the build (nothing is built to list them).
select_tests() {
  local dir=$1
  meson introspect "$dir" --tests | python3 -c '
import json, sys
suites, excluded = set(sys.argv[1].split()), set(sys.argv[2].split("|"))
for t in json.load(sys.stdin):
    if suites & {s.split(":")[-1] for s in t["suite"]} and t["name"] not in excluded:
        print(t["name"])' "${suites[*]//--suite /}" "$(IFS='|'; echo "${excluded[*]}")"
}

# Builds only what the selected tests run (their executables and declared
# dependencies): the benchmark, the tools and the shim's programs are not
# instrumented for nothing. A failure is shown by a second, serial pass.
build_for() {
  local dir=$1; shift
  local targets
  mapfile -t targets < <(meson introspect "$dir" --tests --targets | python3 -c '
import json, os, sys
d = json.load(sys.stdin)
root = os.path.abspath(sys.argv[1]); names = set(sys.argv[2:])
files = {t["id"]: t["filename"] for t in d["targets"]}
out = set()
for t in d["tests"]:
    if t["name"] not in names:
        continue
    for dep in t["depends"]:
        out.update(os.path.relpath(f, root) for f in files.get(dep, []))
    for word in t["cmd"]:
        if word.startswith(root + "/"):
            out.add(os.path.relpath(word, root))
print("\n".join(sorted(out)))' "$dir" "$@")
  ninja -C "$dir" -j2 "${targets[@]}" >/dev/null 2>&1 || ninja -C "$dir" -j1 "${targets[@]}" 2>&1 | tail -30
  ninja -C "$dir" -j1 -n "${targets[@]}" 2>/dev/null | grep -q "no work to do"
}

count() {
  python3 - "$1" <<'PY'
import json, sys
passed = failed = 0
with open(sys.argv[1]) as f:
    for line in f:
        if line.strip():
            r = json.loads(line)["result"]
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            else:
                failed += 1
print(f"{passed} passed, {failed} failed")
PY
}

status=0
# Every report goes to a file of its own in $dir/sanitizer-reports (report.
# <program>.<pid>), also from processes whose stderr no test keeps (a daemon
# a rank launched logs into a runtime directory the test removes); they are
# printed after the run. One log_path in every variable: ASan reads the
# common flags from LSAN_OPTIONS too, and the last one read wins.
reports_of() { echo "$root/$1/sanitizer-reports"; }
# The tests' bounds on how long real things take (a killed daemon noticed
# within 2 s) stretch by this much: the instrumented builds are slower.
export IOFWD_TEST_TIME_SCALE=4
for b in "${builds[@]}"; do
  case "$b" in
    asan)
      dir=build-asan
      configure "$dir" address,undefined || { echo "sanitize.sh: cannot configure $dir"; status=1; continue; }
      reports=$(reports_of "$dir")
      log="log_path=$reports/report:log_exe_name=1"
      export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:suppressions=$root/tests/sanitizers/asan.supp:$log"
      export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0:$log"
      export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/sanitizers/ubsan.supp:$log"
      # UCX's memory hooks (malloc, and madvise/mmap patched in place) and the
      # sanitizer's interceptors must not both wrap the same calls: under TSan
      # a thread's exit crashed in UCX's madvise hook.
      export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no UCX_MEM_MMAP_HOOK_MODE=none
      suites=(--suite unit --suite integration --suite failure --suite lifecycle --suite mpi)
      # It measures the daemon's resident memory, which ASan's shadow memory
      # and quarantine inflate by design.
      excluded=("runtime memory" "bounded huge-ranks")
      ;;
    tsan)
      dir=build-tsan
      configure "$dir" thread || { echo "sanitize.sh: cannot configure $dir"; status=1; continue; }
      reports=$(reports_of "$dir")
      export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp:log_path=$reports/report:log_exe_name=1"
      unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
      export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no UCX_MEM_MMAP_HOOK_MODE=none
      suites=(--suite integration --suite failure --suite lifecycle)
      # "runtime over4g" moves a 4.5 GiB buffer, every byte of which TSan
      # shadows (more than two minutes here); its point, 64-bit lengths, is
      # checked under ASan+UBSan.
      excluded=("runtime memory" "bounded huge-ranks" "runtime over4g")
      ;;
    *) echo "sanitize.sh: unknown build '$b' (asan, tsan)" >&2; exit 2 ;;
  esac
  mapfile -t tests < <(select_tests "$dir")
  build_for "$dir" "${tests[@]}" || { echo "sanitize.sh: cannot build $dir"; status=1; continue; }
  echo "== $dir: ${suites[*]} (${#tests[@]} tests; not: ${excluded[*]}; built at $((SECONDS / 60)) min)"
  rm -f "$dir/meson-logs/testlog.json"  # only this run's results count
  rm -rf "$reports" && mkdir -p "$reports"
  meson test -C "$dir" --no-rebuild --num-processes 1 --print-errorlogs --timeout-multiplier 3 \
    "${tests[@]}" > "$dir/sanitize.log" 2>&1 || status=1
  grep -E '^ *[0-9]+/[0-9]+ ' "$dir/sanitize.log"
  # What a failed test printed: the failed checks and the sanitizer reports.
  grep -q 'FAIL\|TIMEOUT' "$dir/sanitize.log" &&
    grep -E -A6 'FAILED:|WARNING: ThreadSanitizer|ERROR: AddressSanitizer|runtime error|SUMMARY:' \
      "$dir/sanitize.log" | head -120
  # Every report, whichever process wrote it (the first 80 lines of each of
  # the first eight, oldest first): a report fails its test, or it came from
  # a process whose status no test looked at, which is worth seeing too. One
  # such process is expected: the daemon's peer-check child (iod/
  # peer_check.cpp), which unpacks what a peer sent in a process of its own
  # because UCX may crash on it; the fuzzing tests make UCX read freed
  # memory there (uct_posix_rkey_unpack, 2026-11-26), and the child's death
  # is the daemon's answer, not a failure.
  mapfile -t found < <(ls -1tr "$reports" | head -8 | sed "s|^|$reports/|")
  if [ ${#found[@]} -gt 0 ]; then
    echo "== $dir: $(find "$reports" -type f | wc -l) sanitizer report(s) in $reports"
    for f in "${found[@]}"; do echo "-- $f"; head -80 "$f"; done
  fi
  echo "$dir: $(count "$dir/meson-logs/testlog.json")"
done
exit $status
