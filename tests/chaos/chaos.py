#!/usr/bin/env python3
"""Chaos: checkpoints written while daemons and ranks are killed and stopped.

Each round runs the checkpoint example under mpiexec (4 ranks, random buffer
sizes from 4 KiB to 8 MiB, many versions, restarting from the newest complete
version when there is one) and, beside it, an MPI-IO program under the shim.
At a random moment a random daemon or rank is SIGKILLed, or SIGSTOPped for a
while and then continued (or left stopped until its bound runs out). Then
the invariants are checked:
  - every process of the round ends by itself within its bound: no call
    blocks past IOFWD_DAEMON_TIMEOUT / IOFWD_FINALIZE_TIMEOUT plus slack;
  - no process of the run is left behind (daemons exit once their ranks
    are gone and their data is durable);
  - every complete version (its own COMPLETE record, or a bucket's record
    when packed; tests/support/store_complete.py) verifies byte for byte;
  - io_latest returns the newest version that has one.
Prints each round, then the totals; exit status 1 if any invariant failed.

  chaos.py --build BUILD_DIR [--rounds N] [--seed S] [--work DIR]
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from store_complete import complete_versions  # noqa: E402  (the store read apart from iofwd)

BOUND = 90  # seconds a round's processes may take to end after the fault


def pids_with(text):
    """Processes whose command line contains `text`."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and int(p) != os.getpid():
            out.append((int(p), cmd))
    return out


