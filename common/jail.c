/* The VMM's jail (see jail.h).  The order of the steps is what makes it
 * safe: host files are opened, and handed to the jail uid, while still
 * root and before any mount; the mounts come before the uid change, which
 * takes the capabilities they need; the seccomp filter comes last because
 * it forbids mount() and friends.  Every step is checked, and the caller
 * does not exec when one fails. */
#include "jail.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <seccomp.h>
#if defined(__SANITIZE_ADDRESS__)
#define SBX_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SBX_SANITIZED 1
#endif
#endif
#ifdef SBX_SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

/* Where the new root is built.  Only our private mount namespace sees the
 * tmpfs on it, and everything the jail needs from the host is opened
 * before it is mounted, so shadowing the host's /tmp (where SBX_ROOT may
 * live) does not matter. */
#define STAGE "/tmp"

static const char *const vol_names[8] = {
	SBX_JAIL_DIR "/vol0.img", SBX_JAIL_DIR "/vol1.img", SBX_JAIL_DIR "/vol2.img", SBX_JAIL_DIR "/vol3.img",
	SBX_JAIL_DIR "/vol4.img", SBX_JAIL_DIR "/vol5.img", SBX_JAIL_DIR "/vol6.img", SBX_JAIL_DIR "/vol7.img",
};

int sbx_jail_enabled(struct sbx_err *err)
{
	const char *e = getenv("SBX_JAIL");
	if (!e || !*e || !strcmp(e, "on"))
		return 1;
	if (!strcmp(e, "off"))
		return 0;
	return sbx_err_set(err, SBX_EXIT_INVALID, 0, "SBX_JAIL must be 'on' or 'off', not '%s'", e);
}

void sbx_jail_view(const struct sbx_vm_config *host, struct sbx_vm_config *in)
{
	*in = *host;
	in->kernel = host->kernel ? SBX_JAIL_DIR "/kernel" : NULL;
	in->initrd = host->initrd ? SBX_JAIL_DIR "/initrd" : NULL;
	in->rootfs = host->rootfs ? SBX_JAIL_DIR "/rootfs.img" : NULL;
	in->scratch = host->scratch ? SBX_JAIL_DIR "/scratch.img" : NULL;
	for (unsigned i = 0; i < host->nvols && i < 8; i++)
		in->vol_path[i] = vol_names[i];
	in->agent_sock = host->agent_sock ? "agent.sock" : NULL;
	in->console_path = host->console_path ? "console.log" : NULL;
}

/* One thing to bind into the jail: an O_PATH fd to the host object, and
 * where it goes under STAGE. */
struct bind {
	int fd;
	char dst[64];
	int dir;  /* a directory (else a file, socket or device) */
	int rw;   /* writable; everything else is read-only */
	int exec; /* may hold programs and libraries */
	int dev;  /* a device node */
};

enum { RW = 1, EXEC = 2, OWN = 4 };

struct plan {
	struct bind b[32];
	unsigned n;
	/* host /bin, /lib, ... that are symlinks on merged-/usr systems are
	 * recreated as symlinks rather than bound */
	char link_name[6][8], link_to[6][64];
	unsigned nlinks;
};

static void plan_free(struct plan *p)
{
	for (unsigned i = 0; i < p->n; i++)
		if (p->b[i].fd >= 0)
			close(p->b[i].fd);
	p->n = 0;
}

/* Open what the jail will show, by host path, while the host is visible.
 * want: the file type required.  Session files (flag OWN) must not be
 * symlinks, which could point anywhere; template files may be. */
