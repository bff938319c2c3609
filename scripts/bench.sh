#!/bin/bash
# make bench: sbx against its raw floor, side by side in one run.
#  - cold create-to-ready (sbx-create) vs QEMU + kernel + initramfs launched
#    directly until the agent's HELLO (tools/sbx-bench-floor);
#  - `sbx-exec ID -- true` vs an EXEC `true` round trip straight on the agent
#    channel, and the raw PING round trip;
#  - create-to-ready when a warm-pool member is claimed (sbx.yaml(5));
#  - create-to-ready from a snapshot (sbx-create -s) vs QEMU -incoming
#    restores of the same saved VM, its disk unpacked, until the agent
#    answers a PING (sbx-bench-floor's raw restore floor);
#  - creates from a snapshot per second, 1, 4 and 16 at a time;
#  - resume from suspend to first exec vs the same restore floor, and the
#    cost of a suspended session (scripts/bench-suspend.sh).
# Prints a table and writes $SBX_BUILD/bench.json.  Runs: BENCH_RUNS (10).
set -euo pipefail
B=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
RUNS=${BENCH_RUNS:-10}
EXECS=${BENCH_EXECS:-50}
export PATH="$B/bin:$PATH" SBX_TEMPLATES=${SBX_TEMPLATES:-$B/templates}
export SBX_ROOT=$(mktemp -d /tmp/sbx-bench.XXXXXX)
trap 'ls "$SBX_ROOT/var/lib/sbx/sessions" 2>/dev/null | sbx-kill >/dev/null 2>&1; rm -rf "$SBX_ROOT"' EXIT
tmpl=$(ls -dt "$SBX_TEMPLATES"/default@* | head -n1) # the newest, as sbx-create picks
raw=$SBX_ROOT/raw
mkdir -p "$raw"

echo "bench: floor: $RUNS direct boots, 200 pings, $EXECS raw execs" >&2
"$B/tools/sbx-bench-floor" "$tmpl" "$RUNS" 200 "$EXECS" "$RUNS" >"$raw/floor.json"

T=$(dirname "$0")/bench-time.py
echo "bench: sbx-create x $RUNS" >&2
: >"$raw/create.txt"
for i in $(seq "$RUNS"); do
	"$T" 1 sbx-create -q --id "bench-$i" >>"$raw/create.txt"
	sbx-kill "bench-$i"
done

# From a snapshot: a session saved once (idle, as the floor's), restored.
echo "bench: sbx-create -s x $RUNS" >&2
src=$(sbx-create -q)
sbx-exec "$src" -- true
sbx-snapshot save "$src" bench@1 >/dev/null
sbx-kill "$src"
: >"$raw/restore.txt"
for i in $(seq "$RUNS"); do
	"$T" 1 sbx-create -q -s bench@1 --id "restore-$i" >>"$raw/restore.txt"
	sbx-kill "restore-$i"
done
# Throughput: creates from that snapshot per second with 1, 4 and 16
# creates in flight (each worker creates BENCH_PER_WORKER sessions in turn,
# all kept until the round ends, then destroyed).  The host's default
# capacity (4 vCPUs per CPU) would refuse 16 sessions on a 2-core machine:
# raised for this round only.
PER=${BENCH_PER_WORKER:-1}
export SBX_MAX_VCPUS=64 SBX_MAX_STARTING=32
: >"$raw/rate.txt"
for c in 1 4 16; do
	echo "bench: $((c * PER)) creates from a snapshot, $c at a time" >&2
	t0=$(date +%s.%N)
	for w in $(seq "$c"); do
		(for k in $(seq "$PER"); do sbx-create -q -s bench@1 --id "rate-$c-$w-$k" >/dev/null || exit 1; done) &
	done
	fail=0
	for w in $(seq "$c"); do wait -n || fail=1; done
	t1=$(date +%s.%N)
	[ $fail = 0 ] || { echo "bench: a create failed at concurrency $c" >&2; exit 1; }
	echo "$c $((c * PER)) $t0 $t1" >>"$raw/rate.txt"
	ls "$SBX_ROOT/var/lib/sbx/sessions" | grep "^rate-" | sbx-kill >/dev/null
done
unset SBX_MAX_VCPUS SBX_MAX_STARTING
sbx-snapshot rm bench@1

# Warm pool: the same create, served by a member.  sbx-gc --pool-only
# before each run waits for the previous claim's refill (one keeper of the
# pool at a time) and tops the pool up, so each timed create finds one.
echo "bench: sbx-create from the warm pool x $RUNS" >&2
mkdir -p "$SBX_ROOT/etc/sbx"
printf 'pool:\n  templates:\n    default: {size: 1}\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
: >"$raw/claim.txt"
for i in $(seq "$RUNS"); do
	sbx-gc --pool-only >/dev/null
	"$T" 1 sbx-create -q --id "claim-$i" >>"$raw/claim.txt"
	jq -e .from_pool "$SBX_ROOT/var/lib/sbx/sessions/claim-$i/session.json" >/dev/null ||
		{ echo "bench: claim-$i was not served from the pool" >&2; exit 1; }
	sbx-kill "claim-$i"
done
rm "$SBX_ROOT/etc/sbx/sbx.yaml"
sbx-gc --pool-only >/dev/null # after the last refill: empties the pool

echo "bench: sbx-exec true x $EXECS" >&2
id=$(sbx-create -q)
sbx-exec "$id" -- true
"$T" "$EXECS" sbx-exec "$id" -- true >"$raw/exec.txt"
"$T" "$EXECS" /bin/true >"$raw/spawn.txt"
sbx-kill "$id"

