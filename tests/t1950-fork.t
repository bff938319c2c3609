#!/bin/bash
# Snapshots and forks keep running processes (issue 37, item 2): a save
# taken while an exec runs succeeds and the exec runs on in the source;
# a session restored from it lists the exec running as its own, its output
# goes on into that copy's record with nothing lost or repeated around the
# save, sbx-kill --exec ends it there and its exit is recorded; sbx-snapshot
# fork -n 2 makes two such copies with their own hostnames and leaves no
# snapshot behind; the README's example, pasted in order; bad input (no
# such session, N out of bounds, a tenant's quota) leaves nothing.
. "$(dirname "$0")/lib.sh"
require_vm
L=$SBX_ROOT/var/lib/sbx
A=$L/audit.log
now_ms() { date +%s%3N; }
# The ticker's lines in a session's record of exec E: "1 2 3 ..." checked
# to be 1..N in order, nothing missing or twice (0), and N.
ticks() { sbx-exec --output "$2" "$1" | awk '{ print $2 }'; }
contiguous() { ticks "$1" "$2" | awk 'NR != $1 { bad = 1 } END { exit bad || NR == 0 }'; }
last_tick() { ticks "$1" "$2" | tail -1; }
exec_state() { sbx-ps --execs "$1" --json | jq -r ".[] | select(.exec == \"$2\") | .state"; }
# A number that grows: wait up to 20 s for the ticker past $3 in $1.
grows() {
	local n
	for _ in $(seq 100); do
		n=$(last_tick "$1" "$2")
		[ "${n:-0}" -gt "$3" ] && return 0
		sleep 0.2
	done
	return 1
}

id=$(sbx-create -q); ok $? "a session ($id)"
# Fast enough that a line is in flight whenever the save happens.
e=$(sbx-exec -d "$id" -- sh -c 'i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 0.05; done')
ok $? "a detached ticker runs ($e)"
grows "$id" "$e" 5; ok $? "it writes"

# --- save with an exec running ---------------------------------------------------
snap=$(sbx-snapshot save "$id" running 2>"$TEST_TMP/err"); rc=$?
is "$rc" 0 "a save while an exec runs succeeds"
[ "$rc" = 0 ] || diag "$(cat "$TEST_TMP/err")"
D=$L/snapshots/_/$snap
is "$(ls "$D" | tr '\n' ' ')" "$e.stderr $e.stdout execs.json manifest.json memory.zst scratch.zst " \
   "the snapshot carries the exec's record (execs.json, its output)"
is "$(jq -r '.execs | map(.id) | join(" ")' "$D/execs.json")" "$e" "execs.json names it"
is "$(jq -r ".files[\"execs.json\"].sha256" "$D/manifest.json")" "$(sha256sum <"$D/execs.json" | cut -d' ' -f1)" \
   "and the manifest hashes it"
saved=$(wc -l <"$D/$e.stdout")
n0=$(last_tick "$id" "$e")
is "$(exec_state "$id" "$e")" running "the exec runs on in the source"
grows "$id" "$e" "$n0"; ok $? "its output there grows"
contiguous "$id" "$e"; ok $? "the source's record has every line once, in order"

