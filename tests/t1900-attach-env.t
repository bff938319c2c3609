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

# --- a session's environment -------------------------------------------------
# Everything sbx keeps, to see that a refusal changes nothing.
state() { (cd "$SBX_ROOT" && find var/lib/sbx run/sbx -printf '%p %y\n' 2>/dev/null | sort); }
printf '# comment\n\nFROM_FILE=one\nBOTH=file\nSPACED=a b  c\nEMPTY=\n' >"$TEST_TMP/env"
id=$(sbx-create -q --env-file "$TEST_TMP/env" -e BOTH=cli -e CLI=two -w /tmp); ok $? "-e, --env-file and -w ($id)"
is "$(sbx-exec "$id" -- sh -c 'echo "$FROM_FILE|$BOTH|$CLI|$SPACED|${EMPTY-unset}"')" "one|cli|two|a b  c|" \
   "every exec sees them (-e over the file; values kept as written)"
is "$(sbx-exec "$id" -- pwd)" /tmp "and starts in -w"
is "$(sbx-exec "$id" -- env | grep -c '^BOTH=')" 1 "a variable set twice is there once"
is "$(sbx-exec -e BOTH=exec -e NEW=3 -w / "$id" -- sh -c 'echo "$BOTH $NEW $CLI"; pwd')" "$(printf 'exec 3 two\n/')" \
   "sbx-exec -e and -w override for one exec"
is "$(sbx-exec "$id" -- sh -c 'echo "$BOTH"')" cli "the next exec has the session's again"
is "$(sbx-exec "$id" -- sh -c 'echo "$HOME $USER"')" "/home/user user" "the login defaults are still there"
is "$(sbx-ps --json "$id" | jq -S -c '.[0] | [.env, .workdir]')" \
   '[{"BOTH":"cli","CLI":"two","EMPTY":"","FROM_FILE":"one","SPACED":"a b  c"},"/tmp"]' "sbx-ps --json shows them"
echo hello >"$TEST_TMP/f"
sbx-cp "$TEST_TMP/f" "$id:/tmp/f"; ok $? "sbx-cp is not moved by the session's -w"
is "$(sbx-exec "$id" -- cat /tmp/f)" hello "... it copied to the path named"
export SBX_T1900_HOST=from-host
o2=$(sbx-create -q -e SBX_T1900_HOST -e SBX_T1900_UNSET); ok $? "-e NAME takes the caller's value"
is "$(sbx-exec "$o2" -- sh -c 'echo "$SBX_T1900_HOST ${SBX_T1900_UNSET-unset}"')" "from-host unset" "... and an unset NAME passes nothing"

# The environment is part of an --id's spec: the same again is the same
# session, another is a conflict (5).
sbx-create -q --id envid -e A=1 -w /tmp >/dev/null; ok $? "--id with an environment"
is "$(sbx-create --json --id envid -e A=1 -w /tmp | jq -r .existed)" true "the same again is the existing session"
sbx-create -q --id envid -e A=2 -w /tmp 2>/dev/null; is "$?" 5 "another value: 5"
sbx-create -q --id envid -e A=1 2>/dev/null; is "$?" 5 "another workdir: 5"
sbx-kill envid >/dev/null

# Bad input: 3, naming the place, and nothing is created.
before=$(state)
bad_file() { # CONTENT WANT-MESSAGE DESCRIPTION
	printf "$1" >"$TEST_TMP/bad.env"
	out=$(sbx-create -q --env-file "$TEST_TMP/bad.env" 2>&1); r=$?
	is "$r" 3 "env file: $3: 3"
	like "$out" "$2" "... saying where and why"
}
bad_file 'A=1\nNOEQUALS\n' "bad.env:2: 'NOEQUALS' is not NAME=VALUE" "a line without ="
bad_file 'A=1\n\n1BAD=x\n' "bad.env:3: '1BAD' is not a variable name" "a name with a leading digit"
bad_file 'export A=1\n' "bad.env:1: 'export A' is not a variable name" "shell syntax"
bad_file ' A=1\n' "bad.env:1: ' A' is not a variable name" "a leading space"
bad_file 'A=1\r\n' "bad.env:1: the value of A holds a control character" "a CRLF line"
bad_file 'A=\033[2J\n' "bad.env:1: the value of A holds a control character" "an escape sequence"
bad_file 'A=\377\n' "bad.env:1: the value of A is not UTF-8" "a value that is not UTF-8"
bad_file 'A=1\0B=2\n' "holds a NUL byte" "a NUL byte"
bad_file "V=$(head -c 4097 /dev/zero | tr '\0' x)\n" "bad.env:1: the value of V is over 4096 bytes" "a value over 4 KiB"
bad_file "$(for i in $(seq 65); do printf 'V%s=1\\n' "$i"; done)" "bad.env:65: at most 64 variables" "65 variables"
bad_file "$(for i in $(seq 5); do printf 'V%s=%s\\n' "$i" "$(head -c 4000 /dev/zero | tr '\0' x)"; done)" \
	"bad.env:5: the environment is over 16384 bytes" "over 16 KiB in all"
