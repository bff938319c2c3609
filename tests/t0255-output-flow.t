#!/bin/bash
# Output under credit (SBX_EXEC_OUT_WINDOW, design.md "Output credit"): a
# client that stops reading slows the command, as a pipe would, and gets
# every byte when it reads on, however far past output_cap (which bounds
# only what the files keep); one that goes away gives the command back its
# speed.  Before the credit, a client more than the monitor's 8 MiB queue
# behind read on from the files and lost what they did not keep.
. "$(dirname "$0")/lib.sh"
require_vm
pol=$TEST_TMP/flow.yaml
cat >"$pol" <<'Y'
resources:
  exec_timeout: {default: 2m, max: 5m}
  output_cap: 1M
Y
id=$(sbx-create -q -p "$pol") || { ok 1 "a session with a 1 MiB output cap"; done_testing; }
S=$SBX_ROOT/var/lib/sbx/sessions/$id

# 24 MB, three times the monitor's queue, to a reader that waits until
# the command is held back (it says how far it got in /tmp/progress, 1 MB
# at a time, and does not move for 5 s) or it has written everything
# (what happened before the credit, the monitor taking it all in).
slow_reader() {
	local last=-1 same=0 p
	while :; do
		p=$(sbx-exec "$id" -- cat /tmp/progress 2>/dev/null || echo 0)
		[ "$p" -ge 24 ] 2>/dev/null && break
		if [ "$p" = "$last" ]; then same=$((same + 1)); else same=0; last=$p; fi
		[ "$same" -ge 10 ] && break
		sleep 0.5
	done
	echo "$p" >"$TEST_TMP/held"
	wc -c
}
sbx-exec "$id" -- sh -c 'i=0; while [ $i -lt 24 ]; do head -c 1000000 /dev/zero; i=$((i + 1)); echo $i >/tmp/progress; done' |
	slow_reader >"$TEST_TMP/n"
is "$(cat "$TEST_TMP/n")" 24000000 "a client that stopped reading gets all 24 MB when it reads on"
held=$(cat "$TEST_TMP/held")
ok "$([ "$held" -lt 12 ]; echo $?)" "the command was held back while nobody read (at $held MB of 24)"
# The writer's record, not the reader's polls.
writer='[.[] | select(.request.argv[0] == "sh")][-1]'
r=$(sbx-ps --execs "$id" --json | jq -c "$writer | [.truncated, .stdout_bytes]")
is "$r" "[true,24000000]" "the files kept the cap, the record counts the stream"
e=$(sbx-ps --execs "$id" --json | jq -r "$writer | .exec")
is "$(wc -c <"$S/execs/$e/stdout")" 1048576 "exactly the cap is on disk"

# Both streams, one slow reader of each.
sbx-exec "$id" -- sh -c 'head -c 6000000 /dev/zero; head -c 5000000 /dev/zero >&2' \
	2> >(sleep 3; wc -c >"$TEST_TMP/err") | { sleep 3; wc -c; } >"$TEST_TMP/out"
for i in $(seq 100); do [ -s "$TEST_TMP/err" ] && break; sleep 0.1; done
is "$(cat "$TEST_TMP/out") $(cat "$TEST_TMP/err")" "6000000 5000000" "stdout and stderr, each whole"

# stdin and stdout both under credit, the reader slow: cat's output waits
# for the reader, its input for cat, and nothing waits on itself.
head -c 20000000 /dev/urandom >"$TEST_TMP/in"
sum=$(sbx-exec -i "$id" -- cat <"$TEST_TMP/in" | { sleep 3; sha256sum; } | cut -d' ' -f1)
is "$sum" "$(sha256sum <"$TEST_TMP/in" | cut -d' ' -f1)" "20 MB through cat, both ways under credit, to a slow reader"

# A reader that leaves early: the command runs on at full speed without it
# (the monitor gives back what nobody will read) and ends on its own.
sbx-exec "$id" -- sh -c 'head -c 30000000 /dev/zero; echo done >/tmp/flow-done' | head -c 1000 >/dev/null
e=$(sbx-ps --execs "$id" --json | jq -r '.[-1].exec')
for i in $(seq 600); do
	[ "$(sbx-ps --execs "$id" --json | jq -r --arg e "$e" '.[] | select(.exec == $e) | .state')" = ended ] && break
	sleep 0.1
done
is "$(sbx-ps --execs "$id" --json | jq -r --arg e "$e" '.[] | select(.exec == $e) | [.state, .reason, .stdout_bytes] | map(tostring) | join(" ")')" \
	"ended exited 30000000" "after its reader left, the command wrote all 30 MB and ended"
is "$(sbx-exec "$id" -- cat /tmp/flow-done)" done "and went on past its output"

# A detached exec has no reader to wait for.
e=$(sbx-exec -d "$id" -- head -c 20000000 /dev/zero)
sbx-exec --wait "$e" "$id"; is "$?" 0 "a detached exec's 20 MB goes to the files at once"
is "$(sbx-exec --wait "$e" --json "$id" | jq -c '[.stdout_bytes, .truncated]')" "[20000000,true]" "counted, the cap kept"

# sbx-cp's download is an exec's output too: whole, sixteen times the cap.
head -c 16777216 /dev/urandom >"$TEST_TMP/big"
sbx-cp "$TEST_TMP/big" "$id:/tmp/" && sbx-cp "$id:/tmp/big" "$TEST_TMP/back"
ok $? "sbx-cp moves 16 MiB each way under a 1 MiB output cap"
cmp -s "$TEST_TMP/big" "$TEST_TMP/back"; ok $? "and the download is the file"

sbx-kill "$id" >/dev/null
done_testing
