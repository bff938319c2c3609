#!/bin/bash
# Cloud Hypervisor's API without a Cloud Hypervisor (none runs on our build
# machines): every request body the backend sends, built by its own code
# (tests/unit/test-vmm-ch --dump), checked against the OpenAPI document in
# tests/fixtures/cloud-hypervisor, and the checker shown to refuse what is
# wrong.  The response parsers are tests/unit/test-vmm-ch's (t0001).
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
dump=$SBX_BUILD/tests/test-vmm-ch
fix=$here/fixtures/cloud-hypervisor
check() { python3 "$here/tools/openapi-check.py" "$@"; }
[ -x "$dump" ] || skip_all "test-vmm-ch not built (make all)"
python3 -c 'import yaml' 2>/dev/null || skip_all "python3-yaml not installed (scripts/deps.sh)"
command -v jq >/dev/null || skip_all "jq not installed"

d=$TEST_TMP/bodies
mkdir -p "$d"
"$dump" --dump "$d"; ok $? "the request bodies build"
out=$(check "$fix/cloud-hypervisor.yaml" --index "$d"); rc=$?
ok $rc "every request body satisfies the OpenAPI schema"
[ $rc -eq 0 ] || diag "$out"
is "$(wc -l <"$d/index")" 8 "8 bodies: vm.create (probe, session, volumes, unjailed, network), vm.snapshot, vm.restore, a restore's config.json"

# The checker is not a rubber stamp: each of these must fail.
bad() { # bad NAME JQ-FILTER DESCRIPTION
	jq "$2" "$d/vm.create-volumes.json" >"$d/$1.json"
	out=$(check "$fix/cloud-hypervisor.yaml" "$d/$1.json" /vm.create); rc=$?
	[ $rc -ne 0 ]; ok $? "refused: $3"
	[ $rc -ne 0 ] || diag "$out"
}
bad misspelt '.disks[0].read_only = .disks[0].readonly | del(.disks[0].readonly)' 'a misspelt key (read_only)'
bad strtype '.cpus.boot_vcpus = "2"' 'a number as a string'
bad nopayload 'del(.payload)' 'VmConfig without its required payload'
bad lowcid '.vsock.cid = 2' 'a vsock CID below the minimum 3'
bad badenum '.serial.mode = "file"' 'a serial mode not in ConsoleMode'
bad boolint '.disks[1].readonly = 0' 'an integer for a boolean'
bad noserial '.disks[0].serial = 5' 'a disk serial of the wrong type'
bad nosize 'del(.rate_limit_groups[0].rate_limiter_config.bandwidth.size)' 'a token bucket without its size'
bad badgroup '.disks[1].rate_limit_group = 1' 'a rate limit group named by a number'
bad netrate '.disks[1].rate_limiter_config = {"bandwidth": {"size": -1, "refill_time": 1000}}' 'a negative token bucket'

# Recorded response shapes: real answers carry nulls and keys the schema
# lacks, so they are checked leniently (and parsed by test-vmm-ch).
out=$(cd "$fix" && check --lenient cloud-hypervisor.yaml vm.info.json '#/components/schemas/VmInfo' \
	vm.counters.json '#/components/schemas/VmCounters' vmm.ping.json '#/components/schemas/VmmPingResponse')
ok $? "the response fixtures have the schema's shape"
out=$(cd "$fix" && check cloud-hypervisor.yaml vm.info.json '#/components/schemas/VmInfo')
[ $? -ne 0 ] && printf '%s' "$out" | grep -q 'topology: expected an object, got NoneType'
ok $? "strictly, a real vm.info does not satisfy the schema (nulls): why responses are checked leniently"
done_testing
