#!/bin/bash
# Snapshots on real VMs: pause/resume keeps processes and files and stops
# the guest's clock; save, then two sessions from it, independent and each
# with its own identity; a session with secrets is never saved, no exec
# records in a snapshot; tenants
# cannot see each other's; rm refused while in use; hostile names; a save
# killed midway leaves nothing visible; a snapshot published as a template;
# a session with a workspace is saved and the workspace re-attached by
# name at restore, refused (5) while another session holds it.
. "$(dirname "$0")/lib.sh"
require_vm
L=$SBX_ROOT/var/lib/sbx
A=$L/audit.log
# Templates published by this test go to a directory of its own.
# Every version, so the newest is chosen as it would be there.
mkdir -p "$TEST_TMP/templates"
ln -s "$SBX_TEMPLATES"/default@* "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates
guest_lines() { sbx-exec "$1" -- sh -c 'wc -l </tmp/count'; }
now() { date +%s.%N; }
fsub() { echo "$1 $2" | awk '{ printf "%.3f", $1 - $2 }'; }
flt() { echo "$1 $2" | awk '{ exit !($1 < $2) }'; }
printf 'canary-%s\n' "$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$TEST_TMP/canary"
CANARY=$(cat "$TEST_TMP/canary")

id=$(sbx-create -q); ok $? "a session is created"

# --- pause / resume --------------------------------------------------------
e=$(sbx-exec -d "$id" -- sh -c 'while :; do cat /proc/uptime >>/tmp/count; sleep 0.2; done')
ok $? "a background counter runs in the guest ($e)"
sbx-exec "$id" -- sh -c 'echo kept >/tmp/kept'
sleep 1.5
n1=$(guest_lines "$id"); u1=$(sbx-exec "$id" -- cut -d' ' -f1 /proc/uptime); h1=$(now)
sbx-snapshot pause "$id"; ok $? "sbx-snapshot pause exits 0"
like "$(sbx-ps --no-headers "$id")" "^$id	paused	" "sbx-ps shows the session paused"
is "$(sbx-ps --json "$id" | jq -r '.[0].state')" paused "and so does its JSON"
sbx-exec "$id" -- true 2>"$TEST_TMP/err"; rc=$?
is "$rc" 4 "sbx-exec into a paused session exits 4"
like "$(cat "$TEST_TMP/err")" "is paused: resume it" "and says why and what to do"
sleep 3
is "$(sbx-snapshot resume --json "$id" | jq -r .state)" running "sbx-snapshot resume --json says running"
u2=$(sbx-exec "$id" -- cut -d' ' -f1 /proc/uptime); h2=$(now); n2=$(guest_lines "$id")
gd=$(fsub "$u2" "$u1"); hd=$(fsub "$h2" "$h1")
diag "host clock advanced $hd s, the guest's $gd s, the counter $((n2 - n1)) lines (5 a second when running)"
flt "$gd" "$(fsub "$hd" 2.5)"; ok $? "the guest's clock stood still while paused ($gd s of $hd s)"
[ $((n2 - n1)) -le 8 ]; ok $? "the counter did not advance while paused ($((n2 - n1)) lines in $hd s)"
sleep 1.5
n3=$(guest_lines "$id")
[ "$n3" -gt "$n2" ]; ok $? "and counts again after resume ($n2 -> $n3)"
is "$(sbx-exec "$id" -- cat /tmp/kept)" kept "files are kept across pause and resume"
sbx-snapshot pause "$id"
is "$(sbx-exec --resume "$id" -- echo ok)" ok "sbx-exec --resume runs a paused session again"
like "$(sbx-ps --no-headers "$id")" "^$id	running	" "which is running again"
grep -q '"type":"session.pause"' "$A" && grep -q '"type":"session.resume"' "$A"
ok $? "pause and resume are in the audit trail"

