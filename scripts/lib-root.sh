# shellcheck shell=bash
# A private state root's end: for the bench scripts, tests/lib.sh (and a
# test's second root), the template builds of make image, test.sh's node
# template and check.sh's Cloud Hypervisor probe.

# The host cgroups the library made for SBX_ROOT (sbx-<first 8 hex digits
# of sha256(SBX_ROOT)> in each hierarchy, common/cgroup.c), with any
# session group a killed monitor left in one, deepest first.  A session's
# group may outlive its sbx-kill, or the kill -9 of its last process, by a
# moment, hence the retries (5 s at most).  Without this every run left an
# empty group in each hierarchy (four on cgroup v1).
root_cgroups_remove() {
	local h d left
	h=$(printf '%s' "$SBX_ROOT" | sha256sum | cut -c1-8)
	for _ in $(seq 50); do
		left=0
		for d in /sys/fs/cgroup/*/sbx-"$h" /sys/fs/cgroup/sbx-"$h"; do
			[ -d "$d" ] || continue
			find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
			[ -d "$d" ] && left=1
		done
		[ "$left" = 0 ] && return 0
		sleep 0.1
	done
	return 1
}

# Its sessions destroyed, its cgroups removed, the root deleted.
root_cleanup() {
	[ -n "${SBX_ROOT:-}" ] || return 0
	ls "$SBX_ROOT/var/lib/sbx/sessions" 2>/dev/null | sbx-kill >/dev/null 2>&1 || true
	root_cgroups_remove || true
	rm -rf "$SBX_ROOT"
}
