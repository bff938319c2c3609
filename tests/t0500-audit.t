#!/bin/bash
# The audit trail through sbx-audit: listing and filters, --jsonl as
# stored, verify on an intact log and on tampered copies.  No VM needed:
# events are appended by tools/sbx-audit-append, as the commands would.
. "$(dirname "$0")/lib.sh"
append=$SBX_BUILD/tools/sbx-audit-append
[ -x "$append" ] || skip_all "sbx-audit-append not built (make all)"
LOG=$SBX_ROOT/var/lib/sbx/audit.log

is "$(sbx-audit verify)" "ok 0 records" "an empty trail verifies"
is "$(sbx-audit)" "$(printf 'SEQ\tTIME\tTYPE\tSESSION\tSUMMARY')" "and lists only the header"
sbx-audit --type exec. >/dev/null; is "$?" 1 "a filter that matches nothing exits 1"

"$append" session.create '{"session":"s-a","template":"default@1"}' \
	exec.start '{"session":"s-a","argv":["sh","-c","echo hi"],"cwd":"/workspace"}' \
	exec.end '{"session":"s-a","status":0,"reason":"exited"}'
sleep 0.05 # so record 4 has a later time than 3
"$append" session.create '{"session":"s-b"}' files.upload '{"session":"s-b","bytes":12}' \
	policy.refused '{"session":"s-b","what":"network"}' session.destroy '{"session":"s-a"}'
ok $? "seven events appended"
is "$(stat -c %a "$LOG")" 600 "the log is mode 0600"

is "$(sbx-audit --no-headers | wc -l)" 7 "every event is listed"
is "$(sbx-audit --no-headers | head -1 | cut -f1,3,4,5)" "$(printf '1\tsession.create\ts-a\ttemplate=default@1')" \
	"text: SEQ TIME TYPE SESSION SUMMARY, tab-separated"
like "$(sbx-audit --no-headers | sed -n 2p | cut -f2)" '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z$' \
	"times are RFC 3339 UTC with milliseconds"
is "$(sbx-audit --no-headers | sed -n 2p | cut -f5)" 'argv=["sh","-c","echo hi"] cwd=/workspace' \
	"the summary holds the other fields"
is "$(sbx-audit -q --type exec. | tr '\n' ' ')" "2 3 " "--type with a trailing dot is a prefix; -q prints seqs"
is "$(sbx-audit -q --type 'exec.*' | tr '\n' ' ')" "2 3 " "... and so is a trailing .*"
is "$(sbx-audit -q --type exec | tr '\n' ' ')" "" "... but a bare word is exact"
is "$(sbx-audit -q --type session.create | tr '\n' ' ')" "1 4 " "an exact type"
is "$(sbx-audit -q --session s-b | tr '\n' ' ')" "4 5 6 " "--session"
is "$(sbx-audit -q --session s-a --type session. | tr '\n' ' ')" "1 7 " "filters combine"
sbx-audit --tenant t1 >/dev/null; is "$?" 1 "no record carries tenant t1"
"$append" exec.start '{"session":"s-c","tenant":"t1","argv":["true"]}'
is "$(sbx-audit -q --tenant t1)" 8 "--tenant"

t4=$(sbx-audit --json | jq -r '.[3].time')
is "$(sbx-audit -q --since "$t4" | tr '\n' ' ')" "4 5 6 7 8 " "--since TIME is inclusive"
is "$(sbx-audit -q --until "$t4" | tr '\n' ' ')" "1 2 3 " "--until TIME is exclusive"
is "$(sbx-audit -q --since 1h | wc -l)" 8 "--since 1h"
sbx-audit --since 2099-01-01 >/dev/null; is "$?" 1 "--since in the future matches nothing (1)"
sbx-audit --since yesterday 2>/dev/null; is "$?" 3 "a bad time exits 3"
sbx-audit --until 2024-02-30 2>/dev/null; is "$?" 3 "an impossible date exits 3"
sbx-audit --session ../x 2>/dev/null; is "$?" 3 "a bad session ID exits 3"
sbx-audit --type 'Exec Start' 2>/dev/null; is "$?" 3 "a bad type exits 3"
like "$(sbx-audit --json --since nope 2>&1 >/dev/null | jq -r .error)" invalid "--json errors are JSON on stderr"
sbx-audit --json --jsonl 2>/dev/null; is "$?" 2 "--json with --jsonl is a usage error"
sbx-audit --bogus 2>/dev/null; is "$?" 2 "an unknown option is a usage error"
sbx-audit verify --type exec. 2>/dev/null; is "$?" 2 "verify takes no filters"
sbx-audit frobnicate 2>/dev/null; is "$?" 2 "an unknown operand is a usage error"

is "$(sbx-audit --json | jq -r 'length, .[0].prev, .[7].seq' | tr '\n' ' ')" \
	"8 0000000000000000000000000000000000000000000000000000000000000000 8 " "--json is an array of the records"
