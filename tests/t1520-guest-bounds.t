#!/bin/bash
# What a hostile guest can make the host keep, write or print is bounded
# (issue 11, security review findings 7, 8 and 13).
#
# Two kinds of guest.  The default template, where root in the guest floods
# its serial console or prints a fake panic line, as any guest can.  And a
# lying agent: a template whose /init is not guest-init but a busybox
# script that speaks the frame protocol on the real agent port of a real
# microVM, sending frames written beforehand by tests/tools/lying-guest.py.
# That is exactly the position of root in a guest that has taken over PID
# 1 (ptrace, /proc/1/mem), without needing an exploit in the test.
. "$(dirname "$0")/lib.sh"
require_vm
here=$(cd "$(dirname "$0")" && pwd)
backend=${SBX_VMM:-qemu}
tmpl=$(ls -d "$SBX_TEMPLATES"/default@* | head -1)
mkdir -p "$TEST_TMP/templates"
ln -s "$tmpl" "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates
lib=$SBX_ROOT/var/lib/sbx
top=$(cd "$(dirname "$0")/.." && pwd)
run=$SBX_ROOT/run/sbx

# liar NAME MODE: default@NAME, a lying agent (lib.sh) sending the frames
# tests/tools/lying-guest.py writes for MODE.
liar() {
	lying_template "$tmpl" "$SBX_TEMPLATES/default@$1" "$here/tools/lying-guest.py" "$2"
}

if [ "$backend" != qemu ]; then
	diag "the lying agent speaks virtio-serial: QEMU only"
elif ! command -v python3 >/dev/null || ! command -v busybox >/dev/null; then
	diag "python3 or busybox missing: no lying agent"
