#!/bin/bash
# Boots that never answer (issue 35, item 7): many cold boots, as many at
# a time as the host admits, beside CPU hogs, each create followed by one
# exec and a kill.  Every failure keeps its error (with the console sbx
# put in it) under OUT; the last line is the tally.
#   scripts/stress-boot.sh [-n BOOTS] [-j PARALLEL] [-H HOGS] [-o OUT]
# Defaults: 200 boots, 4 at a time (8 vCPUs of 2-vCPU guests), 2 hogs.
# In a state root of its own (SBX_ROOT); SBX_BUILD as for the tests.
set -u
cd "$(dirname "$0")/.."
n=200 par=4 hogs=2 out=
while getopts n:j:H:o: o; do
	case $o in
	n) n=$OPTARG ;; j) par=$OPTARG ;; H) hogs=$OPTARG ;; o) out=$OPTARG ;;
	*) echo "usage: $0 [-n BOOTS] [-j PARALLEL] [-H HOGS] [-o OUT]" >&2; exit 2 ;;
	esac
done
. scripts/lib-root.sh # root_cgroups_remove
B=${SBX_BUILD:-$PWD/build}
export PATH="$B/bin:$PATH" SBX_TEMPLATES=${SBX_TEMPLATES:-$B/templates}
SBX_ROOT=$(mktemp -d /tmp/sbx-stress.XXXXXX)
export SBX_ROOT
out=${out:-$SBX_ROOT/out}
mkdir -p "$out"
hog_pids=()
cleanup() {
	[ ${#hog_pids[@]} -gt 0 ] && kill "${hog_pids[@]}" 2>/dev/null
	sbx-ps -q 2>/dev/null | sbx-kill >/dev/null 2>&1
	root_cgroups_remove || true
	[ "$out" = "$SBX_ROOT/out" ] || rm -rf "$SBX_ROOT"
}
trap cleanup EXIT
for _ in $(seq "$hogs"); do
	# A hog bounded in time, as every load here is.
	timeout 3600 sh -c 'while :; do :; done' &
	hog_pids+=($!)
done
# One boot: create (a cold boot: this root has no sbx.yaml, so no pool),
# one exec, kill.  Prints
# "ok MS" or "fail I" and keeps the failure's error as OUT/I.err.
one() {
	local i=$1 t0 id ms
	t0=$(date +%s%N)
	if ! id=$(sbx-create -q 2>"$out/$i.err"); then
		echo "fail $i"
		return
	fi
	ms=$((($(date +%s%N) - t0) / 1000000))
	if ! sbx-exec "$id" -- true 2>>"$out/$i.err"; then
		echo "fail $i exec"
	else
		echo "ok $ms"
		rm -f "$out/$i.err"
	fi
	sbx-kill "$id" >/dev/null 2>&1
}
export -f one
export out
start=$(date +%s)
seq "$n" | xargs -P "$par" -I{} bash -c 'one {}' >"$out/results"
secs=$(($(date +%s) - start))
ok=$(grep -c '^ok' "$out/results")
failed=$(grep -c '^fail' "$out/results")
p=$(grep '^ok' "$out/results" | awk '{ print $2 }' | sort -n | awk '
	{ a[NR] = $1 }
	END {
		if (!NR) exit
		i50 = int((NR + 1) / 2); i95 = int(NR * 0.95); if (i95 < 1) i95 = 1
		printf "p50 %d ms, p95 %d ms, max %d ms", a[i50], a[i95], a[NR]
	}')
echo "stress-boot: $n boots, $par at a time, $hogs hogs, ${secs}s: create to ready $p"
for f in "$out"/*.err; do
	[ -f "$f" ] || continue
	echo "--- $(basename "$f")"
	head -c 2000 "$f"
	echo
done
echo "$ok passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
