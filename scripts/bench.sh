#!/bin/bash
# make bench: sbx against its raw floor, side by side in one run.
#  - cold create-to-ready (sbx-create) vs QEMU + kernel + initramfs launched
#    directly until the agent's HELLO (tools/sbx-bench-floor);
#  - `sbx-exec ID -- true` vs an EXEC `true` round trip straight on the agent
#    channel, and the raw PING round trip;
#  - create-to-ready when a warm-pool member is claimed (sbx.yaml(5));
#  - create-to-ready from a snapshot (sbx-create -s) vs QEMU -incoming
#    restores of the same saved VM, its disk unpacked, until the agent
#    answers a PING, one after each create (sbx-bench-floor restore); and
#    its steps (SBX_TRACE: boot.monitor), the load among them beside the
#    floor's;
#  - creates from a snapshot per second, 1, 4 and 16 at a time, beside raw
#    QEMU -incoming restores of it at the same concurrency, a round of them
#    beside each round of creates (sbx-bench-floor rate; the floor first
#    in every other round), BENCH_RATE_ROUNDS (7) rounds of each,
#    compared by their medians;
#  - the first exec after a create (cold and from the pool) vs the next one;
#  - a pool claim's steps (SBX_TRACE, trace.h: the member's monitor and
#    sbx-create) vs a paused VM's cont + PING;
#  - guest-to-host output (sbx-exec of dd, 32 MiB in 64 KiB writes) vs the
#    raw stream of the same dd on the agent channel, and the same 32 MiB
#    from busybox head -c (a producer slower than the stream: it is what
#    the stream row measured before Dec 2026);
#  - sbx-cp upload and download of BENCH_CP_MIB (256) MiB vs tar moving the
#    same file through the same guest disk;
#  - resume from suspend to first exec vs the same restore floor, and the
#    cost of a suspended session (scripts/bench-suspend.sh);
#  - density: BENCH_DENSITY_N (200) sessions, at most 8 running, the rest
#    suspended by their idle policy, and a random one's `sbx-exec true`
#    (p50/p95/p99), with disk and memory per suspended session
#    (scripts/bench-density.sh);
#  - fairness: a neighbour's `sbx-exec true` and audit appends (p50/p95)
#    with no writer, beside a session writing flat out to its disk under
#    the default resources.disk_bps/disk_iops, and beside one without
#    limits, as ratios to the first (scripts/bench-fair.sh; run alone:
#    scripts/bench-fair.sh);
#  - sbx-serve: the E2B SDK's create-to-first-command, commands.run and
#    streamed output against the CLI's, and 64 SDK clients at once
#    (scripts/bench-serve.sh);
#  - apt-get install jq through the package cache, cold and warm, against
#    the same install straight from Debian's archive (scripts/bench-apt.sh);
#  - npm ci of a 25-package locked project through the cache, cold and
#    warm, against the same straight from npm's registry
#    (scripts/bench-npm-ci.sh).
# Prints a table, then each figure beside its floor with the ratio, and
# writes $SBX_BUILD/bench.json.  Runs: BENCH_RUNS (10).
set -euo pipefail
B=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
RUNS=${BENCH_RUNS:-10}
EXECS=${BENCH_EXECS:-50}
export PATH="$B/bin:$PATH" SBX_TEMPLATES=${SBX_TEMPLATES:-$B/templates}
export SBX_ROOT=$(mktemp -d /tmp/sbx-bench.XXXXXX)
. "$(dirname "$0")/lib-root.sh"
trap root_cleanup EXIT
tmpl=$(ls -dt "$SBX_TEMPLATES"/default@* | head -n1) # the newest, as sbx-create picks
raw=$SBX_ROOT/raw
mkdir -p "$raw"

echo "bench: floor: $RUNS direct boots, 200 pings, $EXECS raw execs" >&2
	"$B/tools/sbx-bench-floor" "$tmpl" "$RUNS" 200 "$EXECS" "$RUNS" >"$raw/floor.json"

