#!/bin/bash
# Host paths a tenant names are confined (issue 12 item 3, security review
# finding 6): secrets.from_file, --secret NAME=@FILE, secrets.from_env, -v
# and both sides of sbx-cp reach only what sbx.yaml's host_paths and
# secrets.env_allow grant the tenant; sbx's own state, /proc, /sys and /dev
# are nobody's source or target.  Every refusal exits 3 naming the key and
# leaves nothing behind; the granted paths work in a real session.
. "$(dirname "$0")/lib.sh"
require_vm
command -v jq >/dev/null || skip_all "jq not installed"
S=$SBX_ROOT/var/lib/sbx/sessions
LIB=$SBX_ROOT/var/lib/sbx
# The tenants' files live outside SBX_ROOT (which holds sbx's state).
IN=$(mktemp -d /tmp/sbx-t1610.XXXXXX)
trap 'rm -rf "$IN"; _cleanup' EXIT
mkdir -p "$LIB/sessions" && echo x >"$LIB/t1610"
mkdir -p "$IN/in/acme/vol/sub" "$IN/in/other" "$IN/out/acme" "$SBX_ROOT/etc/sbx" "$LIB/workspaces/x"
echo tok-acme >"$IN/in/acme/secret"
echo in-volume >"$IN/in/acme/vol/sub/file"
echo upload-me >"$IN/in/acme/up"
echo other >"$IN/in/other/secret"
ln -s /etc/shadow "$IN/in/acme/link"
ln -s /etc "$IN/in/acme/etc"
ln -s /tmp "$IN/out/acme/esc"
ln -s "$IN/out/acme" "$IN/wlink" # a root may itself be a link: the operator's
cat >"$SBX_ROOT/etc/sbx/sbx.yaml" <<EOF
host_paths:
  read:
    - "$IN/in/{tenant}"
  write:
    - "$IN/out/{tenant}"
    - "$IN/wlink"
secrets:
  env_allow: [T1610_OK]
EOF

# refused CMD...: exit 3, the key named in the message, no session left.
refused() { # refused DESCRIPTION KEY-REGEX CMD...
	local d=$1 key=$2
	shift 2
	out=$("$@" 2>&1 >/dev/null)
	rc=$?
	is "$rc" 3 "$d: exit 3"
	like "$out" "$key" "$d: the message names the key"
	is "$(ls -A "$S" 2>/dev/null)" "" "$d: no session was created"
}

# ---- sbx.yaml's schema ------------------------------------------------------------
cp "$SBX_ROOT/etc/sbx/sbx.yaml" "$IN/good.yaml"
printf 'host_paths:\n  read: [/srv/../etc]\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
out=$(sbx-create -q --tenant acme --secret K=@"$IN/in/acme/secret" 2>&1)
is "$?" 3 "a root with '..' in sbx.yaml is refused"
like "$out" "host_paths.read" "naming the key"
printf 'host_paths:\n  raed: [/srv]\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
out=$(sbx-create -q --tenant acme --secret K=@"$IN/in/acme/secret" 2>&1)
is "$?" 3 "an unknown key under host_paths is refused"
like "$out" "unknown key 'raed'" "naming it"
cp "$IN/good.yaml" "$SBX_ROOT/etc/sbx/sbx.yaml"

# ---- hostile paths, tenant acme -----------------------------------------------------
T="--tenant acme"
refused "/etc/shadow as --secret @FILE" "--secret K.*host_paths.read" sbx-create -q $T --secret K=@/etc/shadow
printf 'secrets:\n  - {name: K, from_file: /etc/shadow}\n' >"$IN/shadow.yaml"
refused "/etc/shadow as secrets.from_file" "secrets.from_file" sbx-create -q $T -p "$IN/shadow.yaml"
refused "/proc/1/environ as --secret" "--secret K" sbx-create -q $T --secret K=@/proc/1/environ
refused "a symlink out of the root" "--secret K.*symbolic link" sbx-create -q $T --secret K=@"$IN/in/acme/link"
refused "a directory symlink out of the root" "--secret K.*symbolic link" \
	sbx-create -q $T --secret K=@"$IN/in/acme/etc/shadow"
