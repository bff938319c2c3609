/* Confinement for steps over trees sbx did not make (confine.h).  The
 * order is what makes it hold: the user namespace first (its maps written
 * by the parent, which alone may map a range), then every other namespace
 * owned by it, the host files opened while the host's tree is still
 * visible, the new root built and pivoted into, and last the capability
 * bounding set, no_new_privs and the seccomp filter, which forbids the
 * mounts made before it. */
#include "confine.h"
#include "jail.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Where the new root is built, in the step's own mount namespace (as the
 * VMM's jail does): what it needs of the host is opened before. */
#define STAGE "/tmp"

int sbx_confine_slot_take(int run_fd, struct sbx_confine_slot *s, struct sbx_err *err)
{
	s->lock_fd = -1;
	for (unsigned i = 0; i < SBX_CONFINE_SLOTS; i++) {
		char name[32];
		snprintf(name, sizeof name, "confine-%u.lock", i);
		int fd = openat(run_fd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot take a build uid range");
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			s->lock_fd = fd;
			s->base = SBX_CONFINE_UID_BASE + i * SBX_CONFINE_IDS;
			return 0;
		}
		close(fd);
	}
	return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "all %u build uid ranges are in use: too many builds at once",
			   SBX_CONFINE_SLOTS);
}

void sbx_confine_slot_release(struct sbx_confine_slot *s)
{
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	s->lock_fd = -1;
}

int sbx_confine_execv(void *argv)
{
	char *const *a = argv;
	execv(a[0], a);
	dprintf(2, "sbx: cannot run %s: %s\n", a[0], strerror(errno));
	return 127;
}

/* --- inside: the step's PID 1 ---------------------------------------------- */

/* In the step's stderr (the build's log), then exit 125: the caller's
 * message is the log's tail. */
static _Noreturn void fail(const char *what)
{
	dprintf(2, "sbx: cannot confine the step: %s: %s\n", what, strerror(errno));
	_exit(125);
}

/* The flags a bind of src must keep: a mount namespace of a user
 * namespace may not clear what the host's mount has (they are locked). */
static unsigned long locked_flags(int fd)
{
	struct statvfs v;
	if (fstatvfs(fd, &v) < 0)
		return MS_NOSUID | MS_NODEV | MS_NOEXEC;
	unsigned long f = 0;
	if (v.f_flag & ST_NOSUID)
		f |= MS_NOSUID;
	if (v.f_flag & ST_NODEV)
		f |= MS_NODEV;
	if (v.f_flag & ST_NOEXEC)
		f |= MS_NOEXEC;
	if (v.f_flag & ST_NOATIME)
		f |= MS_NOATIME;
	if (v.f_flag & ST_NODIRATIME)
		f |= MS_NODIRATIME;
	if (v.f_flag & ST_RELATIME)
		f |= MS_RELATIME;
	if (v.f_flag & ST_RDONLY)
		f |= MS_RDONLY;
	return f;
}

/* mkdir -p of path's parents under STAGE. */
static void parents(const char *path)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, STAGE "%s", path);
	for (char *s = p + strlen(STAGE) + 1; (s = strchr(s, '/')); s++) {
		*s = 0;
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			fail(p);
		*s = '/';
	}
}

/* fd (opened on the host) at STAGE/dst: read-only unless rw, nosuid, and
 * nodev unless a device. */
static void bind_fd(int fd, const char *dst, int rw, int exec)
{
	struct stat st;
	char src[40], to[PATH_MAX];
	if (fstat(fd, &st) < 0)
		fail(dst);
	parents(dst);
	snprintf(to, sizeof to, STAGE "%s", dst);
	if ((S_ISDIR(st.st_mode) ? mkdir(to, 0755) : mknod(to, S_IFREG | 0644, 0)) < 0 && errno != EEXIST)
		fail(to);
	snprintf(src, sizeof src, "/proc/self/fd/%d", fd);
	if (mount(src, to, NULL, MS_BIND, NULL) < 0)
		fail(to);
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_NOSUID | locked_flags(fd) | (rw ? 0 : MS_RDONLY) |
			   (exec ? 0 : MS_NOEXEC) | (S_ISCHR(st.st_mode) ? 0 : MS_NODEV);
	if (mount(NULL, to, NULL, fl, NULL) < 0)
		fail(to);
}