T=$(dirname "$0")/bench-time.py
echo "bench: sbx-create x $RUNS" >&2
: >"$raw/create.txt"
: >"$raw/first.txt"
: >"$raw/later.txt"
: >"$raw/create-trace.jsonl"
for i in $(seq "$RUNS"); do
	# Traced: the monitor's warm-up (boot.warm) and the guest's part of
	# the first and the next exec (exec.monitor), in that order.
	SBX_TRACE=$raw/create-trace.jsonl "$T" 1 sbx-create -q --id "bench-$i" >>"$raw/create.txt"
	"$T" 1 sbx-exec "bench-$i" -- echo hi >>"$raw/first.txt"
	"$T" 1 sbx-exec "bench-$i" -- echo hi >>"$raw/later.txt"
	sbx-kill "bench-$i"
done

# From a snapshot: a session saved once (idle, as the floor's), restored,
# each create followed by one raw restore of the same saved VM (the
# floor's restore subcommand), so the machine's drift falls on both.
echo "bench: sbx-create -s x $RUNS" >&2
src=$(sbx-create -q)
sbx-exec "$src" -- true
sbx-snapshot save "$src" bench@1 >/dev/null
sbx-kill "$src"
snapdir=$SBX_ROOT/var/lib/sbx/snapshots/_/bench@1
[ -f "$snapdir/memory.zst" ] || { echo "bench: no saved VM at $snapdir" >&2; exit 1; }
: >"$raw/restore-floor.jsonl"
: >"$raw/restore.txt"
: >"$raw/restore-trace.jsonl"
for i in $(seq "$RUNS"); do
	: >"$raw/id" # a default ID, as the rate rounds below explain
	SBX_TRACE=$raw/restore-trace.jsonl BENCH_TIME_OUT=$raw/id "$T" 1 sbx-create -q -s bench@1 >>"$raw/restore.txt"
	sbx-kill "$(cat "$raw/id")"
	"$B/tools/sbx-bench-floor" restore "$tmpl" "$snapdir" >>"$raw/restore-floor.jsonl"
done
# Throughput: creates from that snapshot per second with 1, 4 and 16
# creates in flight (each worker creates BENCH_PER_WORKER sessions in turn,
# all kept until the round ends, then destroyed), BENCH_RATE_ROUNDS rounds
# at each (one round is one wall time of a few creates: its spread is the
# machine's, so the rounds' median is what is compared), each round
# beside one of raw restores of the same saved VM at the same
# concurrency (after it, or in even rounds before it), left running
# until the last is answered as the sessions are.  The sessions get
# default IDs, as a user's `sbx-create -s` does: an ID as long as the
# source's lets the guest overwrite /etc/hosts in place, where another
# length writes a new file and renames it (under TCG ~20 ms more of
# QEMU's time per create; until Dec 2026 these rounds used --id
# rate-C-W-K, i.e. that path).  The host's default capacity (4 vCPUs per
# CPU) would refuse 16 sessions on a 2-core machine: raised for these
# rounds only.
PER=${BENCH_PER_WORKER:-1}
export SBX_MAX_VCPUS=64 SBX_MAX_STARTING=32
: >"$raw/rate.txt"
: >"$raw/rate-floor.txt"
ROUNDS=${BENCH_RATE_ROUNDS:-7}
floor_round() { # C: one round of raw restores, C at a time
	printf '%s ' "$1" >>"$raw/rate-floor.txt"
	"$B/tools/sbx-bench-floor" rate "$tmpl" "$snapdir" "$1" "$PER" >>"$raw/rate-floor.txt"
}
for c in 1 4 16; do
	echo "bench: $ROUNDS x $((c * PER)) creates from a snapshot, $c at a time" >&2
	for round in $(seq "$ROUNDS"); do
		# Every other round the floor goes first: a round right after
		# the other side's VMs were freed and one after a longer gap
		# can differ by 2x here (this host hands freed memory back to
		# its own hypervisor after ~2 s, and touching it again costs
		# page faults there), so each side gets both places.
		[ $((round % 2)) = 1 ] || floor_round "$c"
		t0=$(date +%s.%N)
		for w in $(seq "$c"); do
			(for k in $(seq "$PER"); do sbx-create -q -s bench@1 >>"$raw/rate-ids.$w" || exit 1; done) &
		done
		fail=0
		for w in $(seq "$c"); do wait -n || fail=1; done
		t1=$(date +%s.%N)
		[ $fail = 0 ] || { echo "bench: a create failed at concurrency $c" >&2; exit 1; }
		echo "$c $((c * PER)) $t0 $t1" >>"$raw/rate.txt"
		cat "$raw"/rate-ids.* | sbx-kill >/dev/null
		rm -f "$raw"/rate-ids.*
		[ $((round % 2)) = 0 ] || floor_round "$c"
	done
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
: >"$raw/claim-first.txt"
: >"$raw/claim-later.txt"
: >"$raw/trace.jsonl"
for i in $(seq "$RUNS"); do
	# The members sbx-gc boots inherit SBX_TRACE, and trace their claim.
	SBX_TRACE=$raw/trace.jsonl sbx-gc --pool-only >/dev/null
	: >"$raw/id" # a default ID, as a user's claim has
	SBX_TRACE=$raw/trace.jsonl BENCH_TIME_OUT=$raw/id "$T" 1 sbx-create -q >>"$raw/claim.txt"
	id=$(cat "$raw/id")
	jq -e .from_pool "$SBX_ROOT/var/lib/sbx/sessions/$id/session.json" >/dev/null ||
		{ echo "bench: $id was not served from the pool" >&2; exit 1; }
	"$T" 1 sbx-exec "$id" -- echo hi >>"$raw/claim-first.txt"
	"$T" 1 sbx-exec "$id" -- echo hi >>"$raw/claim-later.txt"
	sbx-kill "$id"