refused "'..' out of the root" "--secret K.*'\.\.'" sbx-create -q $T --secret K=@"$IN/in/acme/../../../etc/shadow"
refused "'..' that stays inside the root" "--secret K.*'\.\.'" \
	sbx-create -q $T --secret K=@"$IN/in/acme/vol/../secret"
refused "another tenant's root" "--secret K.*host_paths.read" sbx-create -q $T --secret K=@"$IN/in/other/secret"
refused "a root listed only for writing" "--secret K.*host_paths.read" \
	sbx-create -q $T --secret K=@"$IN/out/acme/x"
printf 'secrets:\n  - {name: H, from_env: HOME}\n' >"$IN/env.yaml"
refused "an environment name not allowed" "secrets.from_env.*secrets.env_allow" sbx-create -q $T -p "$IN/env.yaml"
refused "SBX_TENANT is --tenant" "--secret K.*tenant acme" env SBX_TENANT=acme sbx-create -q --secret K=@/etc/shadow
refused "-v of sbx's state" "^sbx-create: error: -v" sbx-create -q $T -v "$LIB/workspaces/x:/x:ro"
refused "-v of /etc" "-v.*host_paths.read" sbx-create -q $T -v /etc:/x:ro
refused "-v through a symlink" "-v.*symbolic link" sbx-create -q $T -v "$IN/in/acme/etc:/x:ro"
refused "-v of another tenant's root" "-v.*host_paths.read" sbx-create -q $T -v "$IN/in/other:/x:ro"
refused "-v with a workspace, refused first" "-v" sbx-create -q $T --workspace w1 -v /etc:/x:ro
is "$(ls -A "$LIB/workspaces" | grep -v '^x$')" "" "and no workspace was made"

# ---- sbx's own state and kernel files, for the operator too ---------------------------
refused "operator: -v of sbx's state" "-v.*sbx's own state" sbx-create -q -v "$LIB/workspaces/x:/x:ro"
refused "operator: -v of SBX_ROOT" "-v.*sbx's own state" sbx-create -q -v "$SBX_ROOT:/x:ro"
refused "operator: -v of a symlink to the state" "-v.*sbx's own state" \
	sh -c 'ln -sfn "$1" "$2/statelink" && sbx-create -q -v "$2/statelink:/x:ro"' - "$LIB" "$IN"
refused "operator: a state file as a secret" "--secret K.*sbx's own state" \
	sbx-create -q --secret K=@"$LIB/sessions/../t1610"
refused "operator: /proc/1/environ" "--secret K.*/proc" sbx-create -q --secret K=@/proc/1/environ
refused "operator: /sys" "--secret K.*/sys" sbx-create -q --secret K=@/sys/kernel/uevent_seqnum

# ---- the granted paths work -------------------------------------------------------------
printf 'secrets:\n  - {name: E, from_env: T1610_OK}\n' >"$IN/ok.yaml"
id=$(T1610_OK=env-ok sbx-create -q $T -p "$IN/ok.yaml" --secret K=@"$IN/in/acme/secret" \
	-v "$IN/in/acme/vol:/data:ro")
ok $? "a session with granted secrets and a granted volume is created"
is "$(sbx-exec "$id" -- sh -c 'wc -c </run/secrets/K')" 9 "the file secret is readable in /run/secrets"
is "$(sbx-exec -u root "$id" -- sh -c 'cat /run/secrets/K /run/secrets/E | sha256sum' | cut -d' ' -f1)" \
	"$(printf 'tok-acme\nenv-ok' | sha256sum | cut -d' ' -f1)" "both secrets hold their values"
is "$(sbx-exec "$id" -- cat /data/sub/file)" in-volume "the volume's contents are visible"
is "$(jq -r '.volumes[0].host' "$S/$id/session.json")" "$IN/in/acme/vol" "the record keeps the real path"

sbx-cp $T "$IN/in/acme/up" "$id:/tmp/up"
ok $? "sbx-cp uploads from an allowed read root"
is "$(sbx-exec "$id" -- cat /tmp/up)" upload-me "and the file arrived"
sbx-cp $T "$id:/tmp/up" "$IN/out/acme/"
ok $? "sbx-cp downloads into an allowed write root"
is "$(cat "$IN/out/acme/up" 2>/dev/null)" upload-me "and the file landed"
sbx-cp $T "$id:/tmp/up" "$IN/out/acme/renamed"
is "$(cat "$IN/out/acme/renamed" 2>/dev/null)" upload-me "a download to a new name in the root works"
sbx-exec "$id" -- sh -c 'echo via-link >/tmp/vl'
sbx-cp $T "$id:/tmp/vl" "$IN/wlink/"
is "$(cat "$IN/out/acme/vl" 2>/dev/null)" via-link "a download into a root that is itself a link works"