static int open_host(const char *path, int nofollow)
{
	int fd = open(path, O_PATH | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
	if (fd < 0)
		fail(path);
	return fd;
}

/* The host's programs: /usr, and /bin, /sbin, /lib* as links (merged
 * /usr) or binds; read-only, nosuid. */
static void system_dirs(void)
{
	static const char *const names[] = { "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(names); i++) {
		char src[16], dst[32], to[PATH_MAX];
		snprintf(src, sizeof src, "/%s", names[i]);
		struct stat sb;
		if (lstat(src, &sb) < 0)
			continue;
		if (S_ISLNK(sb.st_mode)) {
			ssize_t n = readlink(src, to, sizeof to - 1);
			snprintf(dst, sizeof dst, STAGE "/%s", names[i]);
			if (n < 0 || (to[n] = 0, symlink(to, dst) < 0))
				fail(src);
		} else if (S_ISDIR(sb.st_mode)) {
			int fd = open_host(src, 1);
			bind_fd(fd, src, 0, 1);
			close(fd);
		}
	}
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		fail(path);
	close(fd);
}

/* /etc: what the host's programs read (the loader's cache, mke2fs's
 * defaults, Debian's alternatives behind awk and friends) and a passwd
 * naming root; nothing else of the host's. */
static void etc(void)
{
	static const char *const files[] = { "/etc/ld.so.cache", "/etc/mke2fs.conf", "/etc/alternatives" };
	if (mkdir(STAGE "/etc", 0755) < 0)
		fail("/etc");
	for (size_t i = 0; i < SBX_ARRAY_LEN(files); i++) {
		int fd = open(files[i], O_PATH | O_CLOEXEC);
		if (fd < 0)
			continue;
		bind_fd(fd, files[i], 0, 0);
		close(fd);
	}
	write_file(STAGE "/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n");
	write_file(STAGE "/etc/group", "root:x:0:\nnogroup:x:65534:\n");
}

static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };

/* A tmpfs at dir (a path that names it afresh: an fd opened before the
 * mount would still reach the directory beneath) holding the minimal
 * /dev, nodes bound from dev_fds. */
static void devfs_at(const char *dir, const int dev_fds[])
{
	char to[PATH_MAX], src[40];
	for (size_t i = 0; i < SBX_ARRAY_LEN(dev_nodes); i++) {
		snprintf(to, sizeof to, "%s/%s", dir, dev_nodes[i]);
		snprintf(src, sizeof src, "/proc/self/fd/%d", dev_fds[i]);
		if (mknod(to, S_IFREG | 0666, 0) < 0 || mount(src, to, NULL, MS_BIND, NULL) < 0 ||
		    mount(NULL, to, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NOEXEC | locked_flags(dev_fds[i]),
			  NULL) < 0)
			fail(to);
	}
	static const char *const links[][2] = {
		{ "fd", "/proc/self/fd" },
		{ "stdin", "/proc/self/fd/0" },
		{ "stdout", "/proc/self/fd/1" },
		{ "stderr", "/proc/self/fd/2" },
	};
	for (size_t i = 0; i < SBX_ARRAY_LEN(links); i++) {
		snprintf(to, sizeof to, "%s/%s", dir, links[i][0]);
		if (symlink(links[i][1], to) < 0)
			fail(to);
	}
	snprintf(to, sizeof to, "%s/shm", dir);
	if (mkdir(to, 01777) < 0 || chmod(to, 01777) < 0)
		fail(to);
}