# --- restore -------------------------------------------------------------------
a=$(sbx-create -q -s "$snap"); ok $? "a session restored from it ($a)"
is "$(exec_state "$a" "$e")" running "the copy lists $e running (sbx-ps --execs)"
like "$(sbx-ps --execs "$a" --no-headers | grep "^$e	")" "tick" "with its command"
grows "$a" "$e" "$saved"; ok $? "its output goes on into the copy's record (past line $saved)"
contiguous "$a" "$e"; ok $? "every line once, in order, across the save (none lost, none repeated)"
is "$(sbx-exec "$a" -- hostname)" "$a" "the copy has its own hostname"
is "$(jq -c "select(.type == \"session.create\" and .session == \"$a\") | .execs" "$A")" "[\"$e\"]" \
   "session.create says which execs the restore kept"
e2=$(sbx-exec -d "$a" -- true); sbx-exec --wait "$e2" "$a" >/dev/null
[ "$e2" != "$e" ]; ok $? "a new exec in the copy gets a new ID ($e2)"
sbx-kill --exec "$e" "$a"; is "$?" 0 "sbx-kill --exec ends it in the copy"
sbx-exec --wait "$e" --timeout 30 "$a" >/dev/null; is "$?" 137 "its exit is recorded: --wait says 137"
is "$(jq -r .reason "$L/sessions/$a/execs/$e/result.json")" killed "result.json: killed"
is "$(exec_state "$a" "$e")" ended "sbx-ps --execs: ended"
is "$(jq -r "select(.type == \"exec.end\" and .session == \"$a\" and .exec == \"$e\") | .reason" "$A")" killed \
   "exec.end of the copy's exec is in the audit trail"
is "$(exec_state "$id" "$e")" running "the source's runs on"

# A foreground exec with stdin (a REPL waiting for input) is kept too.
# Its input: a line, another once told to, then EOF once told to (only the
# pipeline holds the pipe: a fifo's writer would be inherited by every
# command the test runs meanwhile, monitors included).
{ echo one; while [ ! -e "$TEST_TMP/two" ]; do sleep 0.1; done; echo two
  while [ ! -e "$TEST_TMP/eof" ]; do sleep 0.1; done; } |
	sbx-exec -i "$id" -- sh -c 'while read -r l; do echo "got $l"; done' >"$TEST_TMP/repl.out" &
cli=$!
for _ in $(seq 100); do grep -q "got one" "$TEST_TMP/repl.out" && break; sleep 0.1; done
r=$(sbx-ps --execs "$id" --json | jq -r "[.[] | select(.state == \"running\" and .exec != \"$e\") | .exec][0]")
sbx-snapshot save "$id" repl >/dev/null; ok $? "a save while a REPL waits on stdin ($r)"
touch "$TEST_TMP/two"
for _ in $(seq 100); do grep -q "got two" "$TEST_TMP/repl.out" && break; sleep 0.1; done
grep -q "got two" "$TEST_TMP/repl.out"; ok $? "the source's client still talks to it"
b=$(sbx-create -q -s repl); ok $? "restored ($b)"
is "$(exec_state "$b" "$r")" running "the copy lists the REPL running"
is "$(sbx-exec --output "$r" "$b")" "got one" "with its output up to the save"
sbx-kill --exec "$r" "$b"; sbx-exec --wait "$r" --timeout 30 "$b" >/dev/null; is "$?" 137 "and ends it when asked"
touch "$TEST_TMP/eof"
wait "$cli"; is "$?" 0 "the source's REPL ends at its EOF"
sbx-kill "$a" "$b" >/dev/null

# --- fork ----------------------------------------------------------------------
t0=$(now_ms); f1=$(sbx-snapshot fork "$id"); rc=$?; t1=$(now_ms)
is "$rc" 0 "sbx-snapshot fork exits 0"
like "$f1" '^s-[0-9a-f]{12}$' "and prints one new session ID"
diag "fork of 1: $((t1 - t0)) ms"
t0=$(now_ms); out=$(sbx-snapshot fork -n 2 "$id"); rc=$?; t1=$(now_ms)
is "$rc" 0 "fork -n 2 exits 0"
diag "fork of 2: $((t1 - t0)) ms"
is "$(printf '%s\n' "$out" | grep -cE '^s-[0-9a-f]{12}$')" 2 "two IDs, one a line"
set -- $out
hosts=
for s in "$f1" "$@"; do
	is "$(exec_state "$s" "$e")" running "$s: the ticker runs there"
	n=$(last_tick "$s" "$e"); grows "$s" "$e" "${n:-0}"; ok $? "$s: and writes into its own record"
	contiguous "$s" "$e"; ok $? "$s: every line once"
	hosts="$hosts $(sbx-exec "$s" -- hostname)"
done
is "$hosts" " $f1 $1 $2" "each copy has its own hostname, its ID"
is "$(exec_state "$id" "$e")" running "the source keeps running"
is "$(ls -A "$L/snapshots/_" | grep -c -- '^\.tmp-')" 0 "no fork snapshot is left behind"
is "$(sbx-snapshot list -q | grep -c '^fork@')" 0 "nor listed"
is "$(jq -c "select(.type == \"snapshot.fork\" and .session == \"$id\") | .sessions" "$A" | sed -n 2p)" \
   "[\"$1\",\"$2\"]" "snapshot.fork in the audit trail names the source and the copies"
j=$(sbx-snapshot fork --json "$id"); ok $? "fork --json"
is "$(echo "$j" | jq -r '[.session, (.sessions|length)] | join(" ")')" "$id 1" "says the source and the copies"
schema() { python3 "$(dirname "$0")/tools/json-schema-check.py" validate --strict "$(dirname "$0")/../docs/schema" "$1"; }
echo "$j" | schema snapshot-fork.json; ok $? "fork --json matches docs/schema/snapshot-fork.json"
sbx-audit --json | schema audit.json; ok $? "the audit trail (snapshot.fork, session.create with execs) matches audit.json"
sbx-kill "$f1" "$@" "$(echo "$j" | jq -r '.sessions[0]')" >/dev/null

# --- bad input: the documented status, nothing left ------------------------------
count() { ls "$L/sessions" | wc -l; }
before=$(count)
sbx-snapshot fork s-000000000000 2>/dev/null; is "$?" 4 "no such session: 4"
sbx-snapshot fork -n 0 "$id" 2>/dev/null; is "$?" 3 "-n 0: 3"
sbx-snapshot fork -n 17 "$id" 2>"$TEST_TMP/err"; is "$?" 3 "-n 17 (over the bound of 16): 3"
like "$(cat "$TEST_TMP/err")" "1 to 16" "saying the bound"
sbx-snapshot fork -n two "$id" 2>/dev/null; is "$?" 2 "-n not a number: 2"
sbx-snapshot fork 2>/dev/null; is "$?" 2 "no session: 2"
sbx-snapshot save -n 2 "$id" x 2>/dev/null; is "$?" 2 "-n with another verb: 2"
t=$(sbx-create -q --tenant acme); ok $? "a tenant's session ($t)"
sbx-exec -d "$t" -- sleep 600 >/dev/null
before=$(count)
SBX_MAX_SESSIONS_PER_TENANT=2 sbx-snapshot fork -n 2 --tenant acme "$t" 2>"$TEST_TMP/err"; rc=$?
is "$rc" 75 "a fork past the tenant's session quota: 75"
like "$(cat "$TEST_TMP/err")" "sessions" "saying which quota"
is "$(count)" "$before" "no session was made"
is "$(ls -A "$L/snapshots/acme" 2>/dev/null | wc -l)" 0 "no snapshot was left"
sbx-snapshot fork --tenant other "$t" 2>/dev/null; is "$?" 4 "another tenant's session: 4"
# All or nothing: room on the host for one copy more, not two (the
# tenant's quota allows both, so the second restore is what fails).
before=$(count)
SBX_MAX_SESSIONS=$((before + 1)) sbx-snapshot fork -n 2 "$id" >"$TEST_TMP/out" 2>"$TEST_TMP/err"; rc=$?
is "$rc" 75 "a fork the host has room for only in part: 75"
like "$(cat "$TEST_TMP/err")" "host capacity" "saying why"
is "$(cat "$TEST_TMP/out")" "" "no ID printed"
is "$(count)" "$before" "the copy made before it was destroyed"
is "$(ls -A "$L/snapshots/_" | grep -c -- '^\.tmp-')" 0 "and no snapshot is left"
c=$(SBX_MAX_SESSIONS_PER_TENANT=2 sbx-snapshot fork --tenant acme "$t"); ok $? "within the quota it forks ($c)"
is "$(sbx-ps --tenant acme -q "$c")" "$c" "a session of the same tenant"
sbx-kill "$t" "$c" >/dev/null

# --- the README's example, pasted in order ------------------------------------------
id=$(sbx-create -q)
sbx-exec -d "$id" -- busybox httpd -f -p 127.0.0.1:8000 -h /workspace >/dev/null
sbx-exec "$id" -- sh -c 'echo readme >/workspace/index.html'
addr=$(sbx-port "$id" 8000)
is "$(curl -s "http://$addr/")" readme "README: the server answers through sbx-port"
sbx-snapshot pause "$id" && sbx-snapshot resume "$id"
sbx-snapshot save "$id" ready >/dev/null; is "$?" 0 "README: sbx-snapshot save with the server running"
a=$(sbx-create -q -s ready); ok $? "README: a=\$(sbx-create -s ready)"
is "$(sbx-ps --execs "$a" --json | jq -r '.[] | select(.state == "running") | .request.argv[0:2] | join(" ")')" "busybox httpd" \
   "the copy lists the server running"
addr2=$(sbx-port "$a" 8000)
is "$(curl -s "http://$addr2/")" readme "and it answers there too"
is "$(curl -s "http://$addr/")" readme "as it still does in the source"
sbx-kill "$id"; is "$?" 0 "README: sbx-kill"
sbx-kill "$a" >/dev/null

done_testing
