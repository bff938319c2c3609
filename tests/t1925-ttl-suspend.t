#!/bin/bash
# lifecycle.on_ttl: suspend (sbx-policy(5); E2B's autoPause, issue 37): at
# its TTL a session is suspended, not ended; an exec resumes it with its
# files and a background process as they were, and it has its TTL again
# from the resume; a client following a running exec at that moment is
# told and let go (125, naming --attach) while the exec runs on; a session
# that cannot be suspended (secrets) ends as before, and the audit trail
# says why; with ttl_counts: running the key is refused.
. "$(dirname "$0")/lib.sh"
require_vm
L=$SBX_ROOT/var/lib/sbx
state() { sbx-ps --json "$1" | jq -r '.[0].state'; }
wait_state() { # ID STATE SECONDS
	local i
	for i in $(seq $(($3 * 10))); do
		[ "$(state "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	return 1
}
ttl_suspends() { sbx-audit --type session.suspend --session "$1" --jsonl | jq -s '[.[] | select(.reason == "ttl" and .ok)] | length'; }

# ---- the policy ----
printf 'lifecycle: {on_ttl: suspend, ttl_counts: running}\n' >"$TEST_TMP/both.yaml"
out=$(sbx-create --dry-run -p "$TEST_TMP/both.yaml" 2>&1 >/dev/null)
is "$?" 3 "on_ttl: suspend with ttl_counts: running is refused (3)"
like "$out" "both\.yaml:1:[0-9]+: lifecycle\.on_ttl: suspend and lifecycle\.ttl_counts: running do not go together" \
	"naming file:line:col and both keys"
printf 'lifecycle: {on_ttl: pause}\n' >"$TEST_TMP/bad.yaml"
sbx-create --dry-run -p "$TEST_TMP/bad.yaml" >/dev/null 2>&1
is "$?" 3 "on_ttl: pause is not a value (3)"
printf 'resources: {ttl: 30s}\nlifecycle: {on_ttl: suspend}\n' >"$TEST_TMP/p.yaml"
is "$(sbx-create --dry-run --json -p "$TEST_TMP/p.yaml" | jq -r .lifecycle.on_ttl)" suspend \
	"sbx-create --dry-run shows it"

# ---- suspended at its TTL, resumed by an exec ----
# Every step that runs something in the guest starts right after a
# resume, which gives the session its 30 s again, and takes a second or
# two: however slow the boot, the TTL never comes in the middle of one
# but where the test waits for it.
id=$(sbx-create -q -p "$TEST_TMP/p.yaml")
ok $? "a session with resources.ttl: 30s, lifecycle.on_ttl: suspend"
is "$(jq -r .limits.ttl_suspend "$L/sessions/$id/session.json")" true "its record says so"
wait_state "$id" suspended 150
ok $? "past its TTL it is suspended, not ended"
is "$(ttl_suspends "$id")" 1 "the audit trail says session.suspend, reason ttl"
is "$(sbx-ps --json "$id" | jq '.[0].ttl_left_s')" 0 "sbx-ps: no TTL left"
# A file and a process, for the next suspend to find; then a client that
# follows a command when it comes.
bg=$(sbx-exec -d "$id" -- sh -c 'echo kept >/home/user/file; while :; do echo x >>/tmp/count; sleep 0.2; done')
ok $? "an exec resumes it ($bg, detached: a file and a process that runs on)"
timeout 300 sbx-exec "$id" -- sh -c 'echo started; sleep 600' >"$TEST_TMP/out" 2>"$TEST_TMP/err"
rc=$?
is "$rc" 125 "sbx-exec following a command when the TTL suspends the session exits 125"
like "$(cat "$TEST_TMP/err")" "suspended at its TTL \(lifecycle\.on_ttl: suspend\); exec e[0-9]+ runs on when it is resumed: sbx-exec --attach e[0-9]+ $id" \
	"saying so, and how to follow it again"
is "$(cat "$TEST_TMP/out")" started "after the output it had"
is "$(state "$id")" suspended "the session is suspended"
is "$(ttl_suspends "$id")" 2 "at its TTL again (audited)"
ex=$(sed -n 's/.*exec \(e[0-9]*\) runs on.*/\1/p' "$TEST_TMP/err")
is "$(sbx-ps --execs "$id" --json | jq -r --arg e "$ex" '.[] | select(.exec == $e) | .state')" running \
	"the exec is not ended: it runs on when the session does"
out=$(sbx-exec "$id" -- sh -c 'cat /home/user/file; a=$(wc -l </tmp/count); sleep 1; b=$(wc -l </tmp/count); [ "$b" -gt "$a" ] && echo growing')
is "$out" "kept
growing" "an exec resumes it again: its file, and its background process still running"
is "$(state "$id")" running "it runs"
left=$(sbx-ps --json "$id" | jq '.[0].ttl_left_s')
[ "$left" -gt 0 ] && [ "$left" -le 30 ]; ok $? "with its TTL again, from the resume ($left s left)"
sbx-kill "$id" >/dev/null
ok $? "sbx-kill ends it"

# ---- what cannot be suspended ends ----
printf 'resources: {ttl: 10s}\nlifecycle: {on_ttl: suspend}\nsecrets:\n  - {name: TOK, from_env: SBX_T1925_TOKEN}\n' \
	>"$TEST_TMP/secret.yaml"
s=$(SBX_T1925_TOKEN=s3cret sbx-create -q -p "$TEST_TMP/secret.yaml")
ok $? "a session with a secret and on_ttl: suspend"
wait_state "$s" expired 120
ok $? "at its TTL it ends (a memory image would hold the secret)"
like "$(sbx-audit --type session.suspend --session "$s" --jsonl | jq -r 'select(.reason == "ttl") | "\(.ok) \(.error)"')" \
	"^false session $s has secrets: it cannot be suspended" "the audit trail says the suspend was refused, and why"
sbx-kill "$s" >/dev/null

done_testing
