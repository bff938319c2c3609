#!/bin/bash
# Tenancy (issue 12, items 1, 2 and 5): templates are owned, and a tenant
# can neither replace the operator's nor see another's; every command
# scoped by --tenant (or SBX_TENANT) treats another tenant's sessions,
# execs, snapshots, templates and workspaces as nonexistent (4) and changes
# nothing, the audit log included; sbx-audit --tenant shows only the
# tenant's records, and its --chain lets them be checked against the
# whole chain with the others' content left out.
. "$(dirname "$0")/lib.sh"
require_vm
command -v jq >/dev/null || skip_all "jq not installed"
command -v python3 >/dev/null || skip_all "python3 not installed"
L=$SBX_ROOT/var/lib/sbx
CONF=$SBX_ROOT/etc/sbx/sbx.yaml
mkdir -p "$SBX_ROOT/etc/sbx"
# Templates published here go to a directory of this test's own.
mkdir -p "$TEST_TMP/templates"
ln -s "$SBX_TEMPLATES"/default@* "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates
# The shipped default as the operator resolves it before any publish (the
# newest by creation, which need not sort last by version).
shipped=$(sbx-create --dry-run --json | jq -r .template.dir)
unset SBX_TENANT

# Everything sbx keeps: every name under LIB, RUN and the templates (sizes
# too outside RUN, whose logs a running guest may grow), and the bytes of
# every record, manifest and of the audit log.  Refusals write nothing,
# not even an audit record, so the audit log is in it.
state() {
	(cd "$SBX_ROOT" || exit 1
	 find var/lib/sbx tmp/templates -printf '%p %y %s\n' | sort
	 find run/sbx -printf '%p %y\n' | sort
	 find var/lib/sbx tmp/templates -type f \( -name '*.json' -o -name 'audit.*' -o -name lock \) -print0 |
		sort -z | xargs -0 -r sha256sum)
}
# An exec's end is audited by its monitor as the client is told: wait for
# the record (and for the append holding the lock to finish).
exec_audited() { # SESSION EXEC
	for _i in $(seq 200); do
		grep -q "\"type\":\"exec.end\".*\"exec\":\"$2\".*\"session\":\"$1\"" "$L/audit.log" && break
		sleep 0.05
	done
	flock -s "$L/audit.lock" true
}
same_state() { # same_state BEFORE-FILE DESCRIPTION
	state >"$TEST_TMP/after"
	if cmp -s "$1" "$TEST_TMP/after"; then ok 0 "$2"; else
		ok 1 "$2"; diff "$1" "$TEST_TMP/after" | head -20 | sed 's/^/# /'; fi
}
top=$(cd "$(dirname "$0")/.." && pwd)
matrix() { # CMD...: must exit 4 (IDs shown by name in the description)
	"$@" >/dev/null 2>"$TEST_TMP/err" </dev/null
	local rc=$? d="$*"
	[ -z "${a:-}" ] || d=${d//$a/\$a}
	[ -z "${e:-}" ] || d=${d//$e/\$e}
	[ -z "${m:-}" ] || d=${d//$m/\$m}
	is "$rc" 4 "b: $d exits 4"
}
schema() { # REF DESCRIPTION [--lines]: stdin against docs/schema, strictly
	python3 "$top/tests/tools/json-schema-check.py" validate --strict ${3:-} "$top/docs/schema" "$1" >"$TEST_TMP/schema" 2>&1
	ok $? "$2"
	sed 's/^/#   /' "$TEST_TMP/schema" | head -5
}

# --- tenant IDs --------------------------------------------------------------------------
sbx-create --dry-run --tenant a >/dev/null; [ ! -e "$SBX_ROOT/var" ] && [ ! -e "$SBX_ROOT/run" ]
ok $? "--dry-run resolves the template and creates nothing, not even the state directory"
sbx-ps -q >/dev/null 2>&1 # the state directory exists
state >"$TEST_TMP/before"
for t in '' _ @ operator Operator '../x' 'a/b' '.x' '-x' "$(printf 'x%.0s' $(seq 70))"; do
	sbx-create --dry-run --tenant "$t" >/dev/null 2>&1; r1=$?
	sbx-ps --tenant "$t" >/dev/null 2>&1; r2=$?
	SBX_TENANT=$t sbx-snapshot list >/dev/null 2>&1; r3=$?
	sbx-audit --tenant "$t" >/dev/null 2>&1; r4=$?
	is "$r1 $r2 $r3 $r4" "3 3 3 3" "tenant '${t:0:12}' is refused (3) by create, ps, SBX_TENANT and audit"
done
like "$(sbx-ps --tenant operator 2>&1)" "reserved" "saying the name is reserved"
same_state "$TEST_TMP/before" "refused tenant IDs changed nothing"

# --- the reproduction: a tenant cannot replace the operator's template ---------------------
a=$(sbx-create -q --tenant a); ok $? "tenant a has a session ($a)"
sbx-exec "$a" -- sh -c 'echo from-a > /workspace/marker'; ok $? "a writes a marker in its guest"
exec_audited "$a" e1
state >"$TEST_TMP/before"
sbx-snapshot save --tenant a --template "$a" default >/dev/null 2>"$TEST_TMP/err"
is "$?" 3 "sbx-snapshot save --tenant a --template \$a default exits 3"
like "$(cat "$TEST_TMP/err")" "operator's: tenant a is not in templates.publishers" "publishing is the operator's"
SBX_TENANT=a sbx-snapshot save --template "$a" default >/dev/null 2>&1
is "$?" 3 "and so with SBX_TENANT=a"
same_state "$TEST_TMP/before" "a refused publish leaves nothing behind"
b=$(sbx-create -q --tenant b); ok $? "tenant b creates a session ($b)"
sbx-exec "$b" -- cat /workspace/marker >/dev/null 2>&1; isnt=$?
ok $((isnt == 0)) "b's guest does not have a's marker"
is "$(jq -r '.template | [.name, .owner, .dir] | join(" ")' "$L/sessions/$b/session.json")" \
   "default operator $shipped" \
   "b's session is from the shipped default, the operator's (its record names the owner)"
is "$(sbx-ps --tenant b --json "$b" | jq -r '.[0].template_owner')" operator "sbx-ps names the template's owner"
schema ps.json "sbx-ps --json matches its schema" < <(sbx-ps --tenant b --json "$b")
like "$(sbx-ps --tenant b --no-headers "$b")" "	b	operator	-	[0-9]+/[0-9]+/-$" "its text line too (TENANT TEMPLATE_OWNER, then NET and PIDS)"

# --- a tenant that may publish: into its own namespace, never over another owner's ---------
printf 'templates:\n  publishers: [a]\n' >"$CONF"
state >"$TEST_TMP/before"
sbx-snapshot save --tenant a --template "$a" default >/dev/null 2>"$TEST_TMP/err"
is "$?" 3 "a publisher still cannot publish 'default' (3)"
like "$(cat "$TEST_TMP/err")" "template default belongs to the operator" "naming its owner"
for n in '../x' 'x/../../y' '.x' 'x@../y' "$(printf 'y%.0s' $(seq 64))" 'a/b'; do
	sbx-snapshot save --tenant a --template "$a" "$n" >/dev/null 2>&1
	is "$?" 3 "a template name with a path trick ('${n:0:12}') is refused (3)"
done
same_state "$TEST_TMP/before" "nothing half-written by the refusals"
v=$(sbx-snapshot save --tenant a --template "$a" mine); ok $? "a publishes its own template 'mine' ($v)"
[ -f "$SBX_TEMPLATES/tenants/a/$v/manifest.json" ]; ok $? "into its own namespace (templates/tenants/a)"
is "$(jq -r .owner "$SBX_TEMPLATES/tenants/a/$v/manifest.json")" a "whose manifest names its owner"
[ -z "$(ls -d "$SBX_TEMPLATES"/mine@* 2>/dev/null)" ]; ok $? "not among the operator's"
like "$(sbx-snapshot template list --tenant a -q | tr '\n' ' ')" "default@.* a/mine@" "a lists the operator's and its own"
sbx-snapshot template list --tenant b -q | grep -q mine; ok $((! $?)) "b does not see a's"
sbx-snapshot template list -q | grep -q "^a/mine@"; ok $? "the operator sees it as a/mine"
is "$(sbx-snapshot template list --tenant a --json | jq -r '.[] | select(.name == "mine") | .owner + " " + (.snapshot|tostring)')" \
   "a true" "its JSON: owner a, a snapshot template"
schema template-list.json "sbx-snapshot template list --json matches its schema" < <(sbx-snapshot template list --json)

# -t resolves among what the caller sees; --dry-run says what and whose.
is "$(sbx-create --dry-run --json --tenant a -t mine | jq -r '.template | .name + " " + .owner')" "a/mine a" \
   "--dry-run: a's -t mine is a/mine, owner a"
is "$(sbx-create --dry-run --json --tenant b | jq -r '.template | .name + " " + .owner')" "default operator" \
   "--dry-run: b's default is the operator's"
is "$(sbx-create --dry-run --json --tenant b -t mine | jq -r .template.code)" 4 "--dry-run: b has no 'mine'"
is "$(sbx-create --dry-run --json -t mine | jq -r .template.code)" 4 "nor has the operator by the bare name"
schema policy.json "--dry-run --json matches its schema" < <(sbx-create --dry-run --json --tenant a -t mine)
schema policy.json "and when nothing resolved" < <(sbx-create --dry-run --json -t mine)
a2=$(sbx-create -q --tenant a -t mine); ok $? "a creates a session from its template ($a2)"
is "$(sbx-exec "$a2" -- cat /workspace/marker)" from-a "restored from a's guest"
is "$(jq -r '.template | .name + " " + .owner' "$L/sessions/$a2/session.json")" "a/mine a" \
   "its record names the template a/mine and its owner a"

# The operator: never over a tenant's name, never a tenant's guest as its own.
o=$(sbx-create -q); ok $? "an operator session ($o)"
state >"$TEST_TMP/before"
sbx-snapshot save --template "$o" mine >/dev/null 2>"$TEST_TMP/err"
is "$?" 3 "the operator cannot publish over a's 'mine' (3)"
like "$(cat "$TEST_TMP/err")" "belongs to tenant a" "naming the owner"
sbx-snapshot save --template "$a" other >/dev/null 2>"$TEST_TMP/err"
is "$?" 3 "the operator cannot publish a tenant's session as its own template (3)"
oa=$(sbx-create -q -t a/mine); ok $? "the operator may use a's template by its full name"
sbx-snapshot save --template "$oa" other >/dev/null 2>"$TEST_TMP/err"
is "$?" 3 "but never publish a session of it as its own (3)"
like "$(cat "$TEST_TMP/err")" "runs tenant a's template a/mine" "saying whose guest it runs"
sbx-kill "$oa"
state >"$TEST_TMP/before"
sbx-snapshot save --template "$o" mine >/dev/null 2>&1
sbx-snapshot save --template "$a" other >/dev/null 2>&1
same_state "$TEST_TMP/before" "none of these left anything"
ov=$(sbx-snapshot save --template "$o" opt); ok $? "the operator publishes 'opt' ($ov)"
sbx-snapshot save --tenant a --template "$a" opt >/dev/null 2>"$TEST_TMP/err"
is "$?" 3 "a cannot then publish 'opt' (3)"
like "$(cat "$TEST_TMP/err")" "belongs to the operator" "naming the owner"

# Races: the operator and tenant a publish one new name at the same time, four times
# over; each time exactly one owner gets it, the other is refused (3) and leaves nothing.
for i in 1 2 3 4; do
	sbx-snapshot save --template "$o" "race$i" >/dev/null 2>&1 & p1=$!
	sbx-snapshot save --tenant a --template "$a" "race$i" >/dev/null 2>&1 & p2=$!
	wait "$p1"; r1=$?; wait "$p2"; r2=$?
	held=$(ls -d "$SBX_TEMPLATES"/race$i@* "$SBX_TEMPLATES"/tenants/*/race$i@* 2>/dev/null | wc -l)
	is "$(echo "$r1 $r2" | tr ' ' '\n' | sort | tr '\n' ' ')/$held" "0 3 /1" \
	   "race $i: one publish wins ($r1 $r2), one owner holds race$i"
	sbx-snapshot template rm "race$i" >/dev/null 2>&1 || sbx-snapshot template rm --tenant a "race$i" >/dev/null
done
left=$(find "$SBX_TEMPLATES" "$L/snapshots" -name '.tmp-*' | wc -l)
is "$left" 0 "no half-made template or snapshot left by the losers"

# 64 publishes at once, every one refused: by tenant b (not a publisher), of
# the operator's 'opt' by tenant a, and of names with path tricks.
state >"$TEST_TMP/before"
bad=(opt ../x a/opt '.hidden' 'x@y@z' '' "$(printf 'n\tl')" "$(head -c 200 /dev/zero | tr '\0' a)")
pids=()
for i in $(seq 0 63); do
	case $((i % 3)) in
	0) sbx-snapshot save --tenant b --template "$b" "mass$i" >/dev/null 2>&1 & ;;
	1) sbx-snapshot save --tenant a --template "$a" opt >/dev/null 2>&1 & ;;
	2) sbx-snapshot save --tenant a --template "$a" "${bad[$((i % ${#bad[@]}))]}" >/dev/null 2>&1 & ;;
	esac
	pids+=($!)
done
codes=
for p in "${pids[@]}"; do wait "$p"; codes="$codes $?"; done
is "$(echo $codes | tr ' ' '\n' | sort -u | tr '\n' ' ')" "3 " "64 concurrent publishes that may not be: all refused with 3"
same_state "$TEST_TMP/before" "and together they changed nothing"

# Removal: only one's own, never one in use.
state >"$TEST_TMP/before"
sbx-snapshot template rm --tenant a mine 2>"$TEST_TMP/err"; is "$?" 5 "a's template in use by $a2 is kept (5)"
like "$(cat "$TEST_TMP/err")" "in use by session:$a2" "naming its user"
sbx-snapshot template rm --tenant a opt 2>/dev/null; is "$?" 3 "a cannot remove the operator's 'opt' (3)"
sbx-snapshot template rm --tenant b mine 2>/dev/null; is "$?" 4 "b: a's 'mine' does not exist (4)"
sbx-snapshot template rm --tenant b a/mine 2>/dev/null; is "$?" 4 "nor as a/mine (4)"
sbx-snapshot template rm default 2>/dev/null; is "$?" 5 "the default, in use by sessions, is kept (5)"
sbx-snapshot template rm '../../etc' 2>/dev/null; is "$?" 3 "a removal with a path trick is refused (3)"
same_state "$TEST_TMP/before" "refused removals changed nothing"
sbx-kill "$a2"
sbx-snapshot template rm --tenant a --json mine >"$TEST_TMP/rm.json"
is "$(jq -r '.removed[0]' "$TEST_TMP/rm.json")" "a/$v" "once unused, a removes it"
schema template-rm.json "sbx-snapshot template rm --json matches its schema" <"$TEST_TMP/rm.json"
[ ! -e "$SBX_TEMPLATES/tenants/a/$v" ]; ok $? "and it is gone"
grep -q '"type":"template.rm".*"tenant":"a"' "$L/audit.log"; ok $? "audited as a's template.rm"
# A warm-pool member of the operator's 'opt': the host's, nobody's tenant's; it keeps 'opt'.
printf 'templates:\n  publishers: [a]\npool:\n  templates:\n    opt: {size: 1}\n' >"$CONF"
sbx-gc --pool-only >/dev/null; ok $? "sbx-gc fills a pool of 'opt'"
m=$(sbx-ps --pool -q); like "$m" "^pool-" "one member ($m)"
sbx-snapshot template rm "$ov" 2>"$TEST_TMP/err"; is "$?" 5 "'opt' is kept while a pool member uses it (5)"
like "$(cat "$TEST_TMP/err")" "in use by session:$m" "naming the member"
state >"$TEST_TMP/before"
matrix sbx-kill --tenant b "$m"
matrix sbx-exec --tenant b "$m" -- true
matrix sbx-ps --tenant b "$m"
matrix sbx-snapshot save --tenant b "$m" x
is "$(sbx-ps --tenant b --pool -q)" "" "b's --pool lists no member"
same_state "$TEST_TMP/before" "the member and everything else unchanged"
printf 'templates:\n  publishers: [a]\n' >"$CONF"
sbx-gc --pool-only >/dev/null; is "$(sbx-ps --pool -q)" "" "the pool trimmed to nothing"
m=
sbx-snapshot template rm "$ov" >/dev/null; ok $? "the operator removes 'opt'"

# A snapshot saved from a session of a template keeps the template too.
v2=$(sbx-snapshot save --tenant a --template "$a" mine2); ok $? "a publishes mine2 ($v2)"
a3=$(sbx-create -q --tenant a -t mine2); ok $? "a session of it ($a3)"
s2=$(sbx-snapshot save --tenant a "$a3" s2); ok $? "saved as a's snapshot ($s2)"
sbx-kill "$a3"
sbx-snapshot template rm --tenant a mine2 2>"$TEST_TMP/err"; is "$?" 5 "mine2 is kept while a snapshot needs it (5)"
like "$(cat "$TEST_TMP/err")" "in use by snapshot:a/$s2" "naming the snapshot"
sbx-snapshot rm --tenant a "$s2" >/dev/null; ok $? "the snapshot removed"
sbx-snapshot template rm --tenant a mine2 >/dev/null; ok $? "then mine2 can go"

# --- every command is scoped: tenant b against tenant a's objects ---------------------------
e=$(sbx-exec --tenant a -d "$a" -- true); ok $? "a runs a detached exec ($e)"
sbx-exec --tenant a --wait "$e" "$a"; ok $? "which ends"
exec_audited "$a" "$e"
s=$(sbx-snapshot save --tenant a "$a" s1); ok $? "a saves a snapshot ($s)"
aw=$(sbx-create -q --tenant a --workspace wa); ok $? "a session of a's with a workspace"
sbx-kill --tenant a "$aw"; ok $? "ended (the workspace stays)"
printf 'x\n' >"$TEST_TMP/up"
state >"$TEST_TMP/before"
matrix sbx-exec --tenant b "$a" -- true
matrix env SBX_TENANT=b sbx-exec "$a" -- true
like "$(cat "$TEST_TMP/err")" "no such session: $a" "with the message of a missing session"
matrix sbx-exec --tenant b --resume "$a" -- true
matrix sbx-exec --tenant b --wait "$e" "$a"
matrix sbx-exec --tenant b --output "$e" "$a"
matrix sbx-cp --tenant b "$TEST_TMP/up" "$a:/tmp/up"
matrix sbx-cp --tenant b "$a:/etc/hostname" "$TEST_TMP/down"
matrix sbx-kill --tenant b "$a"
matrix env SBX_TENANT=b sbx-kill "$a"
matrix sbx-kill --tenant b --exec "$e" "$a"
matrix sbx-ps --tenant b "$a"
matrix sbx-ps --tenant b --execs "$a"
matrix sbx-ps --tenant b --net "$a"
matrix sbx-snapshot pause --tenant b "$a"
matrix sbx-snapshot resume --tenant b "$a"
matrix sbx-snapshot save --tenant b "$a" x
matrix sbx-snapshot save --tenant b --template "$a" x
matrix sbx-snapshot list --tenant b s1
matrix sbx-snapshot rm --tenant b s1
matrix sbx-snapshot rm --tenant b --force s1
matrix sbx-create --tenant b -s s1
matrix sbx-create --tenant b -t a/mine
matrix sbx-snapshot template list --tenant b a/default
matrix sbx-snapshot template rm --tenant b a/x
sbx-kill --tenant b never-was 2>/dev/null; is "$?" 4 "b: a session that never existed is 4 as well (indistinguishable)"
is "$(sbx-ps --tenant b -q | tr '\n' ' ')" "$b " "b's sbx-ps lists only b's session"
is "$(sbx-ps --tenant b --all -q | tr '\n' ' ')" "$b " "with --all too"
is "$(sbx-snapshot list --tenant b -q)" "" "b's snapshot list is empty"
sbx-ps --tenant b --workspaces -q >"$TEST_TMP/ws"; is "$(cat "$TEST_TMP/ws")" "" "b's workspace list is empty"
is "$(sbx-ps --tenant a --workspaces -q)" wa "a's shows wa"
matrix sbx-ps --tenant b --workspaces wa
is "$(sbx-ps --tenant a --workspaces -q wa)" wa "named by a, it is there"
sbx-audit --tenant b --session "$a" >/dev/null; is "$?" 1 "b's audit view has nothing of \$a (1, as for any unknown session)"
same_state "$TEST_TMP/before" "the matrix changed nothing (records, names, templates, audit log)"
is "$(sbx-ps --tenant a --json "$a" | jq -r '.[0].state')" running "a's session runs on"
is "$(sbx-exec --tenant a "$a" -- cat /workspace/marker)" from-a "and a still reaches it"
sbx-kill --tenant a "$e" 2>/dev/null # not a session ID of a's: 4, harmless

# --- audit per tenant -----------------------------------------------------------------------
is "$(sbx-audit --tenant a --json | jq -r '[.[].tenant] | unique | join(" ")')" a "sbx-audit --tenant a shows only a's records"
sbx-audit --tenant a --json | jq -e 'map(select(.type == "session.create" and .session == "'"$a"'")) | length == 1' >/dev/null
ok $? "among them the creation of \$a"
sbx-audit --tenant b --json | jq -e 'map(select(.session == "'"$a"'")) | length == 0' >/dev/null
ok $? "b's view holds nothing of \$a"
SBX_TENANT=b sbx-audit --json | jq -e 'all(.tenant == "b")' >/dev/null; ok $? "SBX_TENANT=b: the same"
sbx-audit --tenant b --chain >"$TEST_TMP/chain"; ok $? "sbx-audit --tenant b --chain"
is "$(wc -l <"$TEST_TMP/chain")" "$(wc -l <"$L/audit.log")" "one line per record"
python3 - "$TEST_TMP/chain" b <<'EOF'
import hashlib, json, sys
prev = "0" * 64
bad = []
for i, raw in enumerate(open(sys.argv[1], "rb")):
    raw = raw.rstrip(b"\n")
    r = json.loads(raw)
    if r.get("redacted"):
        if set(r) != {"seq", "prev", "sha256", "redacted"}:
            bad.append("line %d: a redacted record shows %s" % (i + 1, sorted(r)))
        h = r["sha256"]
    else:
        if r.get("tenant") != sys.argv[2]:
            bad.append("line %d: another tenant's record in full" % (i + 1))
        h = hashlib.sha256(raw).hexdigest()
    if r["prev"] != prev:
        bad.append("line %d: prev does not chain" % (i + 1))
    prev = h
print("# " + "; ".join(bad[:5]) if bad else "# chain ok")
sys.exit(1 if bad else 0)
EOF
ok $? "b's records check against the chain; the others show only their place in it"
grep -c '"redacted":true' "$TEST_TMP/chain" >/dev/null; ok $? "others' records are redacted"
schema 'audit.json#/$defs/redacted' "the stubs match their schema" --lines < <(grep '"redacted":true' "$TEST_TMP/chain")
schema 'audit.json#/$defs/record' "b's records match theirs" --lines < <(grep -v '"redacted":true' "$TEST_TMP/chain")
schema 'audit.json#/$defs/record' "every record of the trail (template.rm too) matches" --lines < <(sbx-audit --jsonl)
schema audit-verify.json "verify --tenant --json matches its schema" < <(sbx-audit --tenant b --json verify)
grep -q "$a" "$TEST_TMP/chain"; ok $((! $?)) "and nothing of \$a is in b's chain"
is "$(sbx-audit --tenant b --json verify | jq -r '[.ok, .tenant, (.tenant_records > 0)] | map(tostring) | join(" ")')" \
   "true b true" "verify under --tenant: the whole chain, with b's count"

sbx-kill "$a" "$b" "$o"
done_testing
