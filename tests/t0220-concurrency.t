#!/bin/bash
# Concurrent execs in one session keep their outputs apart; five sessions
# run at once.
. "$(dirname "$0")/lib.sh"
require_vm

id=$(sbx-create -q) || { ok 1 "create"; done_testing; }
for i in 1 2 3 4 5 6; do
	sbx-exec "$id" -- sh -c "i=0; while [ \$i -lt 2000 ]; do echo exec$i-line\$i; i=\$((i+1)); done" \
		>"$TEST_TMP/out$i" 2>&1 &
done
wait
for i in 1 2 3 4 5 6; do
	is "$(grep -c "^exec$i-line" "$TEST_TMP/out$i"):$(grep -vc "^exec$i-line" "$TEST_TMP/out$i")" "2000:0" \
		"exec $i got its 2000 lines and nothing else"
done
is "$(ls "$SBX_ROOT/var/lib/sbx/sessions/$id/execs" | wc -l)" 6 "six exec records kept"
res=$(cat "$SBX_ROOT/var/lib/sbx/sessions/$id/execs/e1/result.json")
is "$(echo "$res" | jq -r '.reason + " " + (.status|tostring)')" "exited 0" "result.json records the reason and status"
is "$(wc -c <"$SBX_ROOT/var/lib/sbx/sessions/$id/execs/e1/stdout")" \
   "$(wc -c <"$TEST_TMP/out$(jq -r '.request.argv[2]' <<<"$res" | grep -o 'exec[0-9]' | tr -d exec)")" \
   "the stored stdout matches what the client saw"
sbx-kill "$id"

# Five sessions at once.
for i in 1 2 3 4 5; do (sbx-create -q >"$TEST_TMP/id$i" 2>"$TEST_TMP/cerr$i"; echo $? >"$TEST_TMP/rc$i") & done
wait
ids=""
for i in 1 2 3 4 5; do
	is "$(cat "$TEST_TMP/rc$i")" 0 "concurrent create $i succeeded"
	ids="$ids $(cat "$TEST_TMP/id$i")"
done
is "$(sbx-ps -q | sort | tr '\n' ' ')" "$(printf '%s\n' $ids | sort | tr '\n' ' ')" "sbx-ps lists all five"
for i in $ids; do sbx-exec "$i" -- hostname >"$TEST_TMP/host.$i" & done
wait
n=0; for i in $ids; do [ "$(cat "$TEST_TMP/host.$i")" = "$i" ] && n=$((n + 1)); done
is "$n" 5 "each session answers with its own hostname"
sbx-ps -q | sbx-kill; ok $? "sbx-ps -q | sbx-kill"
is "$(sbx-ps -q | wc -l)" 0 "all gone"
is "$(root_procs | wc -l)" 0 "no process left behind"
done_testing