def newest_complete(store, job):
    """The newest complete version, own directory or pack, 0 for none."""
    return max(complete_versions(store, job), default=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--work")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    # One buffer size for the whole run: a restart reads back what the last
    # round wrote.
    size = rng.choice(["4K", "64K", "1M", "3M", "8M"])
    b = os.path.abspath(a.build)
    checkpoint = f"{b}/examples/checkpoint"
    verify = f"{b}/examples/verify"
    rank_client = f"{b}/tests/rank_client"
    mpiio_app = f"{b}/tests/mpiio_app"
    shim = f"{b}/mpi_shim/libiofwd_shim.so"
    work = a.work or tempfile.mkdtemp(prefix="iofwd-chaos-")
    os.chmod(work, 0o700)
    rt = os.path.join(work, "rt")
    store = os.path.join(work, "store")
    job = "chaos"
    env = dict(os.environ, IOFWD_RUNTIME_DIR=rt, IOFWD_STORE=store, IOFWD_JOB=job,
               IOFWD_DAEMON_TIMEOUT="3", IOFWD_FINALIZE_TIMEOUT="5", IOFWD_LAUNCH_TIMEOUT="10",
               IOFWD_IDLE_TIMEOUT="20", IOFWD_STAGING_SIZE="64M", IOFWD_CHUNK_SIZE="1M")
    print(f"chaos: seed {a.seed}, {a.rounds} rounds, work {work}", flush=True)
    totals = {"rounds": 0, "kills": 0, "stops": 0, "checks": 0, "violations": 0}

    def violation(text):
        totals["violations"] += 1
        print(f"  VIOLATION: {text}", flush=True)

    def check(ok, text):
        totals["checks"] += 1
        if not ok:
            violation(text)

    for rnd in range(1, a.rounds + 1):
        totals["rounds"] += 1
        versions = rng.randint(10, 40)
        restart = newest_complete(store, job) > 0
        cmd = ["mpiexec", "-n", "4", checkpoint, "--size", size, "--versions", str(versions)]
        if restart:
            cmd.append("--restart")
        files = os.path.join(work, f"files{rnd}")
        os.makedirs(files, exist_ok=True)
        os.makedirs(os.path.join(work, "outside"), exist_ok=True)
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True),
                 subprocess.Popen(["mpiexec", "-n", "2", "-genv", "LD_PRELOAD", shim,
                                   "-genv", "IOFWD_SHIM_PREFIXES", files, mpiio_app, files,
                                   os.path.join(work, "outside")],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True)]
        kind = rng.choice(["kill-daemon", "kill-rank", "stop-daemon", "stop-rank",
                           "stop-daemon-long", "none"])

        def targets():
            if "daemon" in kind:
                return pids_with("--runtime-dir " + rt)
            # The ranks themselves, not mpiexec or its proxies.
            return [(p, c) for p, c in pids_with(checkpoint + " --size") +
                    pids_with(mpiio_app + " " + files)
                    if not c.startswith(("mpiexec", "/usr/bin/mpiexec", "/usr/bin/hydra"))]

        # Strike while there is something to strike: once the victims exist,
        # after a random moment into the job.
        ready = time.time() + 5
        while kind != "none" and not targets() and time.time() < ready:
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.4))
        victims = targets()
        stopped = []
        if kind != "none" and victims:
            pid, _ = rng.choice(victims)
            try:
                if kind.startswith("kill"):
                    os.kill(pid, signal.SIGKILL)
                    totals["kills"] += 1
                else:
                    os.kill(pid, signal.SIGSTOP)
                    totals["stops"] += 1
                    stopped.append(pid)
            except ProcessLookupError:
                kind += " (victim already gone)"
            if stopped and kind != "stop-daemon-long":
                time.sleep(rng.uniform(0.5, 5))
                for p in stopped:
                    try:
                        os.kill(p, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
                stopped = []
        elif kind != "none":
            kind += " (nothing to hit yet)"
        # Every process of the round ends by itself within the bound. A daemon
        # left stopped is the exception the bound is about: the ranks must
        # give up on it, then it is continued so that it can go.
        start = time.time()
        outputs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=max(1, BOUND - (time.time() - start)))
                outputs.append((p.returncode, out.decode(errors="replace")))
            except subprocess.TimeoutExpired:
                violation(f"{' '.join(p.args[:4])} ... still running {BOUND} s after the fault")
                # Where it is stuck, for whoever reads this.
                for pid, cmd in pids_with(rt) + pids_with(checkpoint) + pids_with(mpiio_app):
                    bt = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex",
                                         "thread apply all bt 12"], capture_output=True,
                                        text=True, timeout=60).stdout
                    frames = [l for l in bt.splitlines() if l.startswith("#")][:14]
                    print(f"    {pid} {cmd[:100]}\n      " + "\n      ".join(frames), flush=True)
                os.killpg(p.pid, signal.SIGKILL)
                out, _ = p.communicate()
                print("    its output ends:\n      " +
                      "\n      ".join(out.decode(errors="replace").splitlines()[-15:]), flush=True)
                outputs.append((None, ""))
        for p in stopped:
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass
        # Nothing of the run is left behind: daemons finish and exit.
        deadline = time.time() + 40
        while time.time() < deadline and (pids_with(rt) or pids_with(checkpoint + " --size")):
            time.sleep(0.2)
        left = pids_with(rt) + pids_with(checkpoint + " --size") + pids_with(mpiio_app + " " + files)
        check(not left, f"processes left behind: {[c for _, c in left]}")
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Every complete version verifies; io_latest is the newest of them.
        newest = newest_complete(store, job)
        if newest:
            v = subprocess.run([verify, "--store", store, "--job", job], env=env,
                               capture_output=True, text=True, timeout=300)
            check(v.returncode == 0 and "all match" in v.stdout,
                  f"a complete version does not verify:\n{v.stdout[-2000:]}")
        probe = subprocess.run([rank_client, "--latest-only"], env=env, capture_output=True,
                               text=True, timeout=60)
        expect = f"latest 0 {newest}" if newest else "latest 2 "
        check(probe.stdout.startswith(expect),
              f"io_latest says {probe.stdout.strip()!r}, the newest complete in the store is v{newest}")
        if kind == "none" and outputs[0][0] != 0:
            violation("the job failed with no fault:\n" + outputs[0][1][-1500:])
        ok = "ok" if outputs[0][0] == 0 else f"status {outputs[0][0]}"
        shim_ok = "ok" if outputs[1][0] == 0 else f"status {outputs[1][0]}"
        print(f"round {rnd}: {size} x {versions} versions{' (restart)' if restart else ''}, "
              f"{kind}: job {ok}, shim job {shim_ok}, newest complete v{newest}, "
              f"ended in {time.time() - start:.1f} s", flush=True)
        shutil.rmtree(files, ignore_errors=True)

    print("chaos: rounds {rounds}, kills {kills}, stops {stops}, invariant checks {checks}, "
          "violations {violations}".format(**totals), flush=True)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if totals["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
