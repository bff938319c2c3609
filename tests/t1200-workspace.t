#!/bin/bash
# Persistent workspaces (sbx-create --workspace): files outlive the session,
# one running session at a time, tenants never share one, the size cap holds
# in the guest and on the host, sbx-gc removes idle ones past their
# retention and never one in use, hostile names change nothing.
. "$(dirname "$0")/lib.sh"
have_template || skip_all "no template built (make image)"
L=$SBX_ROOT/var/lib/sbx
S=$L/sessions
W=$L/workspaces
POL=$(cd "$(dirname "$0")/../policies" && pwd)
cd "$TEST_TMP" || exit 1
nsessions() { ls "$S" | wc -l; }

cat >ws64.yaml <<'EOF'
workspace: { size: 64M, retention: 1h }
EOF
cat >ws32.yaml <<'EOF'
workspace:
  size: 32M
  retention: 1s
EOF
cat >ws48.yaml <<'EOF'
workspace: { size: 48M, retention: 1s }
EOF

# --- Input that is refused before anything exists -------------------------
for bad in '../x' '..' 'a/b' '.hidden' '' "$(printf 'x%.0s' $(seq 64))" 'a b'; do
	sbx-create --workspace="$bad" 2>err; rc=$?
	is "$rc" 3 "hostile workspace name '${bad:0:12}' is refused with 3"
done
like "$(cat err)" "invalid workspace ID" "and the message says why"
[ ! -e "$W" ] && [ "$(nsessions)" = 0 ]; ok $? "nothing was created for them"
printf 'workspace: { size: 1K }\n' >small.yaml
like "$(sbx-create --dry-run -p small.yaml 2>&1)" "small.yaml:1:.*workspace.size.*out of range" \
	"a workspace size below the minimum is refused with file:line:col"
printf 'workspace:\n  size: 1G\n  colour: red\n' >unknown.yaml
sbx-create --dry-run -p unknown.yaml 2>err; rc=$?
is "$rc" 3 "an unknown key in workspace: exits 3"
like "$(cat err)" "unknown.yaml:3:3: unknown key 'colour' in workspace" "naming file, line and column"
printf 'workspace: { retention: 0 }\n' >zero.yaml
sbx-create --dry-run -p zero.yaml 2>/dev/null; is "$?" 3 "retention 0 is refused (every workspace has a lifecycle)"
is "$(sbx-create --dry-run --json | jq -c .workspace)" '{"size":1073741824,"retention":604800000}' \
	"the defaults: 1 GiB, kept 7 days idle"
is "$(sbx-create --dry-run --json -p "$POL/default.yaml" | jq -c .workspace)" \
	'{"size":1073741824,"retention":604800000}' "policies/default.yaml writes them out"
is "$(sbx-create --dry-run --json -p ws32.yaml | jq -c .workspace)" '{"size":33554432,"retention":1000}' \
	"--dry-run shows the policy's workspace section"
[ ! -e "$W" ]; ok $? "--dry-run creates no workspace"

# --- First use: created, writable by the exec user ------------------------
s1=$(sbx-create -q --id ws-one -p ws64.yaml --workspace ws1); ok $? "create with a new workspace"
is "$(jq -r .workspace "$S/$s1/session.json")" ws1 "the record names its workspace (snapshots leave it out)"
is "$(sbx-exec "$s1" -- sh -c 'id -u; stat -c %u:%g /workspace; pwd')" "1000
1000:1000
/workspace" "execs run as uid 1000 in /workspace, which that user owns"
sbx-exec "$s1" -- sh -c 'echo hello >/workspace/f && head -c 4194304 /dev/urandom >big && md5sum big >big.md5'
ok $? "the exec user writes files in it"
sum1=$(sbx-exec "$s1" -- md5sum big)
is "$(stat -c %s "$W/@/ws1/disk.img")" 67108864 "the host image is exactly the policy's size"
is "$(jq -r '[.name, .session, .size] | join(" ")' "$W/@/ws1/workspace.json")" "ws1 $s1 67108864" \
	"workspace.json: name, the session using it, size"