else
	# --- Finding 8: frames for an exec that has ended ----------------------
	liar liar exit-flood
	id=$(sbx-create -q -t default@liar); ok $? "a session whose agent lies comes up"
	# The client of e1 reads nothing for now: the monitor's queue for it
	# fills (8 MiB), the client lags and reads the rest from the files.
	mkfifo "$TEST_TMP/out1"
	sbx-exec "$id" -- x >"$TEST_TMP/out1" 2>"$TEST_TMP/err1" &
	p1=$!
	exec 4<"$TEST_TMP/out1"
	i=0
	while [ ! -e "$lib/sessions/$id/execs/e1/request.json" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
	# e2's frames come after all of e1's on the agent channel: once e2 has
	# ended the monitor has handled every frame the guest sent for e1.
	sbx-exec "$id" -- y >/dev/null; is "$?" 0 "a second exec completes behind the flood"
	is "$(jq -c 'select(.type == "exec.end" and .exec == "e1")' "$lib/audit.log" | wc -l)" 1 \
	   "one exec.end for e1, not one per EXIT frame"
	is "$(jq -r '.status' "$lib/sessions/$id/execs/e1/result.json")" 7 \
	   "result.json keeps the first EXIT (status 7), later ones do not rewrite it"
	is "$(jq -r '.wall_s' "$lib/sessions/$id/execs/e1/result.json")" 0.001 \
	   "... nor its times"
	is "$(wc -c <"$lib/sessions/$id/execs/e1/stdout")" $((9 << 20)) \
	   "no output after the EXIT is stored"
	got=$(wc -c <&4)
	exec 4<&-
	wait "$p1"; rc=$?
	is "$rc" 7 "the lagging client gets the first exit status"
	is "$got" $((9 << 20)) "... after exactly the output sent before it"
	is "$(jq -c 'select(.type == "exec.end")' "$lib/audit.log" | wc -l)" 2 "two execs, two exec.end records"
	mrss=$(awk '/VmRSS/ { print $2 }' /proc/"$(jq -r .monitor.pid "$lib/sessions/$id/session.json")"/status 2>/dev/null)
	diag "monitor RSS after the flood: ${mrss:-?} kB"
	sbx-kill "$id"; ok $? "the lying session is destroyed"

	# --- Finding 13: a guest's error text on the operator's terminal -------
	liar liar2 error-text
	id=$(sbx-create -q -t default@liar2); ok $? "a second lying session comes up"
	sbx-exec "$id" -- x 2>"$TEST_TMP/err2"; rc=$?
	is "$rc" 3 "the guest's ERROR code passes through"
	like "$(cat "$TEST_TMP/err2")" 'refused' "its message is shown"
	! LC_ALL=C grep -q "$(printf '[\001-\011\013-\037\177]')" "$TEST_TMP/err2"; ok $? \
	   "without control bytes (no escape sequence reaches the terminal)"
	! LC_ALL=C grep -q "$(printf '\233')" "$TEST_TMP/err2"; ok $? "... not even a C1 CSI"
	sbx-exec --json "$id" -- x 2>"$TEST_TMP/err3"
	jq -e . "$TEST_TMP/err3" >/dev/null; ok $? "with --json the error is still valid JSON"
	! LC_ALL=C grep -q "$(printf '[\001-\011\013-\037\177]')" "$TEST_TMP/err3"; ok $? "... and raw control bytes"
	sbx-kill "$id"

	# --- Item 10: the host backstops an exec timeout the guest ignores ---
	liar liar3 hang
	id=$(sbx-create -q -t default@liar3); ok $? "a session whose agent ignores timeouts"
	out=$(sbx-exec --timeout 1s "$id" -- x); rc=$?
	is "$rc" 124 "an exec the guest never ends is ended by the host at its timeout (124)"
	is "$out" "started, and never ends" "... after the output it sent"
	is "$(jq -r '[.reason, .enforced_by] | join(" ")' "$lib/sessions/$id/execs/e1/result.json")" "timeout host" \
	   "its record says timeout, enforced_by host"
	is "$(jq -r 'select(.type == "exec.end" and .session == "'"$id"'") | .enforced_by' "$lib/audit.log")" host \
	   "... and so does its exec.end"
	sbx-exec --timeout 1s -d "$id" -- x >/dev/null  # detached: nobody attached, still ended
	sbx-exec --wait e2 "$id"; is "$?" 124 "a detached exec is ended by the host too"
	sbx-kill "$id"

	# --- Item 10: an agent that stops answering while an exec runs --------
	# (this one never answers a PING; pings every 300 ms for the test)
	id=$(SBX_AGENT_PING_MS=300 sbx-create -q -t default@liar3); ok $? "a session whose agent will not answer pings"
	sbx-exec --timeout 10m "$id" -- x >/dev/null 2>&1 &
	p=$!
	i=0
	while [ "$(sbx-ps --json "$id" | jq -r '.[0].state')" != unresponsive ] && [ $i -lt 600 ]; do
		sleep 0.1; i=$((i + 1))
	done
	is "$(sbx-ps --json "$id" | jq -r '.[0].state')" unresponsive "sbx-ps shows the session unresponsive"
	wait "$p"; rc=$?
	is "$rc" 125 "its exec ends (session lost) long before its 10 min timeout"
	is "$(jq -r .reason "$lib/sessions/$id/execs/e1/result.json")" session-lost "... recorded as session-lost"
	is "$(jq -c 'select(.type == "session.unresponsive" and .session == "'"$id"'")' "$lib/audit.log" | wc -l)" 1 \
	   "the audit trail says when it stopped answering"
	sbx-exec "$id" -- x 2>/dev/null; is "$?" 125 "a new exec in it does not hang either"
	sbx-kill "$id"
	# Their manifests are the newest: "default" would mean them now.
	rm -rf "$SBX_TEMPLATES"/default@liar*
fi

# wait_ended ID: until the session's record says it is over.
wait_ended() {
	local i=0
	while [ "$(jq -r .state "$lib/sessions/$1/session.json" 2>/dev/null)" = running ] && [ $i -lt 600 ]; do
		sleep 0.1; i=$((i + 1))
	done
}

# --- Finding 7: the serial console is a bounded file ----------------------
id=$(sbx-create -q); ok $? "a default session comes up"
[ -s "$run/sessions/$id/console.log" ]; ok $? "console.log holds the guest's console"
# 16 times the cap (64 MiB takes minutes through an emulated 8250 under TCG).
sbx-exec -u root "$id" -- sh -c 'head -c 16777216 /dev/zero | tr "\0" x >/dev/ttyS0; echo END-OF-FLOOD >/dev/ttyS0'
ok $? "root in the guest writes 16 MiB to its serial console"
sbx-exec "$id" -- true   # the console's pipe is drained by the loop this exec runs through
i=0
while ! tail -c 200 "$run/sessions/$id/console.log" | grep -q END-OF-FLOOD && [ $i -lt 300 ]; do
	sleep 0.1; i=$((i + 1))
done
size=$(stat -c %s "$run/sessions/$id/console.log")
[ "$size" -le 1048576 ]; ok $? "console.log stays within 1 MiB ($size bytes)"
tail -c 200 "$run/sessions/$id/console.log" | grep -q END-OF-FLOOD; ok $? "... and keeps the latest output"
like "$(head -c 200 "$run/sessions/$id/console.log")" '^\[sbx: [0-9]+ earlier bytes of this log were dropped' \
     "... saying how much it dropped"
size=$(stat -c %s "$run/sessions/$id/vmm.log")
[ "$size" -le 262144 ]; ok $? "vmm.log is bounded too ($size bytes)"

# --- Finding 7: a session keeps at most output_session_cap of exec output -
pol=$TEST_TMP/cap.yaml
printf 'resources:\n  output_cap: 4M\n  output_session_cap: 1M\n' >"$pol"
id2=$(sbx-create -q -p "$pol"); ok $? "a session with output_session_cap: 1M"
got=$(sbx-exec "$id2" -- sh -c 'head -c 3145728 /dev/zero' | wc -c)
is "$got" 3145728 "the attached client still gets all 3 MiB"
sbx-exec "$id2" -- sh -c 'head -c 2097152 /dev/zero; head -c 1048576 /dev/zero >&2' >/dev/null 2>&1
kept=$(cat "$lib/sessions/$id2"/execs/e*/stdout "$lib/sessions/$id2"/execs/e*/stderr | wc -c)
is "$kept" 1048576 "the session's stored output stops at the cap (6 MiB produced)"
is "$(jq -r '[.truncated, .truncated_by, .stdout_bytes] | map(tostring) | join(" ")' "$lib/sessions/$id2/execs/e1/result.json")" \
   "true output_session_cap 3145728" "the first exec's record says it was truncated, and by which cap"
is "$(jq -r '[.truncated, .truncated_by] | map(tostring) | join(" ")' "$lib/sessions/$id2/execs/e2/result.json")" \
   "true output_session_cap" "... and so does the next one"
is "$(jq -r 'select(.type == "exec.end" and .session == "'"$id2"'") | .output_truncated' "$lib/audit.log" | sort -u)" \
   output_session_cap "the audit trail records the truncation"
is "$(sbx-exec "$id2" -- echo still)" still "the session runs on"
sbx-kill "$id2"

# --- Finding 13: a panic is the kernel's word, not the console's ----------
sbx-exec -u root "$id" -- sh -c \
	'echo "Kernel panic - not syncing: Attempted to kill init!" >/dev/ttyS0; echo o >/proc/sysrq-trigger' 2>/dev/null
wait_ended "$id"
is "$(jq -r .end_reason "$lib/sessions/$id/session.json")" "console reported a panic" \
   "a guest that prints a panic line and powers off is not recorded as a guest panic"

if [ "$backend" = qemu ]; then
	id=$(sbx-create -q); ok $? "another session"
	like "$(sbx-exec "$id" -- sh -c 'ls /sys/bus/platform/drivers/pvpanic-mmio/')" 'QEMU0001' \
	     "the guest kernel drives the pvpanic device"
	sbx-exec -u root "$id" -- sh -c 'echo c >/proc/sysrq-trigger' 2>/dev/null
	wait_ended "$id"
	is "$(jq -r .end_reason "$lib/sessions/$id/session.json")" "guest panic" \
	   "a real kernel panic is reported by pvpanic: guest panic"
	is "$(jq -r .state "$lib/sessions/$id/session.json")" crashed "... and the session crashed"
fi

# ---- a full disk is a violation the exec's record names ------------------
printf 'resources: { disk: 32M }\nworkspace: { size: 32M, retention: 1h }\n' >"$TEST_TMP/small.yaml"
id=$(sbx-create -q -p "$TEST_TMP/small.yaml" --workspace full-ws); ok $? "a session with a 32M disk and a 32M workspace"
out=$(sbx-exec --json "$id" -- sh -c 'dd if=/dev/zero of=/tmp/fill bs=1M 2>/dev/null; true')
is "$(printf '%s' "$out" | jq -c '[.violations.disk_full, .violations.disk_full_on]')" '[true,["scratch"]]' \
	"filling the session's disk: violations.disk_full, on scratch"
printf '%s' "$out" | python3 "$top/tests/tools/json-schema-check.py" validate --strict "$top/docs/schema" exec-result.json >/dev/null 2>&1
ok $? "and the record matches its schema"
out=$(sbx-exec --json "$id" -- sh -c 'rm /tmp/fill; dd if=/dev/zero of=/workspace/fill bs=1M 2>/dev/null; true')
is "$(printf '%s' "$out" | jq -c '[.violations.disk_full, .violations.disk_full_on]')" '[true,["workspace"]]' \
	"filling the workspace: on workspace"
out=$(sbx-exec --json "$id" -- sh -c 'rm /workspace/fill')
is "$(printf '%s' "$out" | jq -c '[.violations.disk_full, .violations.disk_full_on]')" '[false,null]' \
	"with space again, an exec has no disk_full"
sbx-kill "$id" >/dev/null

done_testing
