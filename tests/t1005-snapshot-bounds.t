#!/bin/bash
# A snapshot stops at its tenant's snapshot_bytes left while it is written,
# not after (security review r3 N6, issue 35 item 4): the save fails with
# 75 (kind tenant_quota), leaves no image and no work directory, and the
# session goes on as before.  With no room at all the save is refused
# before any work.  The memory cap against a hostile VMM (memory plus 64
# MiB) is tested on the copy itself in tests/unit/test-zstream.c.
. "$(dirname "$0")/lib.sh"
require_vm
command -v jq >/dev/null || skip_all "jq not installed"
L=$SBX_ROOT/var/lib/sbx
mkdir -p "$SBX_ROOT/etc/sbx"
trap 'rm -f "$SBX_ROOT/etc/sbx/sbx.yaml"; _cleanup' EXIT

id=$(sbx-create -q --tenant snb); ok $? "a session of tenant snb"
sbx-exec "$id" -- sh -c 'echo before >/tmp/mark'
# Far less than any memory image: the copy must stop early.
printf 'quotas:\n  per_tenant: {snapshot_bytes: 1M}\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
out=$(sbx-snapshot save --json --tenant snb "$id" big 2>&1 >/dev/null); rc=$?
is "$rc" 75 "a save past snapshot_bytes fails with 75"
is "$(printf '%s' "$out" | jq -r '[.kind, .quota] | join(" ")')" "tenant_quota snapshot_bytes" \
	"kind tenant_quota, quota snapshot_bytes"
like "$(printf '%s' "$out" | jq -r .message)" "the save was stopped" "stopped while it was written, not after"
is "$(sbx-snapshot list --tenant snb -q | wc -l)" 0 "no snapshot was kept"
is "$(ls -A "$L/snapshots/snb" 2>/dev/null | wc -l)" 0 "nor a work directory or partial image"
is "$(sbx-exec "$id" -- cat /tmp/mark)" before "the session still runs, its files as they were"
is "$(sbx-ps --json | jq -r --arg id "$id" '.[] | select(.id == $id) | .state')" running "and it is running"

# The room is gone once the tenant's snapshots fill it: refused up front.
rm -f "$SBX_ROOT/etc/sbx/sbx.yaml"
sbx-snapshot save --tenant snb "$id" one >/dev/null
ok $? "with no quota the same save works"
size=$(sbx-snapshot list --tenant snb --json | jq '[.[].size_bytes] | add')
printf 'quotas:\n  per_tenant: {snapshot_bytes: %s}\n' "$size" >"$SBX_ROOT/etc/sbx/sbx.yaml"
out=$(sbx-snapshot save --tenant snb "$id" two 2>&1 >/dev/null); rc=$?
is "$rc" 75 "a full quota refuses the next save (75)"
like "$out" "tenant quota reached" "saying the quota is reached"
is "$(ls -A "$L/snapshots/snb" | grep -vc '@')" 0 "and leaves no work directory"
is "$(sbx-exec "$id" -- cat /tmp/mark)" before "the session still runs"

sbx-kill "$id" >/dev/null
done_testing
