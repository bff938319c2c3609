#!/bin/bash
# Disk fairness (issue 35): resources.disk_bps and disk_iops become QEMU
# drive throttling on the session's writable disks, which holds where the
# host's blkio throttling would not (cgroup v1 misses buffered writeback of
# a cache=unsafe scratch disk).  Only lower bounds on time are asserted: a
# busy host makes everything slower, never faster.
. "$(dirname "$0")/lib.sh"
L=$SBX_ROOT/var/lib/sbx/sessions
cd "$TEST_TMP"

# Bad values are refused before anything starts.
for v in "disk_bps: -1" "disk_bps: 100K" "disk_bps: 65G" "disk_bps: 99999999999999999999999" "disk_bps: fast" \
	 "disk_iops: 5" "disk_iops: -3" "disk_iops: 1.5" "disk_iops: 99999999999999999999"; do
	printf 'resources:\n  %s\n' "$v" >bad.yaml
	sbx-create --dry-run -p bad.yaml >/dev/null 2>&1; is "$?" 3 "resources.$v is refused with 3"
done
for v in "rate: 1K" "rate: 5G" "rate: -1" "rate: 1M/s"; do
	printf 'network:\n  %s\n' "$v" >bad.yaml
	sbx-create --dry-run -p bad.yaml >/dev/null 2>&1; is "$?" 3 "network.$v is refused with 3"
done
is "$(sbx-create --dry-run | jq .network.rate)" 33554432 "network.rate defaults to 32M"
printf 'resources:\n  disk_bps: 0\n  disk_iops: 0\n' >off.yaml
is "$(sbx-create --dry-run -p off.yaml | jq -c '[.resources.disk_bps, .resources.disk_iops]')" "[0,0]" \
   "0 turns the throttle off"
is "$(sbx-create --dry-run | jq -c '[.resources.disk_bps, .resources.disk_iops]')" "[67108864,2000]" \
   "the defaults: 64M and 2000 requests per second"

# A tenant's ceilings (sbx.yaml quotas session_*): its policy supplies
# these limits, and 0 would be none.  A value over a ceiling, or 0, gets
# the ceiling; one under it stays; another tenant and the operator keep
# theirs.
CONF=$SBX_ROOT/etc/sbx/sbx.yaml
mkdir -p "${CONF%/*}"
for v in "session_disk_bps: 512K" "session_disk_bps: 65G" "session_disk_iops: 9" "session_network_rate: 1K" \
	 "session_network_rate: 5G" "session_disk_bps: fast"; do
	printf 'quotas:\n  per_tenant:\n    %s\n' "$v" >"$CONF"
	sbx-create --dry-run --tenant a >/dev/null 2>"$TEST_TMP/err"; is "$?" 3 "quotas.per_tenant.$v is refused with 3"
done
like "$(cat "$TEST_TMP/err")" "session_disk_bps: 'fast' is not a size from 1M to 64G" "naming the key and the range"
printf 'quotas:\n  per_tenant:\n    session_disk_bps: 8M\n    session_disk_iops: 100\n    session_network_rate: 1M\n  tenants:\n    b: {session_disk_bps: 16M}\n' >"$CONF"
printf 'resources:\n  disk_bps: 0\n  disk_iops: 0\nnetwork:\n  rate: 0\n' >greedy.yaml
is "$(sbx-create --dry-run --tenant a -p greedy.yaml | jq -c '[.resources.disk_bps, .resources.disk_iops, .network.rate]')" \
   "[8388608,100,1048576]" "a tenant's 0 (no limit) becomes its ceilings"
is "$(sbx-create --dry-run --tenant a | jq -c '[.resources.disk_bps, .resources.disk_iops, .network.rate]')" \
   "[8388608,100,1048576]" "and so do the defaults above them"
printf 'resources:\n  disk_bps: 2M\n  disk_iops: 50\nnetwork:\n  rate: 256K\n' >modest.yaml
is "$(sbx-create --dry-run --tenant a -p modest.yaml | jq -c '[.resources.disk_bps, .resources.disk_iops, .network.rate]')" \
   "[2097152,50,262144]" "values under the ceilings stay"
is "$(sbx-create --dry-run --tenant b -p greedy.yaml | jq -c '[.resources.disk_bps, .resources.disk_iops, .network.rate]')" \
   "[16777216,100,1048576]" "tenants.b replaces one ceiling and keeps per_tenant's others"
is "$(sbx-create --dry-run -p greedy.yaml | jq -c '[.resources.disk_bps, .resources.disk_iops, .network.rate]')" \
   "[0,0,0]" "the operator (no tenant) has no ceiling"

