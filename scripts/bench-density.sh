#!/bin/bash
# Density (issue 15, "Measured"): BENCH_DENSITY_N sessions (200) on this
# host, at most BENCH_DENSITY_RUNNING (8) running at a time, the rest
# suspended to disk by their idle policy (lifecycle.idle_suspend); then
# BENCH_DENSITY_PROBES (100) `sbx-exec ID -- true` on a session picked at
# random, each of which resumes it, timed end to end (p50, p95, p99).
# Also what one suspended session costs the host: its directory on disk
# (memory image plus the scratch disk's allocated blocks) and its
# monitor's RSS, and MemAvailable's drop over the whole set.
#
# The cap on running sessions is kept by this script, not by sbx: before
# each create and each probe it waits until fewer than the cap run (the
# idle policy suspends a session 2 s after its last command).
#
# bench.sh sources this and calls bench_density RAW OUT (0 sessions leaves
# it out); run alone it uses a root of its own and prints the rows.
bench_density() {
	local raw=$1 out=$2 n=${BENCH_DENSITY_N:-200} cap=${BENCH_DENSITY_RUNNING:-8}
	local probes=${BENCH_DENSITY_PROBES:-100} t i id pol sessions
	[ "$n" -gt 0 ] || return 0
	t=$(dirname "${BASH_SOURCE[0]}")/bench-time.py
	sessions=$SBX_ROOT/var/lib/sbx/sessions
	pol=$raw/density.yaml
	printf 'lifecycle:\n  idle_suspend: 2s\nresources:\n  ttl: 2h\n' >"$pol"
	echo "bench: density: $n sessions, at most $cap running, the rest suspended; $probes random execs" >&2
	: >"$raw/density-ids.txt"
	: >"$raw/density-exec.txt"
	local mem0 mem1 t0 t1
	mem0=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
	t0=$(date +%s.%N)
	for i in $(seq "$n"); do
		density_wait_below "$cap"
		id=$(sbx-create -q -p "$pol" --id "dens-$i") || { echo "bench: density: create $i failed" >&2; return 1; }
		sbx-exec "$id" -- true
		echo "$id" >>"$raw/density-ids.txt"
		[ $((i % 25)) -eq 0 ] && echo "bench: density: $i of $n created" >&2
	done
	# Every session suspended (the last ones were still running).
	density_wait_below 1
	t1=$(date +%s.%N)
	mem1=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
	# What each suspended session holds: disk (allocated, not apparent) and
	# its monitor's RSS.
	: >"$raw/density-held.txt"
	while read -r id; do
		echo "$(du -sk "$sessions/$id" | cut -f1) $(ps -o rss= -p "$(jq -r .monitor.pid "$sessions/$id/session.json")")" \
			>>"$raw/density-held.txt"
	done <"$raw/density-ids.txt"
	for i in $(seq "$probes"); do
		density_wait_below "$cap"
		id=$(shuf -n 1 "$raw/density-ids.txt")
		"$t" 1 sbx-exec "$id" -- true >>"$raw/density-exec.txt"
	done
	sbx-kill <"$raw/density-ids.txt" >/dev/null 2>&1
	PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")" python3 - "$raw" "$out" "$n" "$cap" "$mem0" "$mem1" "$t0" "$t1" <<'PY'
import json, os, sys
raw, out = sys.argv[1], sys.argv[2]
n, cap, mem0, mem1 = (int(x) for x in sys.argv[3:7])
t0, t1 = float(sys.argv[7]), float(sys.argv[8])
lat = [float(x) for x in open(f"{raw}/density-exec.txt") if x.strip()]
disk, rss = zip(*[map(int, l.split()) for l in open(f"{raw}/density-held.txt") if l.strip()])
from benchstats import pct, row99 as row
rows = [row(f"density: sbx-exec true on a random one of {n} (resume included)", lat, "ms"),
        row("density: suspended session's directory on disk", [x / 1024 for x in disk], "MiB"),
        row("density: suspended session's monitor RSS", [x / 1024 for x in rss], "MiB")]
summary = {"sessions": n, "running_cap": cap, "setup_s": round(t1 - t0, 1),
           "mem_available_drop_per_session_mib": round((mem0 - mem1) / 1024 / n, 2),
           "disk_total_gib": round(sum(disk) / 1048576, 2)}
res = json.load(open(out)) if os.path.exists(out) else {"schema": 1, "results": [], "ratios": {}}
res["results"] += rows
res["density"] = summary
json.dump(res, open(out, "w"), indent=2)
for r in rows:
    print(f"{r['name']:58} {r['unit']:>4} {r['n']:>4} {r['p50']:>9} {r['p95']:>9} {r['p99']:>9} {r['max']:>9}")
for k, v in summary.items():
    print(f"density: {k:40} {v}")
PY
}

# Wait until fewer than $1 of this bench's density sessions are running
# (a session being suspended counts as running until it is suspended).
density_wait_below() {
	local k
	while :; do
		k=$(sbx-ps --json 2>/dev/null | jq '[.[] | select((.id | startswith("dens-")) and .state != "suspended")] | length')
		[ "${k:-0}" -lt "$1" ] && return 0
		sleep 0.2
	done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	SBX_BUILD=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
	export PATH=$SBX_BUILD/bin:$PATH SBX_TEMPLATES=${SBX_TEMPLATES:-$SBX_BUILD/templates}
	export SBX_ROOT=$(mktemp -d /tmp/sbx-density.XXXXXX)
	. "$(dirname "$0")/lib-root.sh"
	trap root_cleanup EXIT
	mkdir -p "$SBX_ROOT/raw"
	bench_density "$SBX_ROOT/raw" "${BENCH_OUT:-$SBX_BUILD/bench-density.json}"
fi
