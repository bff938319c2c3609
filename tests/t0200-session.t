#!/bin/bash
# The foundation: create, exec (every form), ps, kill, on a real microVM.
. "$(dirname "$0")/lib.sh"
require_vm

id=$(sbx-create 2>"$TEST_TMP/create.err"); rc=$?
ok $rc "sbx-create exits 0"
like "$id" '^s-[0-9a-f]{12}$' "sbx-create prints the session ID"
if [ "$(jq -r .accel "$SBX_ROOT/var/lib/sbx/sessions/$id/session.json")" = tcg ]; then
	like "$(cat "$TEST_TMP/create.err")" '^sbx-create: notice: running under TCG' "under TCG a one-line notice says so, on stderr"
else
	is "$(cat "$TEST_TMP/create.err")" "" "under KVM stderr stays empty"
fi

guest=$(sbx-exec "$id" -- uname -r); rc=$?
ok $rc "sbx-exec uname -r exits 0"
tmpl=$(ls -d "$SBX_TEMPLATES"/default@* | head -1)
want=$(jq -r .kernel.release "$tmpl/manifest.json")
is "$guest" "$want" "uname -r prints the guest kernel release"
[ "$guest" != "$(uname -r)" ]; ok $? "guest kernel differs from the host's"

out=$(sbx-exec "$id" -- sh -c 'echo out; echo err >&2; exit 7' 2>"$TEST_TMP/err"); rc=$?
is "$out" "out" "stdout is separate"
is "$(cat "$TEST_TMP/err")" "err" "stderr is separate"
is "$rc" 7 "exit status passes through"

t0=$(date +%s%N)
sbx-exec --timeout 1 "$id" -- sleep 30; rc=$?
t1=$(date +%s%N)
is "$rc" 124 "timeout exits 124"
ms=$(( (t1 - t0) / 1000000 ))
[ "$ms" -lt 10000 ]; ok $? "timeout returns promptly ($ms ms)"
left=$(sbx-exec -u root "$id" -- sh -c 'ps -o pid,args | grep -c "[s]leep 30"')
is "$left" 0 "the timed-out process is gone in the guest"

is "$(sbx-exec -w /tmp -e FOO=bar "$id" -- sh -c 'pwd; echo $FOO')" "/tmp
bar" "-w and -e"
is "$(printf 'hello' | sbx-exec -i "$id" -- cat)" "hello" "-i passes stdin"
data=$TEST_TMP/data; head -c 3000000 /dev/urandom >"$data"
is "$(sbx-exec -i "$id" -- sha256sum <"$data" | cut -d' ' -f1)" "$(sha256sum <"$data" | cut -d' ' -f1)" \
   "3 MB of stdin arrive intact (flow control)"
is "$(sbx-exec "$id" -- sh -c 'head -c 5000000 /dev/zero' | wc -c)" 5000000 "5 MB of stdout arrive intact"
# A reader that stalls while 24 MB pour out: the monitor spills to the
# session's files and the client catches up from them, losing nothing.
is "$(sbx-exec "$id" -- sh -c 'head -c 24000000 /dev/urandom | tee /tmp/big | sha256sum >/tmp/big.sum; cat /tmp/big' |
      (sleep 4; sha256sum | cut -d' ' -f1))" \
   "$(sbx-exec "$id" -- cut -d' ' -f1 /tmp/big.sum)" "a stalled reader still gets every byte, in order"

sbx-exec "$id" -- no-such-command 2>"$TEST_TMP/err"; rc=$?
is "$rc" 127 "missing command exits 127"
like "$(cat "$TEST_TMP/err")" 'no-such-command' "the guest's message is on stderr"
is "$(sbx-exec "$id" -- id -u)" 1000 "commands run as the unprivileged user by default"
is "$(sbx-exec -u root "$id" -- id -u)" 0 "--user root"

sbx-exec "$id" -- sh -c 'kill -TERM $$'; is "$?" 143 "killed by a signal: 128+N"

ps_out=$(sbx-ps --no-headers)
like "$ps_out" "^$id	running	" "sbx-ps lists the session as running"
is "$(sbx-ps -q)" "$id" "sbx-ps -q prints IDs only"
is "$(sbx-ps --json | jq -r '.[0].id + " " + .[0].state')" "$id running" "sbx-ps --json is a JSON array"

sbx-kill "$id"; ok $? "sbx-kill exits 0"
sbx-kill "$id"; ok $? "sbx-kill again exits 0 (idempotent)"
[ ! -e "$SBX_ROOT/var/lib/sbx/sessions/$id" ] && [ ! -e "$SBX_ROOT/run/sbx/sessions/$id" ]
ok $? "nothing of the session remains on disk"
is "$(root_procs | wc -l)" 0 "no process of the session remains"
sbx-exec "$id" -- true 2>/dev/null; is "$?" 4 "exec into a destroyed session exits 4"
is "$(sbx-ps -q)" "" "sbx-ps lists nothing"
done_testing