# Noisy neighbour: exec latency in session B while session A spins both
# of its vCPUs, with A's VMM uncapped (cpu_limit 2 on a 2-core host) and
# capped (cpu_limit 0.5) by its host cgroup.
echo "bench: noisy neighbour" >&2
printf 'resources:\n  vcpus: 2\n  cpu_limit: 2\n' >"$raw/uncapped.yaml"
printf 'resources:\n  vcpus: 2\n  cpu_limit: 0.5\n' >"$raw/capped.yaml"
b=$(sbx-create -q)
sbx-exec "$b" -- true
"$T" "$EXECS" sbx-exec "$b" -- true >"$raw/nb-idle.txt"
for mode in uncapped capped; do
	a=$(sbx-create -q -p "$raw/$mode.yaml")
	sbx-exec -d "$a" -- sh -c 'while :; do :; done & while :; do :; done' >/dev/null
	sleep 2
	"$T" "$EXECS" sbx-exec "$b" -- true >"$raw/nb-$mode.txt"
	sbx-kill "$a"
done
sbx-kill "$b"

python3 - "$raw" "$B/bench.json" <<'PY'
import json, sys, statistics, platform, os
raw, out = sys.argv[1], sys.argv[2]
floor = json.load(open(f"{raw}/floor.json"))
create = [float(x) for x in open(f"{raw}/create.txt") if x.strip()]
execs = [float(x) for x in open(f"{raw}/exec.txt") if x.strip()]
spawn = [float(x) for x in open(f"{raw}/spawn.txt") if x.strip()]
def pct(v, p):
    v = sorted(v); k = (len(v) - 1) * p / 100; f = int(k); c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)
def row(name, v, unit):
    return {"name": name, "unit": unit, "n": len(v), "p50": round(pct(v, 50), 2), "p95": round(pct(v, 95), 2),
            "min": round(min(v), 2), "max": round(max(v), 2)}
accel = "tcg" if not os.path.exists("/dev/kvm") else "probe (see accel.json)"
rows = [row("create-to-ready (sbx-create)", create, "ms"),
        row("floor: qemu launch -> agent HELLO", floor["boot_ms"], "ms"),
        row("sbx-exec true (end to end)", execs, "ms"),
        row("floor: raw EXEC true on agent channel", floor["exec_true_ms"], "ms"),
        row("floor: raw PING round trip", floor["ping_us"], "us"),
        row("host: spawn /bin/true (harness floor)", spawn, "ms")]
nb = {m: [float(x) for x in open(f"{raw}/nb-{m}.txt") if x.strip()] for m in ("idle", "uncapped", "capped")}
rows += [row("B exec true, neighbour idle", nb["idle"], "ms"),
         row("B exec true, neighbour spins, uncapped", nb["uncapped"], "ms"),
         row("B exec true, neighbour spins, capped 0.5", nb["capped"], "ms")]
claim = [float(x) for x in open(f"{raw}/claim.txt") if x.strip()]
rows += [row("create-to-ready, warm pool claim", claim, "ms")]
restore = [float(x) for x in open(f"{raw}/restore.txt") if x.strip()]
rows += [row("create-to-ready from snapshot (sbx-create -s)", restore, "ms"),
         row("floor: qemu -incoming restore -> agent answers", floor["restore_ms"], "ms")]
ratios = {"create_vs_floor_p50": round(rows[0]["p50"] / rows[1]["p50"], 3),
          "create_vs_floor_p95": round(rows[0]["p95"] / rows[1]["p95"], 3),
          "exec_vs_raw_exec_p50": round(rows[2]["p50"] / rows[3]["p50"], 3),
          "exec_host_overhead_p50_ms": round(rows[2]["p50"] - rows[3]["p50"] - rows[5]["p50"], 2),
          "neighbour_uncapped_vs_idle_p50": round(rows[7]["p50"] / rows[6]["p50"], 3),
          "neighbour_capped_vs_idle_p50": round(rows[8]["p50"] / rows[6]["p50"], 3),
          "pool_claim_vs_create_p50": round(rows[9]["p50"] / rows[0]["p50"], 3),
          "snapshot_vs_restore_floor_p50": round(rows[10]["p50"] / rows[11]["p50"], 3),
          "snapshot_vs_restore_floor_p95": round(rows[10]["p95"] / rows[11]["p95"], 3),
          "floor_save_ms": floor["save_ms"]}
rate = {}
for line in open(f"{raw}/rate.txt"):
    c, n, t0, t1 = line.split()
    rate[f"snapshot_creates_per_s_c{c}"] = round(int(n) / (float(t1) - float(t0)), 2)
ratios.update(rate)
res = {"schema": 1, "host": platform.node(), "kernel": platform.release(), "accel": accel,
       "results": rows, "ratios": ratios}
json.dump(res, open(out, "w"), indent=2)
print(f"{'benchmark':42} {'unit':>4} {'n':>4} {'p50':>9} {'p95':>9} {'min':>9} {'max':>9}")
for r in rows:
    print(f"{r['name']:42} {r['unit']:>4} {r['n']:>4} {r['p50']:>9} {r['p95']:>9} {r['min']:>9} {r['max']:>9}")
for k, v in ratios.items():
    print(f"{k:42} {v}")
print(f"written: {out}")
PY

# Resume from suspend (its own file: scripts/bench-suspend.sh).
. "$(dirname "$0")/bench-suspend.sh"
bench_suspend "$raw" "$B/bench.json"