# --- save ----------------------------------------------------------------------
# A running exec no longer stops a save (t1950 follows it into the
# copies); this one ends first, so the copies below have none.
sbx-kill --exec "$e" "$id"
sbx-exec --wait "$e" --timeout 30 "$id" >/dev/null
# A session with secrets is refused, as its suspend is (review r3, N9):
# whatever copy of them the guest keeps (a root process, a variable bound
# to one, the page cache) would be in the memory image, on the host's
# disk, and in every session restored from it.
ENVVAL=envtok-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf 'secrets:\n  - {name: ENVTOK, from_env: SBX_T1000_TOKEN}\n' >"$TEST_TMP/envsec.yaml"
fs=$(sbx-create -q --secret CANARY=@"$TEST_TMP/canary"); ok $? "a session with a file secret ($fs)"
es=$(SBX_T1000_TOKEN=$ENVVAL sbx-create -q -p "$TEST_TMP/envsec.yaml" -e TOKEN="$ENVVAL")
ok $? "a session with an env secret, bound to a variable too ($es)"
ntpl=$(ls -A "$SBX_TEMPLATES" | wc -l)
for s in "$fs" "$es"; do
	sbx-snapshot save "$s" withsecret 2>"$TEST_TMP/err"; rc=$?
	is "$rc" 5 "saving $s is refused (5), as suspending it is"
	like "$(cat "$TEST_TMP/err")" "has secrets: it cannot be saved \\(its memory image would hold them" "saying why"
	sbx-snapshot save --template "$s" "withsecret-${s#s-}@1" 2>"$TEST_TMP/err"; rc=$?
	is "$rc" 5 "and so is saving it as a template"
	like "$(cat "$TEST_TMP/err")" "has secrets: it cannot be saved" "for the same reason"
	sbx-snapshot suspend "$s" 2>/dev/null; is "$?" 5 "(as its suspend is)"
done
is "$(ls -A "$L/snapshots/_" 2>/dev/null | wc -l)" 0 "nothing is left in the snapshots directory"
is "$(sbx-snapshot list -q | wc -l)" 0 "nor listed"
is "$(ls -A "$SBX_TEMPLATES" | wc -l)" "$ntpl" "nor among the templates"
is "$(sbx-exec "$fs" -- sha256sum /run/secrets/CANARY | cut -d' ' -f1)" "$(sha256sum <"$TEST_TMP/canary" | cut -d' ' -f1)" \
   "the session goes on with its secret"
is "$(sbx-exec "$es" -- sh -c 'printf %s "$TOKEN" | sha256sum' | cut -d' ' -f1)" "$(printf %s "$ENVVAL" | sha256sum | cut -d' ' -f1)" \
   "and the other with its variable"
