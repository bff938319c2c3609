#!/bin/bash
# The monitor's warm-up exec before a new guest is ready (monitor/warm.c):
# it is nobody's exec (no record, no audit, no EXECS count, the first exec
# is still e1, nothing of it left running in the guest), and it is bounded
# by the guest's 2 s kill, so a template whose /bin/echo never ends boots,
# and so does one without /bin/echo.  (The execs here use the shell's own
# echo: the templates' /bin/echo is what they change.)
. "$(dirname "$0")/lib.sh"
require_vm
L=$SBX_ROOT/var/lib/sbx
mkdir -p "$TEST_TMP/templates"
ln -s "$SBX_TEMPLATES"/default@* "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates
S=$TEST_TMP/spec
mkdir -p "$S"

# nobody_s ID: the warm-up left no trace in the session's own records
nobody_s() {
	local id=$1 what=$2
	is "$(sbx-ps --json "$id" | jq -r '.[0].execs')" 0 "$what: sbx-ps counts no exec"
	is "$(ls "$L/sessions/$id/execs" 2>/dev/null | wc -l)" 0 "$what: no exec directory"
	is "$(sbx-audit --jsonl --session "$id" --type exec.start | wc -l)" 0 "$what: no exec.start in the trail"
}
# first_exec ID: the first exec is e1, and runs
first_exec() {
	local id=$1 what=$2
	is "$(sbx-exec "$id" -- sh -c 'echo hi')" hi "$what: the first exec runs"
	is "$(ls "$L/sessions/$id/execs")" e1 "$what: and is e1"
	is "$(sbx-audit --jsonl --session "$id" --type exec.start | jq -r .exec)" e1 "$what: its exec.start is the only one"
}

id=$(sbx-create -q); ok $? "a session of the default template is created"
nobody_s "$id" "default"
first_exec "$id" "default"
is "$(sbx-exec "$id" -- sh -c 'ls /sys/fs/cgroup/execs | grep -c "^sbx-exec-805306368"' 2>/dev/null)" 0 \
	"the warm-up's cgroup (its stream, 0x30000000) is gone from the guest"
sbx-kill "$id" >/dev/null

# A /bin/echo that never ends: the guest kills it at 2 s; the boot goes on.
printf '#!/bin/sh\nexec sleep 600\n' >"$S/hang"
printf 'from: default\nfiles: [{src: hang, dst: /bin/echo, mode: "0755"}]\n' >"$S/hang.yaml"
sbx-template build hang -f "$S/hang.yaml" >/dev/null; ok $? "a template whose /bin/echo hangs builds"
id=$(sbx-create -q -t hang 2>"$TEST_TMP/err"); ok $? "a session of it is created"
is "$(cat "$TEST_TMP/err")" "" "with nothing said about the warm-up"
boot=$(jq -r .boot_ms "$L/sessions/$id/session.json")
[ "$boot" -ge 2000 ]; ok $? "ready only once the guest ended the warm-up at its 2 s timeout (boot_ms $boot)"
nobody_s "$id" "hanging /bin/echo"
first_exec "$id" "hanging /bin/echo"
is "$(sbx-exec "$id" -- sh -c 'ps -o pid,args | grep -c "[s]leep 600"')" 0 "nothing of the warm-up runs on in the guest"
sbx-kill "$id" >/dev/null

# No /bin/echo at all: the warm-up fails at once (127); the boot goes on.
printf 'from: default\nremove: [/bin/echo]\n' >"$S/noecho.yaml"
sbx-template build noecho -f "$S/noecho.yaml" >/dev/null; ok $? "a template without /bin/echo builds"
id=$(sbx-create -q -t noecho); ok $? "a session of it is created"
nobody_s "$id" "no /bin/echo"
first_exec "$id" "no /bin/echo"
sbx-kill "$id" >/dev/null

done_testing
