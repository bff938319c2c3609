#!/bin/bash
# sbx-gc: reclaims crashed, expired, corrupt and orphaned state; never
# touches a live or still-creating session, even when run in a loop.
. "$(dirname "$0")/lib.sh"
require_vm
h=$(printf '%s' "$SBX_ROOT" | sha256sum | cut -c1-8)
S=$SBX_ROOT/var/lib/sbx/sessions
R=$SBX_ROOT/run/sbx/sessions

live=$(sbx-create -q)
is "$(sbx-gc --grace 0)" "" "nothing to do: no output (cron stays quiet)"
is "$(sbx-exec "$live" -- echo alive)" alive "a live session is untouched"

# A monitor killed -9: marked crashed first, reclaimed after the grace.
dead=$(sbx-create -q)
kill -9 "$(jq -r .monitor.pid "$S/$dead/session.json")"
sleep 0.5
like "$(sbx-gc)" "^mark-crashed	$dead	" "a session without its monitor is marked crashed"
is "$(jq -r .state "$S/$dead/session.json")" crashed "and recorded so"
[ -d "$S/$dead" ]; ok $? "its record stays for the grace period"
like "$(sbx-gc -n --grace 0)" "^reclaim	$dead	" "--dry-run says what it would reclaim"
[ -d "$S/$dead" ]; ok $? "and changes nothing"
like "$(sbx-gc --grace 0)" "^reclaim	$dead	" "after the grace it is reclaimed"
[ ! -e "$S/$dead" ] && [ ! -e "$R/$dead" ]; ok $? "nothing of it is left on disk"

# Expired by TTL.
exp=$(sbx-create -q --ttl 2s)
# A bound, generous: a boot under ASan on a loaded host took over 12 s.
for i in $(seq 300); do [ "$(sbx-ps --no-headers "$exp" | cut -f2)" = expired ] && break; sleep 0.2; done
like "$(sbx-gc --grace 0)" "^reclaim	$exp	expired" "an expired session is reclaimed"

# Corrupt record, orphan runtime dir, orphan cgroup.
c=$(sbx-create -q); sbx-kill "$c"
mkdir -p "$S/corrupt1" && echo '{not json' >"$S/corrupt1/session.json"
# What a host crash can leave of a live session's record, which is not
# synced (record.c): an empty file, or none beside its leftovers.
mkdir -p "$S/crashed1" "$S/crashed2" && : >"$S/crashed1/session.json" && : >"$S/crashed2/disk.qcow2"
mkdir -p "$R/ghost1"
if [ -d /sys/fs/cgroup/pids ] && [ ! -e /sys/fs/cgroup/cgroup.controllers ]; then
	mkdir -p /sys/fs/cgroup/pids/sbx-$h/ghost2; cg=/sys/fs/cgroup/pids/sbx-$h/ghost2
else
	mkdir -p /sys/fs/cgroup/sbx-$h/ghost2; cg=/sys/fs/cgroup/sbx-$h/ghost2
fi
out=$(sbx-gc --grace 0)
like "$out" "reclaim	corrupt1	record unreadable" "a corrupt record is reclaimed"
like "$out" "reclaim	crashed1	record unreadable" "an empty record is reclaimed"
like "$out" "reclaim	crashed2	record unreadable" "a session directory without a record is reclaimed"
like "$out" "reclaim-orphan-run	ghost1" "an orphan runtime directory is reclaimed"
like "$out" "reclaim-orphan-cgroup	ghost2" "an orphan host cgroup is reclaimed"
[ ! -e "$S/corrupt1" ] && [ ! -e "$S/crashed1" ] && [ ! -e "$S/crashed2" ] && [ ! -e "$R/ghost1" ] && [ ! -e "$cg" ]; ok $? "all gone"
is "$(sbx-gc --grace 0 --json | jq -c '[.reclaimed, (.actions|length)]')" "[0,0]" "--json: nothing left, a count of 0"

# A host reboot: a record from another boot ID can have nothing alive.
rb=$(sbx-create -q); sbx-kill "$rb"
mkdir -p "$S/reboot1"
jq -n '{schema:1, id:"reboot1", state:"running", boot_id:"00000000-0000-0000-0000-000000000000", created_ns:1}' \
	>"$S/reboot1/session.json"
like "$(sbx-gc 2>/dev/null)" "^mark-stopped	reboot1	" "a session from before a host reboot is marked stopped"
is "$(jq -r .state "$S/reboot1/session.json")" stopped "and recorded so"
is "$(sbx-gc --grace 0 --json | jq -r '.reclaimed')" 1 "then reclaimed, and counted"

# gc in a loop next to creates, execs and kills: nothing live is harmed.
( for i in $(seq 40); do sbx-gc --grace 0 >/dev/null 2>&1; sleep 0.1; done ) &
gcpid=$!
okc=0
for i in 1 2 3; do
	id=$(sbx-create -q) && [ "$(sbx-exec "$id" -- echo ok$i)" = "ok$i" ] && okc=$((okc + 1))
	sbx-kill "$id"
done
wait $gcpid
is "$okc" 3 "creates, execs and kills all succeed while sbx-gc runs in a loop"
is "$(sbx-exec "$live" -- echo alive)" alive "the live session survived every collection"
sbx-kill "$live"
is "$(ls "$S" | wc -l):$(root_procs | wc -l)" "0:0" "nothing left"
done_testing