like "$(sbx-ps --workspaces --no-headers)" "^ws1		attached	$s1	67108864	" "sbx-ps --workspaces lists it attached"
is "$(sbx-ps --workspaces -q)" ws1 "-q prints names"
is "$(sbx-create -q --id ws-one -p ws64.yaml --workspace ws1)" "$s1" \
	"the same create again is idempotent (its own session holds the workspace)"
sbx-create -q --id ws-one -p ws64.yaml --workspace other 2>/dev/null; is "$?" 5 "the workspace is part of the spec"

# --- One running session at a time ---------------------------------------
before=$(nsessions)
sbx-create -q -p ws64.yaml --workspace ws1 2>err; rc=$?
is "$rc" 5 "a second session with the same workspace is refused with 5"
like "$(cat err)" "workspace ws1 is in use by session $s1" "naming the session that holds it"
is "$(nsessions)" "$before" "nothing is left of the refused create"

# --- Kill and re-create: the files are still there --------------------------
sbx-kill "$s1"; ok $? "kill the first session"
is "$(stat -c %u:%g "$W/@/ws1/disk.img")" 0:0 "the image is root's again (the VMM's jail uid had it)"
like "$(sbx-ps --workspaces --no-headers)" "^ws1		idle	$s1	" "the workspace is idle, last used by it"
s2=$(sbx-create -q -p ws64.yaml --workspace ws1); ok $? "re-create with the same workspace"
is "$(sbx-exec "$s2" -- cat /workspace/f)" hello "a file written before the kill survives"
is "$(sbx-exec "$s2" -- md5sum big)" "$sum1" "4 MiB written just before the kill survive intact"

# --- Tenants never share a workspace -----------------------------------------
s3=$(sbx-create -q --tenant acme -p ws32.yaml --workspace ws1)
ok $? "tenant acme's ws1 is its own (no conflict with the running untenanted ws1)"
is "$(sbx-exec "$s3" -- ls -A /workspace | grep -v lost+found)" "" "it cannot see the other ws1's files"
[ -f "$W/@/ws1/disk.img" ] && [ -f "$W/acme/ws1/disk.img" ]; ok $? "stored apart, under each tenant"
is "$(sbx-ps --workspaces --tenant acme -q)" ws1 "sbx-ps --workspaces --tenant lists only that tenant's"
sbx-ps --workspaces --tenant nobody >/dev/null; is "$?" 1 "a tenant filter matching nothing exits 1"

# --- The size cap -----------------------------------------------------------
out=$(sbx-exec "$s3" -- sh -c 'echo keep >/workspace/k; dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1; echo rc=$?')
like "$out" "No space left on device" "filling the workspace ends in ENOSPC in the guest"
like "$out" "rc=1" "and the writer fails"
is "$(stat -c %s "$W/acme/ws1/disk.img")" 33554432 "the host file is the cap, no larger"
[ "$(du -B1 "$W/acme/ws1/disk.img" | cut -f1)" -le 33554432 ]; ok $? "and allocates no more than the cap"

# --- sbx-gc: never one in use, idle ones after their retention ---------------
sleep 1.5
is "$(sbx-gc -n | grep -c reclaim-workspace)" 0 "gc leaves a workspace in use alone, retention or not"
sbx-kill "$s3"
sleep 1.5
like "$(sbx-gc -n)" "^reclaim-workspace	acme/ws1	idle " "--dry-run says it would remove the idle one"
[ -f "$W/acme/ws1/disk.img" ]; ok $? "and removes nothing"
out=$(sbx-gc)
like "$out" "^reclaim-workspace	acme/ws1	" "gc removes a workspace idle past its retention"
[ ! -e "$W/acme" ]; ok $? "nothing of it is left (the empty tenant directory goes too)"
[ -f "$W/@/ws1/disk.img" ]; ok $? "one still in its retention (and in use) stays"
is "$(sbx-gc --json | jq '[.actions[] | select(.action == "reclaim-workspace")] | length')" 0 "a second run finds nothing"