sbx-create -q --env-file "$TEST_TMP/missing" 2>/dev/null; is "$?" 3 "a missing env file: 3"
sbx-create -q --env-file "$TEST_TMP" 2>/dev/null; is "$?" 3 "a directory as env file: 3"
sbx-create -q --env-file /dev/zero 2>/dev/null; is "$?" 3 "a device as env file: 3"
sbx-create -q --env-file "$L/sessions/$id/session.json" 2>/dev/null; is "$?" 3 "sbx's own state as env file: 3"
sbx-create -q --tenant ta --env-file "$TEST_TMP/env" 2>"$TEST_TMP/err"; is "$?" 3 "a tenant's env file outside its host_paths: 3"
for e in '1X=y' 'A-B=c' '=v' "$(head -c 129 /dev/zero | tr '\0' N)=v" "X=$(printf 'a\nb')"; do
	sbx-create -q -e "$e" >/dev/null 2>&1; is "$?" 3 "-e '$e': 3"
done
for w in tmp '' "/$(head -c 300 /dev/zero | tr '\0' d)" "$(printf '/a\tb\nc')"; do
	sbx-create -q -w "$w" >/dev/null 2>&1; is "$?" 3 "-w '${w:0:20}': 3"
done
is "$(state)" "$before" "no refusal created anything"

# The template's manifest env, workdir and user apply beneath the session's.
mkdir -p "$TEST_TMP/templates/envt@1"
d=$(ls -d "$SBX_TEMPLATES"/default@* | head -1)
for f in vmlinux initrd.cpio rootfs.ext4; do ln -s "$d/$f" "$TEST_TMP/templates/envt@1/$f"; done
ln -s "$d" "$TEST_TMP/templates/"
jq '.name="envt" | .version="1" | .env={"FROM_T":"t","BOTH":"t"} | .workdir="/etc" | .user="root"' \
	"$d/manifest.json" >"$TEST_TMP/templates/envt@1/manifest.json"
export SBX_TEMPLATES=$TEST_TMP/templates
t1=$(sbx-create -q -t envt -e BOTH=mine); ok $? "a session of a template with env, workdir and user ($t1)"
is "$(sbx-exec "$t1" -- sh -c 'echo "$FROM_T $BOTH"; pwd; id -u')" "$(printf 't mine\n/etc\n0')" \
   "the template's apply, the session's over them"
is "$(sbx-exec -u user -w /tmp "$t1" -- sh -c 'pwd; id -u')" "$(printf '/tmp\n1000')" "sbx-exec -u and -w over both"
jq '.name="envt" | .version="2" | .env={"BAD NAME":"x"}' "$d/manifest.json" >"$TEST_TMP/m.json"
mkdir -p "$TEST_TMP/templates/envt@2"
for f in vmlinux initrd.cpio rootfs.ext4; do ln -s "$d/$f" "$TEST_TMP/templates/envt@2/$f"; done
mv "$TEST_TMP/m.json" "$TEST_TMP/templates/envt@2/manifest.json"
sbx-create -q -t envt@2 2>"$TEST_TMP/err"; is "$?" 3 "a template whose manifest env is bad: 3"
like "$(cat "$TEST_TMP/err")" "template envt@2: manifest: 'BAD NAME' is not a variable name" "... naming it"
rm -rf "$TEST_TMP/templates/envt@2"

# A value that is also a secret is never kept nor shown, yet the guest has it.
printf 's3cr3t-value\n' >"$TEST_TMP/token"
sid=$(sbx-create -q --secret TOKEN=@"$TEST_TMP/token" -e API_TOKEN=s3cr3t-value -e PLAIN=p); ok $? "a secret's value as -e ($sid)"
is "$(sbx-ps --json "$sid" | jq -S -c '.[0].env')" '{"API_TOKEN":"[secret:TOKEN]","PLAIN":"p"}' "sbx-ps --json shows it scrubbed"
if command -v python3 >/dev/null; then
	sbx-ps --json "$sid" "$t1" | python3 "$(dirname "$0")/tools/json-schema-check.py" validate --strict \
		"$(dirname "$0")/../docs/schema" ps.json; ok $? "sbx-ps --json with env, workdir and user matches its schema"