static int add(struct plan *p, const char *src, const char *dst, mode_t want, int flags, struct sbx_err *err)
{
	if (p->n >= SBX_ARRAY_LEN(p->b))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "too many jail mounts");
	int fd = open(src, O_PATH | O_CLOEXEC | (flags & OWN ? O_NOFOLLOW : 0));
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s", src);
	struct stat st;
	if (fstat(fd, &st) < 0 || (st.st_mode & S_IFMT) != want) {
		close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "%s is not a %s", src,
				   want == S_IFREG   ? "regular file"
				   : want == S_IFDIR ? "directory"
				   : want == S_IFCHR ? "character device"
						     : "socket");
	}
	struct bind *b = &p->b[p->n++];
	*b = (struct bind){ .fd = fd,
			    .dir = S_ISDIR(st.st_mode),
			    .rw = !!(flags & RW),
			    .exec = !!(flags & EXEC),
			    .dev = S_ISCHR(st.st_mode) };
	snprintf(b->dst, sizeof b->dst, "%s", dst);
	return 0;
}

/* The files QEMU opens for writing (scratch, console, a workspace image)
 * and the agent socket it connects to belong to the jail uid; read-only
 * volumes too, since they are created 0600 and QEMU must read them (the
 * monitor hands a workspace image back to root when the session ends).
 * Nothing else changes hands. */
static int give(struct plan *p, unsigned i, uid_t id, struct sbx_err *err)
{
	if (fchownat(p->b[i].fd, "", id, id, AT_EMPTY_PATH) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot hand %s to the VMM's uid", p->b[i].dst);
	return 0;
}

/* What a VMM that makes its own files needs (Cloud Hypervisor): the
 * directory its vsock socket goes in, given as DIR/NAME under the run
 * directory and bound at the same place under SBX_JAIL_RUN, and the state
 * directory it writes snapshots into and restores from, with what the
 * backend staged there for a restore.  Both are the session's own and
 * handed to the jail uid, like the scratch disk. */
static int plan_vmm_dirs(struct plan *p, const struct sbx_vm_config *c, uid_t id, struct sbx_err *err)
{
	if (c->vsock_sock) {
		const char *slash = strchr(c->vsock_sock, '/');
		size_t dl = slash ? (size_t)(slash - c->vsock_sock) : 0;
		char dir[32], dst[64];
		if (!dl || dl >= sizeof dir || strchr(slash + 1, '/') || !slash[1] || c->vsock_sock[0] == '.')
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the vsock socket must be DIR/NAME, not %s",
					   c->vsock_sock);
		memcpy(dir, c->vsock_sock, dl);
		dir[dl] = 0;
		snprintf(dst, sizeof dst, SBX_JAIL_RUN "/%s", dir);
		if (add(p, dir, dst, S_IFDIR, RW | OWN, err) < 0 || give(p, p->n - 1, id, err) < 0)
			return -1;
	}
	if (!c->state_dir)
		return 0;
	if (add(p, c->state_dir, SBX_JAIL_DIR "/state", S_IFDIR, RW | OWN, err) < 0 || give(p, p->n - 1, id, err) < 0)
		return -1;
	int dfd = open(c->state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list %s", c->state_dir);
	}
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (de = readdir(d))) {
		struct stat st;
		int fd = openat(dfd, de->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
		    fchownat(fd, "", id, id, AT_EMPTY_PATH) < 0)
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot hand %s to the VMM's uid", de->d_name);
		if (fd >= 0)
			close(fd);
	}
	closedir(d);
	return rc;
}

