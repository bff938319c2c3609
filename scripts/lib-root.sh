# shellcheck shell=bash
# A private state root's end, for the bench scripts (tests/lib.sh has its
# own, with the test's processes): its sessions destroyed, the host cgroup
# parent the library made for it removed (sbx-<first 8 hex digits of
# sha256(SBX_ROOT)> in each hierarchy, common/cgroup.c; a session's own
# group may outlive sbx-kill by a moment, hence the retries), and the
# root deleted.  Without the rmdir every run left an empty group in each
# hierarchy (four on cgroup v1).
root_cleanup() {
	[ -n "${SBX_ROOT:-}" ] || return 0
	ls "$SBX_ROOT/var/lib/sbx/sessions" 2>/dev/null | sbx-kill >/dev/null 2>&1 || true
	local h d left
	h=$(printf '%s' "$SBX_ROOT" | sha256sum | cut -c1-8)
	for _ in $(seq 50); do
		left=0
		for d in /sys/fs/cgroup/*/sbx-"$h" /sys/fs/cgroup/sbx-"$h"; do
			[ -d "$d" ] || continue
			rmdir "$d" 2>/dev/null || left=1
		done
		[ "$left" = 0 ] && break
		sleep 0.1
	done
	rm -rf "$SBX_ROOT"
}
