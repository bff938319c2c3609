#!/bin/bash
# The records of an exec (execs/eN/stdout, stderr, request.json,
# result.json) are written by the monitor's unprivileged half, which owns
# execs/ (review r3, N8): after a compromise it can put a FIFO where a
# file was.  Root's readers (sbx-exec --output, --wait, --attach, sbx-ps
# --execs) must not block in open() on it: they refuse what is not a
# regular file, promptly, and the session goes on.
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root"
L=$SBX_ROOT/var/lib/sbx/sessions

a=$(sbx-create -q); ok $? "create a session"
is "$(sbx-exec "$a" -- echo hi)" hi "e1 runs"
x=$L/$a/execs
[ -f "$x/e1/stdout" ] && [ -f "$x/e1/result.json" ]; ok $? "its records are files under execs/e1"
owner=$(stat -c %u:%g "$x")
plant() { rm -f "$1" && mkfifo -m 0644 "$1" && chown "$owner" "$1"; } # as its owner would

plant "$x/e1/stdout"
out=$(timeout -s KILL 20 sbx-exec --output e1 "$a" 2>&1 >/dev/null); rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 137 ]; ok $? "--output with a FIFO for stdout returns, failing (status $rc)"
like "$out" "not a regular file" "saying what is wrong ($out)"
out=$(timeout -s KILL 20 sbx-exec --attach e1 "$a" 2>&1 >/dev/null); rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 137 ]; ok $? "--attach returns, failing (status $rc)"
like "$out" "not a regular file" "saying what is wrong ($out)"

e=$(sbx-exec -d "$a" -- sleep 600); ok $? "a detached exec ($e)"
plant "$x/$e/result.json"
out=$(timeout -s KILL 20 sbx-exec --wait "$e" "$a" 2>&1 >/dev/null); rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 137 ]; ok $? "--wait with a FIFO for result.json returns, failing (status $rc)"
like "$out" "not a regular file" "saying what is wrong ($out)"
out=$(timeout -s KILL 20 sbx-exec --attach "$e" "$a" 2>&1 >/dev/null); rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 137 ]; ok $? "--attach returns, failing (status $rc)"
like "$out" "not a regular file" "saying what is wrong ($out)"

f=$(sbx-exec -d "$a" -- sleep 600); ok $? "another detached exec ($f)"
plant "$x/$f/request.json"
ps=$(timeout -s KILL 20 sbx-ps -q --execs "$a"); rc=$?
is "$rc" 0 "sbx-ps --execs returns with FIFOs for a result and a request"
is "$(echo $ps)" "e1 $e $f" "listing every exec"

is "$(sbx-exec "$a" -- echo still)" still "the session goes on"
sbx-kill "$a" >/dev/null; ok $? "the session is destroyed"
done_testing
