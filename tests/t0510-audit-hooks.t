#!/bin/bash
# Every command leaves its trace in the audit trail; output never does; a
# session or exec that cannot be audited does not run.
. "$(dirname "$0")/lib.sh"
require_vm
A=$SBX_ROOT/var/lib/sbx/audit.log

id=$(sbx-create -q)
sbx-exec "$id" -- sh -c 'echo CANARY-OUTPUT-$((4000 + 711))' >/dev/null
sbx-exec --timeout 1 "$id" -- sleep 10 2>/dev/null
echo data >"$TEST_TMP/up.txt"
sbx-cp "$TEST_TMP/up.txt" "$id:/workspace/up.txt"
sbx-cp "$id:/workspace/up.txt" "$TEST_TMP/down.txt"
sbx-kill "$id"
# A policy this installation cannot enforce (an egress allowlist without
# the session proxy) is refused, and the refusal recorded.
mkdir -p "$TEST_TMP/libexec"
ln -s "$SBX_BUILD/libexec/sbx/sbx-monitor" "$TEST_TMP/libexec/sbx-monitor"
SBX_LIBEXEC=$TEST_TMP/libexec sbx-create -q -p "$(dirname "$0")/../policies/coding-agent.yaml" 2>/dev/null
types=$(sbx-audit --json | jq -r '[.[].type] | unique | join(" ")')
for t in session.create exec.start exec.end files.upload files.download session.destroy policy.refused; do
	like " $types " " $t " "the trail records $t"
done
is "$(sbx-audit --session "$id" --type exec.end --json | jq -r '[.[].reason] | join(",")')" "exited,timeout,exited,exited" \
   "exec.end records each exit reason"
grep -q CANARY-OUTPUT-4711 "$A"; is "$?" 1 "command output is never in the trail"
sbx-audit verify >/dev/null; ok $? "the trail verifies"

# A command line of most of a megabyte runs; its record stays bounded.
id=$(sbx-create -q)
a=$(head -c 110000 /dev/zero | tr '\0' c)
is "$(sbx-exec "$id" -- sh -c 'echo $#' _ $a $a $a $a $a $a $a $a)" 8 "an 880 KB command line runs"
is "$(sbx-audit --type exec.start --session "$id" --json | jq -c '.[-1] | [.argv_truncated, (.argv_sha256|length)]')" \
   "[true,64]" "its audit record is truncated, with the SHA-256 of the whole argv"
sbx-kill "$id"

# A crashed session and gc's reclaim are recorded too.
id=$(sbx-create -q)
mon=$(jq -r .monitor.pid "$SBX_ROOT/var/lib/sbx/sessions/$id/session.json")
kill -9 "$(jq -r .vmm_process.pid "$SBX_ROOT/var/lib/sbx/sessions/$id/session.json")"
# The record says crashed before the monitor has finished and let go of
# the session's lock (gc passes over a locked session): wait for both.
for i in $(seq 300); do
	[ "$(sbx-ps --no-headers "$id" | cut -f2)" = crashed ] && ! kill -0 "$mon" 2>/dev/null && break
	sleep 0.1
done
sbx-gc --grace 0 >/dev/null 2>&1
is "$(sbx-audit --session "$id" --json | jq -r '[.[].type] | join(" ")')" "session.create session.crash gc.reclaim" \
   "crash and reclaim are recorded"

# Fail closed: with the trail unwritable, nothing runs unrecorded.
id=$(sbx-create -q)
mv "$A" "$A.keep" && mkdir "$A"
sbx-exec "$id" -- echo should-not-run >"$TEST_TMP/out" 2>"$TEST_TMP/err"; rc=$?
is "$rc" 125 "an exec that cannot be audited is refused"
like "$(cat "$TEST_TMP/err")" "audit" "the message says why"
sbx-create -q >/dev/null 2>&1; is "$?" 70 "a session that cannot be audited is not created"
rmdir "$A" && mv "$A.keep" "$A"
is "$(sbx-exec "$id" -- echo back)" back "with the trail back, execs run again"
sbx-kill "$id"
sbx-audit verify >/dev/null; ok $? "the trail still verifies"
is "$(ls "$SBX_ROOT/var/lib/sbx/sessions" | wc -l)" 0 "refused creates left nothing"
done_testing
