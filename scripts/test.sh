#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every test
# (unit, integration with real iod and UCX, failure injection, mpiexec, a real
# throwaway Ceph cluster for the rados store), and
# end with the line "N passed, N failed" counted from meson's test log.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --ceph || exit 1
bash scripts/build.sh || exit 1
# A test's processes must not find a daemon of an earlier run or of the user.
export TMPDIR=${TMPDIR:-/tmp}
meson test -C build --num-processes 1 --print-errorlogs "$@"
status=$?
python3 - build/meson-logs/testlog.json <<'PY'
import json, sys
passed = failed = skipped = 0
with open(sys.argv[1]) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)["result"]
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r == "SKIP":
            skipped += 1
        else:
            failed += 1
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
PY
exit $status
