#!/bin/bash
# 32 parallel creates, execs and kills, with colliding IDs and clashing
# specs: every call ends ok, conflict (5) or retryable (75) - or, for an
# exec whose session another worker destroyed, 4 or 137; no record is
# lost, duplicated or corrupt; afterwards nothing is left.
. "$(dirname "$0")/lib.sh"
require_vm
export SBX_BOOT_TIMEOUT=240
worker() {
	local i=$1 id=c$(( $1 % 8 )) mem=$(( $1 % 16 < 8 ? 256 : 320 ))
	sbx-create -q --id "$id" --memory "$mem" >/dev/null 2>"$TEST_TMP/w$i.err"
	local c=$?
	local e=-
	if [ $c = 0 ]; then
		out=$(sbx-exec "$id" -- echo "w$i" 2>>"$TEST_TMP/w$i.err"); e=$?
		[ $e = 0 ] && [ "$out" != "w$i" ] && e=bad-output
	fi
	sbx-kill "$id" 2>>"$TEST_TMP/w$i.err"
	echo "$c $e $?" >"$TEST_TMP/w$i.rc"
}
for i in $(seq 0 31); do worker "$i" & done
wait
bad=0
for i in $(seq 0 31); do
	read -r c e k <"$TEST_TMP/w$i.rc"
	case "$c" in 0|5|75) ;; *) bad=$((bad + 1)); diag "worker $i: create $c: $(cat "$TEST_TMP/w$i.err")";; esac
	case "$e" in -|0|4|125|137) ;; *) bad=$((bad + 1)); diag "worker $i: exec $e: $(cat "$TEST_TMP/w$i.err")";; esac
	case "$k" in 0|75) ;; *) bad=$((bad + 1)); diag "worker $i: kill $k: $(cat "$TEST_TMP/w$i.err")";; esac
done
is "$bad" 0 "every create, exec and kill ended ok, conflict or retryable"
n_ok=$(cut -d' ' -f1 "$TEST_TMP"/w*.rc | grep -c '^0$')
diag "$n_ok of 32 creates succeeded; the rest conflicted or were told to retry"
# Colliding workers may kill every create mid-boot (5): only the outcome
# of each call is guaranteed.  The host must be healthy afterwards.
after=$(sbx-create -q) && [ "$(sbx-exec "$after" -- echo fine)" = fine ]; ok $? "after the storm a fresh session works"
sbx-kill "$after"
is "$(sbx-ps --json | jq '[.[] | select(.state == "corrupt")] | length')" 0 "no corrupt record"
sbx-ps -q | sbx-kill
sbx-gc --grace 0 >/dev/null 2>&1
is "$(find "$SBX_ROOT/var/lib/sbx/sessions" "$SBX_ROOT/run/sbx/sessions" -mindepth 1 -maxdepth 1 | wc -l):$(root_procs | wc -l)" \
   "0:0" "nothing left"
sbx-audit verify >/dev/null; ok $? "32 writers at once left an intact audit trail"
creates=$(sbx-audit --type session.create --json | jq '[.[] | select(.ok != false)] | length')
destroys=$(sbx-audit --type session.destroy --json | jq length)
is "$creates" "$destroys" "every created session was destroyed exactly once ($creates)"
done_testing
