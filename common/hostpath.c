/* Host paths named by a caller, confined (hostpath.h).  The rules are
 * checked on what the kernel resolved (the fd's path and inode), not on the
 * string the caller gave: "..", symlinks and bind mounts cannot talk past
 * them. */
#include "hostpath.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostconf.h"
#include "util.h"

#define RESOLVE_CONFINED (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

static int openat2_(int dfd, const char *path, int flags)
{
	struct open_how how = { .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW), .resolve = RESOLVE_CONFINED };
	return (int)syscall(SYS_openat2, dfd, path, &how, sizeof how);
}

/* A directory beneath dfd; a symlink in its place is ELOOP (O_DIRECTORY
 * alone would say ENOTDIR). */
static int open_dir_beneath(int dfd, const char *path)
{
	int fd = openat2_(dfd, path, O_PATH);
	struct stat st;
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
		int e = S_ISLNK(st.st_mode) ? ELOOP : ENOTDIR;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Is path p equal to or below directory d (both absolute, normalized)? */
static bool under(const char *p, const char *d)
{
	size_t n = strlen(d);
	if (n == 1 && d[0] == '/')
		return true;
	return !strncmp(p, d, n) && (p[n] == 0 || p[n] == '/');
}

/* sbx's own state: where it is (canonical when it exists) and which inode. */
struct state_dir {
	char path[PATH_MAX];
	struct stat st;
	bool have_st;
};

static unsigned state_dirs(struct state_dir d[4])
{
	const char *root = getenv("SBX_ROOT"), *cache = getenv("SBX_CACHE");
	if (!root || root[0] != '/')
		root = "";
	if (!cache || cache[0] != '/')
		cache = "/var/cache/sbx";
	char raw[4][PATH_MAX];
	snprintf(raw[0], sizeof raw[0], "%s/var/lib/sbx", root);
	snprintf(raw[1], sizeof raw[1], "%s/run/sbx", root);
	snprintf(raw[2], sizeof raw[2], "%s/etc/sbx", root);
	snprintf(raw[3], sizeof raw[3], "%s", cache);
	for (unsigned i = 0; i < 4; i++) {
		if (!realpath(raw[i], d[i].path))
			snprintf(d[i].path, sizeof d[i].path, "%s", raw[i]);
		d[i].have_st = stat(d[i].path, &d[i].st) == 0;
	}
	return 4;
}

int sbx_hostpath_is_state(const struct stat *st)
{
	struct state_dir d[4];
	unsigned n = state_dirs(d);
	for (unsigned i = 0; i < n; i++)
		if (d[i].have_st && d[i].st.st_dev == st->st_dev && d[i].st.st_ino == st->st_ino)
			return 1;
	return 0;
}

/* Kernel file systems whose files are views of processes and devices. */
static bool kernel_fs(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0)
		return true; /* fail closed */
	switch ((unsigned long)sf.f_type) {
	case PROC_SUPER_MAGIC:
	case SYSFS_MAGIC:
	case DEVPTS_SUPER_MAGIC:
	case DEBUGFS_MAGIC:
	case SECURITYFS_MAGIC:
	case TRACEFS_MAGIC:
	case CGROUP_SUPER_MAGIC:
	case CGROUP2_SUPER_MAGIC:
	case BPF_FS_MAGIC:
	case EFIVARFS_MAGIC:
	case PSTOREFS_MAGIC: return true;
	default: return false;
	}
}