static int plan_host(struct plan *p, const struct sbx_vm_config *c, uid_t id, struct sbx_err *err)
{
	static const char *const roots[] = { "bin", "sbin", "lib", "lib32", "lib64", "libx32" };
	char path[64], to[64];
	for (size_t i = 0; i < SBX_ARRAY_LEN(roots); i++) {
		snprintf(path, sizeof path, "/%s", roots[i]);
		struct stat st;
		if (lstat(path, &st) < 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			ssize_t l = readlink(path, to, sizeof to - 1);
			if (l <= 0 || p->nlinks >= SBX_ARRAY_LEN(p->link_name))
				return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the symlink %s", path);
			to[l] = 0;
			snprintf(p->link_name[p->nlinks], sizeof p->link_name[0], "%s", roots[i]);
			snprintf(p->link_to[p->nlinks++], sizeof p->link_to[0], "%s", to);
		} else if (S_ISDIR(st.st_mode) && add(p, path, path, S_IFDIR, EXEC, err) < 0) {
			return -1;
		}
	}
	/* /usr holds QEMU, its libraries, firmware (/usr/share/qemu) and
	 * modules (/usr/lib/<triplet>/qemu); the loader wants its cache. */
	if (add(p, "/usr", "/usr", S_IFDIR, EXEC, err) < 0)
		return -1;
	if (access("/etc/ld.so.cache", F_OK) == 0 &&
	    add(p, "/etc/ld.so.cache", "/etc/ld.so.cache", S_IFREG, 0, err) < 0)
		return -1;
	if (add(p, "/dev/null", "/dev/null", S_IFCHR, RW, err) < 0 ||
	    add(p, "/dev/urandom", "/dev/urandom", S_IFCHR, 0, err) < 0)
		return -1;
	if (c->accel == SBX_ACCEL_KVM && add(p, "/dev/kvm", "/dev/kvm", S_IFCHR, RW, err) < 0)
		return -1;
	/* Template files are shared by sessions and stay root's; they are
	 * world-readable (0644), which is all QEMU needs. */
	if ((c->kernel && add(p, c->kernel, SBX_JAIL_DIR "/kernel", S_IFREG, 0, err) < 0) ||
	    (c->initrd && add(p, c->initrd, SBX_JAIL_DIR "/initrd", S_IFREG, 0, err) < 0) ||
	    (c->rootfs && add(p, c->rootfs, SBX_JAIL_DIR "/rootfs.img", S_IFREG, 0, err) < 0))
		return -1;
	if (c->scratch && (add(p, c->scratch, SBX_JAIL_DIR "/scratch.img", S_IFREG, RW | OWN, err) < 0 ||
			   give(p, p->n - 1, id, err) < 0))
		return -1;
	for (unsigned i = 0; i < c->nvols && i < 8; i++)
		if (add(p, c->vol_path[i], vol_names[i], S_IFREG, OWN | (c->vol_rw_mask & (1u << i) ? RW : 0), err) <
			    0 ||
		    give(p, p->n - 1, id, err) < 0)
			return -1;
	/* Only the agent socket and the console log of the session's runtime
	 * directory: that directory also holds monitor.sock, which clients
	 * trust, so the VMM gets no write access to it (QMP's socket is
	 * created by the parent and passed as an fd). */
	if (c->agent_sock && (add(p, c->agent_sock, SBX_JAIL_RUN "/agent.sock", S_IFSOCK, OWN, err) < 0 ||
			      give(p, p->n - 1, id, err) < 0))
		return -1;
	if (c->console_path) {
		/* Created here rather than by QEMU, which cannot create files. */
		int fd = open(c->console_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", c->console_path);
		close(fd);
		if (add(p, c->console_path, SBX_JAIL_RUN "/console.log", S_IFREG, RW | OWN, err) < 0 ||
		    give(p, p->n - 1, id, err) < 0)
			return -1;
	}
	return plan_vmm_dirs(p, c, id, err);
}

/* Create the mount point for b (and its parents) under STAGE. */
static int mountpoint(const struct bind *b, char *dst, size_t n, struct sbx_err *err)
{
	snprintf(dst, n, STAGE "%s", b->dst);
	for (char *s = dst + strlen(STAGE) + 1; (s = strchr(s, '/')); s++) {
		*s = 0;
		int r = mkdir(dst, 0755);
		*s = '/';
		if (r < 0 && errno != EEXIST)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create a jail directory for %s",
					   b->dst);
	}
	int r = b->dir ? mkdir(dst, 0755) : mknod(dst, S_IFREG | 0644, 0);
	if (r < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create the jail mount point %s", b->dst);
	return 0;
}

static int bind_one(const struct bind *b, struct sbx_err *err)
{
	char src[40], dst[128];
	if (mountpoint(b, dst, sizeof dst, err) < 0)
		return -1;
	/* The fd was opened on the host, before STAGE was covered. */
	snprintf(src, sizeof src, "/proc/self/fd/%d", b->fd);
	if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot bind %s into the jail", b->dst);
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_NOSUID | (b->rw ? 0 : MS_RDONLY) | (b->dev ? 0 : MS_NODEV) |
			   (b->exec ? 0 : MS_NOEXEC);
	if (mount(NULL, dst, NULL, fl, NULL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make %s read-only in the jail", b->dst);
	return 0;
}

/* Our mounts must not propagate to the host, nor the host's to us.  Done
 * before the host files are opened: a bind's source must be a mount of
 * our own namespace. */
static int private_ns(struct sbx_err *err)
{
	if (unshare(CLONE_NEWNS) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create a mount namespace");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the mounts private");
	return 0;
}

static int build_root(struct plan *p, struct sbx_err *err)
{
	unsigned long fl = MS_NOSUID | MS_NODEV | MS_NOEXEC;
	if (mount("sbx-jail", STAGE, "tmpfs", fl, "mode=0755,size=64k,nr_inodes=256") < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot mount the jail's root");
	for (unsigned i = 0; i < p->nlinks; i++) {
		char dst[32];
		snprintf(dst, sizeof dst, STAGE "/%s", p->link_name[i]);
		if (symlink(p->link_to[i], dst) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot link /%s in the jail",
					   p->link_name[i]);
	}
	struct bind run = { .fd = -1, .dst = SBX_JAIL_RUN, .dir = 1 };
	char dst[128];
	if (mountpoint(&run, dst, sizeof dst, err) < 0)
		return -1;
	for (unsigned i = 0; i < p->n; i++)
		if (bind_one(&p->b[i], err) < 0)
			return -1;
	plan_free(p);
	/* Nothing in the jail's own tree is writable: QEMU writes only the
	 * scratch disk, a workspace and the console, bound read-write above. */
	if (mount(NULL, STAGE, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the jail's root read-only");
	/* pivot_root(".", ".") stacks the old root on the new one; detaching
	 * it leaves no path back to the host. */
	if (chdir(STAGE) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot pivot into the jail");
	if (umount2(".", MNT_DETACH) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot detach the host's root");
	if (chdir("/") < 0 || chdir(SBX_JAIL_RUN) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot enter the jail");
	return 0;
}

static int caps_clear(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = { { 0 } };
	return (int)syscall(SYS_capset, &h, d);
}

static int caps_none(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return 0;
	for (int i = 0; i < 2; i++)
		if (d[i].effective || d[i].permitted || d[i].inheritable)
			return 0;
	for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
		if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 0 ||
		    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) != 0)
			return 0;
	return 1;
}

static int drop_privileges(uid_t id, const struct sbx_vm_config *c, int parent_pidfd, struct sbx_err *err)
{
	/* The bounding and ambient sets need CAP_SETPCAP to shrink, so they go
	 * first; PR_CAPBSET_READ fails past the kernel's last capability. */
	for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot drop capability %d", cap);
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot clear the ambient capabilities");
	/* No supplementary groups, except /dev/kvm's group when it is not
	 * open to everyone (Debian: root:kvm 0660). */
	gid_t groups[1];
	size_t ngroups = 0;
	struct stat st;
	if (c->accel == SBX_ACCEL_KVM && stat("/dev/kvm", &st) == 0 && (st.st_mode & 0006) != 0006)
		groups[ngroups++] = st.st_gid;
	if (setgroups(ngroups, groups) < 0 || setresgid(id, id, id) < 0 || setresuid(id, id, id) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot switch to uid %u", (unsigned)id);
	/* Leaving uid 0 without keep-caps empties the permitted and effective
	 * sets; inheritable is cleared by hand. */
	if (caps_clear() < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot clear the capabilities");
	/* A uid change clears the parent-death signal: re-arm it, then check
	 * the monitor did not die in between. */
	struct pollfd pp = { .fd = parent_pidfd, .events = POLLIN };
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || poll(&pp, 1, 0) != 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "the monitor went away");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set no_new_privs");
	/* Trust, but verify: no way back to root, no capability anywhere. */
	uid_t r, e, s;
	gid_t gr, ge, gs;
	if (getresuid(&r, &e, &s) < 0 || getresgid(&gr, &ge, &gs) < 0 || r != id || e != id || s != id || gr != id ||
	    ge != id || gs != id || setresuid(0, 0, 0) == 0 || !caps_none())
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "privileges are still held after dropping them");
	return 0;
}

/* Syscalls QEMU never makes, denied on top of its own -sandbox (which
 * leaves most of them alone).  KILL where the only caller would be an
 * exploit; EPERM where a library might probe and cope. */
static const struct {
	int nr;
	int kill;
} denied[] = {
	/* Reading or steering other processes; also an old seccomp bypass. */
	{ SCMP_SYS(ptrace), 1 },
	{ SCMP_SYS(process_vm_readv), 1 },
	{ SCMP_SYS(process_vm_writev), 1 },
	/* Replacing or extending the running kernel. */
	{ SCMP_SYS(kexec_load), 1 },
	{ SCMP_SYS(kexec_file_load), 1 },
	{ SCMP_SYS(init_module), 1 },
	{ SCMP_SYS(finit_module), 1 },
	{ SCMP_SYS(delete_module), 1 },
	/* Undoing or widening the jail.  unshare and clone with namespace
	 * flags would also reach unprivileged user namespaces: a full set of
	 * capabilities over fresh kernel attack surface. */
	{ SCMP_SYS(mount), 1 },
	{ SCMP_SYS(umount2), 1 },
	{ SCMP_SYS(pivot_root), 1 },
	{ SCMP_SYS(chroot), 1 },
	{ SCMP_SYS(unshare), 1 },
	{ SCMP_SYS(setns), 1 },
	{ SCMP_SYS(fsopen), 1 },
	{ SCMP_SYS(fsmount), 1 },
	{ SCMP_SYS(move_mount), 1 },
	{ SCMP_SYS(open_tree), 1 },
	/* Host-wide state (swap, power, accounting, clocks): all need
	 * capabilities we dropped, denied so bugs in those paths are out of
	 * reach. */
	{ SCMP_SYS(swapon), 1 },
	{ SCMP_SYS(swapoff), 1 },
	{ SCMP_SYS(reboot), 1 },
	{ SCMP_SYS(acct), 1 },
	{ SCMP_SYS(settimeofday), 1 },
	{ SCMP_SYS(clock_settime), 1 },
	/* ntp_gettime() reads through these with modes 0: EPERM, not KILL. */
	{ SCMP_SYS(adjtimex), 0 },
	{ SCMP_SYS(clock_adjtime), 0 },
	/* The file-handle escape: opens by inode number, past any jail. */
	{ SCMP_SYS(open_by_handle_at), 1 },
	{ SCMP_SYS(name_to_handle_at), 0 },
	/* Large kernel attack surface, staples of kernel exploits (bpf
	 * programs, perf counters and side channels, userfaultfd to widen
	 * races, the keyring, which is not namespaced). */
	{ SCMP_SYS(bpf), 0 },
	{ SCMP_SYS(perf_event_open), 0 },
	{ SCMP_SYS(userfaultfd), 0 },
	{ SCMP_SYS(keyctl), 0 },
	{ SCMP_SYS(add_key), 0 },
	{ SCMP_SYS(request_key), 0 },
	/* io_uring runs file operations that seccomp never sees; QEMU falls
	 * back to epoll and threads when setup fails. */
	{ SCMP_SYS(io_uring_setup), 0 },
	{ SCMP_SYS(io_uring_enter), 0 },
	{ SCMP_SYS(io_uring_register), 0 },
};

/* In a confined build step (confine.h) the same list, but chroot (apt's
 * steps run in the tree) is allowed, and the mount and namespace calls a
 * maintainer script may try answer EPERM rather than kill the install. */
static int build_allows(int nr)
{
	return nr == SCMP_SYS(chroot);
}

static int build_softens(int nr)
{
	static const int soft[] = { SCMP_SYS(mount),   SCMP_SYS(umount2),    SCMP_SYS(pivot_root),
				    SCMP_SYS(unshare), SCMP_SYS(setns),      SCMP_SYS(fsopen),
				    SCMP_SYS(fsmount), SCMP_SYS(move_mount), SCMP_SYS(open_tree) };
	for (size_t i = 0; i < SBX_ARRAY_LEN(soft); i++)
		if (soft[i] == nr)
			return 1;
	return 0;
}

static int filter(int build, struct sbx_err *err)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot create the seccomp filter");
	int rc = 0;
	for (size_t i = 0; i < SBX_ARRAY_LEN(denied) && rc == 0; i++) {
		if (build && build_allows(denied[i].nr))
			continue;
		int kill = denied[i].kill && !(build && build_softens(denied[i].nr));
		rc = seccomp_rule_add(ctx, kill ? SCMP_ACT_KILL_PROCESS : SCMP_ACT_ERRNO(EPERM), denied[i].nr, 0);
	}
	/* personality(): only PER_LINUX (0) and the query (0xffffffff); the
	 * flags would turn off ASLR (ADDR_NO_RANDOMIZE) or NX
	 * (READ_IMPLIES_EXEC).  libseccomp cannot AND two tests of one
	 * argument, so: a 32-bit value other than all-zeros and all-ones has
	 * two cyclically adjacent bits that differ, one rule per such pair;
	 * and any upper bit set. */
	for (unsigned i = 0; i < 32 && rc == 0; i++) {
		uint64_t lo = 1ull << i, hi = 1ull << ((i + 1) % 32);
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, lo | hi, lo));
		if (rc == 0)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
					      SCMP_A0(SCMP_CMP_MASKED_EQ, lo | hi, hi));
	}
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
				      SCMP_A0(SCMP_CMP_GT, 0xffffffffull));
	/* Namespaces through clone(): one rule per flag (a rule's comparisons
	 * all must hold).  clone3 hides its flags in memory seccomp cannot
	 * read, so it answers ENOSYS and libc falls back to clone. */
	static const unsigned long ns_flags[] = { CLONE_NEWNS,  CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
						  CLONE_NEWUTS, CLONE_NEWIPC,  CLONE_NEWCGROUP, CLONE_NEWTIME };
	for (size_t i = 0; i < SBX_ARRAY_LEN(ns_flags) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, build ? SCMP_ACT_ERRNO(EPERM) : SCMP_ACT_KILL_PROCESS, SCMP_SYS(clone), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	if (rc < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, -rc, "cannot install the seccomp filter");
	return 0;
}

/* Sanitizer builds (make asan) only.  The runtime opens its report file
 * (log_path.PID) by path when it first reports, which an empty or built
 * root no longer has: "Can't open file", and the report is lost (to a
 * monitor's /dev/null).  Asking for the path opens it now, and the
 * runtime keeps that file.  A child forked after gets a file opened now
 * for it (report_spare), which it hands to the runtime (report_use). */
static void keep_reports(void)
{
#ifdef SBX_SANITIZED
	(void)__sanitizer_get_report_path();
#endif
}

int sbx_jail_report_spare(void)
{
#ifdef SBX_SANITIZED
	const char *p = __sanitizer_get_report_path();
	char path[PATH_MAX];
	if (p && (size_t)snprintf(path, sizeof path, "%s.child", p) < sizeof path)
		return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
#endif
	return -1;
}

int sbx_jail_sanitized(void)
{
#ifdef SBX_SANITIZED
	return 1;
#else
	return 0;
#endif
}

void sbx_jail_report_use(int fd)
{
#ifdef SBX_SANITIZED
	if (fd >= 0)
		__sanitizer_set_report_fd((void *)(intptr_t)fd);
#else
	(void)fd;
#endif
}

int sbx_jail_filter(struct sbx_err *err)
{
	return filter(0, err);
}

int sbx_jail_filter_build(struct sbx_err *err)
{
	return filter(1, err);
}

int sbx_jail_namespaces(const char *hostname, struct sbx_err *err)
{
	keep_reports();
	if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create namespaces");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the mounts private");
	/* An empty read-only root, the host's detached: no host path
	 * resolves, and no host mount stays referenced from here (a copy of
	 * the host's table would hold every mount of the moment, other
	 * sessions' included, and show their paths in our mountinfo). */
	if (mount("sbx-empty", STAGE, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "size=4k,nr_inodes=1,mode=0555") < 0 ||
	    chdir(STAGE) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make an empty root");
	if (hostname && sethostname(hostname, strlen(hostname)) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set the hostname");
	return 0;
}

/* One top-level entry of the host's root into the new one at STAGE: a
 * symlink as it is (merged /usr: /lib -> usr/lib), a directory as a
 * non-recursive bind (the mounts below it, another tenant's or a disk,
 * are neither copied nor kept alive), read-only, nosuid, nodev, and
 * noexec unless code is loaded from it.  Absent: nothing. */
static int system_entry(const char *name, int exec, struct sbx_err *err)
{
	char src[64], dst[64], to[PATH_MAX];
	snprintf(src, sizeof src, "/%s", name);
	snprintf(dst, sizeof dst, STAGE "/%s", name);
	struct stat sb;
	if (lstat(src, &sb) < 0)
		return errno == ENOENT ? 0 : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot look at %s", src);
	if (S_ISLNK(sb.st_mode)) {
		ssize_t n = readlink(src, to, sizeof to - 1);
		if (n < 0 || (to[n] = 0, symlink(to, dst) < 0))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot link %s in the new root", src);
		return 0;
	}
	if (!S_ISDIR(sb.st_mode))
		return 0;
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | (exec ? 0 : MS_NOEXEC);
	if (mkdir(dst, 0755) < 0 || mount(src, dst, NULL, MS_BIND, NULL) < 0 || mount(NULL, dst, NULL, fl, NULL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot bind %s into the new root", src);
	return 0;
}

/* The resolver's configuration where /etc/resolv.conf leads outside the
 * binds (systemd-resolved's /run/systemd/resolve/stub-resolv.conf): that
 * file alone, at its own path, read-only; its directories are made on
 * the new root's tmpfs.  Not a symlink, or one into /etc or /usr:
 * nothing to do. */
static int resolver_file(struct sbx_err *err)
{
	char real[PATH_MAX], dst[PATH_MAX + 16];
	if (!realpath("/etc/resolv.conf", real) || !strncmp(real, "/etc/", 5) || !strncmp(real, "/usr/", 5))
		return 0;
	if ((size_t)snprintf(dst, sizeof dst, STAGE "%s", real) >= sizeof dst)
		return 0;
	for (char *q = dst + strlen(STAGE) + 1; (q = strchr(q, '/')); q++) {
		*q = 0;
		int rc = mkdir(dst, 0755);
		*q = '/';
		if (rc < 0 && errno != EEXIST)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot bind %s into the new root", real);
	}
	_cleanup_close_ int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
	if (fd < 0 || mount(real, dst, NULL, MS_BIND, NULL) < 0 || mount(NULL, dst, NULL, fl, NULL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot bind %s into the new root", real);
	return 0;
}

int sbx_jail_system_root(struct sbx_err *err)
{
	/* What a resolver, libcurl and OpenSSL read at run time: /etc
	 * (resolv.conf, nsswitch.conf, CA certificates) and the libraries and
	 * NSS modules they load.  Not /run: it holds every session's sockets
	 * (RUN/sessions/ID/monitor.sock) and the host's daemons'; only the file
	 * resolv.conf may lead to there is bound (resolver_file); glibc does
	 * without nscd's socket.  No /proc: the host's shows every host
	 * process's command line, and nothing here needs it (the package
	 * cache names its downloads by rename, store.c).  A sanitized build
	 * still reports (its report file is open, keep_reports; frames come
	 * as module+offset, unsymbolized), but LeakSanitizer, which lists
	 * /proc/self/task, cannot run: the proxy ends with _exit
	 * (proxy/main.c), as the monitor's unprivileged half does.  /var,
	 * /home, /tmp, /dev, /srv and every other mount are not there. */
	static const struct {
		const char *name;
		int exec;
	} keep[] = {
		{ "etc", 0 }, { "usr", 1 },   { "bin", 1 },   { "sbin", 1 },
		{ "lib", 1 }, { "lib32", 1 }, { "lib64", 1 }, { "libx32", 1 },
	};
	keep_reports();
	if (private_ns(err) < 0)
		return -1;
	if (mount("sbx-root", STAGE, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k,nr_inodes=32,mode=0755") < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot mount the new root");
	for (size_t i = 0; i < SBX_ARRAY_LEN(keep); i++)
		if (system_entry(keep[i].name, keep[i].exec, err) < 0)
			return -1;
	if (resolver_file(err) < 0)
		return -1;
	if (mount(NULL, STAGE, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
	    chdir(STAGE) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot enter the new root");
	return 0;
}

int sbx_jail_system_files(const char *name, const char *const *names, const char *const *data, const size_t *len,
			  unsigned n, struct sbx_err *err)
{
	char dir[64];
	size_t total = 0;
	for (unsigned i = 0; i < n; i++)
		total += len[i];
	if (total > (1u << 20) || strchr(name, '/') || snprintf(dir, sizeof dir, "/%s", name) >= (int)sizeof dir)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, E2BIG, "cannot place files in the jail");
	unsigned long ro = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
	/* The root, writable for the one mkdir, read-only again after. */
	int rc = mount(NULL, "/", NULL, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (rc == 0)
		rc = mkdir(dir, 0755) < 0 && errno != EEXIST ? -1 : 0;
	if (mount(NULL, "/", NULL, MS_REMOUNT | ro, NULL) < 0 || rc < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make %s in the jail", dir);
	if (mount("sbx-files", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=2m,nr_inodes=64") < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot mount %s in the jail", dir);
	for (unsigned i = 0; i < n; i++) {
		char path[160];
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
		size_t off = 0;
		while (fd >= 0 && off < len[i]) {
			ssize_t w = write(fd, data[i] + off, len[i] - off);
			if (w <= 0)
				break;
			off += (size_t)w;
		}
		if (fd < 0 || off != len[i])
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot write %s in the jail", path);
	}
	if (mount(NULL, dir, NULL, MS_REMOUNT | ro, NULL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make %s read-only", dir);
	return 0;
}

int sbx_jail_self(uid_t id, int parent_pidfd, struct sbx_err *err)
{
	struct sbx_vm_config none = { .accel = SBX_ACCEL_TCG }; /* no /dev/kvm group */
	if (drop_privileges(id, &none, parent_pidfd, err) < 0)
		return -1;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the process not dumpable");
	return filter(0, err);
}

int sbx_jail_enter(const struct sbx_vm_config *c, pid_t host_pid, int parent_pidfd, struct sbx_err *err)
{
	/* The VMM's own pid on the host (it is 1 in its PID namespace):
	 * unique among live VMMs, so no allocation file and no lock; the uid
	 * lives exactly as long as the process. */
	uid_t id = SBX_JAIL_UID_BASE + (uid_t)host_pid;
	struct plan p = { .n = 0 };
	int rc = private_ns(err);
	if (rc == 0)
		rc = plan_host(&p, c, id, err);
	if (rc == 0)
		rc = build_root(&p, err);
	plan_free(&p);
	if (rc < 0 || drop_privileges(id, c, parent_pidfd, err) < 0 || filter(0, err) < 0)
		return -1;
	return 0;
}
