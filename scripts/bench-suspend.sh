#!/bin/bash
# Resume from suspend to first exec (issue 15, "Measured"): a session
# suspended to disk (sbx-snapshot suspend), then `sbx-exec ID -- true`,
# which resumes it, timed end to end; against sbx-bench-floor's raw restore
# floor (QEMU -incoming of a saved idle VM until the agent answers a PING).
# Also `sbx-snapshot resume` alone (the VMM restored and running: the rest
# of the first exec is the guest's, whose first command after any restore
# under TCG runs with an empty translation cache), and what one suspended
# session costs: its memory image on disk and its monitor's RSS.
#
# bench.sh sources this and calls bench_suspend RAW OUT after its own
# table, with its floor in RAW/floor.json: the rows and ratios are added to
# OUT (bench.json).  Run alone (scripts/bench-suspend.sh), it measures its
# own floor in a root of its own and prints the rows.
bench_suspend() {
	local raw=$1 out=$2 runs=${BENCH_RUNS:-10} id i t
	t=$(dirname "${BASH_SOURCE[0]}")/bench-time.py
	echo "bench: suspend, then sbx-exec true (and sbx-snapshot resume) x $runs" >&2
	id=$(sbx-create -q)
	sbx-exec "$id" -- true
	: >"$raw/resume.txt"
	: >"$raw/resume-only.txt"
	: >"$raw/suspended.txt"
	for i in $(seq "$runs"); do
		sbx-snapshot suspend "$id" >/dev/null
		local d=$SBX_ROOT/var/lib/sbx/sessions/$id
		echo "$(stat -c %s "$d/suspend/memory.zst") $(ps -o rss= -p "$(jq -r .monitor.pid "$d/session.json")")" \
			>>"$raw/suspended.txt"
		"$t" 1 sbx-exec "$id" -- true >>"$raw/resume.txt"
		sbx-snapshot suspend "$id" >/dev/null
		"$t" 1 sbx-snapshot resume "$id" >>"$raw/resume-only.txt"
	done
	sbx-kill "$id"
	PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")" python3 - "$raw" "$out" <<'PY'
import json, os, sys
raw, out = sys.argv[1], sys.argv[2]
fl = json.load(open(f"{raw}/floor.json"))
floor, floor_exec = fl["restore_ms"], fl.get("restore_exec_ms", [])
resume = [float(x) for x in open(f"{raw}/resume.txt") if x.strip()]
only = [float(x) for x in open(f"{raw}/resume-only.txt") if x.strip()]
img, rss = zip(*[map(int, l.split()) for l in open(f"{raw}/suspended.txt") if l.strip()])
from benchstats import pct, row
rows = [row("resume from suspend to first exec (sbx-exec true)", resume, "ms"),
        row("floor: qemu -incoming restore -> agent answers", floor, "ms"),
        row("resume from suspend alone (sbx-snapshot resume)", only, "ms"),
        row("suspended session: memory image on disk", [x / 1048576 for x in img], "MiB"),
        row("suspended session: its monitor's RSS", [x / 1024 for x in rss], "MiB")]
ratios = {"resume_vs_restore_floor_p50": round(rows[0]["p50"] / rows[1]["p50"], 3),
          "resume_vs_restore_floor_p95": round(rows[0]["p95"] / rows[1]["p95"], 3),
          "resume_only_vs_restore_floor_p50": round(rows[2]["p50"] / rows[1]["p50"], 3)}
# The same restores, until their first raw EXEC `true` is answered: a
# restored guest's first exec, its TCG translations all made afresh, is
# the guest's cost, not sbx's.
if floor_exec:
    rows.append(row("floor: qemu -incoming restore -> first raw EXEC true", floor_exec, "ms"))
    ratios["resume_vs_restore_exec_floor_p50"] = round(rows[0]["p50"] / rows[-1]["p50"], 3)
    ratios["resume_vs_restore_exec_floor_p95"] = round(rows[0]["p95"] / rows[-1]["p95"], 3)
res = json.load(open(out)) if os.path.exists(out) else {"schema": 1, "results": [], "ratios": {}}
res["results"] += rows
res["ratios"].update(ratios)
json.dump(res, open(out, "w"), indent=2)
for r in rows:
    print(f"{r['name']:52} {r['unit']:>4} {r['n']:>4} {r['p50']:>9} {r['p95']:>9} {r['min']:>9} {r['max']:>9}")
for k, v in ratios.items():
    print(f"{k:52} {v}")
PY
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	B=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
	RUNS=${BENCH_RUNS:-10}
	export PATH="$B/bin:$PATH" SBX_TEMPLATES=${SBX_TEMPLATES:-$B/templates}
	export SBX_ROOT=$(mktemp -d /tmp/sbx-bench.XXXXXX)
	. "$(dirname "$0")/lib-root.sh"
	trap root_cleanup EXIT
	tmpl=$(ls -dt "$SBX_TEMPLATES"/default@* | head -n1)
	raw=$SBX_ROOT/raw
	mkdir -p "$raw"
	echo "bench: floor: $RUNS raw restores" >&2
	"$B/tools/sbx-bench-floor" "$tmpl" 1 10 1 "$RUNS" >"$raw/floor.json"
	bench_suspend "$raw" "$raw/bench.json"
fi
