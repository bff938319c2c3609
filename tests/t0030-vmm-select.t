#!/bin/bash
# Which VMM a session gets (common/vmm.c, sbx_vmm_choose): SBX_VMM, else
# Cloud Hypervisor where it is installed and KVM works, else QEMU; what
# cannot be honoured is refused before anything exists.  The Cloud
# Hypervisor binary given below is only ever checked for, never run: the
# refusals come before a VM would start.
. "$(dirname "$0")/lib.sh"
have_template || skip_all "no template built (make image)"
L=$SBX_ROOT/var/lib/sbx

SBX_VMM=bogus sbx-create -q 2>"$TEST_TMP/err"; is "$?" 3 "SBX_VMM=bogus: 3"
like "$(cat "$TEST_TMP/err")" 'SBX_VMM=bogus: no such VMM backend \(qemu, cloud-hypervisor\)' "and says which exist"
[ ! -e "$L/accel.json" ]; ok $? "refused before the KVM probe ran"

if ! command -v cloud-hypervisor >/dev/null; then
	SBX_VMM=cloud-hypervisor sbx-create -q 2>"$TEST_TMP/err"; is "$?" 69 "SBX_VMM=cloud-hypervisor, not installed: 69"
	like "$(cat "$TEST_TMP/err")" 'cloud-hypervisor is not installed' "and says so"
else
	ok 0 "# skip cloud-hypervisor is installed"
	ok 0 "# skip cloud-hypervisor is installed"
fi
SBX_VMM=cloud-hypervisor SBX_CLOUD_HYPERVISOR=/bin/true SBX_ACCEL=tcg sbx-create -q 2>"$TEST_TMP/err"
is "$?" 69 "SBX_VMM=cloud-hypervisor under TCG: 69"
like "$(cat "$TEST_TMP/err")" 'SBX_VMM=cloud-hypervisor needs KVM' "Cloud Hypervisor has no emulator: it says so"
SBX_VMM=qemu SBX_QEMU=/nonexistent/qemu SBX_ACCEL=tcg sbx-create -q 2>"$TEST_TMP/err"
is "$?" 69 "SBX_VMM=qemu, not installed: 69"
is "$(ls -A "$L/sessions" 2>/dev/null | wc -l)" 0 "no session left behind by any of them"
done_testing
