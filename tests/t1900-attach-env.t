#!/bin/bash
# Attach to a detached exec and a session's environment (issue 15, items 1
# and 2): --attach prints what the exec wrote so far and follows it to its
# end, stdout and stderr apart, with its status; --since starts later;
# several attach at once; a signal detaches and leaves the exec running;
# another session's or tenant's exec is not there (4).  sbx-create -e,
# --env-file and -w set what every exec inherits, sbx-exec -e/-w override;
# a bad env file is 3 and creates nothing; a value that is also a secret
# is not shown.
. "$(dirname "$0")/lib.sh"
require_vm
command -v jq >/dev/null || skip_all "jq not installed"
L=$SBX_ROOT/var/lib/sbx

# wait_for CMD...: true within a bound (20 s), checked every 0.1 s.
wait_for() {
	for _i in $(seq 200); do
		"$@" && return 0
		sleep 0.1
	done
	return 1
}
exec_state() { sbx-ps --no-headers --execs "$1" | awk -v e="$2" '$1 == e { print $2 }'; }

id=$(sbx-create -q); ok $? "a session ($id)"

# --- attach -----------------------------------------------------------------
# Prints over time on both streams; ends with 7 once /tmp/go exists, so the
# attach surely begins in the middle.
e=$(sbx-exec -d "$id" -- sh -c 'for i in 1 2 3; do echo out$i; echo err$i >&2; done
	while [ ! -e /tmp/go ]; do sleep 0.1; done
	for i in 4 5 6; do echo out$i; echo err$i >&2; sleep 0.2; done; exit 7')
is "$e" e1 "a detached exec"
wait_for grep -q out3 "$L/sessions/$id/execs/$e/stdout"; ok $? "it has written its first lines"
sbx-exec --attach "$e" "$id" >"$TEST_TMP/a1.out" 2>"$TEST_TMP/a1.err" & a1=$!
sbx-exec --attach "$e" "$id" >"$TEST_TMP/a2.out" 2>"$TEST_TMP/a2.err" & a2=$!
wait_for grep -q out3 "$TEST_TMP/a1.out"; ok $? "the first attacher printed what was written before it came"
wait_for grep -q out3 "$TEST_TMP/a2.out"; ok $? "so did the second"
is "$(exec_state "$id" "$e")" running "the exec still runs"
sbx-exec "$id" -- touch /tmp/go
wait "$a1"; is "$?" 7 "--attach exits with the exec's status"
wait "$a2"; is "$?" 7 "... both attachers do"
want_out=$(printf 'out%s\n' 1 2 3 4 5 6) want_err=$(printf 'err%s\n' 1 2 3 4 5 6)
is "$(cat "$TEST_TMP/a1.out")" "$want_out" "stdout in order, whole, on stdout"
is "$(cat "$TEST_TMP/a1.err")" "$want_err" "stderr in order, whole, on stderr"
is "$(cat "$TEST_TMP/a2.out")|$(cat "$TEST_TMP/a2.err")" "$want_out|$want_err" "the second attacher saw the same"

# An exec that already ended: everything, then its status.
out=$(sbx-exec --attach "$e" "$id" 2>"$TEST_TMP/a3.err"); is "$?" 7 "attach to an ended exec: its status"
is "$out|$(cat "$TEST_TMP/a3.err")" "$want_out|$want_err" "... and all its output"
is "$(sbx-exec --attach "$e" --since 10 "$id" 2>/dev/null)" "$(printf 'out%s\n' 3 4 5 6)" "--since N skips N bytes of stdout"
is "$(sbx-exec --attach "$e" --since 10 "$id" 2>&1 >/dev/null)" "$(printf 'err%s\n' 3 4 5 6)" "... and of stderr"
is "$(sbx-exec --attach "$e" --since 0,25 "$id" 2>&1 >/dev/null)" "err6" "--since OUT,ERR apart"
is "$(sbx-exec --attach "$e" --since 0,25 "$id" 2>/dev/null)" "$want_out" "... stdout from its start"
is "$(sbx-exec --attach "$e" --since 999 "$id" 2>&1)" "" "--since past the end of an ended exec: nothing"
for bad in -1 x 1,x 1, ,1 1,,2 " 1" 0x10 1e3 99999999999999999999; do
	sbx-exec --attach "$e" --since "$bad" "$id" >/dev/null 2>&1; r=$?
	is "$r" 2 "--since '$bad' is a usage error"
done
sbx-exec --since 1 "$id" -- true 2>/dev/null; is "$?" 2 "--since without --attach is a usage error"
sbx-exec --attach "$e" --json "$id" >/dev/null 2>&1; is "$?" 2 "--attach takes no --json"

# A signal detaches; the exec goes on.  (Background jobs of a script ignore
# SIGINT; env gives the attacher the default disposition, as a terminal's.)
e2=$(sbx-exec -d "$id" -- sh -c 'echo started; while [ ! -e /tmp/stop ]; do sleep 0.1; done; echo finished; exit 3')
env --default-signal=INT sbx-exec --attach "$e2" "$id" >"$TEST_TMP/b.out" 2>"$TEST_TMP/b.err" & b=$!
wait_for grep -q started "$TEST_TMP/b.out"; ok $? "attached to a running exec"
kill -INT "$b"; wait "$b"; is "$?" 130 "SIGINT detaches (130)"
like "$(cat "$TEST_TMP/b.err")" "detached from $e2" "and says so on stderr"
is "$(exec_state "$id" "$e2")" running "the exec is still running (sbx-ps --execs)"
sbx-exec --attach "$e2" "$id" >"$TEST_TMP/c.out" 2>/dev/null & c=$!
wait_for grep -q started "$TEST_TMP/c.out"
sbx-exec "$id" -- touch /tmp/stop
wait "$c"; is "$?" 3 "attaching again follows it to its end and status"
is "$(cat "$TEST_TMP/c.out")" "$(printf 'started\nfinished')" "with all of its output"

# Bad input: nothing of anyone else's is there.
sbx-exec --attach e99 "$id" 2>/dev/null; is "$?" 4 "an exec the session never had: 4"
sbx-exec --attach ../e1 "$id" 2>/dev/null; is "$?" 3 "a malformed exec ID: 3"
sbx-exec --attach e1 no-such-session 2>/dev/null; is "$?" 4 "no such session: 4"
other=$(sbx-create -q); ok $? "a second session ($other)"
sbx-exec --attach "$e2" "$other" 2>/dev/null; is "$?" 4 "the first session's exec through the second: 4"
ta=$(sbx-create -q --tenant ta); ok $? "a session of tenant ta ($ta)"
te=$(sbx-exec -d --tenant ta "$ta" -- echo mine)
sbx-exec --wait "$te" --tenant ta "$ta"
is "$(sbx-exec --attach "$te" --tenant ta "$ta")" mine "its tenant attaches to its exec"
sbx-exec --attach "$te" --tenant tb "$ta" 2>"$TEST_TMP/tb.err"; is "$?" 4 "another tenant: 4"
is "$(cat "$TEST_TMP/tb.err")" "sbx-exec: error: no such session: $ta" "... told exactly what a missing session says"
sbx-kill "$other" "$ta" >/dev/null

# After the session is gone its records still answer.
e3=$(sbx-exec -d "$id" -- sh -c 'echo before; sleep 600')
wait_for grep -q before "$L/sessions/$id/execs/$e3/stdout"
vmm=$(jq -r .vmm_process.pid "$L/sessions/$id/session.json")
sbx-exec --attach "$e3" "$id" >"$TEST_TMP/d.out" 2>"$TEST_TMP/d.err" & d=$!
wait_for grep -q before "$TEST_TMP/d.out"
kill -9 "$vmm"
wait "$d"; is "$?" 125 "an attached exec whose VM died: 125 (session lost)"
like "$(cat "$TEST_TMP/d.err")" "session $id was lost" "and says so"
sbx-kill "$id" >/dev/null
done_testing
