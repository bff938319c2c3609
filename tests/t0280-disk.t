#!/bin/bash
# The disk quota (the session's scratch disk under an overlay root) and
# read-only host volumes; the template is never modified.
. "$(dirname "$0")/lib.sh"
require_vm
tmpl=$(ls -d "$SBX_TEMPLATES"/default@* | head -1)
sum0=$(sha256sum "$tmpl/rootfs.ext4" | cut -d' ' -f1)
src=$TEST_TMP/src
mkdir -p "$src/sub"; echo hello-vol >"$src/sub/f.txt"; ln -s /etc/passwd "$src/link"

id=$(sbx-create -q --disk 48M -v "$src:/mnt/src:ro")
sbx-exec "$id" -- sh -c 'dd if=/dev/zero of=/workspace/fill bs=1M count=200 2>/tmp/dd.err; echo rc=$?; cat /tmp/dd.err' \
	>"$TEST_TMP/fill" 2>&1
like "$(cat "$TEST_TMP/fill")" "No space left on device" "filling the disk gives ENOSPC in the guest"
alloc=$(( $(stat -c %b "$SBX_ROOT/var/lib/sbx/sessions/$id/scratch.img") * 512 ))
[ "$alloc" -le $((48 * 1048576)) ]; ok $? "the host never holds more than the 48M quota ($alloc bytes)"
is "$(sbx-exec "$id" -- sh -c 'rm /workspace/fill; echo ok > /workspace/after; cat /workspace/after')" ok \
   "the session goes on after freeing space"
sbx-exec -u root "$id" -- sh -c 'echo tampered > /bin/sbx-test-file' ; ok $? "root in the guest can write over the root filesystem"
is "$(sha256sum "$tmpl/rootfs.ext4" | cut -d' ' -f1)" "$sum0" "the template is never modified"

is "$(sbx-exec "$id" -- cat /mnt/src/sub/f.txt)" hello-vol "a -v volume shows the host directory"
sbx-exec -u root "$id" -- sh -c 'echo x > /mnt/src/new' 2>/dev/null; ok $((! $?)) "the volume is read-only, even for root"
like "$(sbx-exec "$id" -- mount)" "/mnt/src type ext4 \\(ro,nosuid,nodev" "mounted ro, nosuid, nodev"
[ ! -e "$src/new" ]; ok $? "nothing reached the host directory"
sbx-kill "$id"

id2=$(sbx-create -q)
sbx-exec "$id2" -- test -e /bin/sbx-test-file; is "$?" 1 "another session does not see the first one's writes"
sbx-kill "$id2"

for bad in "$src:relative:ro" "$src:/proc/x:ro" "$src:/mnt/a b:ro" "$src:/mnt/x:rw" "/nonexistent:/mnt/x:ro" \
	   "$src:/mnt/../etc:ro" "$src"; do
	sbx-create -q -v "$bad" 2>/dev/null; is "$?" 3 "-v '$bad' is refused with 3"
done
is "$(ls "$SBX_ROOT/var/lib/sbx/sessions" | wc -l)" 0 "refused creates leave nothing"
done_testing