static void devfs(const char *dir, const int dev_fds[])
{
	if (mount("sbx-dev", dir, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64") < 0)
		fail("/dev");
	devfs_at(dir, dev_fds);
}

/* A directory beneath tree_fd, made when missing, with no link of the
 * tree's followed: a mount point the tree cannot aim elsewhere. */
static int tree_dir(int tree_fd, const char *name, mode_t mode)
{
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int fd = (int)syscall(SYS_openat2, tree_fd, name, &how, sizeof how);
	if (fd < 0 && errno == ENOENT && mkdirat(tree_fd, name, mode) == 0)
		fd = (int)syscall(SYS_openat2, tree_fd, name, &how, sizeof how);
	if (fd < 0)
		fail(name);
	return fd;
}

/* The tree's /proc (ours) and /dev (the minimal one), for a chroot. */
static void chroot_fs(const char *tree, const int dev_fds[])
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, STAGE "%s", tree);
	int t = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (t < 0)
		fail(tree);
	int p = tree_dir(t, "proc", 0555), d = tree_dir(t, "dev", 0755);
	char pp[40], dp[40];
	snprintf(pp, sizeof pp, "/proc/self/fd/%d", p);
	snprintf(dp, sizeof dp, "/proc/self/fd/%d", d);
	if (mount("proc", pp, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
	    mount("sbx-dev", dp, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64") < 0)
		fail("the tree's /proc and /dev");
	/* The tmpfs's root, through the mount (not the fd from before it). */
	int top = openat(t, "dev", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (top < 0)
		fail("the tree's /dev");
	char tp[40];
	snprintf(tp, sizeof tp, "/proc/self/fd/%d", top);
	devfs_at(tp, dev_fds);
	close(top);
	close(p);
	close(d);
	close(t);
}

/* What a package install needs of root inside its namespaces; every other
 * capability leaves the bounding set (and so every program it runs). */
static const int kept_caps[] = { CAP_CHOWN,      CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
				 CAP_FSETID,     CAP_KILL,         CAP_SETGID,          CAP_SETUID,
				 CAP_SYS_CHROOT, CAP_AUDIT_WRITE,  CAP_SETFCAP,         CAP_MKNOD };

static void caps(void)
{
	uint64_t keep = 0;
	for (size_t i = 0; i < SBX_ARRAY_LEN(kept_caps); i++)
		keep |= 1ull << kept_caps[i];
	for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
		if (!(keep >> cap & 1) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
			fail("the capability bounding set");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		fail("the ambient capabilities");
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = { { 0 } };
	d[0].effective = d[0].permitted = (uint32_t)keep;
	d[1].effective = d[1].permitted = (uint32_t)(keep >> 32);
	if (syscall(SYS_capset, &h, d) < 0)
		fail("the capabilities");
}

static void limits(void)
{
	static const struct {
		int res;
		rlim_t max;
	} lim[] = {
		{ RLIMIT_CORE, 0 },
		{ RLIMIT_NPROC, 4096 }, /* per host uid: the slot's root */
		{ RLIMIT_NOFILE, 65536 },
		{ RLIMIT_FSIZE, 16ull << 30 }, /* an import is at most 8 GiB */
	};
	for (size_t i = 0; i < SBX_ARRAY_LEN(lim); i++) {
		struct rlimit r;
		if (getrlimit(lim[i].res, &r) < 0)
			fail("rlimits");
		if (r.rlim_max > lim[i].max)
			r.rlim_max = lim[i].max;
		if (r.rlim_cur > r.rlim_max)
			r.rlim_cur = r.rlim_max;
		if (setrlimit(lim[i].res, &r) < 0)
			fail("rlimits");
	}
}

/* Every fd but 0-2, the step's own (keep) and the sanitizer's report:
 * nothing of the caller's (LIB, RUN, other builds' directories) reaches
 * the step, even one a library forgot to mark close-on-exec. */
static void close_others(const struct sbx_confine *c, int report_fd)
{
	unsigned lo = 3;
	for (;;) {
		unsigned next = ~0u;
		for (unsigned i = 0; i <= c->nkeep; i++) {
			int fd = i < c->nkeep ? c->keep[i] : report_fd;
			if (fd >= (int)lo && (unsigned)fd < next)
				next = (unsigned)fd;
		}
		if (next == ~0u) {
			syscall(SYS_close_range, lo, ~0u, 0);
			return;
		}
		if (next > lo)
			syscall(SYS_close_range, lo, next - 1, 0);
		lo = next + 1;
	}
}

#define BINDS_MAX 16
struct host_fds {
	int bind[BINDS_MAX];
	int dev[SBX_ARRAY_LEN(dev_nodes)];
};

static _Noreturn void inside(const struct sbx_confine *c, sbx_confine_fn fn, void *arg, int report_fd,
			     const struct host_fds *h)
{
	const int *bind_fds = h->bind, *dev_fds = h->dev;
	if (mount("sbx-build", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096") < 0)
		fail("the new root");
	system_dirs();
	etc();
	for (unsigned i = 0; i < c->nbinds; i++) {
		bind_fd(bind_fds[i], c->binds[i].path, !!(c->binds[i].flags & SBX_CONFINE_RW), 1);
		close(bind_fds[i]);
	}
	/* Scratch space in /var/tmp (and /tmp, unless a bind lives there:
	 * the tests' state roots do). */
	if (mkdir(STAGE "/dev", 0755) < 0 || mkdir(STAGE "/proc", 0555) < 0 || mkdir(STAGE "/root", 0700) < 0 ||
	    (mkdir(STAGE "/var", 0755) < 0 && errno != EEXIST) || mkdir(STAGE "/var/tmp", 01777) < 0 ||
	    (symlink("var/tmp", STAGE "/tmp") < 0 && errno != EEXIST))
		fail("the new root's directories");
	devfs(STAGE "/dev", dev_fds);
	if (mount("proc", STAGE "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		fail("/proc");
	if (mount("sbx-tmp", STAGE "/var/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=1g") < 0)
		fail("/var/tmp");
	if (c->chroot_tree)
		chroot_fs(c->chroot_tree, dev_fds);
	for (size_t i = 0; i < SBX_ARRAY_LEN(dev_nodes); i++)
		close(dev_fds[i]);
	if (mount(NULL, STAGE, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
		fail("a read-only root");
	if (chdir(STAGE) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		fail("pivot into the new root");
	if (sethostname("sbx-build", 9) < 0)
		fail("the hostname");
	limits();
	caps();
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail("no_new_privs");
	close_others(c, report_fd);
	sbx_jail_report_use(report_fd);
	struct sbx_err e = { 0 };
	if (sbx_jail_filter_build(&e) < 0) {
		errno = e.errnum;
		fail("the seccomp filter");
	}
	umask(022);
	setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin", 1);
	setenv("HOME", "/root", 1);
	setenv("TMPDIR", "/var/tmp", 1);
	setenv("SBX_CONFINED", "1", 1);
	_exit(fn(arg));
}

/* The namespaces' first process (the user namespace's creator): it makes
 * the others, forks their PID 1 and reports its end. */
static _Noreturn void creator(const struct sbx_confine *c, sbx_confine_fn fn, void *arg, int sync_w, int go_r,
			      int report_fd, pid_t parent)
{
	if (unshare(CLONE_NEWUSER) < 0)
		fail("a user namespace");
	char x = 'u';
	if (write(sync_w, &x, 1) != 1 || read(go_r, &x, 1) != 1 || x != 'g')
		_exit(125);
	close(sync_w);
	close(go_r);
	/* The mount namespace first, owned by the new user namespace, and the
	 * host's files opened in it while our file system uid is still the
	 * host's root: a bind's source must be a mount of our own namespace,
	 * and the directories on the way (a state root of 0700) are root's. */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fail("a mount namespace");
	struct host_fds h;
	if (c->nbinds > BINDS_MAX) {
		errno = E2BIG;
		fail("binds");
	}
	for (unsigned i = 0; i < c->nbinds; i++)
		h.bind[i] = open_host(c->binds[i].path, 1);
	for (size_t i = 0; i < SBX_ARRAY_LEN(dev_nodes); i++) {
		char p[32];
		snprintf(p, sizeof p, "/dev/%s", dev_nodes[i]);
		h.dev[i] = open_host(p, 1);
	}
	if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		fail("root in the user namespace");
	/* A change of uid clears the death signal (prctl(2)): armed again,
	 * else a build killed now leaves this step running, and its work
	 * directory locked, to its end. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(125);
	if (unshare(CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP) < 0)
		fail("namespaces");
	/* PID 1 of the namespace sees its parent as 0 (getppid), so it asks
	 * this pidfd whether we died before its death signal was armed. */
	int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (self < 0)
		fail("pidfd_open");
	pid_t pid = fork();
	if (pid < 0)
		fail("fork");
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		struct pollfd pf = { .fd = self, .events = POLLIN };
		if (poll(&pf, 1, 0) != 0)
			_exit(125);
		close(self);
		inside(c, fn, arg, report_fd, &h);
	}
	close(self);
	for (unsigned i = 0; i < c->nbinds; i++)
		close(h.bind[i]);
	for (size_t i = 0; i < SBX_ARRAY_LEN(dev_nodes); i++)
		close(h.dev[i]);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			_exit(125);
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

static void child_fds(const struct sbx_confine *c)
{
	for (int i = 0; i < 3; i++)
		if (c->fds[i] != i && dup2(c->fds[i], i) < 0)
			_exit(125);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

static int write_map(pid_t pid, const char *which, uid_t base, struct sbx_err *err)
{
	char path[64], map[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, which);
	int n = snprintf(map, sizeof map, "0 %u %u\n", (unsigned)base, SBX_CONFINE_IDS);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, map, (size_t)n) != n)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot write the build's %s", which);
	return 0;
}

pid_t sbx_confine_spawn(const struct sbx_confine *c, sbx_confine_fn fn, void *arg, struct sbx_err *err)
{
	int sync[2], go[2];
	if (pipe2(sync, O_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot start a build step");
	if (pipe2(go, O_CLOEXEC) < 0) {
		close(sync[0]);
		close(sync[1]);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot start a build step");
	}
	int report_fd = sbx_jail_report_spare();
	pid_t parent = getpid(), pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(125);
		close(sync[0]);
		close(go[1]);
		child_fds(c);
		creator(c, fn, arg, sync[1], go[0], report_fd, parent);
	}
	if (report_fd >= 0)
		close(report_fd);
	close(sync[1]);
	close(go[0]);
	int rc = 0;
	char x;
	if (pid < 0)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot start a build step");
	else if (read(sync[0], &x, 1) != 1)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot start a build step: no user namespace");
	else if (write_map(pid, "uid_map", c->base, err) < 0 || write_map(pid, "gid_map", c->base, err) < 0)
		rc = -1;
	else if (write(go[1], "g", 1) != 1)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot start a build step");
	close(sync[0]);
	close(go[1]);
	if (rc < 0 && pid > 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	return rc < 0 ? -1 : pid;
}

pid_t sbx_confine_spawn_host(const struct sbx_confine *c, char *const argv[], struct sbx_err *err)
{
	pid_t parent = getpid(), pid = fork();
	if (pid < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot start a build step");
	if (pid > 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(125);
	child_fds(c);
	char prog[40];
	char *const *av = argv;
	char **moved = NULL;
	if (c->work) {
		/* Opened in the new namespace (a bind's source must be of it),
		 * before /tmp, where it (or the program: a clone's build) may
		 * lie, is covered; the program is run through its fd. */
		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			fail("a mount namespace");
		int w = open_host(c->work, 1), p = open(argv[0], O_RDONLY);
		if (p < 0)
			fail(argv[0]);
		size_t n = 0;
		while (argv[n])
			n++;
		if (!(moved = calloc(n + 1, sizeof *moved)))
			fail("memory");
		memcpy(moved, argv, n * sizeof *moved);
		snprintf(prog, sizeof prog, "/proc/self/fd/%d", p);
		moved[0] = prog;
		av = moved;
		char src[40];
		snprintf(src, sizeof src, "/proc/self/fd/%d", w);
		if (mount("sbx-work", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=64m") < 0 ||
		    mkdir("/tmp/work", 0755) < 0 || mount(src, "/tmp/work", NULL, MS_BIND, NULL) < 0 ||
		    chdir("/tmp/work") < 0)
			fail("the step's directory");
		close(w);
	}
	uid_t id = c->base;
	/* Leaving uid 0 empties the permitted and effective sets. */
	if (setgroups(0, NULL) < 0 || setresgid(id, id, id) < 0 || setresuid(id, id, id) < 0)
		fail("the build's uid");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(125);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail("no_new_privs");
	limits();
	struct sbx_err e = { 0 };
	if (sbx_jail_filter(&e) < 0) {
		errno = e.errnum;
		fail("the seccomp filter");
	}
	setenv("HOME", "/nonexistent", 1);
	_exit(sbx_confine_execv((void *)av));
}
