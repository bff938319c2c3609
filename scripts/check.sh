#!/bin/bash
# The test suite over every VMM backend (make check): everything once with
# QEMU, then the tests that boot VMs (those calling require_vm) again with
# Cloud Hypervisor.  A backend that cannot run here still goes through its
# pass, each test a TAP skip saying why, so the report shows what was not
# covered; QEMU's pass is not repeated.
#   scripts/check.sh [PROVE-OPTION...]      (SBX_BUILD: the build directory)
set -u
cd "$(dirname "$0")/.."
. scripts/lib-root.sh # root_cgroups_remove
export SBX_BUILD=${SBX_BUILD:-$PWD/build}
export SBX_TEMPLATES=${SBX_TEMPLATES:-$SBX_BUILD/templates}
prove_opts=("$@")
[ ${#prove_opts[@]} -gt 0 ] || prove_opts=(-v --timer)
# Test files run SBX_CHECK_JOBS at a time (default 2): each has its own
# SBX_ROOT, and the one host-wide resource they share, the test network's
# addresses, is taken under a lock (test_net_hosts, tests/lib.sh).  prove
# prints each file's output whole when it ends.
prove_opts+=(-j "${SBX_CHECK_JOBS:-2}")

# Why the VM tests cannot run on backend $1 here; nothing when they can.
# For Cloud Hypervisor that takes a real boot under KVM: /dev/kvm existing
# proves nothing (design.md, "Acceleration probe").
skip_reason() {
	case $1 in
	qemu)
		command -v "${SBX_QEMU:-qemu-system-x86_64}" >/dev/null || echo "qemu not installed" ;;
	cloud-hypervisor)
		if ! command -v "${SBX_CLOUD_HYPERVISOR:-cloud-hypervisor}" >/dev/null; then
			echo "cloud-hypervisor not installed"
			return
		fi
		if ! [ -r /dev/kvm ] || ! [ -w /dev/kvm ]; then
			echo "no usable KVM (/dev/kvm)"
			return
		fi
		local root id rc
		root=$(mktemp -d /tmp/sbx-check.XXXXXX)
		id=$(SBX_ROOT=$root SBX_VMM=$1 SBX_ACCEL=kvm "$SBX_BUILD/bin/sbx-create" -q 2>"$root/err"); rc=$?
		if [ $rc -eq 0 ]; then
			SBX_ROOT=$root "$SBX_BUILD/bin/sbx-kill" "$id" >/dev/null 2>&1
		elif grep -q 'KVM required' "$root/err"; then
			echo "no usable KVM ($(sed -n 's/.*unavailable: //p' "$root/err" | head -n1))"
		else
			echo "cloud-hypervisor cannot boot a guest here: $(head -c 300 "$root/err" | tr '\n' ' ')"
		fi
		SBX_ROOT=$root root_cgroups_remove
		rm -rf "$root" ;;
	esac
}

# One pass of prove, its TAP tallied: "PASSED FAILED SKIPPED" appended to
# $SBX_TOTALS (scripts/test.sh prints the sum of every pass at the end).  A
# file skipped whole counts as one skip; a pass that failed without a
# failing test line (a bad plan, a test that died) as one failure.
tally() {
	local log r counts
	log=$(mktemp /tmp/sbx-prove.XXXXXX)
	prove "$@" 2>&1 | tee "$log"
	r=${PIPESTATUS[0]}
	counts=$(awk -v r="$r" '
		/^ok [0-9]+/ { if ($0 ~ /# *[Ss][Kk][Ii][Pp]/) s++; else p++ }
		/^not ok [0-9]+/ { if ($0 ~ /# *TODO/) s++; else f++ }
		/^(\[[0-9:]+\] )?tests\/.* skipped: / { s++ }
		END { if (r != 0 && f == 0) f = 1; printf "%d %d %d\n", p, f, s }' "$log")
	rm -f "$log"
	echo "# this pass: $counts (passed failed skipped)"
	[ -z "${SBX_TOTALS:-}" ] || echo "$counts" >>"$SBX_TOTALS"
	return "$r"
}

# SBX_CHECK_EXCLUDE: test files (names) this run leaves out, said here;
# the ASan pass leaves out the pip-heavy guest tests, whose host code the
# unit and fuzz tests cover under the sanitizers (Makefile, asan).
tests=()
for t in tests/t*.t; do
	case " ${SBX_CHECK_EXCLUDE:-} " in
	*" $(basename "$t") "*) echo "# not run in this pass: $(basename "$t")" ;;
	*) tests+=("$t") ;;
	esac
done

# SBX_CHECK_BACKENDS: the passes to run (default both); the ASan pass
# runs QEMU's alone (the Cloud Hypervisor pass here is its API tests,
# which the QEMU pass already ran, and skips).
rc=0
for vmm in ${SBX_CHECK_BACKENDS:-qemu cloud-hypervisor}; do
	case $vmm in
	qemu) run=("${tests[@]}") ;;
	cloud-hypervisor) mapfile -t run < <(grep -l '^require_vm' "${tests[@]}") ;;
	*) echo "check.sh: unknown backend $vmm" >&2; exit 2 ;;
	esac
	why=$(skip_reason "$vmm")
	echo "# VMM backend $vmm${why:+: $why}"
	SBX_VMM=$vmm SBX_TEST_VMM_SKIP="$why" tally "${prove_opts[@]}" "${run[@]}" || rc=1
done
exit $rc