sbx-audit --jsonl | cmp -s - "$LOG"; ok $? "--jsonl prints the records byte for byte as stored"
prev=$(sed -n 2p "$LOG" | sha256sum | cut -c1-64)
prev_raw=$(sed -n 2p "$LOG" | tr -d '\n' | sha256sum | cut -c1-64)
is "$(sbx-audit --jsonl | sed -n 3p | jq -r .prev)" "$prev_raw" "each prev is the SHA-256 of the line before, without its newline"
[ "$prev" != "$prev_raw" ]; ok $? "(and not of the line with its newline)"
shipped=$(mktemp -d /tmp/sbx-test-ship.XXXXXX)
mkdir -p "$shipped/var/lib/sbx"
sbx-audit --jsonl > "$shipped/var/lib/sbx/audit.log"
is "$(SBX_ROOT=$shipped sbx-audit verify)" "ok 8 records" "a shipped --jsonl copy verifies on its own"
sbx-audit --jsonl --session s-b > "$shipped/var/lib/sbx/audit.log"
SBX_ROOT=$shipped sbx-audit verify 2>/dev/null; is "$?" 1 "... but a filtered extract does not"
rm -rf "$shipped"

is "$(sbx-audit verify)" "ok 8 records" "verify: ok N records"
is "$(sbx-audit verify -q)" "" "verify -q prints nothing when intact"
is "$(sbx-audit verify --json | jq -r '[.ok, .records, .last_seq, (.last_hash|length)] | map(tostring) | join(" ")')" \
	"true 8 8 64" "verify --json gives the head hash to anchor elsewhere"

# Tampered copies: each must be caught and named, with its line.
HEAD=$SBX_ROOT/var/lib/sbx/audit.head
cp "$LOG" "$TEST_TMP/good"
cp "$HEAD" "$TEST_TMP/good.head"
restore() { cp "$TEST_TMP/good" "$LOG"; cp "$TEST_TMP/good.head" "$HEAD"; }
tamper() { # tamper DESCRIPTION WANT-REGEX SHELL-CMD
	restore
	eval "$3"
	msg=$(sbx-audit verify 2>&1 >/dev/null); rc=$?
	is "$rc" 1 "$1: verify exits 1"
	like "$msg" "$2" "$1: the message names line and problem"
}
tamper "edit a byte" 'audit.log line 3: edited' "sed -i '3s/exited/exitex/' '$LOG'"
tamper "delete a line" 'line 3: deleted' "sed -i 3d '$LOG'"
tamper "swap two lines" 'line 3: reordered' "awk 'NR == 3 { h = \$0; next } NR == 4 { print; print h; next } 1' '$TEST_TMP/good' > '$LOG'"
tamper "cut the last line short" 'line 8: truncated' "truncate -s -4 '$LOG'"
tamper "drop the last line" 'line 8: deleted' "sed -i '\$d' '$LOG'"
tamper "edit the last line" 'line 8: edited' "sed -i '8s/true/echo/' '$LOG'"
tamper "garbage line" 'line 2: malformed' "sed -i '2s/^/x/' '$LOG'"
tamper "renumber a record" 'line 5: edited' "sed -i '5s/\"seq\":5/\"seq\":6/' '$LOG'"
restore
sed -i '3s/exited/exitex/' "$LOG"
is "$(sbx-audit verify --json | jq -r '[.ok, .line, .problem] | map(tostring) | join(" ")')" "false 3 edited" \
	"verify --json names the problem too"
restore
printf '{"seq":9,"time":"20' >>"$LOG" # a crash in the middle of an append
is "$(sbx-audit -q | tr '\n' ' ')" "1 2 3 4 5 6 7 8 " "listing skips a torn last line"
"$append" session.destroy '{"session":"s-b"}'
is "$(sbx-audit verify)" "ok 10 records" "the next append cuts the torn line and goes on (8 + repair + 1)"
is "$(sbx-audit --no-headers --type audit. | cut -f1,3,5)" "$(printf '9\taudit.repair\tdiscarded_bytes=19 discarded_sha256=%s reason=torn' \
	"$(printf '{"seq":9,"time":"20' | sha256sum | cut -c1-64)")" "... recording what it cut"
restore
sed -i '$d' "$LOG"
"$append" session.destroy '{"session":"s-b"}'
is "$(sbx-audit verify)" "ok 9 records" "an append after the last record was removed goes on"
is "$(sbx-audit --json --type audit.repair | jq -r '.[0] | [.reason, .head_seq, .log_seq] | map(tostring) | join(" ")')" \
	"head-mismatch 8 7" "... recording that audit.head was ahead of the log"

# Many writers at once: nothing interleaves, nothing is lost.
restore
for i in 1 2 3 4 5 6; do "$append" -n 50 exec.start "{\"session\":\"s-$i\"}" & done
wait
is "$(sbx-audit verify)" "ok 308 records" "6 writers x 50 appends: intact, 308 records"
is "$(sbx-audit -q --session s-3 | wc -l)" 50 "all of one writer's records are there"
done_testing
