#!/bin/bash
# bench-ab.sh REV: this tree's build against REV's, in turns, in one run.
#
# make bench compares sbx with its raw floor; this compares sbx with an
# earlier sbx, which is what "no slower than before" needs.  Figures of
# different hours are not comparable on this host (the same build's pool
# claim moved from 5.5 to 9.5 ms between two benches a day apart), so
# both builds run here, alternating round by round, each in a state root
# of its own: the hour's drift falls on both.
#
# REV is checked out in a worktree (build/ab/REV), built and given its
# default template (make all image), once.  Rows, each BENCH_AB_ROUNDS (3)
# rounds per build:
#  - cold create to ready (sbx-create), BENCH_AB_CREATES (3) a round;
#  - sbx-exec true on a live session, BENCH_AB_EXECS (30) a round;
#  - pool claim, create to ready, BENCH_AB_CLAIMS (4) a round;
#  - creates from a snapshot per second, 4 at a time, one burst a round;
#  - output streamed by sbx-exec (dd of 32 MiB in 64 KiB writes), MB/s,
#    3 a round (only when BENCH_AB_ROWS names it).
# BENCH_AB_ROWS picks rows (e.g. "create claim"; default: the first four).
# Prints each row's p50 and p95 for both and the ratio (this / REV, above
# 1 is slower; for the rate REV / this), and writes build/bench-ab.json.
set -euo pipefail
[ $# = 1 ] || { echo "usage: bench-ab.sh REV" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-ab.sh: run as root" >&2; exit 1; }
top=$(cd "$(dirname "$0")/.." && pwd)
rev=$(git -C "$top" rev-parse --short=12 "$1^{commit}") || { echo "bench-ab.sh: no commit $1" >&2; exit 2; }
ROUNDS=${BENCH_AB_ROUNDS:-3}
old=$top/build/ab/$rev
if [ ! -d "$old/.git" ] && [ ! -f "$old/.git" ]; then
	git -C "$top" worktree add -q --detach "$old" "$rev"
fi
echo "bench-ab: building $rev (make all image)" >&2
make -s -C "$old" -j"$(nproc)" all >&2
make -s -C "$old" image >&2
make -s -C "$top" -j"$(nproc)" all >&2
raw=$(mktemp -d /tmp/sbx-bench-ab.XXXXXX)
trap 'rm -rf "$raw"' EXIT

# side NAME TREE ROW: one round of ROW with TREE's build, in a state root
# of its own, figures appended to $raw/NAME.ROW.
side() {
	local name=$1 tree=$2 row=$3
	(
		export PATH="$tree/build/bin:$PATH" SBX_TEMPLATES=$tree/build/templates
		SBX_ROOT=$(mktemp -d /tmp/sbx-bench-ab-root.XXXXXX)
		export SBX_ROOT
		# shellcheck source=./lib-root.sh
		. "$top/scripts/lib-root.sh"
		trap root_cleanup EXIT
		T=$top/scripts/bench-time.py
		out=$raw/$name.$row
		case $row in
		create)
			for _ in $(seq "${BENCH_AB_CREATES:-3}"); do
				BENCH_TIME_OUT=$SBX_ROOT/id "$T" 1 sbx-create -q >>"$out"
			done
			;;
		exec)
			id=$(sbx-create -q)
			sbx-exec "$id" -- true
			"$T" "${BENCH_AB_EXECS:-30}" sbx-exec "$id" -- true >>"$out"
			;;
		claim)
			mkdir -p "$SBX_ROOT/etc/sbx"
			printf 'pool:\n  templates:\n    default: {size: 1}\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
			for _ in $(seq "${BENCH_AB_CLAIMS:-4}"); do
				sbx-gc --pool-only >/dev/null # waits for the refill, tops up
				: >"$SBX_ROOT/id"
				BENCH_TIME_OUT=$SBX_ROOT/id "$T" 1 sbx-create -q >>"$out"
				id=$(cat "$SBX_ROOT/id")
				jq -e .from_pool "$SBX_ROOT/var/lib/sbx/sessions/$id/session.json" >/dev/null ||
					{ echo "bench-ab: $id was not served from the pool" >&2; exit 1; }
				sbx-kill "$id"
			done
			rm "$SBX_ROOT/etc/sbx/sbx.yaml"
			sbx-gc --pool-only >/dev/null
			;;
		stream)
			id=$(sbx-create -q)
			sbx-exec "$id" -- true
			for _ in 1 2 3; do
				"$T" 1 sh -c "sbx-exec '$id' -- dd if=/dev/zero bs=65536 count=512 2>/dev/null >/dev/null" |
					awk '{ printf "%.2f\n", 33.554432 / ($1 / 1000) }' >>"$out"
			done
			;;
		rate)
			src=$(sbx-create -q)
			sbx-exec "$src" -- true
			sbx-snapshot save "$src" ab@1 >/dev/null
			sbx-kill "$src"
			export SBX_MAX_VCPUS=64 SBX_MAX_STARTING=32
			t0=$(date +%s.%N)
			for w in 1 2 3 4; do sbx-create -q -s ab@1 >"$SBX_ROOT/ids.$w" & done
			for _ in 1 2 3 4; do wait -n; done
			t1=$(date +%s.%N)
			awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", 4 / (b - a) }' >>"$out"
			cat "$SBX_ROOT"/ids.* | sbx-kill >/dev/null
			;;
		esac
	)
}

for row in ${BENCH_AB_ROWS:-create exec claim rate}; do
	echo "bench-ab: $row, $ROUNDS rounds of each build" >&2
	for r in $(seq "$ROUNDS"); do
		# Each build goes first in every other round.
		if [ $((r % 2)) = 1 ]; then
			side this "$top" "$row"
			side base "$old" "$row"
		else
			side base "$old" "$row"
			side this "$top" "$row"
		fi
	done
done

python3 - "$raw" "$top/build/bench-ab.json" "$rev" "$(git -C "$top" rev-parse --short=12 HEAD)" <<'PY'
import json, sys, os
raw, out, base, this = sys.argv[1:5]
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]
rows = {"create": ("cold create to ready", "ms"), "exec": ("sbx-exec true", "ms"),
        "claim": ("pool claim, create to ready", "ms"), "rate": ("creates/s from a snapshot, c4", "/s"),
        "stream": ("sbx-exec output stream, dd 32M", "MB/s")}
res = []
print(f"{'figure':34} {'unit':4} {'n':>3} {base[:8]+' p50':>13} {'p95':>8} {'this p50':>10} {'p95':>8} {'ratio':>6}")
for k, (name, unit) in rows.items():
    if not os.path.exists(os.path.join(raw, "base." + k)):
        continue
    a = [float(x) for x in open(os.path.join(raw, "base." + k))]
    b = [float(x) for x in open(os.path.join(raw, "this." + k))]
    pa, pb = pct(a, .5), pct(b, .5)
    ratio = pa / pb if unit in ("/s", "MB/s") else pb / pa
    res.append({"name": name, "unit": unit, "n": len(b), "base": {"p50": pa, "p95": pct(a, .95)},
                "this": {"p50": pb, "p95": pct(b, .95)}, "ratio_p50": round(ratio, 3)})
    print(f"{name:34} {unit:4} {len(b):>3} {pa:>13.2f} {pct(a, .95):>8.2f} {pb:>10.2f} {pct(b, .95):>8.2f} {ratio:>6.2f}")
json.dump({"schema": 1, "base": base, "this": this, "loadavg_at_end": os.getloadavg(), "rows": res},
          open(out, "w"), indent=1)
print(f"(ratio: this over {base}, above 1 is slower; rates: {base} over this)")
PY
