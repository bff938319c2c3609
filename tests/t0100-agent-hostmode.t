#!/bin/sh
# guest-init's agent outside a VM: `guest-init --agent-fd 3` on a socketpair,
# driven over the frame protocol by tests/tools/agent-driver.py.  Where the
# host has a writable cgroup2 hierarchy the per-exec cgroup path (what PID 1
# uses in the guest) runs too, under a directory this test owns.
here=$(cd "$(dirname "$0")" && pwd)
bin=${SBX_BUILD:-build}/guest-init
case $bin in /*) ;; *) bin=$here/../$bin ;; esac

if [ ! -x "$bin" ]; then
	echo "1..0 # SKIP $bin not built (make build/guest-init)"
	exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
	echo "1..0 # SKIP python3 missing"
	exit 0
fi

cg=
for root in /sys/fs/cgroup /sys/fs/cgroup/unified; do
	[ "$(stat -f -c %T "$root" 2>/dev/null)" = cgroup2fs ] || continue
	if mkdir "$root/sbx-t0100-$$" 2>/dev/null; then
		cg=$root/sbx-t0100-$$
		break
	fi
done
cleanup() {
	[ -n "$cg" ] || return 0
	# The agent kills its execs on exit; give the kernel a moment to empty them.
	for d in "$cg"/sbx-exec-* "$cg"; do
		[ -d "$d" ] || continue
		[ -w "$d/cgroup.kill" ] && echo 1 >"$d/cgroup.kill" 2>/dev/null
		i=0
		while ! rmdir "$d" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

SBX_TEST_CGROUP=$cg python3 "$here/tools/agent-driver.py" "$bin"