fi
! grep -rq s3cr3t-value "$L/sessions/$sid" "$L/audit.log"; ok $? "the value is in no record"
is "$(sbx-exec "$sid" -- sh -c '[ "$API_TOKEN" = "$(cat /run/secrets/TOKEN)" ] && echo same')" same "the exec has the value"
is "$(sbx-exec --json "$sid" -- true | jq -c '.request.env | sort')" '["API_TOKEN","PLAIN"]' "its record names both variables"
is "$(sbx-exec -e API_TOKEN=other "$sid" -- sh -c 'echo $API_TOKEN')" other "sbx-exec -e overrides it too"
sbx-create -q --secret TOKEN=@"$TEST_TMP/token" -e URL=https://u:s3cr3t-value@h 2>"$TEST_TMP/err"; is "$?" 3 \
   "a value holding a secret inside it: 3"
like "$(cat "$TEST_TMP/err")" "holds the value of secret TOKEN" "... saying why"
! grep -q s3cr3t-value "$TEST_TMP/err"; ok $? "... without the value"
sbx-kill "$sid" "$o2" >/dev/null

# Snapshots: a restored session has its own environment, not the saved one's.
snap=$(sbx-snapshot save "$id" envsnap); ok $? "a snapshot of the first session ($snap)"
r1=$(sbx-create -q -s "$snap" -e BOTH=restored); ok $? "a session restored from it, with -e ($r1)"
is "$(sbx-exec "$r1" -- sh -c 'echo "${CLI-none} $BOTH"; pwd')" "$(printf 'none restored\n/workspace')" \
   "it has its own environment only"
sbx-kill "$id" "$t1" "$r1" >/dev/null

# A warm default (item 7): what install.sh writes is a pool of one default
# member; a plain create is then a claim, and the claim has its own
# environment.  An existing sbx.yaml is never replaced.
conf=$SBX_ROOT/etc/sbx/sbx.yaml
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/default-sbx-yaml.sh" 2>/dev/null; ok $? "the default sbx.yaml is written"
like "$(cat "$conf")" "default: \{size: 1, vcpus: 1, memory: 256M\}" "a pool of one default member"
printf 'pool: {}\n' >"$TEST_TMP/mine.yaml"; cp "$conf" "$TEST_TMP/default.yaml"; cp "$TEST_TMP/mine.yaml" "$conf"
"$top/scripts/default-sbx-yaml.sh" 2>/dev/null; ok $? "run again over the operator's own"
is "$(cat "$conf")" "pool: {}" "... it is left as it is"
rm "$conf"; ln -s "$TEST_TMP/mine.yaml" "$conf"
"$top/scripts/default-sbx-yaml.sh" 2>/dev/null
[ -L "$conf" ] && [ "$(cat "$TEST_TMP/mine.yaml")" = "pool: {}" ]; ok $? "... and so is a symlink in its place"
rm "$conf"; cp "$TEST_TMP/default.yaml" "$conf"
sbx-gc --pool-only >/dev/null; ok $? "sbx-gc fills the default pool"
m=$(sbx-ps --pool -q --state=pooled); like "$m" "^pool-[0-9a-f]{9}$" "one pooled member ($m)"
is "$(sbx-ps --capacity --json | jq -c '[.sessions.used, .pooled]')" "[1,1]" "sbx-ps --capacity counts it, as pooled"
j=$(sbx-create --json -e CLAIMED=yes -w /tmp 2>"$TEST_TMP/err"); ok $? "a plain create, with -e and -w"
is "$(jq -r .from_pool <<<"$j")" true "... is a claim"
c=$(jq -r .session <<<"$j")
is "$(sbx-exec "$c" -- sh -c 'echo "$CLAIMED"; pwd')" "$(printf 'yes\n/tmp')" "the claimed session has its environment"
is "$(sbx-ps --json "$c" | jq -c '.[0] | [.env, .workdir]')" '[{"CLAIMED":"yes"},"/tmp"]' "... recorded as its own"
rm "$conf"
done_testing
