#!/bin/bash
# Bad input changes nothing; failed creates leave nothing; kill survives a
# VMM killed with -9; --id is idempotent.
. "$(dirname "$0")/lib.sh"
require_vm

snapshot() { (cd "$SBX_ROOT" && find . -path ./tmp -prune -o -print | sort) ; }
before=$(sbx-ps -q; snapshot)
for bad in '../x' '' "$(printf 'a%.0s' $(seq 100))" 'a/b' '.hidden' '-x'; do
	sbx-create --id "$bad" >/dev/null 2>"$TEST_TMP/err"; rc=$?
	is "$rc" 3 "sbx-create --id '${bad:0:20}' exits 3"
	sbx-exec -- "$bad" true 2>/dev/null; rc=$?
	[ "$rc" = 3 ] || [ "$rc" = 2 ]; ok $? "sbx-exec '${bad:0:20}' exits 3 (or 2 when it parses as an option)"
done
sbx-kill '../x' 2>/dev/null; is "$?" 3 "sbx-kill ../x exits 3"
is "$(sbx-ps -q; snapshot)" "$before" "bad IDs changed nothing under SBX_ROOT"
sbx-exec no-such-session -- true 2>/dev/null; is "$?" 4 "exec into an unknown session exits 4"
sbx-create -t nosuch 2>/dev/null; is "$?" 4 "unknown template exits 4"
sbx-create --cpus 0 2>/dev/null; is "$?" 2 "--cpus 0 is a usage error"

# A template whose kernel is missing.
tmpl=$(ls -d "$SBX_TEMPLATES"/default@* | head -1)
broken=$TEST_TMP/templates/default@broken
mkdir -p "$broken"
cp "$tmpl/manifest.json" "$tmpl/initrd.cpio" "$broken/"
ln -s "$tmpl/rootfs.ext4" "$broken/rootfs.ext4"
SBX_TEMPLATES=$TEST_TMP/templates sbx-create 2>"$TEST_TMP/err"; rc=$?
[ "$rc" -ne 0 ]; ok $? "create with the kernel missing fails ($rc)"
like "$(cat "$TEST_TMP/err")" 'vmlinux' "the message names the missing kernel"

# A guest that never says hello: the kernel runs, /init just sleeps.
hang=$TEST_TMP/templates/default@hang
mkdir -p "$hang" "$TEST_TMP/hangroot/bin"
cp "$tmpl/manifest.json" "$tmpl/vmlinux" "$hang/"
ln -s "$tmpl/rootfs.ext4" "$hang/rootfs.ext4"
cp /bin/busybox "$TEST_TMP/hangroot/bin/busybox"
printf '#!/bin/busybox sh\nexec /bin/busybox sleep 1000\n' >"$TEST_TMP/hangroot/init"
chmod +x "$TEST_TMP/hangroot/init"
"$SBX_BUILD/tools/sbx-mkcpio" -o "$hang/initrd.cpio" "$TEST_TMP/hangroot"
rm "$broken/initrd.cpio" "$broken/manifest.json"  # only the hang template is valid now
t0=$(date +%s)
SBX_BOOT_TIMEOUT=8 SBX_TEMPLATES=$TEST_TMP/templates sbx-create -t default@hang 2>"$TEST_TMP/err"; rc=$?
t1=$(date +%s)
is "$rc" 69 "a guest that never answers fails with 69"
like "$(cat "$TEST_TMP/err")" 'did not answer within 8 s' "the message says the agent never answered"
[ $((t1 - t0)) -lt 40 ]; ok $? "the deadline is honoured ($((t1 - t0)) s)"
sleep 0.5
is "$(ls "$SBX_ROOT/var/lib/sbx/sessions" | wc -l)" 0 "no session directory left behind"
is "$(ls "$SBX_ROOT/run/sbx/sessions" | wc -l)" 0 "no runtime directory or socket left behind"
is "$(root_procs | wc -l)" 0 "no process left behind"

# Idempotent --id.
id=$(sbx-create --id job-42 -q); rc=$?
is "$rc:$id" "0:job-42" "create with a client-chosen ID"
is "$(sbx-create --id job-42 -q)" "job-42" "the same spec again is a no-op that prints the ID"
sbx-create --id job-42 --memory 512 -q 2>/dev/null; is "$?" 5 "another spec under the same ID exits 5"

# The VMM killed with -9: the session is recorded as crashed; kill cleans up.
vmm=$(jq -r .vmm_process.pid "$SBX_ROOT/var/lib/sbx/sessions/job-42/session.json")
kill -9 "$vmm"
for i in $(seq 50); do [ "$(sbx-ps --no-headers job-42 | cut -f2)" = crashed ] && break; sleep 0.1; done
is "$(sbx-ps --no-headers job-42 | cut -f2)" crashed "a killed VMM shows as crashed"
like "$(sbx-ps --json job-42 | jq -r '.[0].end_reason')" 'signal 9' "the record says why"
sbx-exec job-42 -- true 2>/dev/null; is "$?" 4 "exec into a crashed session exits 4"
sbx-kill job-42; ok $? "sbx-kill of the crashed session exits 0"
[ ! -e "$SBX_ROOT/var/lib/sbx/sessions/job-42" ]; ok $? "and removes it"
is "$(root_procs | wc -l)" 0 "no process left behind"
# sbx-create killed -9 while the guest boots: the monitor notices that
# nobody waits for the ID, stops, and removes everything.
sbx-create -q >/dev/null 2>&1 &
cpid=$!
sleep 0.7
kill -9 $cpid 2>/dev/null; wait $cpid 2>/dev/null
for i in $(seq 100); do [ -z "$(ls "$SBX_ROOT/var/lib/sbx/sessions")" ] && [ "$(root_procs | wc -l)" = 0 ] && break; sleep 0.1; done
is "$(ls "$SBX_ROOT/var/lib/sbx/sessions" | wc -l):$(root_procs | wc -l)" "0:0" \
   "a create killed -9 midway leaves no session and no process"

# The monitor killed -9: its VMM dies with it, the session shows crashed.
id=$(sbx-create -q)
mon=$(jq -r .monitor.pid "$SBX_ROOT/var/lib/sbx/sessions/$id/session.json")
vmm=$(jq -r .vmm_process.pid "$SBX_ROOT/var/lib/sbx/sessions/$id/session.json")
kill -9 "$mon"
for i in $(seq 50); do kill -0 "$vmm" 2>/dev/null || break; sleep 0.1; done
kill -0 "$vmm" 2>/dev/null; is "$?" 1 "the VMM does not outlive its monitor"
is "$(sbx-ps --no-headers "$id" | cut -f2)" crashed "a session without its monitor shows crashed"
sbx-kill "$id"; ok $? "sbx-kill cleans it up"
is "$(ls "$SBX_ROOT/var/lib/sbx/sessions" | wc -l):$(root_procs | wc -l)" "0:0" "nothing left"
done_testing