sbx-kill "$fs" "$es" >/dev/null; ok $? "(both destroyed)"
sbx-exec "$id" -- sh -c 'echo before >/home/user/disk-marker; echo before >/tmp/marker'
before_execs=$(sbx-ps --execs "$id" -q | wc -l)
snap=$(sbx-snapshot save "$id" base); ok $? "sbx-snapshot save exits 0"
t_saved=$(date +%s)
like "$snap" '^base@[0-9]{8}T[0-9]{6}\.[0-9]{3}Z$' "it prints NAME@VERSION, the version a sortable timestamp"
ver=${snap#base@}
D=$L/snapshots/_/$snap
is "$(stat -c %a "$D") $(stat -c %a "$D"/* | sort -u | tr '\n' ' ')" "700 600 " "directory 0700, files 0600"
is "$(ls "$D" | tr '\n' ' ')" "manifest.json memory.zst scratch.zst " "memory, disk and manifest"
is "$(jq -r '.files["memory.zst"].sha256' "$D/manifest.json")" "$(sha256sum <"$D/memory.zst" | cut -d' ' -f1)" \
   "the manifest holds the files' hashes"
is "$(jq -r '[.source.session, .source.template.name, .vcpus, .memory_mib, .tenant, (.limits.ttl_ms|tostring)] | join(" ")' "$D/manifest.json")" \
   "$id default 1 256  3600000" "source, template, shape, tenant and the session's limits"
is "$(sbx-exec "$id" -- cat /tmp/marker)" before "the source runs on after the save"
sbx-snapshot save "$id" "$snap" 2>/dev/null; is "$?" 5 "an existing NAME@VERSION is refused (5)"
is "$(sbx-snapshot list -q)" "$snap" "sbx-snapshot list -q shows it"
is "$(sbx-snapshot list --json | jq -r '.[0].snapshot + " " + (.[0].in_use|tostring)')" "_/$snap 0" \
   "list --json: its reference, not in use"

sbx-snapshot pause "$id"
ps=$(sbx-snapshot save "$id" paused); ok $? "a paused session can be saved too ($ps)"
like "$(sbx-ps --no-headers "$id")" "^$id	paused	" "and stays paused"
sbx-exec --resume "$id" -- true
sbx-snapshot rm "$ps"; ok $? "(and that snapshot removed)"
n0=$(ls -A "$L/snapshots/_" | wc -l)
long=$(printf 'x%.0s' $(seq 70))
for bad in '../x' 'a/b' "$long" 'x@../y' 'x@' '.hidden' "x@$long"; do
	sbx-snapshot save "$id" "$bad" 2>/dev/null; is "$?" 3 "a hostile name '${bad:0:20}' is refused (3)"
done
sbx-snapshot save --tenant _ "$id" y 2>/dev/null; is "$?" 3 "tenant '_' is reserved (3)"
is "$(ls -A "$L/snapshots/_" | wc -l)" "$n0" "and nothing was created"

# --- two sessions from it ----------------------------------------------------------
while [ $(( $(date +%s) - t_saved )) -lt 12 ]; do sleep 1; done # so a stale clock would show
a=$(sbx-create -q -s base); ok $? "a session from the snapshot ($a)"
g=$(sbx-exec "$a" -- date +%s); h=$(date +%s)
diag "guest clock $g, host $h, saved $((h - t_saved)) s ago"
[ $((h - g)) -le 5 ] && [ $((g - h)) -le 5 ]; ok $? "its clock is the host's, not the snapshot's ($((g - h)) s)"
is "$(sbx-ps --execs "$a" -q | tr '\n' ' ')" "e1 " "no exec records of the source (the source had $before_execs)"
b=$(sbx-create -q -s "$snap"); ok $? "and another, by NAME@VERSION ($b)"
is "$(sbx-exec "$a" -- cat /home/user/disk-marker /tmp/marker | tr '\n' ' ')" "before before " \
   "a file written before the save is there (disk and memory)"
is "$(sbx-exec "$b" -- cat /home/user/disk-marker)" before "in both"
sbx-exec "$a" -- sh -c 'echo only-a >/home/user/a-file'
sbx-exec "$b" -- test -e /home/user/a-file; ok $((! $?)) "a file written in one is absent from the other"
sbx-exec "$id" -- test -e /home/user/a-file; ok $((! $?)) "and from the source"
is "$(sbx-exec "$a" -- hostname) $(sbx-exec "$b" -- hostname)" "$a $b" "each has its own hostname"
# /etc/hosts names it: overwritten in place when the name is as long as
# the source's (session IDs are), rewritten and renamed when it is not.
hosts_want() { printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n' "$1"; }
is "$(sbx-exec "$a" -- cat /etc/hosts)" "$(hosts_want "$a")" "its /etc/hosts names it, whole"
c=$(sbx-create -q -s base --id "hosts-${a#s-}"); ok $? "a session from it with a longer ID ($c)"
is "$(sbx-exec "$c" -- cat /etc/hosts)" "$(hosts_want "$c")" "its /etc/hosts names it, whole"
is "$(sbx-exec "$c" -- stat -c %a /etc/hosts)" 644 "and is mode 644"
sbx-kill "$c" >/dev/null
# A restore writes /etc/hosts, the name: a file moved away from it (and
# a copy put in its place) is left as it was.
sbx-exec -u root "$a" -- sh -c 'mv /etc/hosts /etc/hosts.moved && cp /etc/hosts.moved /etc/hosts'
sbx-snapshot save "$a" moved >/dev/null; ok $? "a session whose /etc/hosts was moved away and copied back is saved"
c=$(sbx-create -q -s moved); ok $? "a session from that ($c)"
is "$(sbx-exec "$c" -- cat /etc/hosts)" "$(hosts_want "$c")" "its /etc/hosts names it"
is "$(sbx-exec "$c" -- cat /etc/hosts.moved)" "$(hosts_want "$a")" "the moved file is untouched"
sbx-kill "$c" >/dev/null
sbx-snapshot rm moved >/dev/null
ra=$(sbx-exec "$a" -- sh -c 'head -c 16 /dev/urandom | od -An -tx1'); rb=$(sbx-exec "$b" -- sh -c 'head -c 16 /dev/urandom | od -An -tx1')
[ -n "$ra" ] && [ "$ra" != "$rb" ]; ok $? "and its own random stream"
sbx-exec "$a" -- test -e /run/secrets; ok $((! $?)) "no /run/secrets in it"
# The cgroups the source made ahead serve the restored session's execs
# (renumbered in guest-init's books): still one per exec, none shared.
is "$(for i in 1 2 3 4 5; do sbx-exec "$a" -- cat /proc/self/cgroup; done | sort -u | wc -l)" 5 \
   "each exec after the restore runs in a cgroup of its own"
is "$(sbx-ps --json "$a" | jq -r '.[0].snapshot')" "_/$snap" "sbx-ps names the snapshot it came from"
grep -F '"type":"session.create"' "$A" | grep -F "\"session\":\"$a\"" | grep -qF "\"from_snapshot\":\"_/$snap\""
ok $? "session.create records from_snapshot"
grep -F '"type":"snapshot.save"' "$A" | grep -qF "\"snapshot\":\"_/$snap\""; ok $? "snapshot.save is audited"

sbx-create -q -s base --memory 512 2>"$TEST_TMP/err" >/dev/null; rc=$?
is "$rc" 3 "a restore asking for other memory is refused (3)"
like "$(cat "$TEST_TMP/err")" "has 256 MiB of memory" "saying what the snapshot has"
printf 'resources:\n  vcpus: 2\n' >"$TEST_TMP/two-cpus.yaml"
sbx-create -q -s base -p "$TEST_TMP/two-cpus.yaml" 2>"$TEST_TMP/err" >/dev/null; rc=$?
is "$rc" 3 "so is one whose policy file asks for other vCPUs (3)"
like "$(cat "$TEST_TMP/err")" "has 1 vCPUs and a restored VM keeps them; 2 were asked for" "saying so"
sbx-create -q -s base -v /tmp:/data:ro 2>/dev/null >/dev/null; is "$?" 3 "a restore with a volume is refused (3)"
sbx-create -q -s nosuch 2>/dev/null >/dev/null; is "$?" 4 "a missing snapshot is 4"

# --- rm ------------------------------------------------------------------------------
sbx-snapshot rm base 2>"$TEST_TMP/err"; rc=$?
is "$rc" 5 "rm of a snapshot in use is refused (5)"
like "$(cat "$TEST_TMP/err")" "in use by session" "naming a session"
is "$(sbx-snapshot list -q)" "$snap" "and it is still there"
sbx-kill "$b"
is "$(sbx-snapshot rm --force --json "$snap" | jq -r '.removed[0]')" "_/$snap" "rm --force removes it"
is "$(sbx-snapshot list -q)" "" "it is gone"
is "$(sbx-exec "$a" -- cat /home/user/a-file)" only-a "a session restored from it runs on"
grep -F '"type":"snapshot.rm"' "$A" | grep -qF '"forced":true'; ok $? "snapshot.rm is audited, forced"
sbx-kill "$a"

# --- a save killed midway --------------------------------------------------------
sbx-snapshot save "$id" killed >/dev/null 2>&1 &
pid=$!
for i in $(seq 1000); do ls -d "$L"/snapshots/_/.tmp-killed@* >/dev/null 2>&1 && break; sleep 0.01; done
kill -9 "$pid"; wait "$pid" 2>/dev/null
alive=1
for i in $(seq 60); do [ "$(sbx-exec "$id" -- echo alive 2>/dev/null)" = alive ] && { alive=0; break; }; sleep 0.5; done
ok $alive "the source still works after its save was killed"
sbx-snapshot list killed >/dev/null 2>&1; is "$?" 4 "and no snapshot 'killed' is visible"
ls -d "$L"/snapshots/_/killed@* >/dev/null 2>&1; ok $((! $?)) "not even its directory"
sbx-gc --grace 0 >/dev/null 2>&1
is "$(ls -A "$L/snapshots/_" | wc -l)" 0 "sbx-gc removes what it left"

# --- tenants ------------------------------------------------------------------------------
t=$(sbx-create -q --tenant alice); ok $? "a session of tenant alice"
sbx-snapshot save --tenant bob "$t" x 2>/dev/null; is "$?" 4 "bob cannot save alice's session (4)"
as=$(sbx-snapshot save --tenant alice "$t" asnap); ok $? "alice saves it ($as)"
[ -d "$L/snapshots/alice/$as" ]; ok $? "under snapshots/alice"
sbx-kill "$t"
sbx-snapshot list --tenant bob asnap 2>/dev/null; is "$?" 4 "bob cannot list it (4)"
is "$(sbx-snapshot list --tenant bob -q)" "" "bob's list is empty"
sbx-snapshot list asnap 2>/dev/null; is "$?" 4 "nor is it visible without a tenant (4)"
sbx-create -q --tenant bob -s asnap 2>/dev/null; is "$?" 4 "bob cannot restore it (4)"
sbx-snapshot rm --tenant bob asnap 2>/dev/null; is "$?" 4 "bob cannot remove it (4)"
sbx-snapshot rm asnap 2>/dev/null; is "$?" 4 "nor can anyone without a tenant (4)"
is "$(sbx-snapshot list --tenant alice -q)" "$as" "alice sees it"
ta=$(sbx-create -q --tenant alice -s asnap); ok $? "alice restores it"
is "$(jq -r .tenant "$L/sessions/$ta/session.json")" alice "as a session of hers"
sbx-kill "$ta"
sbx-snapshot rm --tenant alice asnap; ok $? "alice removes it"

# --- a template made from a session ---------------------------------------------------
sbx-snapshot save --template "$id" tsnap@1 >/dev/null; ok $? "save --template publishes tsnap@1"
tver=$(jq -r .template.version "$L/sessions/$id/session.json")
is "$(jq -r '.snapshot.kind + " " + .base' "$SBX_TEMPLATES/tsnap@1/manifest.json")" "snapshot default@$tver" \
   "a template whose manifest holds the snapshot and its base"
tt=$(sbx-create -q --tenant carol -t tsnap); ok $? "any tenant creates a session from it with -t"
is "$(sbx-exec "$tt" -- cat /home/user/disk-marker)" before "restored, not booted"
sbx-kill "$tt"

# --- a session with a workspace: saved, and re-attached by name ----------------------
rec() { jq -r "$2" "$L/sessions/$1/session.json"; }
w=$(sbx-create -q --workspace proj); ok $? "a session with the workspace proj"
sbx-exec "$w" -- sh -c 'echo one >/workspace/f'
sbx-snapshot save --template "$w" wtmpl 2>"$TEST_TMP/err"; is "$?" 5 "but not as a template (5)"
like "$(cat "$TEST_TMP/err")" "has a workspace: it can be saved as a snapshot, not as a template" "saying why"
wv=$(sbx-snapshot save "$w" wsnap); ok $? "it can be saved ($wv)"
is "$(jq -c '[.devices.workspace, .devices.workspace_name]' "$L/snapshots/_/$wv/manifest.json")" '[true,"proj"]' \
   "the manifest records the workspace by name"
is "$(sbx-exec "$w" -- cat /workspace/f)" one "the source's workspace is mounted again after the save"
sbx-exec "$w" -- sh -c 'echo two >/workspace/g'; ok $? "and written after it"
n0=$(ls "$L/sessions" | wc -l)
sbx-create -q -s wsnap 2>"$TEST_TMP/err"; is "$?" 5 "a restore while the source holds the workspace is refused (5)"
like "$(cat "$TEST_TMP/err")" "proj" "naming it"
is "$(ls "$L/sessions" | wc -l)" "$n0" "and nothing is made"
sbx-create -q -s wsnap --workspace other 2>/dev/null; is "$?" 3 "a restore naming another workspace is refused (3)"
sbx-kill "$w"
r=$(sbx-create -q -s wsnap); ok $? "with the workspace free, a restore re-attaches it"
is "$(rec "$r" .workspace)" proj "its record names it"
is "$(sbx-exec "$r" -- cat /workspace/f /workspace/g)" "one
two" "the restored guest reads the workspace as it is now, written after the save too"
sbx-exec "$r" -- sh -c 'echo three >/workspace/h'; ok $? "and writes to it"
sbx-kill "$r"
w2=$(sbx-create -q --workspace proj); ok $? "the workspace is free again once the restored session is gone"
is "$(sbx-exec "$w2" -- cat /workspace/h)" three "with what the restored session wrote"
sbx-kill "$w2"
sbx-snapshot rm wsnap >/dev/null; ok $? "the snapshot is removed"

sbx-kill "$id"
done_testing
