#!/bin/bash
# A free-space reserve on LIB's filesystem (issue 35 item 4): below
# sbx.yaml's audit.reserve (default the larger of 256 MiB and 2% of the
# filesystem) a create, a snapshot save, a template import or an upload
# (also one that would take the filesystem under it) is refused with 75 and a clear
# message, while appends to the audit trail go on in the reserve; and the
# trail has a default retention (rotation at 64M, 64 segments kept by
# sbx-gc).  LIB is a small tmpfs mounted for the test.
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (mount)"
append=$SBX_BUILD/tools/sbx-audit-append
[ -x "$append" ] || skip_all "sbx-audit-append not built (make all)"
L=$SBX_ROOT/var/lib/sbx
mkdir -p "$L" "$SBX_ROOT/etc/sbx"
mount -t tmpfs -o size=96M,mode=0700 sbx-t0535 "$L" || skip_all "cannot mount a tmpfs"
trap 'sbx-kill -q $(sbx-ps -q) >/dev/null 2>&1; umount -l "$L"; _cleanup' EXIT

# The default reserve is more than this whole filesystem.
sbx-create -q >/dev/null 2>"$TEST_TMP/err"; rc=$?
is "$rc" 75 "a create below the default reserve (256M on a 96M LIB) is refused with 75"
like "$(cat "$TEST_TMP/err")" "free on .* under the reserve of 256 MiB .*audit.reserve" \
	"saying how much is free, the reserve and its key"
is "$(ls "$L/sessions" 2>/dev/null | wc -l)" 0 "and nothing was made"

printf 'audit:\n  reserve: 48M\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
id=$(sbx-create -q); ok $? "with audit.reserve 48M (96M free) a create works"
# An upload's bytes land in the session's disk image, on LIB: one that
# would take the filesystem under the reserve is refused before a byte
# moves, and a small one goes through.
room=$(( $(df -B1M --output=avail "$L" | tail -1) - 48 ))
head -c "$(( (room + 8) << 20 ))" /dev/zero >"$TEST_TMP/big"
sbx-cp "$TEST_TMP/big" "$id:/tmp/" 2>"$TEST_TMP/err"; rc=$?
is "$rc" 75 "an upload of $((room + 8)) MiB with $room MiB above the reserve is refused with 75"
like "$(cat "$TEST_TMP/err")" "not enough for $((room + 8)) MiB beside the reserve of 48 MiB" "saying what it needed"
is "$(sbx-exec "$id" -- sh -c 'ls /tmp/big 2>/dev/null | wc -l')" 0 "and nothing of it reached the guest"
echo small >"$TEST_TMP/small"
sbx-cp "$TEST_TMP/small" "$id:/tmp/"; ok $? "a small upload goes through"
rm -f "$TEST_TMP/big"
# Fill the filesystem to under the reserve.
fill=$(($(df -B1M --output=avail "$L" | tail -1) - 40))
dd if=/dev/zero of="$L/filler" bs=1M count="$fill" status=none
diag "$(df -h --output=avail "$L" | tail -1) free after the filler"
sbx-create -q >/dev/null 2>"$TEST_TMP/err"; rc=$?
is "$rc" 75 "below the reserve a create is refused with 75"
like "$(cat "$TEST_TMP/err")" "under the reserve of 48 MiB" "saying so"
sbx-snapshot save "$id" s1 >/dev/null 2>"$TEST_TMP/err"; rc=$?
is "$rc" 75 "and so is a snapshot save"
sbx-cp "$TEST_TMP/small" "$id:/tmp/again" 2>"$TEST_TMP/err"; rc=$?
is "$rc" 75 "and any upload"
mkdir -p "$TEST_TMP/tree/etc"
echo x >"$TEST_TMP/tree/etc/hostname"
tar -C "$TEST_TMP/tree" -cf "$TEST_TMP/tree.tar" .
mkdir -p "$TEST_TMP/templates" # never the shared ones, should it land
ln -s "$SBX_TEMPLATES"/default@* "$TEST_TMP/templates/"
SBX_TEMPLATES=$TEST_TMP/templates sbx-template import full "$TEST_TMP/tree.tar" >/dev/null 2>"$TEST_TMP/err"; rc=$?
is "$rc" 75 "and a template import (its root and disk images go beside the trail)"
like "$(cat "$TEST_TMP/err")" "under the reserve of 48 MiB" "saying so"
is "$(sbx-exec "$id" -- echo still)" still "a running session goes on (its exec records in the trail)"
"$append" -n 200 exec.start '{"session":"s-x"}'
ok $? "the audit trail takes appends inside the reserve"
like "$(sbx-audit verify)" "^ok [0-9]+ records$" "and verifies"
rm -f "$L/filler"
id2=$(sbx-create -q); ok $? "with room again a create works"
sbx-kill "$id" "$id2" >/dev/null

# The default retention: rotation at 64M is seen by reading the key's
# default through sbx-gc -n on a trail of many small segments.
printf 'audit:\n  max_size: 64K\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
pad=$(printf 'x%.0s' $(seq 600))
"$append" -n 8000 exec.start "{\"session\":\"s-r\",\"pad\":\"$pad\"}"
n=$(ls "$L" | grep -c '^audit\.log\.[0-9]\{20\}$')
[ "$n" -gt 64 ]
ok $? "the trail rotated into more than 64 segments ($n)"
is "$(sbx-gc -n | grep -c '^drop-audit-segment')" "$((n - 64))" "with keep unset, sbx-gc keeps 64"
printf 'audit:\n  max_size: 64K\n  keep: 0\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
is "$(sbx-gc -n | grep -c '^drop-audit-segment')" 0 "keep: 0 keeps every segment"
done_testing