done
rm "$SBX_ROOT/etc/sbx/sbx.yaml"
sbx-gc --pool-only >/dev/null # after the last refill: empties the pool

echo "bench: sbx-exec true x $EXECS" >&2
# Traced (SBX_TRACE, trace.h): the session's monitor (it inherits the
# variable) and each sbx-exec write their exec's steps, so the guest's
# part of each exec (the monitor's EXEC sent to EXIT read) is measured on
# the same exec, not taken from the raw floor's simpler request.
: >"$raw/exec-trace.jsonl"
id=$(SBX_TRACE=$raw/exec-trace.jsonl sbx-create -q)
sbx-exec "$id" -- true
: >"$raw/exec-spawn.txt"
SBX_TRACE=$raw/exec-trace.jsonl BENCH_TIME_SPAWN=$raw/exec-spawn.txt "$T" "$EXECS" sbx-exec "$id" -- true >"$raw/exec.txt"
cp "$raw/exec-trace.jsonl" "$raw/exec-steps.jsonl" # before the session's later execs add to it
"$T" "$EXECS" /bin/true >"$raw/spawn.txt"
echo "bench: output stream x 3 (dd, head -c), sbx-cp of ${BENCH_CP_MIB:-256} MiB" >&2
# dd of /dev/zero in 64 KiB blocks costs the guest little, so the stream
# itself is measured; busybox head -c alone, into /dev/null in the guest,
# makes only ~30 MB/s under TCG.
"$T" 3 sh -c "sbx-exec '$id' -- dd if=/dev/zero bs=65536 count=512 2>/dev/null >/dev/null" >"$raw/stream.txt"
"$T" 3 sh -c "sbx-exec '$id' -- head -c 33554432 /dev/zero >/dev/null" >"$raw/stream-head.txt"
CP=${BENCH_CP_MIB:-256}
RUNS_CP=${BENCH_CP_RUNS:-3}
head -c "$((CP << 20))" /dev/urandom >"$raw/big.bin"
# A session of its own, whose transfer budget (files.max_session_transfer,
# 1 GiB by default) covers every round's upload and download.
printf 'files:\n  max_transfer: %sM\n  max_session_transfer: %sM\n' "$CP" "$((CP * RUNS_CP * 2 + 64))" >"$raw/cp.yaml"
cpid=$(sbx-create -q -p "$raw/cp.yaml")
sbx-exec "$cpid" -- mkdir -p /workspace/floor
: >"$raw/cp-up.txt"; : >"$raw/cp-down.txt"; : >"$raw/tar-up.txt"; : >"$raw/tar-down.txt"
# BENCH_CP_RUNS rounds (3), each figure beside its floor in the same
# round: one run of each swung the floor by a fifth from one bench to
# the next.
for _ in $(seq "$RUNS_CP"); do
	"$T" 1 sbx-cp "$raw/big.bin" "$cpid:/workspace/" >>"$raw/cp-up.txt"
	# A download is paced by output credit (design.md, Flow control): the
	# client gets every byte however far past output_cap, so a failure
	# here is a bug, not a row to leave out.
	"$T" 1 sbx-cp "$cpid:/workspace/big.bin" "$raw/down.bin" >>"$raw/cp-down.txt" ||
		{ echo "bench: sbx-cp download of $CP MiB failed" >&2; exit 1; }
	cmp -s "$raw/big.bin" "$raw/down.bin" || { echo "bench: sbx-cp round trip differs" >&2; exit 1; }
	rm -f "$raw/down.bin"
	# The floors: tar moving the same file through the same disk in the
	# guest (read from it and written back; read from it into a pipe).
	"$T" 1 sbx-exec "$cpid" -- sh -c 'tar -cf - -C /workspace big.bin | tar -xf - -C /workspace/floor' >>"$raw/tar-up.txt"
	"$T" 1 sbx-exec "$cpid" -- sh -c 'tar -cf - -C /workspace big.bin | wc -c >/dev/null' >>"$raw/tar-down.txt"