# ---- sbx-cp's refusals, nothing written ------------------------------------------------
sbx-exec "$id" -- sh -c 'echo guest >/tmp/g'
before=$(cd "$IN" && find . | sort | sha256sum)
cp_refused() { # cp_refused DESCRIPTION KEY-REGEX CMD...
	local d=$1 key=$2
	shift 2
	out=$("$@" 2>&1 >/dev/null)
	is "$?" 3 "$d: exit 3"
	like "$out" "$key" "$d: the message names the key"
}
cp_refused "upload of /etc/passwd" "sbx-cp source.*host_paths.read" sbx-cp $T /etc/passwd "$id:/tmp/"
cp_refused "upload of /proc/1/environ" "sbx-cp source" sbx-cp $T /proc/1/environ "$id:/tmp/"
cp_refused "upload through a symlinked directory" "sbx-cp source.*symbolic link" \
	sbx-cp $T "$IN/in/acme/etc/passwd" "$id:/tmp/"
cp_refused "upload with '..'" "sbx-cp source.*'\.\.'" sbx-cp $T "$IN/in/acme/vol/../../other/secret" "$id:/tmp/"
cp_refused "operator: upload of sbx's state" "sbx-cp source.*sbx's own state" sbx-cp "$LIB" "$id:/tmp/"
cp_refused "download outside the write root" "sbx-cp destination.*host_paths.write" \
	sbx-cp $T "$id:/tmp/g" "$IN/in/acme/"
cp_refused "download to /tmp" "sbx-cp destination.*host_paths.write" sbx-cp $T "$id:/tmp/g" /tmp/t1610-never
cp_refused "download through a symlink out of the root" "sbx-cp destination.*symbolic link" \
	sbx-cp $T "$id:/tmp/g" "$IN/out/acme/esc/"
cp_refused "download with '..'" "sbx-cp destination.*'\.\.'" sbx-cp $T "$id:/tmp/g" "$IN/out/acme/../acme/g"
cp_refused "operator: download into sbx's state" "sbx-cp destination.*sbx's own state" \
	sbx-cp "$id:/tmp/g" "$LIB/workspaces/x/"
cp_refused "operator: download over SBX_ROOT's state dir" "sbx-cp destination.*sbx's own state" \
	sbx-cp "$id:/tmp/g" "$LIB"
is "$(cd "$IN" && find . | sort | sha256sum)" "$before" "no refused download wrote anything"
is "$(ls -A "$LIB/workspaces/x")" "" "nor into sbx's state"
[ ! -e /tmp/t1610-never ]
ok $? "nor outside the root"

# ---- per-tenant quotas (item 4): 75, but kind tenant_quota naming the quota ------------
# $id is acme's: 256 MiB and 1 vCPU.
printf 'quotas:\n  per_tenant: {memory: 512M, vcpus: 2}\n  tenants:\n    big: {memory: 2G}\n' \
	>"$SBX_ROOT/etc/sbx/sbx.yaml"
nsess() { ls -A "$S" | wc -l; }
n0=$(nsess)
quota() { # quota DESCRIPTION QUOTA CMD...
	local d=$1 q=$2
	shift 2
	"$@" --json 2>"$IN/q.json" >/dev/null
	is "$?" 75 "$d: exit 75"
	is "$(jq -r '[.error, .kind, .quota, .retry_after_ms > 0] | map(tostring) | join(" ")' "$IN/q.json")" \
		"temporary tenant_quota $q true" "$d: the JSON error says tenant_quota, $q"
	is "$(nsess)" "$n0" "$d: nothing was created"
}
quota "acme over its memory quota" memory sbx-create -q $T --memory 512
quota "acme over its vCPU quota" vcpus sbx-create -q $T --cpus 2
like "$(sbx-create -q $T --cpus 2 2>&1 >/dev/null)" \
	"vcpus of this tenant, acme: its sessions hold 1, this one needs 2 more, the quota is 2" \
	"the text names the quota and the numbers"
