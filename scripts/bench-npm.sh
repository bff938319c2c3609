# make bench: the package cache's install-script check (packages.npm_scripts:
# deny, proxy/npmtgz.c) on a large real npm package, the host's own npm
# (about 3 MiB packed, 19 MiB and 2500 files unpacked), packed the way npm
# packs (one top directory, gzip), beside its floor: gzip -dc | tar -t of
# the same file, which unpacks and lists it and checks nothing.  Both in
# the same run, alternating, BENCH_NPM_RUNS times (20; 0 leaves it out).
# The check runs in-process (tools/sbx-npm-inspect), the floor as two
# processes: the floor includes its spawns, as the check in the proxy
# includes nothing of the kind.
bench_npm() {
	local raw=$1 out=$2 runs=${BENCH_NPM_RUNS:-20} npm_dir t i
	[ "$runs" -gt 0 ] || return 0
	npm_dir=$(dirname "$(readlink -f "$(command -v npm)")")/..
	[ -f "$npm_dir/package.json" ] || { echo "bench: npm check: no npm package on this host" >&2; return 0; }
	t=$(dirname "${BASH_SOURCE[0]}")/bench-time.py
	rm -rf "$raw/npm-pkg" && mkdir -p "$raw/npm-pkg"
	cp -a "$npm_dir" "$raw/npm-pkg/package"
	tar -C "$raw/npm-pkg" -czf "$raw/npm.tgz" package
	echo "bench: npm install-script check: $runs runs on $(du -k "$raw/npm.tgz" | cut -f1) KiB ($(du -sk "$raw/npm-pkg" | cut -f1) KiB unpacked)" >&2
	: >"$raw/npm-check.txt"
	: >"$raw/npm-floor.txt"
	for i in $(seq "$runs"); do
		"${SBX_BUILD:-$B}/tools/sbx-npm-inspect" "$raw/npm.tgz" 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["ms"][0])' >>"$raw/npm-check.txt"
		"$t" 1 sh -c 'gzip -dc "$1" | tar -tf - >/dev/null' sh "$raw/npm.tgz" >>"$raw/npm-floor.txt"
	done
	PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")" python3 - "$raw" "$out" <<'PY'
import json, os, sys
raw, out = sys.argv[1], sys.argv[2]
from benchstats import pct, row
load = lambda f: [float(x) for x in open(f"{raw}/{f}") if x.strip()]
a = row("npm install-script check of npm's own tarball", load("npm-check.txt"), "ms")
b = row("floor: gzip -dc | tar -t of the same tarball", load("npm-floor.txt"), "ms")
res = json.load(open(out)) if os.path.exists(out) else {"schema": 1, "results": [], "ratios": {}, "versus": []}
res["results"] += [a, b]
res.setdefault("versus", []).append({"figure": a["name"], "floor": b["name"], "unit": "ms", "p50": a["p50"], "p95": a["p95"],
                                     "floor_p50": b["p50"], "floor_p95": b["p95"],
                                     "ratio_p50": round(a["p50"] / b["p50"], 3), "ratio_p95": round(a["p95"] / b["p95"], 3)})
res["ratios"]["npm_check_vs_untar_p50"] = round(a["p50"] / b["p50"], 3)
res["ratios"]["npm_check_vs_untar_p95"] = round(a["p95"] / b["p95"], 3)
json.dump(res, open(out, "w"), indent=2)
for r in (a, b):
    print(f"{r['name']:54} {r['unit']:>4} {r['n']:>4} {r['p50']:>9} {r['p95']:>9} {r['min']:>9} {r['max']:>9}")
print(f"{'npm_check_vs_untar_p50':42} {res['ratios']['npm_check_vs_untar_p50']}")
print(f"{'npm_check_vs_untar_p95':42} {res['ratios']['npm_check_vs_untar_p95']}")
PY
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	SBX_BUILD=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
	raw=$(mktemp -d /tmp/sbx-bench-npm.XXXXXX)
	trap 'rm -rf "$raw"' EXIT
	bench_npm "$raw" "$SBX_BUILD/bench.json"
fi
