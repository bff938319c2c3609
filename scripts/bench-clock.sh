#!/bin/bash
# The guest's clock against the host's over busy minutes (issue 17): one
# session with 2 vCPUs, both kept busy by the guest's own loops, sampled
# every BENCH_CLOCK_EVERY seconds (default 30) for BENCH_CLOCK_MIN minutes
# (default 3; issue 17's figure is 30).  Each sample is the guest's
# CLOCK_REALTIME (read by a static helper run with sbx-exec) against the
# midpoint of the host's before and after; the exec's own round trip
# bounds the error.  Prints one JSON object: samples, the largest offset,
# p95, and the guest's clocksource.
set -euo pipefail
B=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
MIN=${BENCH_CLOCK_MIN:-3}
EVERY=${BENCH_CLOCK_EVERY:-30}
export PATH="$B/bin:$PATH"
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/sbx-bench-clock.XXXXXX)
id=''
trap '[ -z "$id" ] || sbx-kill "$id" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
cc -static -O2 -o "$tmp/guest-check" "$top/tests/tools/guest-check.c"
printf 'resources:\n  vcpus: 2\n' >"$tmp/p.yaml"
id=$(sbx-create -q -p "$tmp/p.yaml")
sbx-cp "$tmp/guest-check" "$id":/tmp/ >/dev/null
src=$(sbx-exec "$id" -- cat /sys/devices/system/clocksource/clocksource0/current_clocksource)
for i in 1 2; do sbx-exec -d "$id" -- sh -c 'while :; do :; done' >/dev/null; done
: >"$tmp/s"
end=$(($(date +%s) + MIN * 60))
while [ "$(date +%s)" -lt "$end" ]; do
	b=$(date +%s%3N); g=$(sbx-exec "$id" -- /tmp/guest-check now); a=$(date +%s%3N)
	echo "$b $g $a" >>"$tmp/s"
	sleep "$EVERY"
done
python3 - "$tmp/s" "$src" "$MIN" <<'PY'
import json, sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
off = [abs(g - (b + a) / 2) for b, g, a in rows]
rt = [a - b for b, g, a in rows]
s = sorted(off)
print(json.dumps({"minutes": int(sys.argv[3]), "vcpus": 2, "busy_vcpus": 2, "clocksource": sys.argv[2],
                  "samples": len(off), "offset_max_ms": round(max(off), 1),
                  "offset_p95_ms": round(s[min(len(s) - 1, int(0.95 * len(s)))], 1),
                  "exec_round_trip_p50_ms": sorted(rt)[len(rt) // 2]}))
PY