# --- Growing: a policy granting more grows the workspace, data kept ----------
# (ended by its TTL: the guest syncs before the VM goes, as on sbx-kill)
s4=$(sbx-create -q --tenant acme -p ws32.yaml --ttl 30s --workspace grow); ok $? "a 32 MiB workspace"
sbx-exec "$s4" -- sh -c 'echo kept >/workspace/g'
for i in $(seq 120); do [ "$(sbx-ps --no-headers "$s4" | cut -f2)" = expired ] && break; sleep 0.5; done
is "$(sbx-ps --workspaces --tenant acme --no-headers | cut -f1,3)" "grow	idle" \
	"the session's TTL ended: its workspace is idle"
# No e2fsprogs runs on the host over the image the guest wrote (review
# finding 5): any e2fsck, resize2fs or debugfs found in PATH for this
# create writes its name down, then runs the real one.
mkdir -p "$TEST_TMP/spy"
for t in e2fsck fsck.ext4 resize2fs debugfs tune2fs dumpe2fs; do
	real=$(PATH=/usr/sbin:/sbin:/usr/bin:/bin command -v "$t") || continue
	printf '#!/bin/sh\necho %s >>"%s"\nexec %s "$@"\n' "$t" "$TEST_TMP/spy.log" "$real" >"$TEST_TMP/spy/$t"
	chmod +x "$TEST_TMP/spy/$t"
done
s5=$(PATH=$TEST_TMP/spy:$PATH sbx-create -q --tenant acme -p ws48.yaml --workspace grow); ok $? "attached under a policy granting 48 MiB"
is "$(cat "$TEST_TMP/spy.log" 2>/dev/null)" "" "the host ran no e2fsprogs over the guest-written image"
is "$(stat -c %s "$W/acme/grow/disk.img")" 50331648 "the image grew to 48 MiB"
is "$(sbx-exec "$s5" -- cat /workspace/g)" kept "its files are kept"
size=$(sbx-exec "$s5" -- df -k /workspace | awk 'NR==2 {print $2}')
[ "$size" -gt 40000 ]; ok $? "the guest sees the larger file system ($size KiB)"
sbx-kill "$s5"
s6=$(sbx-create -q --tenant acme -p ws32.yaml --workspace grow); ok $? "a policy granting less ..."
is "$(stat -c %s "$W/acme/grow/disk.img")" 50331648 "... leaves the size the workspace has"
sbx-kill "$s6"

# --- Two creates racing for a new workspace: exactly one wins ----------------
before=$(nsessions)
sbx-create -q -p ws64.yaml --workspace race >a.out 2>a.err & pa=$!
sbx-create -q -p ws64.yaml --workspace race >b.out 2>b.err & pb=$!
wait $pa; ra=$?; wait $pb; rb=$?
is "$(echo $ra $rb | tr ' ' '\n' | sort -n | tr '\n' ' ')" "0 5 " "two concurrent creates: one gets it, the other 5"
is "$(nsessions)" "$((before + 1))" "the loser left no session behind"
winner=$(cat a.out b.out)

# --- A crashed monitor frees the workspace -----------------------------------
kill -9 "$(jq -r .monitor.pid "$S/$winner/session.json")"
for i in $(seq 50); do [ "$(sbx-ps --workspaces --no-headers | awk '$1 == "race" {print $3}')" = idle ] && break; sleep 0.1; done
s7=$(sbx-create -q -p ws64.yaml --workspace race); ok $? "after kill -9 of its monitor the workspace is free again"
sbx-kill "$s7" "$winner" "$s2"

# --- The audit trail -----------------------------------------------------------
is "$(sbx-audit --type workspace.create --json | jq -r '.[] | .workspace + "@" + (.tenant // "-")' | LC_ALL=C sort | tr '\n' ' ')" \
	"grow@acme race@- ws1@- ws1@acme " "workspace.create for each new workspace, with its tenant"
like "$(sbx-audit --type workspace.attach --json | jq -r '.[] | select(.session == "'"$s5"'") | .grown_from')" \
	"^33554432$" "workspace.attach records a growth"
is "$(sbx-audit --type workspace.remove --json | jq -r '.[] | .workspace + "@" + .tenant')" "ws1@acme" \
	"workspace.remove for gc's removal"
is "$(sbx-audit verify | cut -d' ' -f1)" ok "the trail verifies"

done_testing