done
rm -f "$raw/big.bin"
sbx-kill "$id" "$cpid"

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

# The guest's clock against the host's over BENCH_CLOCK_MIN busy minutes
# (issue 17's figure is 30: BENCH_CLOCK_MIN=30); 0 leaves it out.
if [ "${BENCH_CLOCK_MIN:-2}" != 0 ]; then
	echo "bench: the guest's clock, ${BENCH_CLOCK_MIN:-2} busy minutes" >&2
	BENCH_CLOCK_MIN=${BENCH_CLOCK_MIN:-2} "$(dirname "$0")/bench-clock.sh" >"$raw/clock.json" 2>/dev/null || : >"$raw/clock.json"
fi

PYTHONPATH="$(dirname "$0")" python3 - "$raw" "$B/bench.json" <<'PY'
import json, sys, statistics, platform, os
raw, out = sys.argv[1], sys.argv[2]
floor = json.load(open(f"{raw}/floor.json"))
create = [float(x) for x in open(f"{raw}/create.txt") if x.strip()]
execs = [float(x) for x in open(f"{raw}/exec.txt") if x.strip()]
spawn = [float(x) for x in open(f"{raw}/spawn.txt") if x.strip()]
from benchstats import pct, row
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
rfloor = [json.loads(l) for l in open(f"{raw}/restore-floor.jsonl") if l.strip()]
rows += [row("create-to-ready from snapshot (sbx-create -s)", restore, "ms"),
         row("floor: raw restore of the same snapshot -> agent answers", [x["restore_ms"] for x in rfloor], "ms")]
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
# Creates per second from a snapshot, per round; the rounds' median and
# the raw restores' median at the same concurrency.
rate, rounds, frounds = {}, {}, {}
for line in open(f"{raw}/rate.txt"):
    c, n, t0, t1 = line.split()
    rounds.setdefault(c, []).append(int(n) / (float(t1) - float(t0)))
for line in open(f"{raw}/rate-floor.txt"):
    c, r = line.split(" ", 1)
    frounds.setdefault(c, []).append(json.loads(r)["rate"])
rate_rows = []
for c, v in rounds.items():
    rate_rows.append((f"creates/s from a snapshot, {c} at a time (per round)", v))
    rate[f"snapshot_creates_per_s_c{c}"] = round(statistics.median(v), 2)
    fl = frounds.get(c)
    if fl:
        rate_rows.append((f"floor: raw restores/s, {c} at a time (per round)", fl))
        rate[f"floor_raw_restores_per_s_c{c}"] = round(statistics.median(fl), 2)
        # > 1: sbx-create -s is that much slower than raw restores
        rate[f"snapshot_creates_vs_raw_c{c}"] = round(statistics.median(fl) / statistics.median(v), 3)
ratios.update(rate)

def load(name):
    return [float(x) for x in open(f"{raw}/{name}.txt") if x.strip()]
byname = {r["name"]: r for r in rows}
def add(name, v, unit):
    if not v:
        return None
    r = row(name, v, unit); rows.append(r); byname[name] = r; return r
