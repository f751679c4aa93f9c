#!/usr/bin/env bash
# Fuzzes iofwd's parsers of untrusted input with the libFuzzer harnesses of
# tests/fuzz: configures the fuzzing build directory if needed (clang-15,
# -Dfuzz=true: ASan, UBSan and coverage on everything it builds), builds it,
# and runs each harness for N seconds on a copy of its seed corpus
# (tests/fuzz/corpus/<target>) in a temporary directory, one at a time. Prints
# per target the inputs run, the coverage libFuzzer reached (edges and
# features) and PASS or FAIL; a failing target's inputs and log are kept.
#
#   scripts/fuzz.sh [--seconds N] [--build-dir DIR] [--findings DIR] [--no-build] [TARGET...]
#
#   --seconds N     fuzzing time per target (default 60); 0 runs the seeds only
#   --build-dir D   the fuzzing build directory (default ./build-fuzz)
#   --findings D    where a failing target's inputs (crash-*, leak-*, timeout-*,
#                   oom-*) and log go (default <build-dir>/fuzz-findings)
#   --no-build      use the harnesses as built (what the meson tests do)
#   TARGET          protocol, mailbox or store (default: all three)
#
# Exit 0: every target ran its time without a crash, a failed invariant, a
# leak, a timeout or a sanitizer report; 1: some target did; 2: could not
# configure, build or start. A run takes at most N + 60 seconds per target.
# Needs clang-15 and libfuzzer-15-dev: scripts/setup.sh installs them.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
all_targets=(protocol mailbox store)

seconds=60
build="$root/build-fuzz"
findings=""
do_build=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="${2:-}"; shift 2 ;;
    --build-dir) build="${2:-}"; shift 2 ;;
    --findings) findings="${2:-}"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ! [[ "$seconds" =~ ^[0-9]+$ ]]; then
  echo "fuzz.sh: --seconds wants a whole number of seconds, not '$seconds'" >&2
  exit 2
fi
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  case " ${all_targets[*]} " in
    *" $t "*) ;;
    *) echo "fuzz.sh: no target '$t' (there are: ${all_targets[*]})" >&2; exit 2 ;;
  esac
done
build="$(mkdir -p "$build" && cd "$build" && pwd)"
findings="${findings:-$build/fuzz-findings}"

if [ "$do_build" = 1 ]; then
  if [ ! -f "$build/build.ninja" ]; then
    if ! command -v clang-15 >/dev/null || ! command -v clang++-15 >/dev/null; then
      echo "fuzz.sh: clang-15 is not installed: run scripts/setup.sh" >&2
      exit 2
    fi
    CC=clang-15 CXX=clang++-15 meson setup "$build" "$root" -Dfuzz=true || exit 2
  elif ! python3 - "$build/meson-info/intro-buildoptions.json" <<'PY'
import json, sys
opts = {o["name"]: o["value"] for o in json.load(open(sys.argv[1]))}
sys.exit(0 if opts.get("fuzz") is True else 1)
PY
  then
    echo "fuzz.sh: $build is not a fuzzing build (-Dfuzz=true); remove it or pick another" \
         "with --build-dir" >&2
    exit 2
  fi
  if ! ninja -C "$build" -j2 >"$build/fuzz-build.log" 2>&1; then
    tail -n 30 "$build/fuzz-build.log" >&2
    echo "fuzz.sh: building $build failed (whole log: $build/fuzz-build.log);" \
         "libFuzzer itself comes with libfuzzer-15-dev (scripts/setup.sh)" >&2
    exit 2
  fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/iofwd-fuzz.XXXXXX")" || exit 2
trap 'rm -rf "$work"' EXIT

# Sanitizers: stop at the first report, with a stack that names functions.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
for s in llvm-symbolizer-15 /usr/lib/llvm-15/bin/llvm-symbolizer llvm-symbolizer; do
  if command -v "$s" >/dev/null; then
    export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-$(command -v "$s")}"
    break
  fi
done

passed=0
failed=0
for t in "${targets[@]}"; do
  exe="$build/tests/fuzz/fuzz_$t"
  if [ ! -x "$exe" ]; then
    echo "fuzz.sh: $exe is not built" >&2
    exit 2
  fi
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  cp "$root/tests/fuzz/corpus/$t/"* "$work/$t/corpus/" 2>/dev/null || true
  if [ "$seconds" = 0 ]; then
    budget=(-runs=0)
  else
    budget=(-max_total_time="$seconds")
  fi
  # The outer timeout bounds a harness that hangs outside libFuzzer's own
  # clock (a stuck input is libFuzzer's -timeout, reported as a failure).
  timeout --kill-after=10 $((seconds + 60)) "$exe" "${budget[@]}" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" \
    "$work/$t/corpus" >"$work/$t/log" 2>&1
  rc=$?
  log="$work/$t/log"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  [ -n "$runs" ] || runs=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')
  status=$(grep -E 'cov: [0-9]+' "$log" | tail -n 1)
  cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$status")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$status")
  corp=$(sed -nE 's/.* corp: ([0-9]+)\/.*/\1/p' <<<"$status")
  line=$(printf '%-9s runs %-10s cov %-6s ft %-6s corpus %-5s' "$t" "${runs:-?}" "${cov:-?}" \
           "${ft:-?}" "${corp:-?}")
  if [ "$rc" = 0 ]; then
    echo "$line PASS"
    passed=$((passed + 1))
    continue
  fi
  failed=$((failed + 1))
  reason=$(grep -m1 -E 'fuzz invariant failed|^SUMMARY:|ERROR: libFuzzer' "$log")
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && reason="killed after $((seconds + 60)) s"
  echo "$line FAIL (exit $rc): ${reason:-see the log}"
  mkdir -p "$findings/$t"
  cp "$log" "$findings/$t/log"
  cp "$work/$t/artifacts/"* "$findings/$t/" 2>/dev/null || true
  echo "  log and inputs: $findings/$t/"
  for a in "$work/$t/artifacts/"*; do
    [ -f "$a" ] && echo "  reproduce: $exe $findings/$t/$(basename "$a")"
  done
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
