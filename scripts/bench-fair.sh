#!/bin/bash
# Disk fairness (issue 35 item 6): what a session writing flat out to its
# scratch disk does to a neighbour.  Three phases of BENCH_FAIR_SECS (10)
# each: no writer, a writer under the default policy (its
# resources.disk_bps and disk_iops), and a writer with both 0 (no limit);
# BENCH_FAIR_ROUNDS (3) rounds of the three, so the host's drift (other
# load on a shared machine) falls on every phase alike.  The three
# sessions live through all of it, so every phase has as many VMs.
# The writer loops `dd bs=1M count=256 conv=fsync` onto /workspace; while
# it runs, the neighbour (default policy) is probed in turns with
# `sbx-exec ID -- true` and an audit append (tools/sbx-audit-append, one
# fsynced record in the same trail every command writes), timed end to
# end.  Rows: p50 and p95 of each per phase, and the writer's MiB/s;
# ratios: each writer phase's p50 and p95 over the idle phase's.
#
# bench.sh sources this and calls bench_fair RAW OUT (BENCH_FAIR_SECS=0
# leaves it out); run alone it uses a root of its own and prints the rows.
bench_fair() {
	local raw=$1 out=$2 secs=${BENCH_FAIR_SECS:-10} rounds=${BENCH_FAIR_ROUNDS:-3} t append nb w1 w2 phase
	[ "$secs" -gt 0 ] || return 0
	t=$(dirname "${BASH_SOURCE[0]}")/bench-time.py
	append=${SBX_BUILD:-$B}/tools/sbx-audit-append
	printf 'resources:\n  disk_bps: 0\n  disk_iops: 0\n' >"$raw/fair-off.yaml"
	echo "bench: fairness: $rounds rounds of a neighbour's exec and audit appends, $secs s each without" \
		"a writer, beside one under the default disk limits and beside one without" >&2
	nb=$(sbx-create -q --id fair-nb)
	w1=$(sbx-create -q --id fair-w1)
	w2=$(sbx-create -q --id fair-w2 -p "$raw/fair-off.yaml")
	sbx-exec "$nb" -- true
	for phase in idle default unlimited; do
		: >"$raw/fair-$phase-exec.txt"
		: >"$raw/fair-$phase-audit.txt"
		: >"$raw/fair-$phase-mib.txt"
	done
	for _ in $(seq "$rounds"); do
		fair_phase idle "" && fair_phase default "$w1" && fair_phase unlimited "$w2"
	done
	sbx-kill "$nb" "$w1" "$w2"
	PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")" python3 - "$raw" "$out" <<'PY'
import json, os, sys
raw, out = sys.argv[1], sys.argv[2]
from benchstats import pct, row99 as row
label = {"idle": "no writer", "default": "writer at default limits", "unlimited": "writer unlimited"}
rows, ratios, fig = [], {}, {}
for ph in ("idle", "default", "unlimited"):
    for what, name in (("exec", "neighbour's sbx-exec true"), ("audit", "audit append")):
        v = [float(x) for x in open(f"{raw}/fair-{ph}-{what}.txt") if x.strip()]
        r = row(f"fairness: {name}, {label[ph]}", v, "ms")
        rows.append(r); fig[(ph, what)] = r
    if ph != "idle":
        runs = [tuple(map(int, l.split())) for l in open(f"{raw}/fair-{ph}-mib.txt") if l.strip()]
        rows.append({"name": f"fairness: the writer's rate, {label[ph]}", "unit": "MiB/s", "n": len(runs),
                     "p50": round(sum(m for m, _ in runs) / max(sum(s for _, s in runs), 1), 1)})
for ph in ("default", "unlimited"):
    for what in ("exec", "audit"):
        for p in ("p50", "p95"):
            ratios[f"fair_{what}_{p}_{ph}_vs_idle"] = round(fig[(ph, what)][p] / fig[("idle", what)][p], 2)
res = json.load(open(out)) if os.path.exists(out) else {"schema": 1, "results": [], "ratios": {}}
res["results"] += rows
res["ratios"].update(ratios)
json.dump(res, open(out, "w"), indent=2)
for r in rows:
    print(f"{r['name']:58} {r['unit']:>5} {r['n']:>4} {r['p50']:>9} {r.get('p95', ''):>9}")
for k, v in ratios.items():
    print(f"{k:42} {v}")
PY
}

# fair_phase PHASE WRITER: $secs s of probes on $nb, beside WRITER's
# writes when there is one (bench_fair's locals).
fair_phase() {
	local phase=$1 w=$2 end
	if [ -n "$w" ]; then
		# MiB written and the seconds it took, printed when the time is up.
		sbx-exec --timeout $((secs + 120))s "$w" -- sh -c "t0=\$(date +%s); n=0
			while [ \$(date +%s) -lt \$((t0 + $secs)) ]; do
				dd if=/dev/zero of=/workspace/w bs=1M count=256 conv=fsync 2>/dev/null; n=\$((n + 1))
			done; echo \$((n * 256)) \$((\$(date +%s) - t0))" >>"$raw/fair-$phase-mib.txt" &
		sleep 2 # the writer under way
	fi
	end=$(($(date +%s) + secs - 2))
	while [ "$(date +%s)" -lt "$end" ]; do
		"$t" 1 sbx-exec "$nb" -- true >>"$raw/fair-$phase-exec.txt"
		"$t" 1 "$append" bench.fair '{"phase":"'"$phase"'"}' >>"$raw/fair-$phase-audit.txt"
	done
	wait
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	SBX_BUILD=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
	export SBX_BUILD PATH=$SBX_BUILD/bin:$PATH SBX_TEMPLATES=${SBX_TEMPLATES:-$SBX_BUILD/templates}
	export SBX_ROOT=$(mktemp -d /tmp/sbx-fair.XXXXXX)
	. "$(dirname "$0")/lib-root.sh"
	trap root_cleanup EXIT
	mkdir -p "$SBX_ROOT/raw"
	bench_fair "$SBX_ROOT/raw" "${BENCH_OUT:-$SBX_BUILD/bench-fair.json}"
fi