# Host-side overhead of an exec: end to end minus the raw EXEC round trip
# (per percentile), and minus the harness's own spawn of a process.
ov = {"name": "sbx-exec true host-side overhead (p50 - raw EXEC p50 - spawn p50)", "unit": "ms", "n": len(execs),
      "p50": round(byname["sbx-exec true (end to end)"]["p50"] - byname["floor: raw EXEC true on agent channel"]["p50"]
                   - byname["host: spawn /bin/true (harness floor)"]["p50"], 2),
      "p95": round(byname["sbx-exec true (end to end)"]["p95"] - byname["floor: raw EXEC true on agent channel"]["p95"]
                   - byname["host: spawn /bin/true (harness floor)"]["p95"], 2)}
ov["min"] = ov["max"] = None
rows.append(ov); byname[ov["name"]] = ov
# The same, measured on each exec itself: its end to end time minus the
# guest's part (the monitor's EXEC written to EXIT read: audit,
# guest_started and guest_exit), minus the harness's spawn p50.  What is
# left is sbx's host side: the client's start, connect and request, the
# monitor's work before the EXEC and after the EXIT, and the wake-ups.
tr = {"exec.monitor": [], "exec.client": []}
for line in open(f"{raw}/exec-steps.jsonl"):
    t = json.loads(line)
    if t.get("ok") and t["trace"] in tr:
        tr[t["trace"]].append(t)
mon = tr["exec.monitor"][-len(execs):] # the untimed first exec is not the client's
def gpart(t):
    return t["steps"]["audit"] + t["steps"]["guest_started"] + t["steps"]["guest_exit"]
guest = [gpart(t) for t in mon]
for who, ts in tr.items():
    for k in (ts[0]["steps"] if ts else {}):
        add(f"exec step: {who} {k}", [t["steps"][k] for t in ts if k in t["steps"]], "ms")
    add(f"exec step: {who} total", [t["total_ms"] for t in ts], "ms")
add("sbx-exec true, guest side (monitor: EXEC sent -> EXIT read)", guest, "ms")
# The creates' traces: each session's boot.warm, then its first and next
# exec.monitor.
warm, gfirst, glater, seen = [], [], [], None
for line in open(f"{raw}/create-trace.jsonl"):
    t = json.loads(line)
    if t["trace"] == "boot.warm":
        seen = 0
        if t.get("ok"):
            warm.append(t["total_ms"])
    elif t["trace"] == "exec.monitor" and t.get("ok") and seen is not None:
        if seen < 2:
            (gfirst if seen == 0 else glater).append(gpart(t))
        seen += 1
add("boot step: the monitor's warm-up exec (boot.warm)", warm, "ms")
add("first exec after create, guest side (echo hi)", gfirst, "ms")
add("later exec after create, guest side (echo hi)", glater, "ms")
# Each exec's spawn floor is /bin/true timed just before it (bench-time.py,
# BENCH_TIME_SPAWN): the harness's fork and exec cost varies by 2x from
# minute to minute here, and a median from another loop moved this figure
# by as much as the figure itself.
espawn = load("exec-spawn")
if len(mon) == len(execs) == len(espawn):
    add("host: spawn /bin/true, just before each sbx-exec (paired floor)", espawn, "ms")
    r = add("sbx-exec true host side, per exec (end to end - guest side - paired spawn)",
            [e - g - s for e, g, s in zip(execs, guest, espawn)], "ms")
    ratios["exec_host_side_p50_ms"], ratios["exec_host_side_p95_ms"] = r["p50"], r["p95"]