__attribute__((format(printf, 4, 5))) static int refuse(struct sbx_err *err, const char *key, const char *path,
							const char *fmt, ...)
{
	char why[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: %s: %s", key, path, why);
}

/* The rules every path obeys, on the resolved path and its directory. */
static int check_everyone(const struct sbx_hostpath *hp, const char *key, const char *shown, struct sbx_err *err)
{
	static const char *const kernel[] = { "/proc", "/sys", "/dev" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(kernel); i++)
		if (under(hp->real, kernel[i]))
			return refuse(err, key, shown, "%s is never a source or a target", kernel[i]);
	struct state_dir d[4];
	unsigned n = state_dirs(d);
	for (unsigned i = 0; i < n; i++)
		if (under(hp->real, d[i].path) || under(d[i].path, hp->real))
			return refuse(err, key, shown, "sbx's own state (%s) is never a source or a target", d[i].path);
	if (kernel_fs(hp->dir_fd))
		return refuse(err, key, shown, "%s", "a kernel file system is never a source or a target");
	if (hp->exists && sbx_hostpath_is_state(&hp->st))
		return refuse(err, key, shown, "%s", "sbx's own state is never a source or a target");
	/* Below state reached some other way (a bind mount): walk up. */
	_cleanup_close_ int fd = openat(hp->dir_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	struct stat top, st;
	if (fd < 0 || stat("/", &top) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "%s: cannot check %s", key, shown);
	for (int depth = 0; depth < 4096; depth++) {
		if (fstat(fd, &st) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "%s: cannot check %s", key, shown);
		if (sbx_hostpath_is_state(&st))
			return refuse(err, key, shown, "%s", "sbx's own state is never a source or a target");
		if (st.st_dev == top.st_dev && st.st_ino == top.st_ino)
			return 0;
		int up = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (up < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "%s: cannot check %s", key, shown);
		close(fd);
		fd = up;
	}
	return refuse(err, key, shown, "%s", "nested too deep");
}

/* Split an absolute, normalized-here path into its directory and last
 * component, both in bufs of PATH_MAX. */
static void split(const char *abs, char *dir, char *base)
{
	const char *s = strrchr(abs, '/');
	if (s == abs)
		snprintf(dir, PATH_MAX, "/");
	else
		snprintf(dir, PATH_MAX, "%.*s", (int)(s - abs), abs);
	snprintf(base, PATH_MAX, "%s", s[1] ? s + 1 : ".");
}

/* path made absolute against the working directory and normalized
 * lexically: "" and "." components dropped; ".." refused (tenant) or
 * left in place for realpath (operator: *dots set). */
static int absolute(const char *path, char *out, bool *dots)
{
	char buf[PATH_MAX], cwd[PATH_MAX];
	if (path[0] == '/') {
		if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
			return -1;
	} else {
		if (!getcwd(cwd, sizeof cwd) || snprintf(buf, sizeof buf, "%s/%s", cwd, path) >= (int)sizeof buf)
			return -1;
	}
	size_t o = 0;
	*dots = false;
	for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (!strcmp(c, "."))
			continue;
		if (!strcmp(c, ".."))
			*dots = true;
		size_t l = strlen(c);
		if (o + 1 + l >= PATH_MAX)
			return -1;
		out[o++] = '/';
		memcpy(out + o, c, l);
		o += l;
	}
	if (!o)
		out[o++] = '/';
	out[o] = 0;
	return 0;
}

/* The tenant's root that holds abs, opened; -1 when none does. */
static int tenant_root(const char *tenant, const char *abs, const char *shown, unsigned how, const char *key,
		       char *root_out, char *rest, struct sbx_err *err)
{
	static struct sbx_hostconf hc; /* ~13 KiB; commands resolve from one thread */
	if (sbx_hostconf_load(&hc, err) < 0)
		return -1;
	bool w = how & SBX_HOSTPATH_WRITE;
	unsigned n = w ? hc.paths.nwrite : hc.paths.nread;
	for (unsigned i = 0; i < n; i++) {
		const char *pat = w ? hc.paths.write[i] : hc.paths.read[i], *t = strstr(pat, "{tenant}");
		char root[PATH_MAX];
		if (t)
			snprintf(root, sizeof root, "%.*s%s%s", (int)(t - pat), pat, tenant, t + 8);
		else
			snprintf(root, sizeof root, "%s", pat);
		if (!under(abs, root))
			continue;
		int fd = SBX_AS_CALLER(open(root, O_PATH | O_DIRECTORY | O_CLOEXEC));
		if (fd < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, errno,
					   "%s: %s: cannot open the root %s of host_paths.%s", key, shown, root,
					   w ? "write" : "read");
		const char *r = abs + strlen(root);
		snprintf(rest, PATH_MAX, "%s", *r == '/' ? r + 1 : *r ? r : ".");
		snprintf(root_out, PATH_MAX, "%s", root);
		return fd;
	}
	return sbx_err_set(
		err, SBX_EXIT_INVALID, 0,
		"%s: %s is not under a root that sbx.yaml lists in host_paths.%s for tenant %s (see sbx.yaml(5))", key,
		shown, w ? "write" : "read", tenant);
}

static int resolve_fail(struct sbx_err *err, int e, const char *key, const char *shown)
{
	if (e == ELOOP)
		return refuse(err, key, shown, "%s", "a symbolic link on the way (never followed)");
	if (e == EXDEV)
		return refuse(err, key, shown, "%s", "it leads out of its root");
	if (e == ENOENT || e == ENOTDIR)
		return sbx_err_set(err, SBX_EXIT_NOENT, e, "%s: no such file or directory: %s", key, shown);
	return sbx_err_set(err, SBX_EXIT_INVALID, e, "%s: cannot open %s", key, shown);
}

int sbx_hostpath_resolve(const char *tenant, const char *path, unsigned how, const char *key, struct sbx_hostpath *hp,
			 struct sbx_err *err)
{
	memset(hp, 0, sizeof *hp);
	hp->dir_fd = -1;
	bool tn = tenant && *tenant, dots;
	char abs[PATH_MAX], dir[PATH_MAX], base[PATH_MAX], shown[PATH_MAX + 8];
	if (!*path || absolute(path, abs, &dots) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, ENAMETOOLONG, "%s: bad path '%s'", key, path);
	/* The caller's text in messages, printable only (it reaches a terminal). */
	snprintf(shown, sizeof shown, "%s", path);
	for (char *c = shown; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	if (tn) {
		if (dots)
			return refuse(err, key, shown, "%s", "'..' is not allowed in a tenant's path");
		char root[PATH_MAX], rest[PATH_MAX];
		_cleanup_close_ int rfd = tenant_root(tenant, abs, shown, how, key, root, rest, err);
		if (rfd < 0)
			return -1;
		/* The directory beneath the root, then the last name in it. */
		if (!strcmp(rest, ".")) {
			snprintf(dir, sizeof dir, ".");
			snprintf(base, sizeof base, ".");
		} else {
			char *s = strrchr(rest, '/');
			snprintf(dir, sizeof dir, "%.*s", s ? (int)(s - rest) : 1, s ? rest : ".");
			snprintf(base, sizeof base, "%s", s ? s + 1 : rest);
		}
		hp->dir_fd = SBX_AS_CALLER(open_dir_beneath(rfd, dir));
		if (hp->dir_fd < 0)
			return resolve_fail(err, errno, key, shown);
	} else {
		/* The operator's path may pass through links; what it names is
		 * then held by its real directory. */
		char real[PATH_MAX];
		if ((how & SBX_HOSTPATH_FOLLOW) && SBX_AS_CALLER(realpath(abs, real)))
			snprintf(abs, sizeof abs, "%s", real);
		split(abs, dir, base);
		if (!strcmp(base, "..")) {
			if (!SBX_AS_CALLER(realpath(abs, real)))
				return resolve_fail(err, errno, key, shown);
			split(real, dir, base);
		}
		if (!SBX_AS_CALLER(realpath(dir, real)))
			return resolve_fail(err, errno, key, shown);
		hp->dir_fd = SBX_AS_CALLER(open(real, O_PATH | O_DIRECTORY | O_CLOEXEC));
		if (hp->dir_fd < 0)
			return resolve_fail(err, errno, key, shown);
	}
	snprintf(hp->rel, sizeof hp->rel, "%s", base);
	char fdp[40], dreal[PATH_MAX];
	snprintf(fdp, sizeof fdp, "/proc/self/fd/%d", hp->dir_fd);
	ssize_t l = readlink(fdp, dreal, sizeof dreal - 1);
	if (l <= 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "%s: cannot resolve %s", key, shown);
	dreal[l] = 0;
	if (!strcmp(base, "."))
		snprintf(hp->real, sizeof hp->real, "%s", dreal);
	else if (snprintf(hp->real, sizeof hp->real, "%s%s%s", dreal, strcmp(dreal, "/") ? "/" : "", base) >=
		 (int)sizeof hp->real)
		return sbx_err_set(err, SBX_EXIT_INVALID, ENAMETOOLONG, "%s: bad path '%s'", key, path);
	if (SBX_AS_CALLER(fstatat(hp->dir_fd, base, &hp->st, AT_SYMLINK_NOFOLLOW)) == 0) {
		hp->exists = 1;
	} else if (errno != ENOENT || !(how & SBX_HOSTPATH_MAY_BE_MISSING)) {
		return resolve_fail(err, errno, key, shown);
	}
	/* What is followed must not be a link (a tenant's: the operator's was
	 * resolved above, and one swapped in since is refused here). */
	if (hp->exists && S_ISLNK(hp->st.st_mode) && (how & SBX_HOSTPATH_FOLLOW))
		return resolve_fail(err, ELOOP, key, shown);
	if (check_everyone(hp, key, shown, err) < 0)
		return -1;
	if (hp->exists) { /* itself a mount point (a bind-mounted file) */
		_cleanup_close_ int fd = sbx_hostpath_openat(hp, NULL, O_PATH);
		if (fd < 0)
			return resolve_fail(err, errno, key, shown);
		if (kernel_fs(fd))
			return refuse(err, key, shown, "%s", "a kernel file system is never a source or a target");
	}
	return 0;
}

void sbx_hostpath_close(struct sbx_hostpath *hp)
{
	if (hp->dir_fd >= 0)
		close(hp->dir_fd);
	hp->dir_fd = -1;
}

int sbx_hostpath_openat(const struct sbx_hostpath *hp, const char *sub, int oflags)
{
	char p[PATH_MAX];
	if (!sub || !*sub)
		snprintf(p, sizeof p, "%s", hp->rel);
	else if (snprintf(p, sizeof p, "%s/%s", hp->rel, sub) >= (int)sizeof p) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return SBX_AS_CALLER(openat2_(hp->dir_fd, p, oflags));
}

int sbx_hostpath_env_ok(const char *tenant, const char *name, const char *key, struct sbx_err *err)
{
	if (!tenant || !*tenant)
		return 0;
	static struct sbx_hostconf hc;
	if (sbx_hostconf_load(&hc, err) < 0)
		return -1;
	for (unsigned i = 0; i < hc.paths.nenv; i++)
		if (!strcmp(hc.paths.env_allow[i], name))
			return 0;
	return sbx_err_set(
		err, SBX_EXIT_INVALID, 0,
		"%s: the environment variable %s is not listed in secrets.env_allow of sbx.yaml for tenant %s "
		"(see sbx.yaml(5))",
		key, name, tenant);
}
