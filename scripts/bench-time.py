#!/usr/bin/env python3
"""Run a command N times and print each wall time in ms, one per line.
Timed around the child alone (monotonic clock), so the shell's own forks
(e.g. $(date)) do not land in the figure.  The command's stdout is
discarded, or with BENCH_TIME_OUT=FILE appended to FILE (a session's ID
from sbx-create -q)."""
import os, subprocess, sys, time
n = int(sys.argv[1]); cmd = sys.argv[2:]
# BENCH_TIME_SPAWN=FILE: /bin/true is timed the same way just before each
# run, one line per run in FILE, so a figure "minus the harness's spawn"
# subtracts the spawn of that moment, not a median from another minute.
spawn = open(os.environ["BENCH_TIME_SPAWN"], "a") if os.environ.get("BENCH_TIME_SPAWN") else None
out = open(os.environ["BENCH_TIME_OUT"], "ab") if os.environ.get("BENCH_TIME_OUT") else None
for i in range(n):
    if spawn:
        t0 = time.perf_counter()
        subprocess.run(["/bin/true"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        print(f"{(time.perf_counter() - t0) * 1000:.3f}", file=spawn, flush=True)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    t1 = time.perf_counter()
    if r.returncode != 0:
        sys.exit(f"bench-time: {' '.join(cmd)} exited {r.returncode}")
    if out:
        out.write(r.stdout)
        out.flush()
    print(f"{(t1 - t0) * 1000:.3f}", flush=True)