add("first exec after create (echo hi)", load("first"), "ms")
add("later exec after create (echo hi)", load("later"), "ms")
add("first exec after a pool claim (echo hi)", load("claim-first"), "ms")
add("later exec after a pool claim (echo hi)", load("claim-later"), "ms")
add("floor: paused VM cont + PING", floor["cont_ping_ms"], "ms")
mib32 = 33554432 / 1e6
add("output stream, sbx-exec dd 32M (64 KiB writes)", [mib32 / (ms / 1000) for ms in load("stream")], "MB/s")
add("floor: raw stream on agent channel (same dd)", floor["stream_mb_s"], "MB/s")
add("output stream, sbx-exec head -c 32M (producer-bound)", [mib32 / (ms / 1000) for ms in load("stream-head")], "MB/s")
cpb = int(os.environ.get("BENCH_CP_MIB", "256"))
add(f"sbx-cp upload {cpb} MiB", load("cp-up"), "ms")
add(f"floor: guest tar through its disk, {cpb} MiB", load("tar-up"), "ms")
add(f"sbx-cp download {cpb} MiB", load("cp-down"), "ms")
add(f"floor: guest tar from its disk to a pipe, {cpb} MiB", load("tar-down"), "ms")
for name, v in rate_rows:
    add(name, v, "1/s")
# sbx-create -s, step by step in its monitor (SBX_TRACE: boot.monitor),
# and the part that is the floor's load: the disk unpacked, QEMU started,
# the memory image sent and loaded, paused.
boot = [json.loads(l) for l in open(f"{raw}/restore-trace.jsonl")]
boot = [t for t in boot if t["trace"] == "boot.monitor" and t.get("ok")]
for k in (boot[0]["steps"] if boot else {}):
    add(f"snapshot create step: {k}", [t["steps"][k] for t in boot if k in t["steps"]], "ms")
add("snapshot create step: monitor total", [t["total_ms"] for t in boot], "ms")
LOAD = ("disk", "listen", "cgroup", "vmmout", "vmm_spawn", "pump", "vm_boot")
add("snapshot create: load (disk .. vm_boot)", [sum(t["steps"].get(k, 0) for k in LOAD) for t in boot], "ms")
add("floor: raw restore of the same snapshot, load (unpacked, loaded, paused)", [x["restore_load_ms"] for x in rfloor], "ms")
# The claim's steps, from SBX_TRACE: the member's monitor and sbx-create.
steps = {}
for line in open(f"{raw}/trace.jsonl"):
    t = json.loads(line)
    if not t.get("ok") or t["trace"] in ("boot.monitor", "create.pool"): # the members' own boots
        continue
    steps.setdefault((t["trace"], "total"), []).append(t["total_ms"])
    for k, v in t["steps"].items():
        steps.setdefault((t["trace"], k), []).append(v)
for (who, k), v in steps.items():
    add(f"claim step: {who} {k}", v, "ms")
# What the library call does not hold: the process's start and exit, and
# the harness's wait (create.client begins in sbx_session_create).
cc = steps.get(("create.client", "total"), [])
if len(cc) == len(load("claim")):
    add("claim step: sbx-create outside create.client (spawn, exit, wake-up)",
        [e - c for e, c in zip(load("claim"), cc)], "ms")

# Each figure beside its floor.  "lower" figures are times (ratio figure /
# floor); "higher" are rates (ratio floor / figure, so > 1 is slower too).
pairs = [("create-to-ready (sbx-create)", "floor: qemu launch -> agent HELLO", "lower"),
         ("sbx-exec true (end to end)", "floor: raw EXEC true on agent channel", "lower"),
         ("create-to-ready, warm pool claim", "floor: paused VM cont + PING", "lower"),
         ("create-to-ready from snapshot (sbx-create -s)", "floor: raw restore of the same snapshot -> agent answers", "lower"),
         ("snapshot create: load (disk .. vm_boot)", "floor: raw restore of the same snapshot, load (unpacked, loaded, paused)", "lower"),
         ("creates/s from a snapshot, 4 at a time (per round)", "floor: raw restores/s, 4 at a time (per round)", "higher"),
         ("creates/s from a snapshot, 16 at a time (per round)", "floor: raw restores/s, 16 at a time (per round)", "higher"),
         ("first exec after create (echo hi)", "later exec after create (echo hi)", "lower"),
         ("first exec after a pool claim (echo hi)", "later exec after a pool claim (echo hi)", "lower"),
         ("first exec after create, guest side (echo hi)", "later exec after create, guest side (echo hi)", "lower"),
         ("output stream, sbx-exec dd 32M (64 KiB writes)", "floor: raw stream on agent channel (same dd)", "higher"),
         (f"sbx-cp upload {cpb} MiB", f"floor: guest tar through its disk, {cpb} MiB", "lower"),
         (f"sbx-cp download {cpb} MiB", f"floor: guest tar from its disk to a pipe, {cpb} MiB", "lower")]