SBX_MAX_SESSIONS=1 sbx-create -q --tenant globex --json 2>"$IN/h.json" >/dev/null
is "$?" 75 "host capacity is 75 too"
is "$(jq -r '[.kind, .quota // "none"] | join(" ")' "$IN/h.json")" "platform none" "but kind platform, no quota"
big=$(sbx-create -q --tenant big --memory 1024)
ok $? "a tenant's own entry replaces the memory quota"
n0=$(nsess)
quota "and keeps per_tenant's vCPUs" vcpus sbx-create -q --tenant big --cpus 2
[ -n "$big" ] && sbx-kill "$big" >/dev/null
n0=$(nsess)
printf 'quotas:\n  tenants:\n    acme: {sessions: 1}\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
quota "acme at its session quota" sessions sbx-create -q $T
other=$(sbx-create -q --tenant globex)
ok $? "another tenant is not held back"
[ -n "$other" ] && sbx-kill "$other" >/dev/null
# Workspace bytes: the sizes of the tenant's workspaces (1 GiB each by default).
printf 'quotas:\n  per_tenant: {workspace_bytes: 1536M}\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
w=$(sbx-create -q --tenant wsq --workspace w1)
ok $? "a first workspace fits the tenant's workspace_bytes"
n0=$(nsess)
quota "a second one would not" workspace_bytes sbx-create -q --tenant wsq --workspace w2
[ ! -e "$LIB/workspaces/wsq/w2" ]
ok $? "and it was not made"
[ -n "$w" ] && sbx-kill "$w" >/dev/null
n0=$(nsess)
quota "an idle workspace still counts" workspace_bytes sbx-create -q --tenant wsq --workspace w2
w=$(sbx-create -q --tenant wsq --workspace w1)
ok $? "attaching the existing one again fits"
[ -n "$w" ] && sbx-kill "$w" >/dev/null
o=$(sbx-create -q --tenant globex --workspace w2)
ok $? "another tenant's workspaces are its own"
[ -n "$o" ] && sbx-kill "$o" >/dev/null
# Snapshot bytes: the sizes of the tenant's snapshots.  One is saved with no
# quota; a quota just above its size then refuses a second save.
rm -f "$SBX_ROOT/etc/sbx/sbx.yaml"
sq=$(sbx-create -q --tenant snq)
ok $? "a session of tenant snq"
sbx-snapshot save --tenant snq "$sq" one >/dev/null
ok $? "its first snapshot is saved"
size=$(sbx-snapshot list --tenant snq --json | jq '[.[].size_bytes] | add')
printf 'quotas:\n  per_tenant: {snapshot_bytes: %sM}\n' $((size / 1048576 + 1)) >"$SBX_ROOT/etc/sbx/sbx.yaml"
before=$(sbx-snapshot list --tenant snq -q | tr '\n' ' ')
out=$(sbx-snapshot save --json --tenant snq "$sq" two 2>&1 >/dev/null); rc=$?
is "$rc" 75 "a second snapshot past snapshot_bytes is refused with 75"
is "$(printf '%s' "$out" | jq -r '[.kind, .quota] | join(" ")')" "tenant_quota snapshot_bytes" \
	"kind tenant_quota, quota snapshot_bytes"
is "$(sbx-snapshot list --tenant snq -q | tr '\n' ' ')" "$before" "and nothing was added"
is "$(ls -A "$LIB/snapshots/snq" | grep -vc '@')" 0 "not even a work directory"
sbx-snapshot rm --tenant snq one >/dev/null
sbx-snapshot save --tenant snq "$sq" two >/dev/null
ok $? "once the first is removed, the second fits"
sbx-kill "$sq" >/dev/null
printf 'quotas:\n  per_tenant: {memory: 10M}\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
sbx-create -q $T 2>"$IN/bad" >/dev/null
is "$?" 3 "a malformed quota in sbx.yaml fails the create closed (3)"
like "$(cat "$IN/bad")" "quotas.per_tenant.memory" "naming the key"

sbx-kill "$id" >/dev/null
done_testing
