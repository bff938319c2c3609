#!/bin/bash
# Fault matrix: kill -9 of sbx-create at several points, of the monitor, of
# the VMM, and a guest kernel panic.  After one sbx-gc nothing of those
# sessions remains (process, socket, cgroup, directory); a second finds
# nothing.
. "$(dirname "$0")/lib.sh"
require_vm
h=$(printf '%s' "$SBX_ROOT" | sha256sum | cut -c1-8)
S=$SBX_ROOT/var/lib/sbx/sessions
R=$SBX_ROOT/run/sbx/sessions
leftovers() {
	echo "dirs=$(find "$S" "$R" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" \
	     "procs=$(root_procs | wc -l)" \
	     "cgroups=$(ls -d /sys/fs/cgroup/*/sbx-$h/*/ /sys/fs/cgroup/sbx-$h/*/ 2>/dev/null | wc -l)"
}

# sbx-create killed -9 at several points of its work.  The last points can
# come after the session was ready (a TCG boot takes 1.3 s on a quiet
# machine): such a session is a created one, as if its ID had been lost on
# the way to the caller, and is destroyed below like any other.
for d in 0.02 0.1 0.3 0.8 1.4; do
	sbx-create -q --id "fault-${d#0.}" >/dev/null 2>&1 &
	p=$!
	sleep "$d"
	kill -9 $p 2>/dev/null
	wait $p 2>/dev/null
done
# The monitor killed -9; the VMM killed -9; a guest kernel panic.
m=$(sbx-create -q); kill -9 "$(jq -r .monitor.pid "$S/$m/session.json")"
v=$(sbx-create -q); kill -9 "$(jq -r .vmm_process.pid "$S/$v/session.json")"
g=$(sbx-create -q)
sbx-exec -u root "$g" -- sh -c 'echo c > /proc/sysrq-trigger' >/dev/null 2>&1
for i in $(seq 100); do [ "$(sbx-ps --no-headers "$g" | cut -f2)" = crashed ] && break; sleep 0.1; done
is "$(sbx-ps --json "$g" | jq -r '.[0].state + ": " + .[0].end_reason')" "crashed: guest panic" \
   "a guest kernel panic is recorded as crashed, with the reason"
sbx-exec "$g" -- true 2>"$TEST_TMP/err"; rc=$?
is "$rc" 4 "the next command on it exits 4"
like "$(cat "$TEST_TMP/err")" "not running \\(crashed: guest panic\\)" "and says why, without waiting for gc"
for i in $(seq 50); do kill -0 "$(jq -r .vmm_process.pid "$S/$v/session.json")" 2>/dev/null || break; sleep 0.1; done
# A monitor whose sbx-create was killed abandons the boot by itself; one
# whose create got as far as ready keeps a running session, which sbx-kill
# ends.  Waited for, not slept on: under load abandoning takes longer than
# any fixed pause, and gc rightly skips a monitor still holding its lock.
creating() { sbx-ps --all --no-headers 2>/dev/null | awk -F'\t' '$2 == "creating"' | wc -l; }
for i in $(seq 600); do [ "$(creating)" = 0 ] && break; sleep 0.1; done
is "$(creating)" 0 "no killed create is left half-way: each abandoned its boot or finished it"
done_ids=$(sbx-ps --all --no-headers 2>/dev/null | awk -F'\t' '$1 ~ /^fault-/ && $2 == "running" { print $1 }')
diag "creates that were ready before their kill: ${done_ids:-none}"
[ -z "$done_ids" ] || sbx-kill $done_ids >/dev/null
for i in $(seq 600); do [ -z "$(root_procs)" ] && break; sleep 0.1; done
is "$(root_procs | wc -l)" 0 "every monitor and VMM of those sessions has ended"
sbx-gc --grace 0 >"$TEST_TMP/gc1" 2>&1
diag "gc: $(tr '\n' ';' <"$TEST_TMP/gc1")"
is "$(leftovers)" "dirs=0 procs=0 cgroups=0" "after one sbx-gc nothing of those sessions remains"
is "$(sbx-gc --grace 0 2>&1)" "" "a second sbx-gc finds nothing"
sbx-audit verify >/dev/null; ok $? "the audit trail verifies after all that"
done_testing
