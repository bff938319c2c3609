#!/bin/bash
# The VMM's host cgroup (CPU cap, memory, pids) and the usage sbx-ps reports.
. "$(dirname "$0")/lib.sh"
require_vm
h=$(printf '%s' "$SBX_ROOT" | sha256sum | cut -c1-8)

id=$(sbx-create -q --cpus 2 --memory 384)
vmm=$(jq -r .vmm_process.pid "$SBX_ROOT/var/lib/sbx/sessions/$id/session.json")
if [ -d /sys/fs/cgroup/cpu ] && [ ! -e /sys/fs/cgroup/cgroup.controllers ]; then
	g=/sys/fs/cgroup/cpu/sbx-$h/$id
	is "$(cat $g/cpu.cfs_quota_us):$(cat $g/cpu.cfs_period_us)" "200000:100000" "v1: CPU capped at the session's 2 vCPUs"
	grep -qx "$vmm" $g/cgroup.procs; ok $? "v1: the VMM is in its cpu group"
	is "$(cat /sys/fs/cgroup/memory/sbx-$h/$id/memory.limit_in_bytes)" $(( (384 + 512) * 1048576 )) \
	   "v1: memory limit is guest memory plus the VMM's allowance"
	is "$(cat /sys/fs/cgroup/pids/sbx-$h/$id/pids.max)" 512 "v1: pids limit"
else
	g=/sys/fs/cgroup/sbx-$h/$id
	is "$(cat $g/cpu.max)" "200000 100000" "v2: CPU capped at the session's 2 vCPUs"
	grep -qx "$vmm" $g/cgroup.procs; ok $? "v2: the VMM is in its group"
	is "$(cat $g/memory.max)" $(( (384 + 512) * 1048576 )) "v2: memory limit"
	is "$(cat $g/pids.max)" 512 "v2: pids limit"
fi

sbx-exec "$id" -- dd if=/dev/zero of=/workspace/blob bs=1M count=16 conv=fsync 2>/dev/null
j=$(sbx-ps --json "$id")
cpu=$(jq '.[0].cpu_s' <<<"$j")
awk "BEGIN{exit !($cpu > 0)}"; ok $? "host-measured CPU seconds ($cpu)"
[ "$(jq '.[0].memory_peak_bytes' <<<"$j")" -gt 50000000 ]; ok $? "host-measured memory peak"
[ "$(jq '.[0].disk_written_bytes' <<<"$j")" -ge 16000000 ]; ok $? "disk written counts the guest's writes"
awk "BEGIN{exit !($(jq '.[0].vcpu_seconds' <<<"$j") >= 2 * $(jq '.[0].age_s' <<<"$j"))}"; ok $? "vCPU-seconds allocated"
is "$(jq '.[0].execs' <<<"$j")" 1 "exec count"
p=$(sbx-ps --prometheus)
like "$p" "# TYPE sbx_session_cpu_seconds_total counter" "--prometheus has TYPE lines"
like "$p" "sbx_session_vcpus\\{session=\"$id\",state=\"running\",accel=\"[a-z]+\",template=\"default@[0-9a-f]+\"\\} 2" \
     "--prometheus has labelled samples"
sbx-ps --state=crashed >/dev/null; is "$?" 1 "--state matching nothing exits 1"
is "$(sbx-ps --capacity --json | jq -c '[.sessions.used, .vcpus.used, .memory_mib.used]')" "[1,2,$((384 + 512))]" \
   "--capacity reports what live sessions use"
SBX_MAX_SESSIONS=1 sbx-create -q --json 2>"$TEST_TMP/cap" >/dev/null; is "$?" 75 "a create beyond capacity exits 75"
is "$(jq -r '[.error, .retry_after_ms > 0] | map(tostring) | join(" ")' "$TEST_TMP/cap")" "temporary true" \
   "with retry_after_ms in the JSON error"
SBX_MAX_MEMORY=1G sbx-create -q 2>/dev/null >/dev/null; is "$?" 75 "guest memory beyond capacity exits 75"
sbx-create -q --id booting >/dev/null 2>&1 &
bp=$!
for i in $(seq 50); do [ -e "$SBX_ROOT/var/lib/sbx/sessions/booting" ] && break; sleep 0.05; done
SBX_MAX_STARTING=1 sbx-create -q --json 2>"$TEST_TMP/cap2" >/dev/null; is "$?" 75 "a start beyond the concurrent-start limit exits 75"
like "$(jq -r .message "$TEST_TMP/cap2")" "concurrent starts" "naming the limit"
wait $bp
sbx-kill booting
is "$(ls "$SBX_ROOT/var/lib/sbx/sessions" | wc -l)" 1 "refused creates leave nothing"
is "$(sbx-ps --capacity --json | jq -c '.starting')" '{"used":0,"max":'$((8 * $(nproc)))'}' "--capacity reports concurrent starts"

# Tenants: a per-tenant session limit, filters, a tenant-scoped audit view.
t1=$(sbx-create -q --tenant acme)
SBX_MAX_SESSIONS_PER_TENANT=1 sbx-create -q --tenant acme 2>"$TEST_TMP/ten" >/dev/null
is "$?" 75 "a tenant at its session limit gets 75"
like "$(cat "$TEST_TMP/ten")" "sessions of this tenant" "naming the limit"
t2=$(SBX_MAX_SESSIONS_PER_TENANT=1 sbx-create -q --tenant globex); ok $? "another tenant is not held back"
is "$(sbx-ps -q --tenant acme)" "$t1" "sbx-ps --tenant lists one tenant's sessions"
sbx-exec "$t1" -- true
sbx-kill "$t1" "$t2"   # the monitors have recorded everything once they are gone
is "$(sbx-audit --tenant acme --json | jq -r '[.[].type] | unique | join(" ")')" "exec.end exec.start session.create session.destroy" \
   "the audit trail has a tenant-scoped view of everything the tenant did"
sbx-create -q --tenant '../x' 2>/dev/null; is "$?" 3 "a malformed tenant exits 3"

kill -9 "$vmm"
for i in $(seq 50); do [ "$(sbx-ps --no-headers "$id" | cut -f2)" = crashed ] && break; sleep 0.1; done
awk "BEGIN{exit !($(sbx-ps --json "$id" | jq '.[0].cpu_s') > 0)}"; ok $? "usage is kept after the VM ended"
sbx-kill "$id"
n=$(ls -d /sys/fs/cgroup/*/sbx-$h/$id /sys/fs/cgroup/sbx-$h/$id 2>/dev/null | wc -l)
is "$n" 0 "the session's cgroups are removed"
done_testing