versus = []
for a, b, better in pairs:
    if a not in byname or b not in byname:
        continue
    x, y = byname[a], byname[b]
    rp50 = x["p50"] / y["p50"] if better == "lower" else y["p50"] / x["p50"]
    rp95 = x["p95"] / y["p95"] if better == "lower" else y["p95"] / x["p95"]
    versus.append({"figure": a, "floor": b, "unit": x["unit"], "p50": x["p50"], "p95": x["p95"],
                   "floor_p50": y["p50"], "floor_p95": y["p95"], "ratio_p50": round(rp50, 3), "ratio_p95": round(rp95, 3)})
clock = None
if os.path.exists(f"{raw}/clock.json") and os.path.getsize(f"{raw}/clock.json"):
    clock = json.load(open(f"{raw}/clock.json"))
    ratios["clock_offset_max_ms"] = clock["offset_max_ms"]
    ratios["clock_offset_p95_ms"] = clock["offset_p95_ms"]
    ratios["clock_minutes"] = clock["minutes"]
res = {"schema": 1, "host": platform.node(), "kernel": platform.release(), "accel": accel, "clock": clock,
       "loadavg_at_end": open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else None,
       "results": rows, "ratios": ratios, "versus": versus}
json.dump(res, open(out, "w"), indent=2)
print(f"{'benchmark':54} {'unit':>4} {'n':>4} {'p50':>9} {'p95':>9} {'min':>9} {'max':>9}")
for r in rows:
    print(f"{r['name']:54} {r['unit']:>4} {r['n']:>4} {r['p50']:>9} {r['p95']:>9} {str(r['min']):>9} {str(r['max']):>9}")
print()
print(f"{'figure':46} {'p50':>9} {'p95':>9}  {'floor':46} {'p50':>9} {'p95':>9} {'x p50':>6} {'x p95':>6}")
for v in versus:
    print(f"{v['figure']:46} {v['p50']:>9} {v['p95']:>9}  {v['floor']:46} {v['floor_p50']:>9} {v['floor_p95']:>9} "
          f"{v['ratio_p50']:>6} {v['ratio_p95']:>6}")
print()
for k, v in ratios.items():
    print(f"{k:42} {v}")
print(f"written: {out}")
PY

# Resume from suspend (its own file: scripts/bench-suspend.sh).
. "$(dirname "$0")/bench-suspend.sh"
bench_suspend "$raw" "$B/bench.json"

# Density: 200 sessions, at most 8 running, the rest suspended
# (scripts/bench-density.sh; BENCH_DENSITY_N=0 leaves it out: it takes
# about 10 minutes under TCG).
. "$(dirname "$0")/bench-density.sh"
bench_density "$raw" "$B/bench.json"

# Fairness under a disk writer (scripts/bench-fair.sh; BENCH_FAIR_SECS=0
# leaves it out).
. "$(dirname "$0")/bench-fair.sh"
bench_fair "$raw" "$B/bench.json"

# The package cache's npm install-script check against untarring the same
# tarball (scripts/bench-npm.sh; BENCH_NPM_RUNS=0 leaves it out).
. "$(dirname "$0")/bench-npm.sh"
bench_npm "$raw" "$B/bench.json"

# apt-get install jq through the cache, cold and warm, against a direct
# install from Debian's archive (scripts/bench-apt.sh; BENCH_APT_RUNS=0
# leaves it out).
. "$(dirname "$0")/bench-apt.sh"
bench_apt "$raw" "$B/bench.json"

# npm ci of a 25-package locked project through the cache, cold and warm,
# against the same npm ci straight from npm's registry
# (scripts/bench-npm-ci.sh; BENCH_NPM_CI_RUNS=0 leaves it out).
. "$(dirname "$0")/bench-npm-ci.sh"
bench_npm_ci "$raw" "$B/bench.json"

# sbx-serve against the CLI (scripts/bench-serve.sh; BENCH_SERVE_RUNS=0
# leaves it out).
. "$(dirname "$0")/bench-serve.sh"
bench_serve "$raw" "$B/bench.json"