require_vm
# The ceiling is what the VMM enforces, not only what is shown.
id=$(sbx-create -q --tenant a -p greedy.yaml)
ok $? "a tenant's session with a greedy policy is created ($id)"
is "$(jq -c '[.limits.disk_bps, .limits.disk_iops]' "$L/$id/session.json")" "[8388608,100]" \
   "its record holds the ceilings"
if [ "$(jq -r .vmm "$L/$id/session.json")" = qemu ]; then
	vmm=$(jq -r .vmm_process.pid "$L/$id/session.json")
	like "$(tr '\0' ' ' <"/proc/$vmm/cmdline")" "id=scratch0,[^ ]*throttling.bps-total=8388608,throttling.iops-total=100," \
	     "and its scratch disk is throttled at them"
fi
sbx-kill "$id"
rm -f "$CONF"

printf 'resources:\n  disk_bps: 2M\n  disk_iops: 1000\n' >slow.yaml
id=$(sbx-create -q -p slow.yaml)
vmm=$(jq -r .vmm_process.pid "$L/$id/session.json")
backend=$(jq -r .vmm "$L/$id/session.json")
# Cloud Hypervisor's configuration goes over its API (t0020 checks the
# body); only the timings below hold for it here.
if [ "$backend" = qemu ]; then
	args=$(tr '\0' ' ' <"/proc/$vmm/cmdline")
	like "$args" "id=scratch0,[^ ]*throttling.bps-total=2097152,throttling.iops-total=1000,throttling.group=sbx" \
	     "the scratch disk carries the throttle"
	like "$args" "id=root0,[^ ]*readonly=on " "the read-only root is not throttled"
fi
is "$(jq -c '[.limits.disk_bps, .limits.disk_iops]' "$L/$id/session.json")" "[2097152,1000]" \
   "the session record keeps the throttle"
# 8 MiB at 2 MiB/s: 4 s, less QEMU's burst (a tenth of a second's worth).
t0=$(date +%s%N)
sbx-exec "$id" -- dd if=/dev/zero of=/workspace/f bs=1M count=8 conv=fsync 2>/dev/null; ok $? "dd ran"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$ms" -ge 3500 ]; ok $? "8 MiB with fsync at 2M/s took at least 3.5 s ($ms ms)"
sbx-kill "$id"

printf 'resources:\n  disk_iops: 25\n' >iops.yaml
id=$(sbx-create -q -p iops.yaml)
# 100 direct 4 KiB writes, each its own request: 4 s at 25 a second
# (unthrottled here they take about 0.1 s).
t0=$(date +%s%N)
sbx-exec "$id" -- dd if=/dev/zero of=/workspace/g bs=4k count=100 oflag=direct 2>/dev/null; ok $? "the small writes ran"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$ms" -ge 3000 ]; ok $? "100 direct 4 KiB writes at 25 requests/s took at least 3 s ($ms ms)"
sbx-kill "$id"

if [ "$backend" = qemu ]; then
	id=$(sbx-create -q -p off.yaml)
	vmm=$(jq -r .vmm_process.pid "$L/$id/session.json")
	tr '\0' ' ' <"/proc/$vmm/cmdline" | grep -q throttling; ok $((! $?)) "with 0 and 0 no disk is throttled"
	sbx-kill "$id"
fi

# network.rate: 2 MiB from a test host at 256K/s takes 8 s, less the
# second's worth the kernel's bucket starts with.
test_web_host rate 1 "hello"
head -c 2097152 /dev/urandom >"$TEST_TMP/www/big"
printf 'network:\n  egress: allowlist\n  allow:\n    - {cidr: %s/32, ports: [80]}\n  rate: 256K\n' "$WEB" >net.yaml
id=$(sbx-create -q -p net.yaml)
ok $? "a session with network.rate: 256K is created"
vmm=$(jq -r .vmm_process.pid "$L/$id/session.json")
like "$(nsenter --net="/proc/$vmm/ns/net" nft list table inet sbx_rate 2>&1)" \
     'iifname "sbx0" limit rate over 256 kbytes/second drop' "the namespace polices sbx0 at the rate"
t0=$(date +%s%N)
sbx-exec --timeout 120s "$id" -- wget -q -O /tmp/big "http://$WEB/big"; ok $? "the download ran"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
is "$(sbx-exec "$id" -- sh -c 'wc -c </tmp/big')" 2097152 "all of it arrived"
[ "$ms" -ge 6000 ]; ok $? "2 MiB at 256K/s took at least 6 s ($ms ms)"
sbx-kill "$id"
done_testing
