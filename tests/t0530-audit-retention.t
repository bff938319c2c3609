#!/bin/bash
# Audit retention (sbx.yaml audit: {max_size, keep}): the log rotates into
# segments whose first record carries the previous segment's head; verify
# and the reading commands go across segments; a deleted or edited segment
# is named; sbx-gc drops the oldest beyond keep and records it.  No VM:
# events are appended by tools/sbx-audit-append, as the commands would.
. "$(dirname "$0")/lib.sh"
append=$SBX_BUILD/tools/sbx-audit-append
[ -x "$append" ] || skip_all "sbx-audit-append not built (make all)"
L=$SBX_ROOT/var/lib/sbx
mkdir -p "$SBX_ROOT/etc/sbx"
pad=$(printf 'x%.0s' $(seq 200))
segs() { ls "$L" | grep -c '^audit\.log\.[0-9]\{20\}$'; }

printf 'audit:\n  max_size: 1K\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
sbx-gc 2>"$SBX_ROOT/err" >/dev/null; is "$?" 3 "a max_size below 64K is refused (3)"
like "$(cat "$SBX_ROOT/err")" "64K" "... saying the bound"

printf 'audit:\n  max_size: 64K\n  keep: 2\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
"$append" -n 1000 exec.start "{\"session\":\"s-a\",\"pad\":\"$pad\"}"; ok $? "1000 records appended"
n=$(segs)
ok "$([ "$n" -ge 3 ] && echo 0 || echo 1)" "the log rotated into segments ($n)"
is "$(stat -c %s "$L"/audit.log.* | awk '$1 > 65536 + 65536 {bad++} END {print bad+0}')" 0 \
	"no segment is much over max_size"
is "$(sbx-audit verify)" "ok $((1000 + n)) records" "verify reads across segments: 1000 + one audit.segment per rotation"
is "$(sbx-audit verify --json | jq -r .segments)" "$n" "--json says how many segments"

# Each new file's first record carries the previous file's head.
first=$(ls "$L" | grep '^audit\.log\.' | head -1)
second=$(ls "$L" | grep '^audit\.log\.' | sed -n 2p)
is "$(head -1 "$L/$second" | jq -r '.type + " " + .segment')" "audit.segment $first" \
	"a segment begins with audit.segment naming the one before"
is "$(head -1 "$L/$second" | jq -r .segment_last_seq)" "$(tail -1 "$L/$first" | jq -r .seq)" "... its last seq"
is "$(head -1 "$L/$second" | jq -r .segment_sha256)" "$(tail -1 "$L/$first" | tr -d '\n' | sha256sum | cut -c1-64)" \
	"... and the SHA-256 of its last line"
is "$(sbx-audit -q --type exec.start | wc -l) $(sbx-audit -q | head -1)" "1000 1" "listing reads across segments"
is "$(sbx-audit --chain | wc -l)" "$((1000 + n))" "--chain too"

# Tampering across files.  Work on a copy; put the trail back after each.
save() { rm -rf "$SBX_ROOT/keep" && mkdir "$SBX_ROOT/keep" && cp -a "$L"/audit.* "$SBX_ROOT/keep/"; }
restore() { rm -f "$L"/audit.* && cp -a "$SBX_ROOT/keep/"audit.* "$L/"; }
save
rm "$L/$second"
sbx-audit verify 2>"$SBX_ROOT/err"; is "$?" 1 "a deleted middle segment fails verify"
third=$(ls "$SBX_ROOT/keep" | grep '^audit\.log\.' | sed -n 3p)
[ -n "$third" ] || third=audit.log
like "$(cat "$SBX_ROOT/err")" "$third line 1: deleted" "... named at the next file's first line"
restore
sed -i '$ s/"pad":"x/"pad":"y/' "$L/$first"
sbx-audit verify 2>"$SBX_ROOT/err"; is "$?" 1 "an edited last line of a segment fails verify"
like "$(cat "$SBX_ROOT/err")" "$first line [0-9]+: edited" "... named in that segment"
restore
rm "$L/$first"
sbx-audit verify 2>"$SBX_ROOT/err"; is "$?" 1 "the oldest segment deleted, with no retention record, fails verify"
like "$(cat "$SBX_ROOT/err")" "no audit.retention record" "... and says so"
restore
is "$(sbx-audit verify)" "ok $((1000 + n)) records" "the trail put back verifies"

# Retention: sbx-gc drops the oldest beyond keep, after recording it.
is "$(sbx-gc -n | grep -c '^drop-audit-segment')" "$((n - 2))" "sbx-gc -n says which segments would go"
is "$(segs)" "$n" "... and drops none"
is "$(sbx-gc --json | jq -r '[.actions[] | select(.action == "drop-audit-segment")] | length')" "$((n - 2))" \
	"sbx-gc drops the oldest beyond keep 2"
is "$(segs)" 2 "two segments are left"
kept=$(sbx-audit --type audit.retention --jsonl | jq -r .kept_from_seq)
is "$(sbx-audit --type audit.retention --jsonl | jq -r '.dropped | length')" "$((n - 2))" \
	"the trail records what went (audit.retention)"
is "$(sbx-audit -q | head -1)" "$kept" "the trail now starts where retention kept it"
total=$(sbx-audit -q | wc -l)
is "$(sbx-audit verify)" "ok $total records" "and verifies"
is "$(sbx-gc | grep -c '^drop-audit-segment')" 0 "a second run drops nothing"
save
rm "$L/$(ls "$L" | grep '^audit\.log\.' | head -1)"
sbx-audit verify 2>"$SBX_ROOT/err"; is "$?" 1 "deleting a kept segment fails verify"
like "$(cat "$SBX_ROOT/err")" "retention kept it from seq $kept" "... naming what retention kept"
restore

# A crash between the rename and the new log's first record: the next
# append continues the chain from the newest segment.
mv "$L/audit.log" "$L/audit.log.$(printf %020d "$(tail -1 "$L/audit.log" | jq -r .seq)")"
"$append" exec.end '{"session":"s-a"}'
is "$(head -1 "$L/audit.log" | jq -r .type)" audit.segment "after a crash mid-rotation the next append begins the new log"
is "$(sbx-audit verify)" "ok $((total + 2)) records" "and the chain goes on"

# Appenders at once across rotations (group commit, rotation, one chain).
for i in 1 2 3 4; do "$append" -n 250 exec.start "{\"session\":\"s-$i\",\"pad\":\"$pad\"}" & done
fail=0; for i in 1 2 3 4; do wait -n || fail=1; done
is "$fail" 0 "4 concurrent appenders across rotations"
is "$(sbx-audit --type exec.start --jsonl | jq -r 'select(.session != "s-a") | .session' | wc -l)" 1000 \
	"every record reads back"
r=$(sbx-audit verify); like "$r" "^ok [0-9]+ records$" "one intact chain: $r"
done_testing
