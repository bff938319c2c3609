#!/bin/bash
# The audit trail's durability mechanism (one fdatasync per append, shared
# by concurrent appenders; audit.head written after it without an fsync):
# crashes at each step of an append, simulated with kill -9 injected by
# strace at the syscall (no hooks in the code), leave a trail that
# verifies and that the next append continues without a false alarm.
# Then real sessions: kill -9 of sbx-exec, and of the monitor, right after
# an exec started leaves its exec.start in the trail.
. "$(dirname "$0")/lib.sh"
append=$SBX_BUILD/tools/sbx-audit-append
[ -x "$append" ] || skip_all "sbx-audit-append not built (make all)"
L=$SBX_ROOT/var/lib/sbx
LOG=$L/audit.log
repairs() { sbx-audit -q --type audit.repair 2>/dev/null | wc -l; }

"$append" -n 3 exec.start '{"session":"s-a"}'
is "$(cut -d' ' -f1 "$L/audit.head")" 3 "audit.head follows the appends"

if command -v strace >/dev/null; then
	# Killed after the record was synced, at the write of audit.head (in
	# place, or by a rename): the record is in the trail, the head one behind.
	(strace -f -qq -o /dev/null -P "$L/audit.head" -e trace=pwrite64,renameat,renameat2 \
		-e inject=pwrite64,renameat,renameat2:signal=KILL \
		"$append" exec.start '{"session":"s-a","n":4}'; :) 2>/dev/null
	is "$(wc -l <"$LOG") $(cut -d' ' -f1 "$L/audit.head")" "4 3" "killed before the head write: record 4 in, head at 3"
	is "$(sbx-audit verify)" "ok 4 records" "verify accepts a head behind the log"
	# Killed before its fdatasync: written, not yet synced; the next
	# append's sync covers it.
	(strace -f -qq -o /dev/null -e trace=fdatasync -e inject=fdatasync:signal=KILL \
		"$append" exec.start '{"session":"s-a","n":5}'; :) 2>/dev/null
	is "$(sbx-audit verify)" "ok 5 records" "killed before the sync: the record is in the chain"
	"$append" exec.end '{"session":"s-a","n":6}'
	is "$(sbx-audit verify) $(cut -d' ' -f1 "$L/audit.head")" "ok 6 records 6" \
		"the next append continues from the log, the head catches up"
	is "$(repairs)" 0 "no audit.repair: a stale head is not tampering"
else
	for i in 1 2 3 4 5; do ok 0 "# SKIP strace not installed"; done
	"$append" -n 3 exec.start '{"session":"s-a"}'
fi

# A power cut in the middle of an append: the torn record was never
# acknowledged, and the head (written after the sync) names the one before.
cp "$L/audit.head" "$SBX_ROOT/head.6"
"$append" exec.start '{"session":"s-a","n":7,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'
head -c -40 "$LOG" >"$SBX_ROOT/torn" && cat "$SBX_ROOT/torn" >"$LOG"
cp "$SBX_ROOT/head.6" "$L/audit.head"
sbx-audit verify 2>"$SBX_ROOT/err"; is "$?" 1 "a torn last line fails verify (1)"
like "$(cat "$SBX_ROOT/err")" "line 7: truncated" "... and says where"
"$append" exec.end '{"session":"s-a","n":8}'; ok $? "the next append goes on"
is "$(sbx-audit verify)" "ok 8 records" "intact: 6, the repair of the torn line, the new record"
is "$(sbx-audit --no-headers --type audit.repair | cut -f5 | grep -o 'reason=[a-z-]*')" "reason=torn" \
	"one repair, for the torn line; none for the head"

# No head at all (lost in the crash): nothing to compare, nothing to repair.
rm "$L/audit.head"
is "$(sbx-audit verify)" "ok 8 records" "a missing head verifies"
"$append" exec.end '{"session":"s-a","n":9}'
is "$(sbx-audit verify) $(cut -d' ' -f1 "$L/audit.head") $(repairs)" "ok 9 records 9 1" \
	"the next append writes the head again, without a repair"

# A head ahead of the log is still tampering (records were cut off the end).
head -n 8 "$LOG" >"$SBX_ROOT/cut" && cat "$SBX_ROOT/cut" >"$LOG"
sbx-audit verify 2>/dev/null; is "$?" 1 "a head ahead of the log fails verify"
"$append" exec.end '{"session":"s-a","n":10}'
is "$(sbx-audit --no-headers --type audit.repair | cut -f5 | grep -o 'reason=[a-z-]*' | tail -1)" "reason=head-mismatch" \
	"... and the next append records it"

# audit.head is "SEQ HASH CHECK", CHECK the start of the SHA-256 of
# "SEQ HASH", and is written in place (no new inode per append): a reader
# that races the write sees a mix of two heads, which the check rejects.
n=$(wc -l <"$LOG")
read -r hs hh hc <"$L/audit.head"
is "$hs:$hc" "$n:$(printf '%s %s' "$hs" "$hh" | sha256sum | cut -c1-16)" "audit.head: the last seq, its hash, and the check"
ino=$(stat -c %i "$L/audit.head")
"$append" -n 3 exec.end '{"session":"s-a"}'
is "$(stat -c %i "$L/audit.head") $(cut -d' ' -f1 "$L/audit.head")" "$ino $((n + 3))" "appends rewrite it in place"
cp "$L/audit.head" "$SBX_ROOT/head.good"
# A mix: a later seq with this hash and check, as a torn read could see it.
printf '%s %s %s\n' "$((n + 13))" "$hh" "$hc" >"$L/audit.head"
is "$(sbx-audit verify)" "ok $((n + 3)) records" "a head whose check fails is no head: verify does not take it for a cut log"
r0=$(repairs)
"$append" exec.end '{"session":"s-a"}'
is "$(repairs) $(cut -d' ' -f1 "$L/audit.head")" "$r0 $((n + 4))" "... nor the next append for tampering; it writes a good one"
# The older form (no check; replaced by a rename, never mixed) is still a head.
printf '%s %s\n' "$((n + 14))" "$hh" >"$L/audit.head"
sbx-audit verify 2>"$SBX_ROOT/err"; is "$?" 1 "a head of the older form is read: ahead of the log fails verify"
like "$(cat "$SBX_ROOT/err")" "audit.head records seq $((n + 14))" "... and says so"
"$append" exec.end '{"session":"s-a"}'
read -r hs hh hc <"$L/audit.head"
is "$hs:$hc" "$((n + 6)):$(printf '%s %s' "$hs" "$hh" | sha256sum | cut -c1-16)" \
	"the next append records the mismatch and writes the checked form"

# The group-commit counters are not trusted across boots or when mangled:
# garbage, another boot's, a directory in their place: every append is
# still synced and chained.
head -c 104 /dev/urandom >"$L/audit.sync"
"$append" -n 2 exec.end '{"session":"s-a"}'; ok $? "appends with mangled counters"
is "$(od -An -tu8 -j48 -N16 "$L/audit.sync" | tr -s ' ')" " 2 2" "they start again: 2 written, 2 synced"
rm "$L/audit.sync" && mkdir "$L/audit.sync"
"$append" exec.end '{"session":"s-a"}'; ok $? "appends with a directory as the counters (each syncs alone)"
rmdir "$L/audit.sync"
n=$(wc -l <"$LOG")
is "$(sbx-audit verify)" "ok $n records" "all intact"

# Group commit: 6 appenders at once, 100 records each, while verify runs
# again and again: it reads audit.head as the appenders rewrite it in
# place, and must never take a half-written head for tampering.
: >"$SBX_ROOT/verify.out"
(while [ ! -e "$SBX_ROOT/stop" ]; do sbx-audit verify -q >>"$SBX_ROOT/verify.out" 2>&1 || echo "rc $?" >>"$SBX_ROOT/verify.out"; done) &
vpid=$!
for i in 1 2 3 4 5 6; do "$append" -n 100 exec.start "{\"session\":\"s-$i\"}" & done
fail=0; for i in 1 2 3 4 5 6; do wait -n || fail=1; done
touch "$SBX_ROOT/stop"; wait "$vpid"
is "$fail" 0 "6 concurrent appenders"
is "$(cat "$SBX_ROOT/verify.out")" "" "verify beside them found nothing wrong"
is "$(sbx-audit verify)" "ok $((n + 600)) records" "one chain, seq without gaps"
is "$(od -An -tu8 -j48 -N16 "$L/audit.sync" | awk '{print ($1 == $2)}')" 1 "every record handed out is synced"

# Real sessions.  The start record is durable before the command runs, so
# whoever dies once the command printed, the start is in the trail.
require_vm
id=$(sbx-create -q)
started() { # started FILE: wait (bounded) until the command printed
	for _ in $(seq 600); do grep -q started "$1" 2>/dev/null && return 0; sleep 0.1; done
	return 1
}
sbx-exec "$id" -- sh -c 'echo started; exec sleep 100' >"$SBX_ROOT/out1" &
pid=$!
started "$SBX_ROOT/out1"; ok $? "the command runs"
kill -9 "$pid"; wait "$pid" 2>/dev/null
is "$(sbx-audit --session "$id" --type exec.start --jsonl | jq -r 'select(.argv[2] == "echo started; exec sleep 100") | .exec' | wc -l)" \
	1 "kill -9 of sbx-exec after the start: exec.start is in the trail"

m=$(jq -r .monitor.pid "$L/sessions/$id/session.json")
sbx-exec "$id" -- sh -c 'echo started; exec sleep 101' >"$SBX_ROOT/out2" 2>/dev/null &
pid=$!
started "$SBX_ROOT/out2"; ok $? "a second command runs"
kill -9 "$m"; wait "$pid" 2>/dev/null
is "$(sbx-audit --session "$id" --type exec.start --jsonl | jq -r 'select(.argv[2] == "echo started; exec sleep 101") | .exec' | wc -l)" \
	1 "kill -9 of the monitor after the start: exec.start is in the trail"
n=$(wc -l <"$LOG")
is "$(sbx-audit verify)" "ok $n records" "and the trail verifies"
sbx-kill "$id" >/dev/null 2>&1
done_testing
